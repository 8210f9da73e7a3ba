//! `/metrics`: every series msgx exports, in the Prometheus text format (0.0.4, which
//! OpenMetrics scrapers read too), through `prometheus-client`. Low cardinality: labels are
//! outcomes, classes, targets, stores and stages — never message or flight ids.
//!
//! Counters and histograms are the process's own (from start-up, as Prometheus expects); the
//! gauges about the queue, the outbox and the marks are read from own PostgreSQL every
//! [`GAUGES_TTL`] by a thread of their own ([`Metrics::refresh`]), never on a request: a
//! PostgreSQL that hangs holds that thread, not the listener's workers, so `/live` and
//! `/metrics` still answer at once (#42). A scrape shows the last read and its age.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Ops, STORES};
use crate::clock::{Clock, Mono};
use crate::error::Store;
use crate::ports::{GaugeSource, Gauges};
use crate::requests::Origin;

/// How often the store gauges are read again.
pub const GAUGES_TTL: Duration = Duration::from_secs(5);
/// A last read older than this is not up (`msgx_gauges_up` 0): the reads hang or fail.
const GAUGES_STALE: Duration = Duration::from_secs(15);

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The renderer: the shared view and the last read of the store gauges.
pub struct Metrics {
    ops: Arc<Ops>,
    clock: Arc<dyn Clock>,
    /// When the gauges were last read, and what that read gave; the last good read.
    gauges: Mutex<GaugeReads>,
}

#[derive(Default)]
struct GaugeReads {
    last: Option<(Mono, Result<(), String>)>,
    good: Option<(Mono, Gauges)>,
}

