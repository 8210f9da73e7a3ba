-- Overdue marks (C-16) are the owed marks the mailbox refused at least once (SPEC §4.9). The
-- backfill asks for them every round; through idx_proc_backfill that meant visiting every owed
-- mark (12 ms per call with 20 K owed, issue #13). This index holds only the refused ones, so
-- the question costs nothing while the mailbox accepts marks.
CREATE INDEX idx_proc_backfill_refused ON proc_state (msg_id)
    WHERE backfill_at IS NULL AND backfill_abandoned_at IS NULL AND backfill_next_at IS NOT NULL
      AND backfill_attempts > 0;
