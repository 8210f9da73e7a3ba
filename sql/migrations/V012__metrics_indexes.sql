-- #22: the operations endpoint reads the dead-letter queue and the abandoned marks every few
-- seconds while it is scraped; these partial indexes hold only those rows, so the gauges cost
-- nothing on a PROC_STATE of millions of settled and archived rows.
CREATE INDEX idx_proc_dead ON proc_state (error_class) WHERE state = 'DEAD' AND dismissed_at IS NULL;
CREATE INDEX idx_proc_abandoned ON proc_state (msg_id)
    WHERE backfill_abandoned_at IS NOT NULL AND backfill_reconciled_at IS NULL;
