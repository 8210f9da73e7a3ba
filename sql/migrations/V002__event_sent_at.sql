-- G-EVENT-RETENTION (V10 of the spec's numbering): when an event was acknowledged. Written by
-- the same conditional UPDATE that makes the row SENT; NULL means not delivered.
ALTER TABLE msg_event ADD COLUMN sent_at TIMESTAMPTZ(6);
CREATE INDEX idx_evt_retention ON msg_event (sent_at, event_id) WHERE state = 'SENT';
