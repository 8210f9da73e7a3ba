-- KAFKA:schd keeps one row per flight: a new generation for a FLID resets that row to PENDING
-- (clearing SENT_AT) instead of adding another, so a flush always carries the latest state and
-- a DEAD row is revived by the next generation (spec-boundary-closure.md, G-EVENT-RETENTION).
CREATE UNIQUE INDEX uk_evt_schd_flid ON msg_event (partition_key) WHERE target = 'KAFKA:schd';
-- When delivery of an event was last started: COUTMSGS delivery stamps it before inserting into
-- the shared outbound mailbox, so a retry after a crash can find its own earlier row instead of
-- inserting twice.
ALTER TABLE msg_event ADD COLUMN last_attempt_at TIMESTAMPTZ(6);
