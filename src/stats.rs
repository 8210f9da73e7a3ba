//! Counters for the periodic `stats` log line. Every counter is listed in docs/reference.md.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($name:ident: $doc:literal,)*) => {
        /// Monotonic counters since start-up, shared by all stages, and the latency
        /// histograms of `/metrics`.
        #[derive(Debug, Default)]
        pub struct Stats {
            $(#[doc = $doc] pub $name: AtomicU64,)*
            pub latency: Latencies,
            /// The head event each Kafka topic holds at because the broker refuses it (#67).
            pub refused: Refused,
        }

        impl Stats {
            /// Names and docs of every counter, in log order.
            pub const NAMES: &'static [(&'static str, &'static str)] = &[$((stringify!($name), $doc),)*];

            /// The `stats` log line body: `name=value …`.
            pub fn line(&self) -> String {
                let parts: Vec<String> = vec![$(format!("{}={}", stringify!($name), self.$name.load(Relaxed)),)*];
                parts.join(" ")
            }
        }
    };
}

counters! {
    polled: "mailbox rows seen by the poller",
    enqueued: "PROC_STATE rows created (PENDING)",
    rescued: "unmarked mailbox rows without PROC_STATE enqueued by the compensating rescan",
    succeeded: "messages SUCCEEDED",
    skipped_duplicate: "messages SKIPPED as duplicate-of another (INV-9)",
    skipped_ignored: "messages SKIPPED by an ignore rule (G-IGNORE)",
    skipped_not_for_msgx: "messages SKIPPED as not for msgx (a request to the platform, another platform's document; replayable with msgx replay --skipped)",
    failed: "message attempts that ended FAILED",
    dead: "messages that became DEAD",
    events_sent: "outbox events acknowledged and marked SENT",
    sent_kafka_msg: "events SENT to KAFKA:msg",
    sent_kafka_schd: "events SENT to KAFKA:schd (each flight of a batch counts)",
    sent_coutmsgs: "events SENT to COUTMSGS",
    events_failed: "event delivery attempts that failed",
    events_dead: "events that became DEAD (dead-letter queue)",
    refused_kafka_msg: "records the broker refused for KAFKA:msg (each refused attempt; the topic holds at its head, #67)",
    refused_kafka_schd: "records the broker refused for KAFKA:schd (each refused attempt; the topic holds at its head, #67)",
    marks_written: "mailbox rows marked processed by msgx",
    marks_already: "mailbox rows found marked by someone else (nothing overwritten)",
    marks_missing: "mailbox rows missing at backfill (MISSING_ROW, abandoned)",
    marks_failed: "backfill attempts that failed and were rescheduled",
    marks_overdue: "marks abandoned as OVERDUE (unmarked longer than overdue-backfill)",
    events_deleted: "SENT events deleted by the retention job (G-EVENT-RETENTION)",
    archived: "terminal rows archived to PROC_STATE_HST (G-PROC-HST)",
    unknown_elements: "element or attribute names the tolerant reader skipped (msgx.codec.strict = false)",
    outages: "times a stage stalled on a store that was unavailable or refused it (SPEC 4.9)",
    outage_ms: "milliseconds stages spent stalled, summed over stages and outages",
    consistency_findings: "findings of the consistency sentinel: a store behind what it acknowledged (U25, #20)",
    consistency_suspicions: "suspicions of the consistency sentinel: evidence that does not prove a store forgot, reported and left alone (#37)",
    consistency_checks: "comparisons of the stores by the consistency sentinel that found nothing (its rounds: a count that stops growing on the active instance means nothing watches the stores, #66)",
    heals: "heals of a store that forgot that changed something (mailbox rows enqueued again, flights or journal entries rebuilt)",
    unsolicited_answers: "answers from the AODB (SCHD-RESP, a reference RESP, a family-B RMID) no request explains: processed, counted (G-RESP-GUARD)",
    requests_expired_operator: "requests an operator asked that EXPIRED unanswered or undeliverable (#55)",
    requests_expired_heal: "requests a heal asked that EXPIRED unanswered or undeliverable: each is asked again up to msgx.requests.heal-tries (#55)",
    requests_expired_first_start: "requests the first start asked that EXPIRED unanswered or undeliverable (#55)",
}

