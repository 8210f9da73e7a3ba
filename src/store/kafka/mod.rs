//! The Kafka producer: rdkafka's `ThreadedProducer` (a synchronous producer whose own thread
//! serves librdkafka's events; no async runtime), configured by D3 only: `acks=all`,
//! `enable.idempotence=true`, `max.in.flight.requests.per.connection=1`. A batch is produced in
//! order; the dispatch thread then blocks until every record's delivery report has arrived
//! (the reports signal a condition variable) or the flush timeout passes — it never spins.
//! After a failed round the producer is recreated and the caller re-sends what was not
//! acknowledged, in order.

pub mod classify;

use crate::error::Store;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use log::{error, warn};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message as _, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer as _, ProducerContext, ThreadedProducer};

use crate::config::Config;
use crate::error::StoreError;
use crate::ports::{Position, Producer, Record};

/// The producer settings msgx uses, D3 first. `Config` has already refused anything else.
pub fn producer_settings(cfg: &Config) -> Vec<(&'static str, String)> {
    let p = &cfg.producer;
    let mut s = vec![
        ("bootstrap.servers", cfg.kafka_brokers.clone()),
        ("acks", p.acks.clone()),
        ("enable.idempotence", p.enable_idempotence.to_string()),
        ("max.in.flight.requests.per.connection", p.max_in_flight.to_string()),
        ("message.timeout.ms", p.message_timeout.as_millis().to_string()),
        ("linger.ms", p.linger_ms.to_string()),
        ("client.id", "msgx".to_string()),
        ("socket.connection.setup.timeout.ms", "10000".to_string()),
    ];
    if !p.debug.is_empty() {
        s.push(("debug", p.debug.clone()));
    }
    s.extend(security_settings(&cfg.kafka_security));
    s
}

/// What `kafka.security-protocol` sets in librdkafka (#64), the password aside (read at each
/// new producer, never kept in the settings): TLS always verifies the chain and the broker's
/// host name, whatever librdkafka's defaults are.
fn security_settings(k: &crate::config::KafkaSecurity) -> Vec<(&'static str, String)> {
    let mut s = vec![("security.protocol", k.protocol.name().to_string())];
    if k.protocol.tls() {
        s.push(("enable.ssl.certificate.verification", "true".into()));
        s.push(("ssl.endpoint.identification.algorithm", "https".into()));
        let path = |p: &std::path::PathBuf| p.display().to_string();
        s.extend(k.ca.as_ref().map(|p| ("ssl.ca.location", path(p))));
        s.extend(k.cert.as_ref().map(|p| ("ssl.certificate.location", path(p))));
        s.extend(k.key.as_ref().map(|p| ("ssl.key.location", path(p))));
    }
    if let Some(sasl) = &k.sasl {
        s.push(("sasl.mechanisms", sasl.mechanism.name().to_string()));
        s.push(("sasl.username", sasl.username.clone()));
    }
    s
}

/// The host of each `host:port` of `kafka.bootstrap-servers`.
pub fn broker_hosts(brokers: &str) -> Vec<String> {
    brokers
        .split(',')
        .map(|b| b.trim())
        .map(|b| b.rsplit_once(':').map_or(b, |(h, _)| h).to_string())
        .collect()
}

/// How msgx connects to the brokers, for `msgx check` and the start-up log (#64).
pub fn describe(k: &crate::config::KafkaSecurity) -> String {
    let tls = if k.protocol.tls() {
        let ca = k.ca.as_ref().map_or("the system's CAs".to_string(), |p| format!("CA {}", p.display()));
        let client = k
            .cert
            .as_ref()
            .map_or("no client certificate".to_string(), |p| format!("client certificate {}", p.display()));
        format!("TLS, verified (chain and host name); {ca}; {client}")
    } else {
        crate::store::tls::PLAINTEXT.to_string()
    };
    match &k.sasl {
        Some(s) => format!("{tls}; SASL {} as {} ({})", s.mechanism.name(), s.username, k.protocol.name()),
        None => format!("{tls} ({})", k.protocol.name()),
    }
}

/// Delivery reports of the current round: (round, index in the round, result).
#[derive(Default)]
struct Acks {
    round: u64,
    got: Vec<(usize, Result<Position, KafkaError>)>,
}

/// librdkafka's log facility for a broker connection that failed or dropped.
const BROKER_FAILURE: &str = "FAIL";

/// The level msgx logs a librdkafka line at (`None`: debug). A broker that cannot be reached
/// (`FAIL`: "Connect to … failed: Connection refused", "Disconnected") is an outage the dispatch
/// stage reports itself, once: WARN here, so that alerting on ERROR stays quiet through a broker
/// restart.
fn level_of(level: RDKafkaLogLevel, fac: &str) -> Option<log::Level> {
    match level {
        RDKafkaLogLevel::Error if fac == BROKER_FAILURE => Some(log::Level::Warn),
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => Some(log::Level::Error),
        RDKafkaLogLevel::Warning => Some(log::Level::Warn),
        _ => None,
    }
}

struct Collector {
    acks: Mutex<Acks>,
    arrived: Condvar,
}

