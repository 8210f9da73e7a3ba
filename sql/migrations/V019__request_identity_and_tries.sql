-- #55: a request's number on the wire (its SEQN, and family B's MGID) is drawn from the time it
-- was registered, so a PostgreSQL that went back in time and hands out a REQ_ID again never
-- hands out a number the AODB already saw; a heal's request that expired is asked again
-- (TRIES: which try it is) and, after the last try, waits for a person who dismisses it with a
-- note. Expand-only: a release that does not know these columns registers requests without
-- them (SEQN NULL: its SEQN is its REQ_ID; TRIES NULL: the first try).
ALTER TABLE req_track ADD COLUMN seqn BIGINT;
ALTER TABLE req_track ADD COLUMN tries SMALLINT;
ALTER TABLE req_track ADD COLUMN dismissed_at TIMESTAMPTZ;
ALTER TABLE req_track ADD COLUMN dismissed_note VARCHAR(500);
CREATE UNIQUE INDEX uk_req_seqn ON req_track (seqn);
-- A window's requests, newest first: whether a later request took a heal's place.
CREATE INDEX idx_req_window ON req_track (req_type, req_key, req_id);
-- A heal's requests no answer and no person closed: the windows that may await the AODB.
CREATE INDEX idx_req_heal_unanswered ON req_track (req_id)
    WHERE origin = 'heal' AND answer_msg_id IS NULL AND dismissed_at IS NULL;
