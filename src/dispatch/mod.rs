//! Dispatch: delivers the outbox. Every target is strict FIFO by EVENT_ID; a head in backoff is
//! waited for, never skipped (I1 on the delivery side). Two stages, so a broker outage never
//! holds COUTMSGS back:
//!
//! - [`Dispatcher`] (thread `dispatch`): `KAFKA:msg`, one record per event, key FLID, headers
//!   `event_id` and `msg_id`, many records per produce round (still one request in flight,
//!   D3), SENT in batches, only the acknowledged prefix counted; and `KAFKA:schd`, never one by
//!   one: every `flush-period` up to `flush-limit` events are claimed, the newest per FLID
//!   kept, and sent as one FLTR JSON array no larger than `max-event-bytes`; a refused batch
//!   backs off whole.
//! - [`OutboundDispatcher`] (thread `outbound`): `COUTMSGS`, each event inserted once into the
//!   shared outbound mailbox.
//!
//! Failures (SPEC §4.9): a broker or mailbox that is unavailable — however long — stalls the
//! stage; no event is charged an attempt and none becomes DEAD. The broker's refusal of a
//! record (too large, invalid against the topic's schema, not authorised) is charged to the
//! head event, which backs off and holds its topic — never DEAD by itself, so nothing behind
//! it is delivered first — until the broker takes it or a person parks it (`msgx park`, #67).
//! A refusal of a COUTMSGS insert backs off, then goes to the dead-letter queue.
//! Nothing is produced while this instance's lease is not confirmed (the [`LeaseGate`]).

use crate::error::Store;
use std::collections::HashMap;
use std::sync::Arc;

use crate::clock::Clock;
use std::time::{Duration, SystemTime};

use log::{error, info, warn};

use crate::domain::{MsgEvent, Target};
use crate::error::{ErrorClass, StoreError};
use crate::lease::Gate;
use crate::policy::retry::RetryPolicy;
use crate::ports::{Failure, Landed, Outbound, Outbox, Producer, Record, Sent};
use crate::stage::{Next, RoundReport, Stage};
use crate::stats::{self, Stats};

/// What one delivery round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    Idle,
    /// Nothing may go before this time (a head in backoff, or the next schd flush).
    Wait(SystemTime),
    /// Events acknowledged, and whether a target's head was refused (it backs off).
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

impl RoundReport for Round {
    fn next(&self) -> Next {
        match self {
            // More may be ready; a refused head answers the next round with its backoff.
            Round::Sent { .. } => Next::Now,
            Round::Wait(t) => Next::At(*t),
            Round::Idle => Next::Idle,
        }
    }

