//! Dispatch (dispatch thread): delivers the outbox. Every target is strict FIFO by EVENT_ID; a
//! head in backoff is waited for, never skipped (I1 on the delivery side).
//!
//! - `KAFKA:msg`: one record per event, key FLID, headers `event_id` and `msg_id`; many records
//!   per produce round (still one request in flight, D3), SENT in batches; only the
//!   acknowledged prefix of a round counts.
//! - `KAFKA:schd`: never one by one. Every `flush-period` up to `flush-limit` events are
//!   claimed, the newest per FLID kept, and sent as one FLTR JSON array; a failure backs the
//!   whole batch off, exhaustion makes the whole batch DEAD.
//! - `COUTMSGS`: each event inserted once into the shared outbound mailbox.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use log::{error, info, warn};

use crate::clock::Clock;
use crate::domain::{MsgEvent, Target};
use crate::error::{ErrorClass, StoreError};
use crate::ports::{Failure, Outbound, Outbox, Producer, Record};
use crate::pump::rules::RetryPolicy;
use crate::stats::{self, Stats};

/// What one delivery round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    Idle,
    /// Nothing may go before this time (a head in backoff, or the next schd flush).
    Wait(SystemTime),
    /// Events acknowledged, and whether some target stopped on a failure.
    Sent {
        sent: usize,
        failed: bool,
    },
}

impl Round {
    fn and(self, other: Round) -> Round {
        match (self, other) {
            (Round::Sent { sent: a, failed: f }, Round::Sent { sent: b, failed: g }) => {
                Round::Sent { sent: a + b, failed: f || g }
            }
            (s @ Round::Sent { .. }, _) | (_, s @ Round::Sent { .. }) => s,
            (Round::Wait(a), Round::Wait(b)) => Round::Wait(a.min(b)),
            (w @ Round::Wait(_), Round::Idle) | (Round::Idle, w @ Round::Wait(_)) => w,
            (Round::Idle, Round::Idle) => Round::Idle,
        }
    }
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

/// The newest event per FLID (highest generation, then highest EVENT_ID), in EVENT_ID order.
pub fn latest_per_flid(events: &[MsgEvent]) -> Vec<&MsgEvent> {
    let mut newest: HashMap<&str, &MsgEvent> = HashMap::new();
    for e in events {
        let slot = newest.entry(e.partition_key.as_str()).or_insert(e);
        if (e.state_version, e.event_id) > (slot.state_version, slot.event_id) {
            *slot = e;
        }
    }
    let mut out: Vec<&MsgEvent> = newest.into_values().collect();
    out.sort_by_key(|e| e.event_id);
    out
}

/// An outbound intent as the pump writes it for target COUTMSGS.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutboundIntent {
    pub routing_id: String,
    pub xml: String,
}

/// Topics and the schd cadence.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub topic_msg: String,
    pub topic_schd: String,
    pub batch: usize,
    pub flush_period: Duration,
    pub flush_limit: usize,
}

impl Settings {
    pub fn from_config(cfg: &crate::config::Config) -> Settings {
        Settings {
            topic_msg: cfg.topic_msg.clone(),
            topic_schd: cfg.topic_schd.clone(),
            batch: cfg.pipeline.dispatch_batch,
            flush_period: cfg.pipeline.schd_flush_period,
            flush_limit: cfg.pipeline.schd_flush_limit,
        }
    }
}

pub struct Dispatcher<O, K, B> {
    outbox: O,
    producer: K,
    outbound: B,
    clock: Arc<dyn Clock>,
    policy: RetryPolicy,
    settings: Settings,
    /// When the next schd flush may run; `None`: as soon as something is due.
    next_flush: Option<SystemTime>,
    stats: Arc<Stats>,
}

impl<O: Outbox, K: Producer, B: Outbound> Dispatcher<O, K, B> {
    pub fn new(
        outbox: O,
        producer: K,
        outbound: B,
        clock: Arc<dyn Clock>,
        policy: RetryPolicy,
        settings: Settings,
        stats: Arc<Stats>,
    ) -> Self {
        Dispatcher { outbox, producer, outbound, clock, policy, settings, next_flush: None, stats }
    }