impl ClientContext for Collector {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, msg: &str) {
        // A broker whose certificate is refused (or that refuses msgx's) will not pass by
        // itself: an ERROR whatever librdkafka's level (#64).
        let level =
            if crate::store::tls::refused(msg) { Some(log::Level::Error) } else { level_of(level, fac) };
        match level {
            Some(l) => log::log!(l, "kafka {fac}: {msg}"),
            None => log::debug!("kafka {fac}: {msg}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // A broker outage shows here many times a second; the dispatch stage reports the
        // outage once (WARN, then ERROR after outage-alert-after).
        log::debug!("kafka client error: {error}: {reason}");
    }
}

impl ProducerContext for Collector {
    type DeliveryOpaque = Box<(u64, usize)>;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: Box<(u64, usize)>) {
        let (round, index) = *opaque;
        let mut acks = self.acks.lock().expect("ack list poisoned");
        // A report of an earlier round (a record that timed out there) is not this round's.
        if acks.round == round {
            let report = result.as_ref().map(|m| Position { partition: m.partition(), offset: m.offset() });
            acks.got.push((index, report.map_err(|(e, _)| e.clone())));
            self.arrived.notify_all();
        }
    }
}

pub struct KafkaProducer {
    settings: Vec<(&'static str, String)>,
    /// `kafka.sasl-password-file`, read at each new producer (#64).
    password: Option<crate::secret::SecretFile>,
    producer: ThreadedProducer<Collector>,
    /// Upper bound of one round's wait: the message timeout plus slack.
    flush_timeout: Duration,
    round: u64,
}

fn build(
    settings: &[(&'static str, String)],
    password: Option<&crate::secret::SecretFile>,
) -> Result<ThreadedProducer<Collector>, StoreError> {
    let mut cc = ClientConfig::new();
    for (k, v) in settings {
        cc.set(*k, v);
    }
    if let Some(f) = password {
        let pw = f
            .read()
            .map_err(|e| StoreError::new(Store::Kafka, crate::error::StoreErrorKind::Untrusted, e))?;
        cc.set("sasl.password", pw);
    }
    if settings.iter().any(|(k, _)| *k == "debug") {
        cc.set_log_level(RDKafkaLogLevel::Debug);
    }
    cc.create_with_context(Collector { acks: Mutex::new(Acks::default()), arrived: Condvar::new() })
        .map_err(|e| classify::classify(&e))
}

/// One configured topic as the broker's metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSeen {
    pub topic: String,
    /// Partitions, or `None` when the broker does not know the topic.
    pub partitions: Option<usize>,
    /// The smallest replication factor and in-sync replica count over its partitions.
    pub replication: usize,
    pub in_sync: usize,
}

impl TopicSeen {
    /// What an operator should fix about the topic's replication (#19): a single copy loses
    /// records with its broker; a short ISR is a replica behind.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.partitions.is_some() && self.replication < 2 {
            w.push(format!("replication factor {} (below 2: a broker lost is records lost; use 3 with min.insync.replicas=2)", self.replication));
        }
        if self.partitions.is_some() && self.in_sync < self.replication {
            w.push(format!("only {} of {} replicas in sync", self.in_sync, self.replication));
        }
        w
    }
}

impl KafkaProducer {
    /// `msgx check`: the broker's metadata for every topic (asking for all, so that asking
    /// never auto-creates one), and which of `topics` it knows. Fails as the producer would.
    pub fn topics(&self, topics: &[&str], timeout: Duration) -> Result<Vec<TopicSeen>, StoreError> {
        let md = self.producer.client().fetch_metadata(None, timeout).map_err(|e| classify::classify(&e))?;
        if md.brokers().is_empty() {
            return Err(StoreError::unavailable(Store::Kafka, "the metadata names no broker"));
        }
        Ok(topics
            .iter()
            .map(|t| {
                let found = md.topics().iter().find(|m| m.name() == *t && m.error().is_none());
                let parts = found.map(|m| m.partitions()).unwrap_or_default();
                TopicSeen {
                    topic: t.to_string(),
                    partitions: found.map(|m| m.partitions().len()),
                    replication: parts.iter().map(|p| p.replicas().len()).min().unwrap_or(0),
                    in_sync: parts.iter().map(|p| p.isr().len()).min().unwrap_or(0),
                }
            })
            .collect())
    }

    pub fn new(cfg: &Config) -> Result<KafkaProducer, StoreError> {
        let settings = producer_settings(cfg);
        let password = cfg.kafka_security.sasl.as_ref().map(|s| s.password.clone());
        let producer = build(&settings, password.as_ref())?;
        Ok(KafkaProducer {
            settings,
            password,
            producer,
            flush_timeout: cfg.producer.message_timeout + Duration::from_secs(5),
            round: 0,
        })
    }