    fn progressed(&self) -> bool {
        false // nothing downstream of delivery
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

/// How many of `events` (in EVENT_ID order) one FLTR array may carry: the longest prefix
/// whose array of the newest per FLID stays within `max_bytes` (at least one event).
pub fn schd_batch_len(events: &[MsgEvent], max_bytes: usize) -> usize {
    let mut sizes: HashMap<&str, (i64, i64, usize)> = HashMap::new(); // flid -> (version, id, len)
    let mut total = 2usize; // the brackets
    for (i, e) in events.iter().enumerate() {
        let mut next = total;
        match sizes.get(e.partition_key.as_str()) {
            Some(&(v, id, len)) if (e.state_version, e.event_id) > (v, id) => {
                next = next - len + e.payload_json.len()
            }
            Some(_) => {}
            None => next += e.payload_json.len() + usize::from(!sizes.is_empty()),
        }
        if next > max_bytes && i > 0 {
            return i;
        }
        let slot = sizes.entry(e.partition_key.as_str()).or_insert((i64::MIN, i64::MIN, 0));
        if (e.state_version, e.event_id) > (slot.0, slot.1) {
            *slot = (e.state_version, e.event_id, e.payload_json.len());
        }
        total = next;
    }
    events.len()
}

pub use crate::domain::OutboundIntent;

/// Topics, batches and the schd cadence.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub topic_msg: String,
    pub topic_schd: String,
    pub batch: usize,
    pub flush_period: Duration,
    pub flush_limit: usize,
    /// The largest record msgx produces (`msgx.codec.max-event-bytes`).
    pub max_record_bytes: usize,
    /// The zone of every time in the events (`mailbox.time-zone`, the AODB's local time),
    /// named on every record (header `time_zone`, #67).
    pub time_zone: String,
}

impl Settings {
    pub fn from_config(cfg: &crate::config::Config) -> Settings {
        Settings {
            topic_msg: cfg.topic_msg.clone(),
            topic_schd: cfg.topic_schd.clone(),
            batch: cfg.pipeline.dispatch_batch,
            flush_period: cfg.pipeline.schd_flush_period,
            flush_limit: cfg.pipeline.schd_flush_limit,
            max_record_bytes: cfg.pipeline.max_event_bytes,
            time_zone: cfg.inbound.zone.name.clone(),
        }
    }
}

/// What both dispatch stages share: the outbox, the retry policy and how a failure is charged.
struct Delivery<O> {
    outbox: O,
    policy: RetryPolicy,
    stats: Arc<Stats>,
    /// The Kafka topics of `KAFKA:msg` and `KAFKA:schd`, named in a refusal's log line.
    topics: [String; 2],
}

impl<O: Outbox> Delivery<O> {
    /// `events` SENT, each where its receipt in `landed` says.
    fn sent(
        &mut self,
        target: Target,
        events: &[MsgEvent],
        landed: Vec<Landed<'_>>,
        now: SystemTime,
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        assert_eq!(landed.len(), events.len(), "a receipt per event");
        let sent: Vec<Sent> = events
            .iter()
            .zip(landed)
            .map(|(e, l)| Sent { event_id: e.event_id, state_version: e.state_version, landed: Some(l) })
            .collect();
        self.outbox.mark_sent(&sent, now)?;
        stats::add(&self.stats.events_sent, events.len() as u64);
        let per_target = match target {
            Target::KafkaMsg => &self.stats.sent_kafka_msg,
            Target::KafkaSchd => &self.stats.sent_kafka_schd,
            Target::Coutmsgs => &self.stats.sent_coutmsgs,
        };
        stats::add(per_target, events.len() as u64);
        // The topic moved on: whatever it held at was taken (or parked, and this came after).
        self.stats.refused.set(target, 0);
        for e in events {
            stats::Latencies::observe(&self.stats.latency.delivery, e.created_at, now);
        }
        info!(
            "sent target={} events={} first_event_id={} last_event_id={}",
            target.as_str(),
            events.len(),
            events[0].event_id,
            events[events.len() - 1].event_id
        );
        Ok(())
    }

