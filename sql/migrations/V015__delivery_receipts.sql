-- #40: where a SENT event landed, written by the statement that marks it SENT: the Kafka topic,
-- partition and offset of its record (a KAFKA:schd array's, for every event folded into it),
-- or the COUTMSGS row an outbound message became. NULL: not sent yet, or sent before V015.
ALTER TABLE msg_event ADD COLUMN sent_topic VARCHAR(249);
ALTER TABLE msg_event ADD COLUMN sent_partition INT;
ALTER TABLE msg_event ADD COLUMN sent_offset BIGINT;
ALTER TABLE msg_event ADD COLUMN sent_row_id BIGINT;
-- `msgx trace`, `msgx flight` and the console find a message's events by MSG_ID.
CREATE INDEX idx_evt_msg ON msg_event (msg_id);
-- `msgx flight` and the console's flight page list the messages that changed a flight.
CREATE INDEX idx_evt_flight ON msg_event (partition_key, event_id) WHERE target = 'KAFKA:msg';
