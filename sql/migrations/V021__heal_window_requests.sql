-- #68: a window a person named for a heal (msgx.requests.heal-window) is spent once a heal's
-- request for it was answered or dismissed; the heal looks up a heal's requests of one window,
-- newest first, through this index rather than walking the newest requests of any kind.
-- Expand-only: an index; every release since V017 runs on it.
CREATE INDEX idx_req_heal_key ON req_track (req_key, req_id) WHERE origin = 'heal';
