-- msgx own PostgreSQL, baseline: the V1–V9 schema of spec-boundary-closure.md in one step.
-- Add-only: an applied migration is never edited; a change is a new file.

-- PROC_STATE: one row per mailbox message (INV-9), keyed by the mailbox ID.
CREATE TABLE proc_state (
    msg_id                    BIGINT       PRIMARY KEY,
    state                     VARCHAR(16)  NOT NULL
        CHECK (state IN ('PENDING', 'FAILED', 'SUCCEEDED', 'SKIPPED', 'DEAD', 'ARCHIVED')),
    identity_key              VARCHAR(200),
    attempts                  INT          NOT NULL DEFAULT 0,
    next_attempt_at           TIMESTAMPTZ(6),
    error_class               VARCHAR(20)
        CHECK (error_class IN ('MALFORMED', 'PROTOCOL', 'CODEC_ERROR', 'UNSUPPORTED', 'INFRA', 'EXHAUSTED')),
    last_error                VARCHAR(1000),
    updated_at                TIMESTAMPTZ(6) NOT NULL,
    received_at               TIMESTAMPTZ(6),                         -- V2
    backfill_at               TIMESTAMPTZ(6),                         -- V2: the mark is settled
    backfill_next_at          TIMESTAMPTZ(6),                         -- V2: the mark is owed (INV-8)
    backfill_attempts         INT          NOT NULL DEFAULT 0,        -- V2
    backfill_error            VARCHAR(512),                           -- V2
    backfill_abandoned_at     TIMESTAMPTZ(6),                         -- V4
    backfill_abandoned_reason VARCHAR(64),                            -- V4
    enqueued_at               TIMESTAMPTZ(6) NOT NULL DEFAULT now(),  -- V6
    CONSTRAINT uk_proc_identity UNIQUE (identity_key)
);

-- The FIFO head (INV-3): the smallest unfinished MSG_ID, ARCHIVED and terminal rows excluded.
CREATE INDEX idx_proc_head ON proc_state (msg_id) WHERE state IN ('PENDING', 'FAILED');
-- Marks owed (INV-8): terminal, not settled, not abandoned, by due time.
CREATE INDEX idx_proc_backfill ON proc_state (backfill_next_at, msg_id)
    WHERE backfill_at IS NULL AND backfill_abandoned_at IS NULL AND backfill_next_at IS NOT NULL;

-- MSG_EVENT: the outbox, one total order by EVENT_ID.
CREATE TABLE msg_event (
    event_id        BIGSERIAL    PRIMARY KEY,
    target          VARCHAR(30)  NOT NULL,
    partition_key   VARCHAR(32)  NOT NULL,
    event_type      VARCHAR(16)  NOT NULL DEFAULT 'UPSERT',
    state_version   BIGINT       NOT NULL,
    payload_json    TEXT         NOT NULL,
    state           VARCHAR(16)  NOT NULL CHECK (state IN ('PENDING', 'SENT', 'DEAD')),
    attempts        INT          NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ(6),
    error_class     VARCHAR(20),
    last_error      VARCHAR(1000),
    created_at      TIMESTAMPTZ(6) NOT NULL,
    -- msgx addition: the message that caused the event, for the Kafka msg_id header (INV-10).
    msg_id          BIGINT
);
-- Per-target head (idx_evt_head of design.md §2).
CREATE INDEX idx_evt_head ON msg_event (target, event_id) WHERE state = 'PENDING';

-- The ingress watermark: a single row, overwritten (PRE-5).
CREATE TABLE ingress_watermark (
    id         SMALLINT     PRIMARY KEY CHECK (id = 1),
    last_id    BIGINT       NOT NULL,
    updated_at TIMESTAMPTZ(6) NOT NULL
);
INSERT INTO ingress_watermark (id, last_id, updated_at) VALUES (1, 0, now());

-- V1 tables kept for phase B (created, not used in this iteration; SPEC §8).
CREATE TABLE pump_job (
    job_id       BIGSERIAL    PRIMARY KEY,
    kind         VARCHAR(32)  NOT NULL CHECK (kind IN ('ARCHIVE', 'HISTORY_SWEEP', 'PROJECTION_REBUILD')),
    state        VARCHAR(16)  NOT NULL,
    scheduled_at TIMESTAMPTZ(6) NOT NULL,
    started_at   TIMESTAMPTZ(6),
    finished_at  TIMESTAMPTZ(6),
    last_error   VARCHAR(1000)
);

CREATE TABLE req_track (
    req_id       BIGSERIAL    PRIMARY KEY,
    req_type     VARCHAR(16)  NOT NULL,
    req_key      VARCHAR(200) NOT NULL,
    state        VARCHAR(16)  NOT NULL CHECK (state IN ('REGISTERED', 'SENT', 'WAITING', 'DONE', 'EXPIRED')),
    coutmsgs_id  BIGINT,                                            -- U18: BIGINT
    created_at   TIMESTAMPTZ(6) NOT NULL,
    updated_at   TIMESTAMPTZ(6) NOT NULL,
    expires_at   TIMESTAMPTZ(6)
);
-- V8: at most one open request per (type, key).
CREATE UNIQUE INDEX uk_req_open ON req_track (req_type, req_key)
    WHERE state IN ('REGISTERED', 'SENT', 'WAITING');

CREATE TABLE ref_master (
    rtype        VARCHAR(8)   NOT NULL,
    rkey         VARCHAR(64)  NOT NULL,
    payload_json TEXT         NOT NULL,
    source       VARCHAR(16)  NOT NULL CHECK (source IN ('ADMINAPI', 'AODB', 'PIPELINE')),
    refreshed_at TIMESTAMPTZ(6) NOT NULL,
    PRIMARY KEY (rtype, rkey)
);