    /// One round over every target.
    pub fn round(&mut self) -> Result<Round, StoreError> {
        let msg = self.fifo_round(Target::KafkaMsg)?;
        let schd = self.schd_round()?;
        let out = self.fifo_round(Target::Coutmsgs)?;
        Ok(msg.and(schd).and(out))
    }

    /// One round of a one-event-at-a-time target (`KAFKA:msg`, `COUTMSGS`).
    fn fifo_round(&mut self, target: Target) -> Result<Round, StoreError> {
        let pending = self.outbox.pending(target, self.settings.batch)?;
        if pending.is_empty() {
            return Ok(Round::Idle);
        }
        let now = self.clock.now();
        let ready = match ready_prefix(&pending, now) {
            Ok(r) => r,
            Err(until) => return Ok(Round::Wait(until)),
        };
        let results = match target {
            Target::KafkaMsg => {
                let records: Vec<Record> = ready.iter().map(|e| self.msg_record(e)).collect();
                self.producer.send(&records)
            }
            Target::Coutmsgs => self.insert_outbound(ready, now)?,
            Target::KafkaSchd => unreachable!("schd is flushed in batches"),
        };
        debug_assert_eq!(results.len(), ready.len());
        let acked = results.iter().take_while(|r| r.is_ok()).count();
        self.sent(target, &ready[..acked])?;
        let failed = acked < ready.len();
        if failed {
            // The first unacknowledged event becomes the head in backoff; the ones behind it
            // stay PENDING untouched and go after it, in order.
            let err = results[acked].as_ref().err().map(|e| e.to_string()).unwrap_or_default();
            self.failed(target, &ready[acked..acked + 1], &err)?;
        }
        Ok(Round::Sent { sent: acked, failed })
    }

    /// A schd flush when it is due: the claimed batch, newest per FLID, as one FLTR array.
    fn schd_round(&mut self) -> Result<Round, StoreError> {
        let now = self.clock.now();
        if let Some(t) = self.next_flush.filter(|t| *t > now) {
            return Ok(Round::Wait(t));
        }
        let claimed = self.outbox.pending(Target::KafkaSchd, self.settings.flush_limit)?;
        if claimed.is_empty() {
            self.next_flush = Some(now + self.settings.flush_period);
            return Ok(Round::Idle);
        }
        // The head not due: nothing is claimed (the whole last batch is backing off together).
        let ready = match ready_prefix(&claimed, now) {
            Ok(r) => r,
            Err(until) => return Ok(Round::Wait(until)),
        };
        let latest = latest_per_flid(ready);
        let payload =
            format!("[{}]", latest.iter().map(|e| e.payload_json.as_str()).collect::<Vec<_>>().join(","));
        let record = Record {
            topic: self.settings.topic_schd.clone(),
            key: "FLTR".to_string(),
            payload,
            headers: vec![
                ("first_event_id".into(), ready[0].event_id.to_string()),
                ("last_event_id".into(), ready[ready.len() - 1].event_id.to_string()),
                ("flights".into(), latest.len().to_string()),
            ],
        };
        match self.producer.send(std::slice::from_ref(&record)).pop() {
            Some(Ok(())) => {
                // Older generations folded into the array are delivered too.
                self.sent(Target::KafkaSchd, ready)?;
                self.next_flush = Some(now + self.settings.flush_period);
                Ok(Round::Sent { sent: ready.len(), failed: false })
            }
            other => {
                let err = match other {
                    Some(Err(e)) => e.to_string(),
                    _ => "no acknowledgement".to_string(),
                };
                self.failed(Target::KafkaSchd, ready, &err)?;
                // Only a success moves the cadence; after a failure the backoff decides.
                self.next_flush = None;
                Ok(Round::Sent { sent: 0, failed: true })
            }
        }
    }

