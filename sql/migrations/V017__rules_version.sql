-- #52: the rules that decided a message. Written with every SUCCEEDED message whose decision
-- this process applied (handlers::RULES_VERSION); NULL for one decided before V017, or whose
-- decision was reused from the Redis journal (the rules that made it are not known). The
-- consistency check re-decides a message only under the rules that decided it. Expand-only: a
-- release before V017 runs on this schema and leaves the column NULL.
ALTER TABLE proc_state ADD COLUMN rules_version INT;
ALTER TABLE proc_state_hst ADD COLUMN rules_version INT;
