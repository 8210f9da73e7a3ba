//! The Kafka producer: rdkafka's synchronous `BaseProducer` (no async runtime), configured by
//! D3 only: `acks=all`, `enable.idempotence=true`, `max.in.flight.requests.per.connection=1`.
//! A batch is produced in order, then flushed; each record's acknowledgement is collected by
//! index. On a fatal (idempotence) error the producer is recreated and the caller re-sends
//! what was not acknowledged, in order.

use std::sync::Mutex;
use std::time::Duration;

use log::{error, warn};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer as _, ProducerContext};

use crate::config::Config;
use crate::error::StoreError;
use crate::ports::{Producer, Record};

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
    s
}

struct Collector {
    acks: Mutex<Vec<(usize, Result<(), String>)>>,
}

impl ClientContext for Collector {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, msg: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                error!("kafka {fac}: {msg}")
            }
            RDKafkaLogLevel::Warning => warn!("kafka {fac}: {msg}"),
            _ => log::debug!("kafka {fac}: {msg}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // A broker outage shows here many times; delivery failures are reported per event.
        warn!("kafka client error: {error}: {reason}");
    }
}

impl ProducerContext for Collector {
    type DeliveryOpaque = Box<usize>;

    fn delivery(&self, result: &DeliveryResult<'_>, index: Box<usize>) {
        let r = match result {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(e.to_string()),
        };
        self.acks.lock().expect("ack list poisoned").push((*index, r));
    }
}

pub struct KafkaProducer {
    settings: Vec<(&'static str, String)>,
    producer: BaseProducer<Collector>,
    /// Upper bound of one flush: the message timeout plus slack.
    flush_timeout: Duration,
}

fn build(settings: &[(&'static str, String)]) -> Result<BaseProducer<Collector>, StoreError> {
    let mut cc = ClientConfig::new();
    for (k, v) in settings {
        cc.set(*k, v);
    }
    if settings.iter().any(|(k, _)| *k == "debug") {
        cc.set_log_level(RDKafkaLogLevel::Debug);
    }
    cc.create_with_context(Collector { acks: Mutex::new(Vec::new()) }).map_err(StoreError::from)
}

impl KafkaProducer {
    pub fn new(cfg: &Config) -> Result<KafkaProducer, StoreError> {
        let settings = producer_settings(cfg);
        let producer = build(&settings)?;
        Ok(KafkaProducer {
            settings,
            producer,
            flush_timeout: cfg.producer.message_timeout + Duration::from_secs(5),
        })
    }

    fn acked(&self) -> usize {
        self.producer.context().acks.lock().expect("ack list poisoned").len()
    }

    /// Replaces the producer after a failed round. A fatal (idempotence) error demands it;
    /// and an idempotent producer whose id the broker no longer knows (UNKNOWN_PRODUCER_ID
    /// after the broker lost its state) otherwise loops bumping its epoch for ever. A fresh
    /// producer asks for a new id; the outbox re-sends what was not acknowledged, in order.
    fn recreate(&mut self) {
        match self.producer.client().fatal_error() {
            Some((code, reason)) => {
                error!("kafka producer fatal error {code:?}: {reason}; recreating the producer")
            }
            None => warn!("kafka delivery failed; recreating the producer (fresh producer id)"),
        }
        match build(&self.settings) {
            Ok(p) => self.producer = p,
            Err(e) => error!("kafka producer could not be recreated: {e}"),
        }
    }
}

impl Producer for KafkaProducer {
    fn send(&mut self, records: &[Record]) -> Vec<Result<(), StoreError>> {
        self.producer.context().acks.lock().expect("ack list poisoned").clear();
        let mut queued = 0;
        let mut refused: Option<String> = None;
        'records: for (i, r) in records.iter().enumerate() {
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                headers = headers.insert(Header { key: k, value: Some(v.as_bytes()) });
            }
            let mut record = BaseRecord::with_opaque_to(&r.topic, Box::new(i))
                .key(&r.key)
                .payload(&r.payload)
                .headers(headers);
            // A full local queue drains as the broker acknowledges; bounded retries.
            for _ in 0..100 {
                match self.producer.send(record) {
                    Ok(()) => {
                        queued += 1;
                        continue 'records;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        self.producer.poll(Duration::from_millis(100));
                    }
                    Err((e, _)) => {
                        refused = Some(e.to_string());
                        break 'records;
                    }
                }
            }
            refused = Some("local producer queue stayed full".into());
            break;
        }
        // Wait for exactly the acknowledgements expected. Not `flush()`: rdkafka's poll waits
        // out its whole timeout, which made every round cost at least 100 ms. Bounded by the
        // flush timeout, counted in 1 ms polls.
        let mut waited = Duration::ZERO;
        while self.acked() < queued && waited < self.flush_timeout {
            self.producer.poll(Duration::from_millis(1));
            waited += Duration::from_millis(1);
        }
        let acks = std::mem::take(&mut *self.producer.context().acks.lock().expect("ack list poisoned"));
        let mut out: Vec<Result<(), StoreError>> = (0..records.len())
            .map(|i| {
                Err(StoreError::new(
                    "kafka",
                    if i >= queued {
                        refused.clone().unwrap_or_else(|| "not queued".into())
                    } else {
                        "not acknowledged before the flush timeout".into()
                    },
                ))
            })
            .collect();
        for (i, r) in acks {
            if let Some(slot) = out.get_mut(i) {
                *slot = r.map_err(|e| StoreError::new("kafka", e));
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
}
