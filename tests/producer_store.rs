//! The producer conformance suite on the real producer and broker (Tansu): the same cases the
//! in-memory twin passes as unit tests (src/store/conformance/producer.rs).

use crate::common;

use std::time::Duration;

use common::Services;
use msgx::ports::Record;
use msgx::store::conformance::producer::ProducerTwin;
use msgx::store::kafka::KafkaProducer;

struct Broker {
    producer: KafkaProducer,
    s: Services,
    /// A topic of its own without a schema in the broker's registry: the suite's records are
    /// the producer's cases (`{"n":1}`), not msgx's events (#67).
    topic: String,
}

impl ProducerTwin for Broker {
    type P = KafkaProducer;

    fn producer(&mut self) -> &mut KafkaProducer {
        &mut self.producer
    }

    fn topic(&self) -> String {
        self.topic.clone()
    }

    fn read(&mut self, want: usize) -> Vec<Record<'static>> {
        common::consume_from(&self.s.cfg.kafka_brokers, &self.topic, want, Duration::from_secs(20))
            .into_iter()
            .take(want)
            .map(|c| Record {
                topic: self.topic().into(),
                key: c.key.into(),
                payload: c.payload.to_string().into(),
                headers: c.headers.into_iter().map(|(k, v)| (k.into(), v)).collect(),
            })
            .collect()
    }

    fn unreachable(&mut self) -> KafkaProducer {
        let mut cfg = self.s.cfg.clone();
        // Nothing listens on the discard port; a short timeout keeps the case short.
        cfg.kafka_brokers = "127.0.0.1:9".into();
        cfg.producer.message_timeout = Duration::from_secs(3);
        KafkaProducer::new(&cfg).expect("a producer is created without a broker")
    }
}

fn fresh() -> (Broker, ()) {
    let s = Services::migrated("");
    let topic = format!("{}.raw", s.topic());
    common::create_topic_on(&s.cfg.kafka_brokers, &topic);
    (Broker { producer: KafkaProducer::new(&s.cfg).expect("producer"), s, topic }, ())
}

msgx::producer_conformance_tests!(fresh());
