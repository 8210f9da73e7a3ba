//! The Kafka producer, in memory: delivered records in order, per-record refusals like a
//! broker's `message.max.bytes`, and the injected faults of every twin (a whole send fails).

use super::{fault_controls, Shared};
use crate::error::Store;
use crate::error::StoreError;
use crate::ports::{Position, Producer, Record};

#[derive(Debug, Default)]
pub struct ProducerState {
    pub delivered: Vec<Record<'static>>,
    /// A record whose payload is longer than this is refused (MSG_SIZE_TOO_LARGE) and ends
    /// the send, as a broker's `message.max.bytes` does; 0: no limit.
    pub max_bytes: usize,
    /// Acknowledge this many more records, then fail the rest of the send as unavailable
    /// (a broker that went away in the middle of a batch).
    pub ack_then_fail: Option<usize>,
    /// The next offset of each topic (one partition each).
    pub offsets: std::collections::HashMap<String, i64>,
}

/// A producer that delivers to a list.
#[derive(Debug, Clone, Default)]
pub struct MemProducer(pub(crate) Shared<ProducerState>);

fault_controls!(MemProducer);

impl MemProducer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn delivered(&self) -> Vec<Record<'static>> {
        self.0.lock().state.delivered.clone()
    }

    /// Refuses records larger than `bytes`, as the broker's `message.max.bytes`.
    pub fn max_bytes(&self, bytes: usize) {
        self.0.lock().state.max_bytes = bytes;
    }

    /// The next send acknowledges `n` records and fails the rest as unavailable.
    pub fn ack_then_fail(&self, n: usize) {
        self.0.lock().state.ack_then_fail = Some(n);
    }
}

impl Producer for MemProducer {
    fn send(&mut self, records: &[Record<'_>]) -> Vec<Result<Position, StoreError>> {
        let mut out = Vec::with_capacity(records.len());
        let res = self.0.write(Store::Kafka, |s| {
            let mut budget = s.ack_then_fail.take();
            for r in records {
                if out.iter().any(|x: &Result<Position, StoreError>| x.is_err()) {
                    out.push(Err(StoreError::unavailable(
                        Store::Kafka,
                        "not sent: an earlier record failed",
                    )));
                    continue;
                }
                if budget == Some(0) {
                    out.push(Err(StoreError::unavailable(
                        Store::Kafka,
                        "Message production error: MessageTimedOut (Local: Message timed out)",
                    )));
                    continue;
                }
                if s.max_bytes > 0 && r.payload.len() > s.max_bytes {
                    out.push(Err(StoreError::rejected(
                        Store::Kafka,
                        "Message production error: MessageSizeTooLarge (Broker: Message size too large)",
                    )));
                    continue;
                }
                // One partition per topic: a record's offset is how many the topic held before.
                let next = s.offsets.entry(r.topic.to_string()).or_default();
                let offset = *next;
                *next += 1;
                s.delivered.push(r.clone().into_owned());
                budget = budget.map(|b| b - 1);
                out.push(Ok(Position { partition: 0, offset }));
            }
            Ok(())
        });
        match res {
            Ok(()) => out,
            // Lost: the records went out, the acknowledgements did not come back.
            Err(e) => records.iter().map(|_| Err(StoreError::new(Store::Kafka, e.kind, &e.detail))).collect(),
        }
    }
}

#[cfg(test)]
mod conformance {
    fn twin() -> super::MemProducer {
        let p = super::MemProducer::new();
        p.max_bytes(crate::store::conformance::producer::MAX_RECORD_BYTES);
        p
    }

    crate::producer_conformance_tests!((twin(), ()));
}