    /// Asks the broker for its metadata now, waiting at most `timeout`, and drops the answer.
    /// librdkafka asks for the idempotent producer's id (D3) when a metadata answer arrives,
    /// or else on a 500 ms timer that tries again when no broker was up yet: a fresh
    /// producer's first round waited for that timer, 0.9 s in four starts of six (measured in
    /// `cargo bench --bench e2e`, where it was the floor's "2.4× faster" runs, #23). Asked at
    /// creation, the id is there before the first record. A broker that is down costs
    /// `timeout` once; the first round then reports the outage as it would have.
    pub fn greet(self, timeout: Duration) -> KafkaProducer {
        if let Err(e) = self.producer.client().fetch_metadata(None, timeout) {
            log::debug!("kafka producer greeting unanswered: {}", classify::classify(&e));
        }
        self
    }

    /// Blocks until `want` reports of the current round arrived or `deadline` passed.
    fn wait_for(&self, want: usize, deadline: Instant) -> Vec<(usize, Result<Position, KafkaError>)> {
        let c = self.producer.context();
        let mut acks = c.acks.lock().expect("ack list poisoned");
        while acks.got.len() < want {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            acks = c.arrived.wait_timeout(acks, left).expect("ack list poisoned").0;
        }
        std::mem::take(&mut acks.got)
    }

    /// Replaces the producer after a failed round. A fatal (idempotence) error demands it;
    /// and an idempotent producer whose id the broker no longer knows (UNKNOWN_PRODUCER_ID
    /// after the broker lost its state) otherwise loops bumping its epoch for ever. A fresh
    /// producer asks for a new id; the outbox re-sends what was not acknowledged, in order.
    fn recreate(&mut self) {
        if let Some((code, reason)) = self.producer.client().fatal_error() {
            warn!("kafka producer fatal error {code:?}: {reason}; recreating the producer");
        }
        match build(&self.settings, self.password.as_ref()) {
            Ok(p) => self.producer = p,
            Err(e) => error!("kafka producer could not be recreated: {e}"),
        }
    }
}

impl KafkaProducer {
    /// Queues `records` in order; stops at the first the client refuses. A full local queue
    /// drains as the broker acknowledges: wait for reports, bounded by `deadline`. How many
    /// were queued, and the refusal.
    fn queue(
        &mut self,
        records: &[Record<'_>],
        round: u64,
        deadline: Instant,
    ) -> (usize, Option<StoreError>) {
        let mut queued = 0;
        let mut refused: Option<StoreError> = None;
        'records: for (i, r) in records.iter().enumerate() {
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
            }
            let mut record = BaseRecord::with_opaque_to(&r.topic, Box::new((round, i)))
                .key(r.key.as_ref())
                .payload(r.payload.as_ref())
                .headers(headers);
            // A full local queue drains as the broker acknowledges; wait for reports, bounded.
            loop {
                match self.producer.send(record) {
                    Ok(()) => {
                        queued += 1;
                        continue 'records;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                        if Instant::now() < deadline =>
                    {
                        record = back;
                        let c = self.producer.context();
                        let acks = c.acks.lock().expect("ack list poisoned");
                        let _ = c.arrived.wait_timeout(acks, Duration::from_millis(100));
                    }
                    Err((e, _)) => {
                        refused = Some(classify::classify(&e));
                        break 'records;
                    }
                }
            }
        }
        (queued, refused)
    }
}

impl Producer for KafkaProducer {
    fn send(&mut self, records: &[Record<'_>]) -> Vec<Result<Position, StoreError>> {
        self.round += 1;
        let round = self.round;
        {
            let mut acks = self.producer.context().acks.lock().expect("ack list poisoned");
            acks.round = round;
            acks.got.clear();
        }
        let deadline = Instant::now() + self.flush_timeout;
        let (queued, refused) = self.queue(records, round, deadline);
        let acks = self.wait_for(queued, deadline);
        let mut out: Vec<Result<Position, StoreError>> = (0..records.len())
            .map(|i| {
                Err(if i >= queued {
                    refused.clone().unwrap_or_else(|| StoreError::unavailable(Store::Kafka, "not queued"))
                } else {
                    StoreError::unavailable(Store::Kafka, "not acknowledged within message-timeout-ms")
                })
            })
            .collect();
        for (i, r) in acks {
            if let Some(slot) = out.get_mut(i) {
                *slot = r.map_err(|e| classify::classify(&e));
            }
        }
        if out.iter().any(|r| r.is_err()) {
            self.recreate();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_producer_settings_are_d3() {
        let s = producer_settings(&Config::defaults());
        let get = |k: &str| s.iter().find(|(key, _)| *key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("acks"), Some("all"));
        assert_eq!(get("enable.idempotence"), Some("true"));
        assert_eq!(get("max.in.flight.requests.per.connection"), Some("1"));
    }

    /// #21 item 13: librdkafka's "Connection refused" on a broker restart is a WARN, never an
    /// ERROR an operator is paged for; its real errors stay ERROR.
    #[test]
    fn regression_a_refused_broker_connection_is_a_warning() {
        assert_eq!(level_of(RDKafkaLogLevel::Error, "FAIL"), Some(log::Level::Warn));
        assert_eq!(level_of(RDKafkaLogLevel::Error, "TOPICERR"), Some(log::Level::Error));
        assert_eq!(level_of(RDKafkaLogLevel::Critical, "FAIL"), Some(log::Level::Error));
        assert_eq!(level_of(RDKafkaLogLevel::Info, "FAIL"), None);
    }
}
