-- #65: `msgx rules apply --since MSG_ID`: an operator asks the active instance (of the rules the
-- job names) to decide the SUCCEEDED messages from SINCE on again under its rules and to
-- announce every difference as an event. OPEN: asked; APPLYING: its difference is staged here
-- (STAGED: each flight before and after, and the events) and is being written to Redis, then to
-- the outbox with the messages' RULES_VERSION, in one transaction that makes it DONE; FAILED:
-- what a person must read (NOTE). A job survives a crash between the two writes: the next
-- instance of its rules finishes what was staged. Expand-only: a table no earlier release reads;
-- every release since V017 runs on this schema (it leaves the jobs alone).
CREATE TABLE rules_apply (
    job_id        BIGSERIAL PRIMARY KEY,
    since         BIGINT      NOT NULL,
    rules_version INT         NOT NULL,
    state         VARCHAR(16) NOT NULL DEFAULT 'OPEN',
    requested_at  TIMESTAMPTZ NOT NULL,
    started_at    TIMESTAMPTZ,
    done_at       TIMESTAMPTZ,
    staged        TEXT,
    note          VARCHAR(1000),
    CONSTRAINT rules_apply_state CHECK (state IN ('OPEN', 'APPLYING', 'DONE', 'FAILED'))
);
CREATE INDEX idx_rules_apply_open ON rules_apply (rules_version, job_id) WHERE state IN ('OPEN', 'APPLYING');
