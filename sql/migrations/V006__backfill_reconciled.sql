-- C-16 / G-PROC-HST: an abandoned mark stays listed until a person has reconciled it with the
-- mailbox owner (`msgx reconcile`); only then may the row be archived.
ALTER TABLE proc_state ADD COLUMN backfill_reconciled_at TIMESTAMPTZ(6);
ALTER TABLE proc_state ADD COLUMN backfill_reconciled_note VARCHAR(200);
ALTER TABLE proc_state_hst ADD COLUMN backfill_reconciled_at TIMESTAMPTZ(6);
ALTER TABLE proc_state_hst ADD COLUMN backfill_reconciled_note VARCHAR(200);
