//! Dispatch (dispatch thread): delivers the outbox. Each target is strict FIFO by EVENT_ID; a
//! head in backoff is waited for, never skipped (I1 on the delivery side). Events go out in
//! batches (many records per produce round, still one request in flight, D3) and are marked
//! SENT in batches; only the acknowledged prefix of a batch counts.

use std::sync::Arc;
use std::time::SystemTime;

use log::{error, info, warn};

use crate::clock::Clock;
use crate::domain::{MsgEvent, Target};
use crate::error::{ErrorClass, StoreError};
use crate::ports::{Failure, Outbox, Producer, Record};
use crate::pump::rules::RetryPolicy;
use crate::stats::{self, Stats};

/// What one delivery round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    Idle,
    /// The head is backing off until then.
    Wait(SystemTime),
    /// Events acknowledged, and whether the round stopped on a failure.
    Sent {
        sent: usize,
        failed: bool,
    },
}

/// The events of a pending batch that may go now: the prefix whose backoff has expired.
/// Only the head can be backing off (a failure stops the round), but a row behind it is
/// checked too rather than trusted.
pub fn ready_prefix(pending: &[MsgEvent], now: SystemTime) -> Result<&[MsgEvent], SystemTime> {
    let n = pending.iter().take_while(|e| e.next_attempt_at.is_none_or(|t| t <= now)).count();
    if n == 0 {
        if let Some(t) = pending.first().and_then(|e| e.next_attempt_at) {
            return Err(t);
        }
    }
    Ok(&pending[..n])
}

pub struct Dispatcher<O, K> {
    outbox: O,
    producer: K,
    clock: Arc<dyn Clock>,
    policy: RetryPolicy,
    batch: usize,
    topic_msg: String,
    stats: Arc<Stats>,
}

impl<O: Outbox, K: Producer> Dispatcher<O, K> {
    pub fn new(
        outbox: O,
        producer: K,
        clock: Arc<dyn Clock>,
        policy: RetryPolicy,
        batch: usize,
        topic_msg: String,
        stats: Arc<Stats>,
    ) -> Self {
        Dispatcher { outbox, producer, clock, policy, batch, topic_msg, stats }
    }

    /// One round for `KAFKA:msg`: one record per event, key FLID, event and message id in
    /// headers (INV-10: consumers drop duplicates by event id).
    pub fn round(&mut self) -> Result<Round, StoreError> {
        let pending = self.outbox.pending(Target::KafkaMsg, self.batch)?;
        if pending.is_empty() {
            return Ok(Round::Idle);
        }
        let now = self.clock.now();
        let ready = match ready_prefix(&pending, now) {
            Ok(r) => r,
            Err(until) => return Ok(Round::Wait(until)),
        };
        let records: Vec<Record> = ready.iter().map(|e| self.record(e)).collect();
        let results = self.producer.send(&records);
        debug_assert_eq!(results.len(), records.len());
        let acked = results.iter().take_while(|r| r.is_ok()).count();
        let ids: Vec<i64> = ready[..acked].iter().map(|e| e.event_id).collect();
        let now = self.clock.now();
        if !ids.is_empty() {
            self.outbox.mark_sent(&ids, now)?;
            stats::add(&self.stats.events_sent, ids.len() as u64);
            info!(
                "sent target={} events={} first_event_id={} last_event_id={}",
                Target::KafkaMsg.as_str(),
                ids.len(),
                ids[0],
                ids[ids.len() - 1]
            );
        }
        let failed = acked < ready.len();
        if failed {
            // The first unacknowledged event becomes the head in backoff; the ones behind it
            // stay PENDING untouched and go after it, in order.
            let head = &ready[acked];
            let err = results[acked].as_ref().err().map(|e| e.to_string()).unwrap_or_default();
            match self.policy.on_failure(head.attempts, ErrorClass::Infra, &err, now) {
                Failure::Retry { class, error, next_attempt_at } => {
                    self.outbox.retry(head.event_id, class, &error, next_attempt_at)?;
                    stats::inc(&self.stats.events_failed);
                    warn!(
                        "delivery failed target={} event_id={} msg_id={} attempts={} error={error:?}",
                        head.target.as_str(),
                        head.event_id,
                        head.msg_id.unwrap_or(0),
                        head.attempts + 1
                    );
                }
                Failure::Dead { class, error } => {
                    self.outbox.dead(head.event_id, class, &error)?;
                    stats::inc(&self.stats.events_dead);
                    error!(
                        "event dead target={} event_id={} msg_id={} class={class} error={error:?}",
                        head.target.as_str(),
                        head.event_id,
                        head.msg_id.unwrap_or(0)
                    );
                }
            }
        }
        Ok(Round::Sent { sent: acked, failed })
    }

