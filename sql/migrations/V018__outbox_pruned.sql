-- #52: how far the outbox's retention reached. A heal lays on what a message decided under
-- other rules announced (its KAFKA:msg events); it must know whether a message without events
-- announced nothing or lost its events to `msgx.pipeline.event-retention`. Every delete from
-- MSG_EVENT moves this mark to the highest MSG_ID it took, by a trigger, so a release that does
-- not know this table (the previous one, running on this schema) moves it too. Above the mark
-- every event a message wrote is held. Expand-only.
CREATE TABLE outbox_pruned (
    id     SMALLINT PRIMARY KEY CHECK (id = 1),
    msg_id BIGINT   NOT NULL
);
-- What retention took before this migration is not known: every message held so far counts
-- as one whose events may be gone.
INSERT INTO outbox_pruned (id, msg_id) SELECT 1, COALESCE(max(msg_id), 0) FROM proc_state;
CREATE FUNCTION msgx_outbox_pruned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE outbox_pruned SET msg_id = GREATEST(msg_id, (SELECT COALESCE(max(msg_id), 0) FROM gone)) WHERE id = 1;
    RETURN NULL;
END
$$;
CREATE TRIGGER msg_event_pruned AFTER DELETE ON msg_event REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION msgx_outbox_pruned();