    /// A refused attempt for `events` (one head, or a whole schd batch). A Kafka target holds
    /// ([`Delivery::held`]); a COUTMSGS head backs off, and is DEAD once its attempts are used
    /// up. Only rejections come here.
    fn refused(
        &mut self,
        target: Target,
        events: &[MsgEvent],
        err: &StoreError,
        now: SystemTime,
    ) -> Result<(), StoreError> {
        debug_assert!(err.is_rejected(), "only a refusal is charged (SPEC 4.9)");
        let ids: Vec<i64> = events.iter().map(|e| e.event_id).collect();
        let attempts = events.iter().map(|e| e.attempts).max().unwrap_or(0);
        let first = &events[0];
        if target != Target::Coutmsgs {
            return self.held(target, &ids, attempts + 1, first, err, now);
        }
        match self.policy.on_failure(attempts, None, ErrorClass::Infra, &err.to_string(), now) {
            Failure::Retry { class, error, next_attempt_at, .. } => {
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

    /// The broker refused a Kafka record (#67): the topic keeps its order. The head is never
    /// DEAD by itself — a consumer would see what came after it first — but waits, backing off
    /// to the policy's cap, until the broker takes it (its schema, ACL or size limit fixed: it
    /// resumes by itself) or a person parks it (`msgx park`, a note kept with it).
    /// `ids` refused together (the head, or a whole schd batch), `first` among them; this is
    /// their `attempts`-th refusal.
    fn held(
        &mut self,
        target: Target,
        ids: &[i64],
        attempts: u32,
        first: &MsgEvent,
        err: &StoreError,
        now: SystemTime,
    ) -> Result<(), StoreError> {
        let error = format!("refused by the broker: {err}");
        let delay = self.policy.delay(attempts);
        self.outbox.retry(ids, ErrorClass::Infra, &error, now + delay)?;
        stats::add(&self.stats.events_failed, ids.len() as u64);
        let counter = match target {
            Target::KafkaSchd => &self.stats.refused_kafka_schd,
            _ => &self.stats.refused_kafka_msg,
        };
        stats::inc(counter);
        self.stats.refused.set(target, first.event_id);
        let said = format!(
            "{} topic={} event_id={} msg_id={} events={} attempts={attempts} error={}; \
             nothing behind it is delivered until the broker takes it (retried every {}) or msgx park parks it",
            target.as_str(),
            self.topics[usize::from(target == Target::KafkaSchd)],
            first.event_id,
            first.msg_id.unwrap_or(0),
            ids.len(),
            crate::logline::Quoted(&err.to_string()),
            crate::config::format_duration(delay),
        );
        // An alert on ERROR stays quiet: the first refusal and every tenth, WARN between.
        if attempts == 1 || attempts % 10 == 0 {
            error!("event refused target={said}");
        } else {
            warn!("event refused target={said}");
        }
        Ok(())
    }

    /// After a send: the acknowledged prefix is SENT; the first failure either stalls the
    /// stage (unavailable, fenced: returned) or is charged to its event (rejected).
    fn settle(
        &mut self,
        target: Target,
        ready: &[MsgEvent],
        results: Vec<Result<Landed<'_>, StoreError>>,
        now: SystemTime,
    ) -> Result<Round, StoreError> {
        debug_assert!(results.len() <= ready.len());
        let acked = results.iter().take_while(|r| r.is_ok()).count();
        let mut results = results.into_iter();
        let landed: Vec<Landed> =
            results.by_ref().take(acked).map(|r| r.expect("the acknowledged prefix")).collect();
        self.sent(target, &ready[..acked], landed, now)?;
        match results.next() {
            None => Ok(Round::Sent { sent: acked, failed: false }),
            Some(Err(e)) if e.is_rejected() => {
                // The first unacknowledged event becomes the head in backoff; the ones behind
                // it stay PENDING untouched and go after it, in order.
                self.refused(target, &ready[acked..acked + 1], &e, now)?;
                Ok(Round::Sent { sent: acked, failed: true })
            }
            Some(Err(e)) => Err(e),
            Some(Ok(_)) => unreachable!("the prefix stopped at a failure"),
        }
    }
}

/// The Kafka targets (`KAFKA:msg`, `KAFKA:schd`): the `dispatch` stage.
pub struct Dispatcher<O, K> {
    delivery: Delivery<O>,
    producer: K,
    settings: Settings,
    gate: Arc<dyn Gate>,
    /// When the next schd flush may run; `None`: as soon as something is due.
    next_flush: Option<SystemTime>,
    /// The broker refused a batch: the next `KAFKA:msg` round sends the head alone (#67).
    alone: bool,
    /// Read after a produce round: it may take the whole message timeout, and a refused
    /// record's backoff counts from when the broker answered (#69).
    clock: Arc<dyn Clock>,
}

impl<O: Outbox, K: Producer> Stage for Dispatcher<O, K> {
    type Round = Round;
    const ID: crate::stage::StageId = crate::stage::StageId::Dispatch;

    fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        Dispatcher::round(self, now)
    }
}

impl<O: Outbox, K: Producer> Dispatcher<O, K> {
    pub fn new(
        outbox: O,
        producer: K,
        policy: RetryPolicy,
        settings: Settings,
        gate: Arc<dyn Gate>,
        stats: Arc<Stats>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Dispatcher {
            delivery: Delivery {
                outbox,
                policy,
                stats,
                topics: [settings.topic_msg.clone(), settings.topic_schd.clone()],
            },
            producer,
            settings,
            gate,
            next_flush: None,
            alone: false,
            clock,
        }
    }

    /// One round over both Kafka targets.
    pub fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        let msg = self.msg_round(now)?;
        let schd = self.schd_round(now)?;
        Ok(msg.and(schd))
    }

    fn msg_round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        let pending = self.delivery.outbox.pending(Target::KafkaMsg, self.settings.batch)?;
        if pending.is_empty() {
            return Ok(Round::Idle);
        }
        let ready = match ready_prefix(&pending, now) {
            Ok(r) => r,
            Err(until) => return Ok(Round::Wait(until)),
        };
        // A head the broker refused goes alone: a refusal is then its own (#67).
        let ready = if self.alone || ready[0].attempts > 0 { &ready[..1] } else { ready };
        // A stale instance must not send: checked right before every produce round (PRE-5).
        self.gate.check()?;
        let records: Vec<Record> = ready.iter().map(|e| msg_record(&self.settings, e)).collect();
        let topic = self.settings.topic_msg.as_str();
        let mut results: Vec<Result<Landed, StoreError>> = self
            .producer
            .send(&records)
            .into_iter()
            .map(|r| r.map(|at| Landed::Kafka { topic: topic.into(), at }))
            .collect();
        let answered = self.clock.after(now);
        let acked = results.iter().take_while(|r| r.is_ok()).count();
        overtaken(&records, &results, acked);
        // A broker refuses a whole batch for one record in it (Tansu's registry does): a
        // refusal with records behind it in the same request may be theirs. Not charged to
        // anyone; the head goes alone in the next round, at once.
        self.alone = matches!(results.get(acked), Some(Err(e)) if e.is_rejected()) && acked + 1 < ready.len();
        if self.alone {
            info!(
                "the broker refused a batch of {} records at event_id={}; sending them one at a time to find the one it refuses",
                ready.len() - acked,
                ready[acked].event_id
            );
            // The acknowledged prefix alone: its round says Sent, no failure, and the next
            // one comes at once.
            results.truncate(acked);
            return self.delivery.settle(Target::KafkaMsg, &ready[..acked], results, answered);
        }
        self.delivery.settle(Target::KafkaMsg, ready, results, answered)
    }

