-- #20: the identity a consumer deduplicates on is derived from the message, never from the
-- EVENT_ID sequence alone (a PostgreSQL that went back in time hands sequence values out again):
-- an event is its message's MSG_ID and its ordinal among that message's events.
ALTER TABLE msg_event ADD COLUMN ordinal INT;
