-- The head deadline must be reachable (SPEC §4.2): anchor it on when the message first failed,
-- not on UPDATED_AT (which every retry moves). Cleared by replay, so a replayed head gets a
-- fresh deadline.
ALTER TABLE proc_state ADD COLUMN first_failed_at TIMESTAMPTZ(6);
-- The message's type tag (FLOP-STND, SCHD-DNLD, …) once its META was read: for log lines,
-- `msgx status` and counting by kind. NULL when the META could not be read.
ALTER TABLE proc_state ADD COLUMN type_tag VARCHAR(32);
