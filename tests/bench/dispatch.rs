//! Delivery throughput to the broker on the real stores, one run, side by side:
//! - the raw floor: rdkafka's BaseProducer with msgx's D3 settings, no PostgreSQL;
//! - msgx dispatch with `dispatch-batch = 200` (many records per round, SENT in batches);
//! - msgx dispatch with `dispatch-batch = 1`.
//!
//! Run with the services up: `cargo bench --bench dispatch`.

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Instant;

use msgx::clock::{Clock, SystemClock};
use msgx::dispatch::{self, Dispatcher, Round};
use msgx::domain::{NewEvent, Target};
use msgx::policy::retry::retry_policy;
use msgx::ports::{Producer, Record, Settle};
use msgx::stats::Stats;
use msgx::store::kafka::KafkaProducer;
use msgx::store::pg::Pg;

const N: i64 = 5000;

fn payload(n: i64) -> String {
    format!("{{\"msg_id\":{n},\"type\":\"FLOP-STND\",\"flid\":\"F{}\",\"changes\":[{{\"field\":\"STND\",\"old\":\"A1\",\"new\":\"A2\"}}]}}", n % 100)
}

fn raw_floor() -> f64 {
    let s = common::Services::new("");
    let mut producer = KafkaProducer::new(&s.cfg).unwrap();
    let records: Vec<Record> = (1..=N)
        .map(|n| Record {
            topic: s.cfg.topic_msg.as_str().into(),
            key: format!("F{}", n % 100).into(),
            payload: payload(n).into(),
            headers: vec![("event_id".into(), n.to_string()), ("msg_id".into(), n.to_string())],
        })
        .collect();
    let start = Instant::now();
    for chunk in records.chunks(200) {
        assert!(producer.send(chunk).iter().all(|r| r.is_ok()));
    }
    N as f64 / start.elapsed().as_secs_f64()
}

fn dispatch(batch: usize) -> f64 {
    let s = common::Services::migrated(&format!("dispatch-batch = {batch}\n"));
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    let now = SystemClock.now();
    common::enqueue(&mut pg, &(1..=N).collect::<Vec<i64>>(), now);
    let settles: Vec<Settle> = (1..=N)
        .map(|n| {
            let e = NewEvent {
                target: Target::KafkaMsg,
                partition_key: format!("F{}", n % 100),
                event_type: "UPSERT".into(),
                state_version: n,
                payload_json: payload(n),
            };
            Settle::succeeded(n, &format!("k{n}"), vec![e])
        })
        .collect();
    for chunk in settles.chunks(500) {
        common::record(&mut pg, chunk, now);
    }
    let mut d = Dispatcher::new(
        Pg::connect(&s.cfg.pg_url).unwrap(),
        KafkaProducer::new(&s.cfg).unwrap(),
        retry_policy(&s.cfg.pipeline),
        dispatch::Settings::from_config(&s.cfg),
        Arc::new(msgx::lease::LeaseGate::open()),
        Arc::new(Stats::default()),
        std::sync::Arc::new(msgx::clock::SystemClock),
    );
    let start = Instant::now();
    let mut sent = 0;
    while sent < N as usize {
        match d.round(SystemClock.now()).unwrap() {
            Round::Sent { sent: n, failed: false } => sent += n,
            other => panic!("unexpected round {other:?}"),
        }
    }
    N as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let _ = env_logger::Builder::new().filter_level(log::LevelFilter::Warn).try_init();
    let floor = raw_floor();
    let batched = dispatch(200);
    let single = dispatch(1);
    println!("delivery of {N} events to Tansu (acks=all, idempotent, 1 in flight), one run:");
    println!("  raw BaseProducer, 200 per flush   {floor:8.0} events/s");
    println!(
        "  msgx dispatch-batch = 200          {batched:8.0} events/s  ({:.0}% of the floor)",
        100.0 * batched / floor
    );
    println!(
        "  msgx dispatch-batch = 1            {single:8.0} events/s  ({:.0}% of the floor)",
        100.0 * single / floor
    );
}
