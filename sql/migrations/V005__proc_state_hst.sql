-- G-PROC-HST: settled terminal rows move to PROC_STATE_HST; the main row stays as a dedup
-- shadow (STATE = 'ARCHIVED', MSG_ID, IDENTITY_KEY, ARCHIVED_AT) so a later message with the
-- same identity is still a duplicate (INV-9).
ALTER TABLE proc_state ADD COLUMN archived_at TIMESTAMPTZ(6);

CREATE TABLE proc_state_hst (LIKE proc_state INCLUDING DEFAULTS);
ALTER TABLE proc_state_hst ADD PRIMARY KEY (msg_id);
ALTER TABLE proc_state_hst ALTER COLUMN archived_at SET NOT NULL;

-- Archive candidates: settled terminal rows by age.
CREATE INDEX idx_proc_archive ON proc_state (updated_at)
    WHERE state IN ('SUCCEEDED', 'SKIPPED', 'DEAD') AND backfill_at IS NOT NULL;
