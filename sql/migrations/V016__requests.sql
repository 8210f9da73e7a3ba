-- #41: requests to the AODB (SPEC §4.11, G-REQ-TRACK, G-RESP-GUARD). REQ_TRACK exists since
-- V001; a request now also names who asked, the outbox event that carries it to COUTMSGS,
-- family B's MGID (its answer's RMID) and the message that answered it.
ALTER TABLE req_track ADD COLUMN origin VARCHAR(16) NOT NULL DEFAULT 'operator';
ALTER TABLE req_track ADD COLUMN event_id BIGINT;
ALTER TABLE req_track ADD COLUMN mgid VARCHAR(64);
ALTER TABLE req_track ADD COLUMN answer_msg_id BIGINT;
CREATE UNIQUE INDEX uk_req_event ON req_track (event_id);
CREATE INDEX idx_req_mgid ON req_track (mgid) WHERE mgid IS NOT NULL;
CREATE INDEX idx_req_answer ON req_track (answer_msg_id) WHERE answer_msg_id IS NOT NULL;
-- The open requests, oldest first (the answer guard, `msgx requests --open`, the keeper).
CREATE INDEX idx_req_open ON req_track (req_type, req_id) WHERE state IN ('REGISTERED', 'SENT', 'WAITING');
