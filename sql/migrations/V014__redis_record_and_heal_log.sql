-- #37: what Redis acknowledged of a SUCCEEDED message's decision, recorded with its outcome (NULL:
-- the decision changed no flight and Redis was not written, or the row predates V014). The
-- consistency check takes only a recorded write as evidence that Redis must still hold it.
ALTER TABLE proc_state ADD COLUMN redis_record VARCHAR(16)
    CHECK (redis_record IN ('journal', 'applied', 'generation'));
ALTER TABLE proc_state_hst ADD COLUMN redis_record VARCHAR(16);
-- #37: every heal of a store that forgot and changed something, for the heal budget
-- (msgx.consistency-check.max-heals-per-hour, shared by every instance) and `msgx status`.
CREATE TABLE consistency_heal (
    heal_id    BIGSERIAL PRIMARY KEY,
    healed_at  TIMESTAMPTZ(6) NOT NULL,
    epoch      BIGINT NOT NULL,
    store      VARCHAR(16) NOT NULL,
    summary    VARCHAR(1000) NOT NULL
);
CREATE INDEX idx_consistency_heal_at ON consistency_heal (healed_at);