    /// COUTMSGS: each event inserted once. LAST_ATTEMPT_AT is stamped first, so a retry whose
    /// earlier insert committed but whose SENT mark was lost finds that row and does not
    /// insert again.
    fn insert_outbound(
        &mut self,
        ready: &[MsgEvent],
        now: SystemTime,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let ids: Vec<i64> = ready.iter().map(|e| e.event_id).collect();
        self.outbox.started(&ids, now)?;
        let mut out = Vec::with_capacity(ready.len());
        for e in ready {
            if out.iter().any(|r: &Result<(), StoreError>| r.is_err()) {
                out.push(Err(StoreError::new("mailbox", "not attempted: an earlier event failed")));
                continue;
            }
            out.push(self.insert_once(e, now));
        }
        Ok(out)
    }

    fn insert_once(&mut self, e: &MsgEvent, now: SystemTime) -> Result<(), StoreError> {
        let intent: OutboundIntent = serde_json::from_str(&e.payload_json).map_err(|err| {
            StoreError::new("mailbox", format!("event_id={} is not an outbound intent: {err}", e.event_id))
        })?;
        if let Some(since) = e.last_attempt_at {
            if let Some(row) = self.outbound.find(&intent.routing_id, &intent.xml, since)? {
                info!(
                    "outbound already inserted event_id={} coutmsgs_id={row}; not inserting again",
                    e.event_id
                );
                return Ok(());
            }
        }
        self.outbound.insert(&intent.routing_id, &intent.xml, now)?;
        Ok(())
    }

    fn sent(&mut self, target: Target, events: &[MsgEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let pairs: Vec<(i64, i64)> = events.iter().map(|e| (e.event_id, e.state_version)).collect();
        self.outbox.mark_sent(&pairs, self.clock.now())?;
        stats::add(&self.stats.events_sent, events.len() as u64);
        info!(
            "sent target={} events={} first_event_id={} last_event_id={}",
            target.as_str(),
            events.len(),
            events[0].event_id,
            events[events.len() - 1].event_id
        );
        Ok(())
    }

    /// A failed attempt for `events` (one head, or a whole schd batch): back off together, or
    /// DEAD together when the attempts are used up.
    fn failed(&mut self, target: Target, events: &[MsgEvent], err: &str) -> Result<(), StoreError> {
        let now = self.clock.now();
        let ids: Vec<i64> = events.iter().map(|e| e.event_id).collect();
        let attempts = events.iter().map(|e| e.attempts).max().unwrap_or(0);
        let first = &events[0];
        match self.policy.on_failure(attempts, ErrorClass::Infra, err, now) {
            Failure::Retry { class, error, next_attempt_at } => {
                self.outbox.retry(&ids, class, &error, next_attempt_at)?;
                stats::add(&self.stats.events_failed, ids.len() as u64);
                warn!(
                    "delivery failed target={} event_id={} msg_id={} events={} attempts={} error={error:?}",
                    target.as_str(),
                    first.event_id,
                    first.msg_id.unwrap_or(0),
                    ids.len(),
                    attempts + 1
                );
            }
            Failure::Dead { class, error } => {
                self.outbox.dead(&ids, class, &error)?;
                stats::add(&self.stats.events_dead, ids.len() as u64);
                error!(
                    "event dead target={} event_id={} msg_id={} events={} class={class} error={error:?}",
                    target.as_str(),
                    first.event_id,
                    first.msg_id.unwrap_or(0),
                    ids.len()
                );
            }
        }
        Ok(())
    }

    fn msg_record(&self, e: &MsgEvent) -> Record {
        let mut headers = vec![("event_id".to_string(), e.event_id.to_string())];
        if let Some(m) = e.msg_id {
            headers.push(("msg_id".to_string(), m.to_string()));
        }
        Record {
            topic: self.settings.topic_msg.clone(),
            key: e.partition_key.clone(),
            payload: e.payload_json.clone(),
            headers,
        }
    }
}

#[cfg(test)]
mod tests;
