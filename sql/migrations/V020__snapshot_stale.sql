-- #56: a daily-plan snapshot the pump found not newer than the plan's generation (a lower MSG_ID
-- taken after a higher one: a mailbox row committed late) changed nothing in Redis. Its record
-- stays 'journal' (its journal entry is Redis's), and SNAPSHOT_STALE says so, so that a heal,
-- which replays in MSG_ID order, does not lay on what the pump never applied (seeds 13255,
-- 14834). NULL: not known (a release before V020, or not a stale snapshot). Expand-only: a
-- release that does not know it leaves it NULL.
ALTER TABLE proc_state ADD COLUMN snapshot_stale BOOLEAN;
ALTER TABLE proc_state_hst ADD COLUMN snapshot_stale BOOLEAN;