/// The EVENT_ID each Kafka topic holds at, refused by the broker (0: none): set at a refusal,
/// cleared when the topic's next record is acknowledged, read by `/ready`, `/metrics` and
/// systemd's status line (#67).
#[derive(Debug, Default)]
pub struct Refused {
    pub kafka_msg: std::sync::atomic::AtomicI64,
    pub kafka_schd: std::sync::atomic::AtomicI64,
}

impl Refused {
    fn slot(&self, target: crate::domain::Target) -> Option<&std::sync::atomic::AtomicI64> {
        match target {
            crate::domain::Target::KafkaMsg => Some(&self.kafka_msg),
            crate::domain::Target::KafkaSchd => Some(&self.kafka_schd),
            crate::domain::Target::Coutmsgs => None,
        }
    }

    /// `target` holds at `event_id` (0: it holds no more).
    pub fn set(&self, target: crate::domain::Target, event_id: i64) {
        if let Some(s) = self.slot(target) {
            s.store(event_id, Relaxed);
        }
    }

    /// The event `target` holds at (0: none).
    pub fn at(&self, target: crate::domain::Target) -> i64 {
        self.slot(target).map_or(0, |s| s.load(Relaxed))
    }

    /// Each Kafka target and the event it holds at, if any.
    pub fn held(&self) -> Vec<(crate::domain::Target, i64)> {
        [crate::domain::Target::KafkaMsg, crate::domain::Target::KafkaSchd]
            .into_iter()
            .map(|t| (t, self.at(t)))
            .filter(|(_, id)| *id > 0)
            .collect()
    }
}

/// Seconds from the mailbox's `DATE_RECEIVED` to SUCCEEDED (processing), and from SUCCEEDED to
/// SENT (delivery), for `/metrics`.
#[derive(Debug)]
pub struct Latencies {
    pub processing: prometheus_client::metrics::histogram::Histogram,
    pub delivery: prometheus_client::metrics::histogram::Histogram,
}

/// Bucket bounds in seconds: from a few milliseconds (a healthy pipeline) to minutes (an
/// outage, a backlog).
pub const LATENCY_BUCKETS: [f64; 14] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

impl Default for Latencies {
    fn default() -> Self {
        use prometheus_client::metrics::histogram::Histogram;
        Latencies { processing: Histogram::new(LATENCY_BUCKETS), delivery: Histogram::new(LATENCY_BUCKETS) }
    }
}

impl Latencies {
    /// Observes `to - from` (nothing when either is unknown or the clocks disagree).
    pub fn observe(
        h: &prometheus_client::metrics::histogram::Histogram,
        from: Option<std::time::SystemTime>,
        to: std::time::SystemTime,
    ) {
        if let Some(d) = from.and_then(|f| to.duration_since(f).ok()) {
            h.observe(d.as_secs_f64());
        }
    }
}

pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_lists_every_counter() {
        let s = Stats::default();
        inc(&s.succeeded);
        add(&s.events_sent, 3);
        let line = s.line();
        assert!(line.starts_with("polled=0 enqueued=0 rescued=0 succeeded=1 "), "{line}");
        assert!(line.contains("events_sent=3"), "{line}");
        assert_eq!(line.split(' ').count(), Stats::NAMES.len());
    }
}

#[cfg(test)]
mod doc_tests {
    #[test]
    fn reference_doc_lists_every_counter() {
        let doc = include_str!("../docs/reference.md");
        for (name, _) in super::Stats::NAMES {
            assert!(doc.contains(&format!("| `{name}` |")), "docs/reference.md lacks counter {name}");
        }
    }
}