    /// A schd flush when it is due: the claimed batch, newest per FLID, as one FLTR array.
    fn schd_round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        if let Some(t) = self.next_flush.filter(|t| *t > now) {
            return Ok(Round::Wait(t));
        }
        let claimed = self.delivery.outbox.pending(Target::KafkaSchd, self.settings.flush_limit)?;
        if claimed.is_empty() {
            self.next_flush = Some(now + self.settings.flush_period);
            return Ok(Round::Idle);
        }
        // The head not due: nothing is claimed (the whole last batch is backing off together).
        let ready = match ready_prefix(&claimed, now) {
            Ok(r) => r,
            Err(until) => return Ok(Round::Wait(until)),
        };
        let ready = &ready[..schd_batch_len(ready, self.settings.max_record_bytes)];
        let latest = latest_per_flid(ready);
        let payload =
            format!("[{}]", latest.iter().map(|e| e.payload_json.as_str()).collect::<Vec<_>>().join(","));
        let record = Record {
            topic: self.settings.topic_schd.as_str().into(),
            key: "FLTR".into(),
            payload: payload.into(),
            headers: vec![
                ("first_event_id".into(), ready[0].event_id.to_string()),
                ("last_event_id".into(), ready[ready.len() - 1].event_id.to_string()),
                ("flights".into(), latest.len().to_string()),
                ("batch_key".into(), batch_key(&latest)),
                ("schema_version".into(), crate::schema::VERSION.into()),
                ("time_zone".into(), self.settings.time_zone.as_str().into()),
            ],
        };
        self.gate.check()?;
        let result = self
            .producer
            .send(std::slice::from_ref(&record))
            .pop()
            .unwrap_or_else(|| Err(StoreError::unavailable(Store::Kafka, "no acknowledgement")));
        let now = self.clock.after(now);
        match result {
            Ok(at) => {
                // Older generations folded into the array are delivered too, in the same record.
                let landed = Landed::Kafka { topic: self.settings.topic_schd.as_str().into(), at };
                self.delivery.sent(Target::KafkaSchd, ready, vec![landed; ready.len()], now)?;
                let more = ready.len() < claimed.len();
                self.next_flush = (!more).then_some(now + self.settings.flush_period);
                Ok(Round::Sent { sent: ready.len(), failed: false })
            }
            Err(e) if e.is_rejected() => {
                self.delivery.refused(Target::KafkaSchd, ready, &e, now)?;
                // Only a success moves the cadence; after a failure the backoff decides.
                self.next_flush = None;
                Ok(Round::Sent { sent: 0, failed: true })
            }
            Err(e) => Err(e),
        }
    }
}

/// Records the broker took behind one it refused: they landed before it, and go again after
/// it (same `event_key`). A broker that checks the idempotent producer's sequence refuses them
/// (OUT_OF_ORDER_SEQUENCE); one that does not took a request the producer split off
/// (`linger-ms` keeps a round one request). Said, so the order consumers saw is known (#67).
fn overtaken(records: &[Record<'_>], results: &[Result<Landed<'_>, StoreError>], acked: usize) {
    let Some(Err(refused)) = results.get(acked) else { return };
    if !refused.is_rejected() {
        return;
    }
    for (r, result) in records.iter().zip(results).skip(acked + 1) {
        if let Ok(Landed::Kafka { at, .. }) = result {
            error!(
                "the broker took event_key={} at offset {} behind a record it refused (event_key={}): it is on the topic before the refused one, and is sent again after it",
                header(r, "event_key"),
                at.offset,
                header(&records[acked], "event_key")
            );
        }
    }
}

