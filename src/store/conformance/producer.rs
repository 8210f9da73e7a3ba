//! The producer conformance suite: the same cases on the in-memory twin (unit tests) and on
//! the real producer against Tansu (`tests/producer_store.rs`): order, keys and headers, where
//! each record landed (partition and offset), an
//! unreachable broker as unavailable (the stage waits), a record too large as refused (the
//! event is charged).

use crate::ports::{Producer, Record};

/// A producer for the suite, with a consumer's eyes.
pub trait ProducerTwin {
    type P: Producer;
    fn producer(&mut self) -> &mut Self::P;
    /// The topic the suite writes to.
    fn topic(&self) -> String;
    /// The first `want` records on the topic, as a consumer reads them.
    fn read(&mut self, want: usize) -> Vec<Record<'static>>;
    /// A producer whose broker cannot be reached.
    fn unreachable(&mut self) -> Self::P;
}

/// librdkafka's default `message.max.bytes`, which the twin is told to mirror.
pub const MAX_RECORD_BYTES: usize = 1_000_000;

impl ProducerTwin for crate::store::memory::MemProducer {
    type P = Self;

    fn producer(&mut self) -> &mut Self {
        self
    }

    fn topic(&self) -> String {
        "msgx.suite".into()
    }

    fn read(&mut self, want: usize) -> Vec<Record<'static>> {
        self.delivered().into_iter().filter(|r| r.topic == "msgx.suite").take(want).collect()
    }

    fn unreachable(&mut self) -> Self {
        let p = crate::store::memory::MemProducer::new();
        p.set_down(true);
        p
    }
}

fn record(topic: &str, n: usize, payload: String) -> Record<'static> {
    Record {
        topic: topic.to_string().into(),
        key: format!("K{}", n % 5).into(),
        payload: payload.into(),
        headers: vec![("event_id".into(), n.to_string()), ("msg_id".into(), (n * 10).to_string())],
    }
}

pub fn records_arrive_in_order_with_keys_and_headers<T: ProducerTwin>(mut s: T) {
    let topic = s.topic();
    let sent: Vec<Record> = (1..=20).map(|n| record(&topic, n, format!("{{\"n\":{n}}}"))).collect();
    let results = s.producer().send(&sent);
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let got = s.read(20);
    assert_eq!(got, sent, "in order, keys and headers as sent");
    // #40: each acknowledgement names where its record lies — in order, one after the other
    // on the topic's one partition.
    let at: Vec<crate::ports::Position> = results.into_iter().map(|r| r.unwrap()).collect();
    assert!(at.iter().all(|p| p.partition == at[0].partition), "{at:?}");
    let offsets: Vec<i64> = at.iter().map(|p| p.offset).collect();
    let want: Vec<i64> = (offsets[0]..offsets[0] + 20).collect();
    assert_eq!(offsets, want, "consecutive offsets, in the order sent");
}

pub fn an_unreachable_broker_is_unavailable<T: ProducerTwin>(mut s: T) {
    let topic = s.topic();
    let mut p = s.unreachable();
    let results = p.send(&[record(&topic, 1, "{}".into()), record(&topic, 2, "{}".into())]);
    assert_eq!(results.len(), 2);
    for r in &results {
        let e = r.as_ref().expect_err("nothing can be acknowledged");
        assert!(e.is_unavailable(), "the stage waits for the broker, no event is charged: {e}");
    }
}

pub fn a_record_too_large_is_refused<T: ProducerTwin>(mut s: T) {
    let topic = s.topic();
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(MAX_RECORD_BYTES + 10));
    let results = s.producer().send(&[record(&topic, 1, "{\"n\":1}".into()), record(&topic, 2, big)]);
    assert!(results[0].is_ok(), "{:?}", results[0]);
    let e = results[1].as_ref().expect_err("over message.max.bytes");
    assert!(e.is_rejected(), "charged to its event, not waited for: {e}");
    assert_eq!(s.read(1).len(), 1);
}

/// Expands to one `#[test]` per case; `$make` builds a fresh producer twin and a guard.
#[macro_export]
macro_rules! producer_conformance_tests {
    ($make:expr) => {
        $crate::producer_conformance_tests!(@cases $make;
            records_arrive_in_order_with_keys_and_headers,
            an_unreachable_broker_is_unavailable,
            a_record_too_large_is_refused,
        );
    };
    (@cases $make:expr; $($case:ident,)*) => {
        $(
            #[test]
            fn $case() {
                let (store, _guard) = $make;
                $crate::store::conformance::producer::$case(store);
            }
        )*
    };
}