impl Metrics {
    /// The clock the gauges are aged by.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn new(ops: Arc<Ops>, clock: Arc<dyn Clock>) -> Metrics {
        Metrics { ops, clock, gauges: Mutex::default() }
    }

    /// Reads the store gauges from own PostgreSQL: the refreshing thread's turn, every
    /// [`GAUGES_TTL`]. The lock is not held while PostgreSQL answers.
    pub fn refresh(&self, pg: &mut impl GaugeSource) {
        let read = pg.gauges();
        let now = self.clock.mono();
        let mut g = self.gauges.lock().expect("gauge reads poisoned");
        match read {
            Ok(gauges) => {
                g.last = Some((now, Ok(())));
                g.good = Some((now, gauges));
            }
            Err(e) => g.last = Some((now, Err(e.to_string()))),
        }
    }

    /// The gauges in a few words for systemd's status line: the lag and the DEAD messages, or
    /// how long they have not been read; `None` before the first read.
    pub fn brief(&self) -> Option<String> {
        let (up, good) = self.gauges();
        let (age, g) = good?;
        let dead: i64 = g.dead.iter().map(|(_, n)| n).sum();
        let mut line = format!("lag={:.0}s dead={dead}", g.lag);
        let awaiting = g.awaiting_answers();
        if awaiting > 0 {
            line.push_str(&format!(" degraded: {awaiting} window(s) await the AODB's answer"));
        }
        if !up {
            line.push_str(&format!(" (read {}s ago: own PostgreSQL does not answer)", age.as_secs()));
        }
        Some(line)
    }

    /// Windows whose flights await the AODB's answer after a heal (#41), as last read.
    pub fn awaiting_answers(&self) -> i64 {
        self.gauges().1.map_or(0, |(_, g)| g.awaiting_answers())
    }

    /// The last good read of the store gauges and its age; whether the reads are up (the last
    /// one succeeded, recently).
    pub fn gauges(&self) -> (bool, Option<(Duration, Gauges)>) {
        let g = self.gauges.lock().expect("gauge reads poisoned");
        let now = self.clock.mono().as_duration();
        let age = |at: &Mono| now.saturating_sub(at.as_duration());
        let up = matches!(&g.last, Some((at, Ok(()))) if age(at) < GAUGES_STALE);
        (up, g.good.as_ref().map(|(at, gauges)| (age(at), gauges.clone())))
    }

    /// The whole exposition.
    pub fn render(&self) -> String {
        let mut r = Registry::default();
        self.counters(&mut r);
        self.health(&mut r);
        self.store_gauges(&mut r);
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &r).expect("writing to a String");
        out
    }

    fn counters(&self, r: &mut Registry) {
        let s = &self.ops.stats;
        let get = |c: &AtomicU64| c.load(Relaxed);
        let family = |pairs: &[(&str, &str, &AtomicU64)]| {
            let f = Family::<Labels, Counter>::default();
            for (k, v, c) in pairs {
                f.get_or_create(&labels(&[(k, v)])).inc_by(get(c));
            }
            f
        };
        r.register(
            "msgx_messages",
            "Messages by the outcome of an attempt (failed counts attempts)",
            family(&[
                ("outcome", "succeeded", &s.succeeded),
                ("outcome", "skipped_duplicate", &s.skipped_duplicate),
                ("outcome", "skipped_ignored", &s.skipped_ignored),
                ("outcome", "skipped_not_for_msgx", &s.skipped_not_for_msgx),
                ("outcome", "failed", &s.failed),
                ("outcome", "dead", &s.dead),
            ]),
        );
        r.register(
            "msgx_events_sent",
            "Outbox events acknowledged and marked SENT, per target",
            family(&[
                ("target", "KAFKA:msg", &s.sent_kafka_msg),
                ("target", "KAFKA:schd", &s.sent_kafka_schd),
                ("target", "COUTMSGS", &s.sent_coutmsgs),
            ]),
        );
        r.register(
            "msgx_requests_expired",
            "Requests to the AODB that EXPIRED unanswered or undeliverable, per origin (a heal's is asked again up to msgx.requests.heal-tries)",
            family(&[
                ("origin", Origin::Operator.as_str(), &s.requests_expired_operator),
                ("origin", Origin::Heal.as_str(), &s.requests_expired_heal),
                ("origin", Origin::FirstStart.as_str(), &s.requests_expired_first_start),
            ]),
        );
        r.register(
            "msgx_marks",
            "Mailbox marks by result (failed: refused and rescheduled; overdue: abandoned)",
            family(&[
                ("result", "written", &s.marks_written),
                ("result", "already", &s.marks_already),
                ("result", "missing", &s.marks_missing),
                ("result", "failed", &s.marks_failed),
                ("result", "overdue", &s.marks_overdue),
            ]),
        );
        r.register(
            "msgx_events_refused",
            "Records the broker refused, by target (each refused attempt; the topic holds at its head)",
            family(&[
                ("target", "KAFKA:msg", &s.refused_kafka_msg),
                ("target", "KAFKA:schd", &s.refused_kafka_schd),
            ]),
        );
        self.plain_counters(r);
    }

    /// The counters without labels, and the latencies.
    fn plain_counters(&self, r: &mut Registry) {
        let s = &self.ops.stats;
        let get = |c: &AtomicU64| c.load(Relaxed);
        let plain: [(&str, &str, &AtomicU64); 14] = [
            ("msgx_polled", "Mailbox rows seen by the poller", &s.polled),
            ("msgx_enqueued", "PROC_STATE rows created (PENDING)", &s.enqueued),
            ("msgx_rescued", "Unmarked mailbox rows the compensating rescan enqueued", &s.rescued),
            ("msgx_event_attempts_failed", "Event delivery attempts that failed", &s.events_failed),
            ("msgx_events_dead", "Events that became DEAD (dead-letter queue)", &s.events_dead),
            ("msgx_events_deleted", "SENT events deleted by the retention job", &s.events_deleted),
            ("msgx_archived", "Terminal rows archived to PROC_STATE_HST", &s.archived),
            ("msgx_unknown_elements", "Element names the tolerant reader skipped", &s.unknown_elements),
            ("msgx_outages", "Times a stage stalled on a store (SPEC 4.9)", &s.outages),
            (
                "msgx_consistency_findings",
                "Findings of the consistency sentinel: a store behind what it acknowledged",
                &s.consistency_findings,
            ),
            (
                "msgx_consistency_suspicions",
                "Suspicions of the consistency sentinel: evidence that does not prove a store forgot",
                &s.consistency_suspicions,
            ),
            (
                "msgx_consistency_checks",
                "Comparisons of the stores by the consistency sentinel that found nothing",
                &s.consistency_checks,
            ),
            ("msgx_heals", "Heals of a store that forgot that changed something", &s.heals),
            (
                "msgx_unsolicited_answers",
                "Answers from the AODB no request explains (G-RESP-GUARD)",
                &s.unsolicited_answers,
            ),
        ];
        for (name, help, c) in plain {
            let counter = Counter::<u64>::default();
            counter.inc_by(get(c));
            r.register(name, help, counter);
        }
        let outage = Counter::<f64, AtomicU64>::default();
        outage.inc_by(get(&s.outage_ms) as f64 / 1000.0);
        r.register(
            "msgx_outage_seconds",
            "Seconds stages spent stalled, summed over stages and outages",
            outage,
        );
        r.register(
            "msgx_processing_latency_seconds",
            "From the mailbox's DATE_RECEIVED to SUCCEEDED",
            s.latency.processing.clone(),
        );
        r.register("msgx_delivery_latency_seconds", "From SUCCEEDED to SENT", s.latency.delivery.clone());
    }

    fn health(&self, r: &mut Registry) {
        let stalled = self.ops.stalled();
        let up = Family::<Labels, Gauge>::default();
        for store in STORES.map(Store::name) {
            up.get_or_create(&labels(&[("store", store)]))
                .set(i64::from(!stalled.iter().any(|(_, s)| *s == store)));
        }
        r.register("msgx_store_up", "1 unless a stage of this instance waits for the store", up);
        let stages = Family::<Labels, Gauge>::default();
        for (stage, store) in &stalled {
            stages.get_or_create(&labels(&[("stage", stage), ("store", store)])).set(1);
        }
        r.register("msgx_stage_stalled", "1 for each stage waiting for a store", stages);
        let (held, epoch) = (Gauge::<i64>::default(), Gauge::<i64>::default());
        let lease = self.ops.lease();
        held.set(i64::from(lease.is_some()));
        epoch.set(lease.unwrap_or(0));
        r.register("msgx_lease_held", "1 while this instance holds a confirmed lease (the active one)", held);
        r.register("msgx_lease_epoch", "The epoch of the lease this instance holds (0: none)", epoch);
        let refused = Family::<Labels, Gauge>::default();
        for target in [crate::domain::Target::KafkaMsg, crate::domain::Target::KafkaSchd] {
            let at = self.ops.stats.refused.at(target);
            refused.get_or_create(&labels(&[("target", target.as_str())])).set(at);
        }
        r.register(
            "msgx_event_refused",
            "The EVENT_ID a Kafka target holds at because the broker refuses it (0: none)",
            refused,
        );
        let ready = Gauge::<i64>::default();
        ready.set(i64::from(self.ops.ready().is_ok()));
        r.register("msgx_ready", "1 when /ready answers 200", ready);
        let build = Family::<Labels, Gauge>::default();
        build.get_or_create(&labels(&[("version", env!("CARGO_PKG_VERSION"))])).set(1);
        r.register("msgx_build_info", "The running version", build);
    }

    fn store_gauges(&self, r: &mut Registry) {
        let (up, read) = self.gauges();
        let ok = Gauge::<i64>::default();
        ok.set(i64::from(up));
        r.register(
            "msgx_gauges_up",
            "1 when the last read of the store gauges from own PostgreSQL succeeded, within 15 s",
            ok,
        );
        let Some((age, g)) = read else { return };
        let age_gauge = FloatGauge::default();
        age_gauge.set(age.as_secs_f64());
        r.register("msgx_gauges_age_seconds", "Since the store gauges below were read", age_gauge);
        let by = |key: &str, rows: &[(String, i64)]| {
            let f = Family::<Labels, Gauge>::default();
            for (v, n) in rows {
                f.get_or_create(&labels(&[(key, v)])).set(*n);
            }
            f
        };
        let queue: Vec<(String, i64)> = ["PENDING", "FAILED"]
            .iter()
            .map(|s| (s.to_string(), g.queue.iter().find(|(q, _)| q == s).map_or(0, |(_, n)| *n)))
            .collect();
        r.register("msgx_queue_messages", "Unfinished messages per state", by("state", &queue));
        r.register(
            "msgx_dead_messages",
            "DEAD messages nobody dismissed, per error class",
            by("class", &g.dead),
        );
        r.register(
            "msgx_unsupported_messages",
            "DEAD(UNSUPPORTED) messages nobody dismissed, per kind (the 20 most frequent)",
            by("type", &g.unsupported),
        );
        r.register("msgx_dead_events", "DEAD outbox events, per target", by("target", &g.dead_events));
        requests_open(r, &g);
        let pending: Vec<(String, i64)> = g.outbox.iter().map(|(t, n, _)| (t.clone(), *n)).collect();
        r.register("msgx_outbox_pending", "PENDING outbox events, per target", by("target", &pending));
        let oldest = Family::<Labels, FloatGauge>::default();
        for (t, _, age) in &g.outbox {
            oldest.get_or_create(&labels(&[("target", t)])).set(*age);
        }
        r.register("msgx_outbox_oldest_age_seconds", "Age of the oldest PENDING event, per target", oldest);
        let single: [(&str, &str, f64); 4] = [
            ("msgx_head_age_seconds", "Since the FIFO head was enqueued (0: nothing unfinished)", g.head_age),
            ("msgx_lag_seconds", "Since the mailbox received the oldest unfinished message (0: none)", g.lag),
            ("msgx_marks_owed", "Terminal messages whose mailbox mark is still owed", g.marks_owed as f64),
            (
                "msgx_marks_abandoned",
                "Abandoned marks not reconciled by a person (C-16)",
                g.marks_abandoned as f64,
            ),
        ];
        for (name, help, v) in single {
            let gauge = FloatGauge::default();
            gauge.set(v);
            r.register(name, help, gauge);
        }
    }
}