fn header<'a>(r: &'a Record<'_>, name: &str) -> &'a str {
    r.headers.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str())
}

/// A `KAFKA:schd` array's identity (header `batch_key`): what it aggregates — every flight with
/// the generation it carries — so the same batch sent again has the same key and two different
/// batches never share one, whatever EVENT_IDs a rolled-back PostgreSQL hands out (SPEC §4.10).
pub fn batch_key(latest: &[&MsgEvent]) -> String {
    use sha2::{Digest, Sha256};
    let mut flights: Vec<String> =
        latest.iter().map(|e| format!("{}@{}", e.partition_key, e.state_version)).collect();
    flights.sort();
    let digest = Sha256::digest(flights.join("\n").as_bytes());
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("schd:{hex}")
}

/// An event's record, borrowed from its row: only the headers' values are written.
fn msg_record<'a>(settings: &'a Settings, e: &'a MsgEvent) -> Record<'a> {
    let mut headers = Vec::with_capacity(5);
    headers.push(("event_id".into(), e.event_id.to_string()));
    headers.push(("event_key".into(), e.key()));
    if let Some(m) = e.msg_id {
        headers.push(("msg_id".into(), m.to_string()));
    }
    headers.push(("schema_version".into(), crate::schema::VERSION.into()));
    headers.push(("time_zone".into(), settings.time_zone.as_str().into()));
    Record {
        topic: settings.topic_msg.as_str().into(),
        key: e.partition_key.as_str().into(),
        payload: e.payload_json.as_str().into(),
        headers,
    }
}

/// The `COUTMSGS` target: the `outbound` stage.
pub struct OutboundDispatcher<O, B> {
    delivery: Delivery<O>,
    outbound: B,
    batch: usize,
    gate: Arc<dyn Gate>,
    /// Read after the inserts: a refusal's backoff counts from when the mailbox answered (#69).
    clock: Arc<dyn Clock>,
}

impl<O: Outbox, B: Outbound> Stage for OutboundDispatcher<O, B> {
    type Round = Round;
    const ID: crate::stage::StageId = crate::stage::StageId::Outbound;

    fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        OutboundDispatcher::round(self, now)
    }
}

impl<O: Outbox, B: Outbound> OutboundDispatcher<O, B> {
    pub fn new(
        outbox: O,
        outbound: B,
        policy: RetryPolicy,
        batch: usize,
        gate: Arc<dyn Gate>,
        stats: Arc<Stats>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let delivery = Delivery { outbox, policy, stats, topics: Default::default() };
        OutboundDispatcher { delivery, outbound, batch, gate, clock }
    }

    pub fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        let pending = self.delivery.outbox.pending(Target::Coutmsgs, self.batch)?;
        if pending.is_empty() {
            return Ok(Round::Idle);
        }
        let ready = match ready_prefix(&pending, now) {
            Ok(r) => r,
            Err(until) => return Ok(Round::Wait(until)),
        };
        self.gate.check()?;
        // LAST_ATTEMPT_AT first, so a retry whose earlier insert committed but whose SENT mark
        // was lost finds that row and does not insert again.
        let ids: Vec<i64> = ready.iter().map(|e| e.event_id).collect();
        self.delivery.outbox.started(&ids, now)?;
        let mut results = Vec::with_capacity(ready.len());
        for e in ready {
            if results.iter().any(|r: &Result<Landed, StoreError>| r.is_err()) {
                break;
            }
            results.push(self.insert_once(e, now).map(|row| Landed::Outbound { row }));
        }
        let tried = results.len();
        let answered = self.clock.after(now);
        self.delivery.settle(Target::Coutmsgs, &ready[..tried], results, answered)
    }

    /// The COUTMSGS row the event became: inserted now, or found from an earlier attempt.
    fn insert_once(&mut self, e: &MsgEvent, now: SystemTime) -> Result<i64, StoreError> {
        let intent: OutboundIntent = serde_json::from_str(&e.payload_json).map_err(|err| {
            StoreError::rejected(
                Store::Mailbox,
                format!("event_id={} is not an outbound intent: {err}", e.event_id),
            )
        })?;
        if let Some(since) = e.last_attempt_at {
            if let Some(row) = self.outbound.find(&intent.routing_id, &intent.xml, since)? {
                info!(
                    "outbound already inserted event_id={} coutmsgs_id={row}; not inserting again",
                    e.event_id
                );
                return Ok(row);
            }
        }
        self.outbound.insert(&intent.routing_id, &intent.xml, now)
    }
}

#[cfg(test)]
mod tests;
