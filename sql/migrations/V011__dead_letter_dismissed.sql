-- #21: a DEAD message stays in the dead-letter queue (and out of the archive) until a person
-- replays it or dismisses it (`msgx dismiss`), bounded by msgx.proc-state.dead-keep.
ALTER TABLE proc_state ADD COLUMN dismissed_at TIMESTAMPTZ(6);
ALTER TABLE proc_state ADD COLUMN dismissed_note VARCHAR(200);
ALTER TABLE proc_state_hst ADD COLUMN dismissed_at TIMESTAMPTZ(6);
ALTER TABLE proc_state_hst ADD COLUMN dismissed_note VARCHAR(200);