/// `msgx_requests_open{origin}` (#41): every origin, 0 when none is open.
fn requests_open(r: &mut Registry, g: &Gauges) {
    let f = Family::<Labels, Gauge>::default();
    for o in Origin::ALL {
        let n = g.requests_open.iter().find(|(x, _)| x == o.as_str()).map_or(0, |(_, n)| *n);
        f.get_or_create(&labels(&[("origin", o.as_str())])).set(n);
    }
    r.register("msgx_requests_open", "Open requests to the AODB, per origin", f);
    let awaited = Gauge::<i64>::default();
    awaited.set(g.awaited);
    r.register(
        "msgx_requests_awaited",
        "Windows a heal asked the AODB for whose flights await its answer: open, or unanswered after the last try and not dismissed (degraded)",
        awaited,
    );
}

/// Every series name `/metrics` exports (with `_total`, `_bucket`, `_sum`, `_count` where the
/// format adds them): what docs/monitoring.md and the Grafana dashboard may name.
pub const SERIES: &[&str] = &[
    "msgx_messages_total",
    "msgx_events_sent_total",
    "msgx_marks_total",
    "msgx_polled_total",
    "msgx_enqueued_total",
    "msgx_rescued_total",
    "msgx_event_attempts_failed_total",
    "msgx_events_dead_total",
    "msgx_events_refused_total",
    "msgx_event_refused",
    "msgx_events_deleted_total",
    "msgx_archived_total",
    "msgx_unknown_elements_total",
    "msgx_outages_total",
    "msgx_outage_seconds_total",
    "msgx_consistency_findings_total",
    "msgx_consistency_suspicions_total",
    "msgx_consistency_checks_total",
    "msgx_heals_total",
    "msgx_unsolicited_answers_total",
    "msgx_processing_latency_seconds",
    "msgx_delivery_latency_seconds",
    "msgx_store_up",
    "msgx_stage_stalled",
    "msgx_lease_held",
    "msgx_lease_epoch",
    "msgx_ready",
    "msgx_build_info",
    "msgx_gauges_up",
    "msgx_gauges_age_seconds",
    "msgx_queue_messages",
    "msgx_dead_messages",
    "msgx_unsupported_messages",
    "msgx_dead_events",
    "msgx_outbox_pending",
    "msgx_outbox_oldest_age_seconds",
    "msgx_head_age_seconds",
    "msgx_lag_seconds",
    "msgx_marks_owed",
    "msgx_marks_abandoned",
    "msgx_requests_open",
    "msgx_requests_awaited",
    "msgx_requests_expired_total",
];