    fn record(&self, e: &MsgEvent) -> Record {
        let mut headers = vec![("event_id".to_string(), e.event_id.to_string())];
        if let Some(m) = e.msg_id {
            headers.push(("msg_id".to_string(), m.to_string()));
        }
        Record {
            topic: self.topic_msg.clone(),
            key: e.partition_key.clone(),
            payload: e.payload_json.clone(),
            headers,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::FakeClock;
    use crate::config::Config;
    use crate::domain::{EventStatus, InboundRow, NewEvent};
    use crate::ports::{ProcStore, Settle};
    use crate::store::memory::{MemPg, MemProducer};

    fn setup(n: i64) -> (FakeClock, MemPg, MemProducer, Dispatcher<MemPg, MemProducer>) {
        let clock = FakeClock::new();
        let mut pg = MemPg::new();
        for id in 1..=n {
            pg.enqueue(&[InboundRow { id, received_at: None }], Some(id), clock.now()).unwrap();
            let ev = NewEvent {
                target: "KAFKA:msg".into(),
                partition_key: format!("F{}", id % 3),
                event_type: "UPSERT".into(),
                state_version: id,
                payload_json: format!("{{\"n\":{id}}}"),
            };
            pg.commit(&[Settle::succeeded(id, &format!("k{id}"), vec![ev])], clock.now()).unwrap();
        }
        let producer = MemProducer::new();
        let cfg = Config::defaults();
        let d = Dispatcher::new(
            pg.clone(),
            producer.clone(),
            Arc::new(clock.clone()),
            crate::pump::retry_policy(&cfg.pipeline),
            2,
            "t.msg".into(),
            Arc::new(Stats::default()),
        );
        (clock, pg, producer, d)
    }

    fn states(pg: &MemPg) -> Vec<EventStatus> {
        pg.inspect(|s| s.events.values().map(|e| e.state).collect())
    }

    #[test]
    fn delivers_in_event_order_with_key_and_headers_in_batches() {
        let (_c, pg, producer, mut d) = setup(3);
        assert_eq!(d.round().unwrap(), Round::Sent { sent: 2, failed: false });
        assert_eq!(d.round().unwrap(), Round::Sent { sent: 1, failed: false });
        assert_eq!(d.round().unwrap(), Round::Idle);
        let got = producer.delivered();
        let payloads: Vec<_> = got.iter().map(|r| r.payload.as_str()).collect();
        assert_eq!(payloads, ["{\"n\":1}", "{\"n\":2}", "{\"n\":3}"]);
        assert_eq!(got[0].key, "F1");
        assert_eq!(got[0].topic, "t.msg");
        assert_eq!(got[0].headers, vec![("event_id".into(), "1".into()), ("msg_id".into(), "1".into())]);
        assert_eq!(states(&pg), vec![EventStatus::Sent; 3]);
        assert!(pg.inspect(|s| s.events.values().all(|e| e.sent_at.is_some())));
    }

    #[test]
    fn failed_head_backs_off_and_nothing_overtakes_it() {
        let (clock, pg, producer, mut d) = setup(2);
        producer.fail_next(1);
        assert_eq!(d.round().unwrap(), Round::Sent { sent: 0, failed: true });
        let until = clock.now() + Duration::from_secs(1);
        assert_eq!(d.round().unwrap(), Round::Wait(until));
        assert!(producer.delivered().is_empty());
        clock.advance(Duration::from_secs(1));
        assert_eq!(d.round().unwrap(), Round::Sent { sent: 2, failed: false });
        assert_eq!(states(&pg), vec![EventStatus::Sent; 2]);
    }

    #[test]
    fn exhausted_event_goes_dead_and_the_next_one_follows() {
        let (clock, pg, producer, mut d) = setup(2);
        producer.fail_next(5);
        for _ in 0..5 {
            assert!(matches!(d.round().unwrap(), Round::Sent { sent: 0, failed: true }));
            clock.advance(Duration::from_secs(60));
        }
        assert_eq!(states(&pg), vec![EventStatus::Dead, EventStatus::Pending]);
        assert_eq!(d.round().unwrap(), Round::Sent { sent: 1, failed: false });
        let dead = pg.inspect(|s| s.events[&1].clone());
        assert_eq!(dead.error_class, Some(ErrorClass::Exhausted));
        assert_eq!(dead.event.attempts, 5);
    }

    #[test]
    fn ready_prefix_stops_at_a_row_in_backoff() {
        let now = FakeClock::new().now();
        let ev = |id, next: Option<SystemTime>| MsgEvent {
            event_id: id,
            msg_id: None,
            target: Target::KafkaMsg,
            partition_key: "k".into(),
            payload_json: "{}".into(),
            attempts: 0,
            next_attempt_at: next,
        };
        let later = now + Duration::from_secs(5);
        let rows = [ev(1, Some(now)), ev(2, None), ev(3, Some(later)), ev(4, None)];
        assert_eq!(ready_prefix(&rows, now).unwrap().len(), 2);
        assert_eq!(ready_prefix(&rows[2..], now), Err(later));
        assert_eq!(ready_prefix(&[], now).unwrap().len(), 0);
    }
}
