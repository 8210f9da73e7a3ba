-- One writer, fenced (PRE-5, SPEC §4.9): a lease row instead of an advisory lock on an idle
-- session. The active instance renews EXPIRES_AT (database clock) well within the lease
-- duration; a new holder takes the row only once it has expired or was released, and
-- increments EPOCH. Every write transaction of every stage starts with msgx_fence(epoch): it
-- share-locks the row (so a takeover waits for the transaction) and raises SQLSTATE MX001 when
-- the epoch is no longer the caller's, so a stale instance never commits after a newer holder
-- exists.
CREATE TABLE msgx_lease (
    id          SMALLINT     PRIMARY KEY CHECK (id = 1),
    epoch       BIGINT       NOT NULL DEFAULT 0,
    holder      VARCHAR(100),
    host        VARCHAR(255),
    pid         INT,
    acquired_at TIMESTAMPTZ(6),
    renewed_at  TIMESTAMPTZ(6),
    expires_at  TIMESTAMPTZ(6),
    -- What the holder reports with each renewal: its stalled stages, as JSON (msgx status).
    status      TEXT         NOT NULL DEFAULT '{}'
);
INSERT INTO msgx_lease (id) VALUES (1);

CREATE FUNCTION msgx_fence(mine BIGINT) RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE current BIGINT;
BEGIN
    SELECT epoch INTO current FROM msgx_lease WHERE id = 1 FOR SHARE;
    IF current IS DISTINCT FROM mine THEN
        RAISE EXCEPTION 'fenced: the lease epoch is %, this instance holds %; a newer instance is active', current, mine
            USING ERRCODE = 'MX001';
    END IF;
    RETURN current;
END $$;
