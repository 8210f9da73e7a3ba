//! Delivery to a Kafka *cluster* (#19, the Kafka part): three brokers of librdkafka's mock
//! cluster with replication factor 3, while events flow — the partition leader moves, the
//! leader's broker goes down, the brokers answer NOT_LEADER_FOR_PARTITION, NOT_ENOUGH_REPLICAS
//! and REQUEST_TIMED_OUT. No event may be lost, reordered per key or DEAD; duplicates may only be
//! identical re-sends (INV-10), which consumers drop by `event_id`.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use common::*;
use msgx::dispatch::{self, Dispatcher};
use msgx::domain::{NewEvent, Target};
use msgx::lease::LeaseGate;
use msgx::policy::retry::retry_policy;
use msgx::ports::Settle;
use msgx::stats::Stats;
use msgx::store::kafka::KafkaProducer;
use msgx::store::pg::Pg;

const EVENTS: i64 = 300;
const KEYS: i64 = 12;

#[test]
fn a_leader_move_a_broker_down_and_retriable_errors_cost_no_event_and_no_order() {
    let cluster = MockCluster::new(3).expect("mock cluster");
    let s = Services::migrated("");
    let mut cfg = s.cfg.clone();
    cfg.kafka_brokers = cluster.bootstrap_servers();
    cluster.create_topic(&cfg.topic_msg, 1, 3).unwrap();
    cluster.create_topic(&cfg.topic_schd, 1, 3).unwrap();
    cluster.partition_leader(&cfg.topic_msg, 0, Some(1)).unwrap();
    let mut pg = Pg::connect(&cfg.pg_url).unwrap();
    let at = now();
    for id in 1..=EVENTS {
        enqueue(&mut pg, &[id], at);
        let e = NewEvent {
            target: Target::KafkaMsg,
            partition_key: format!("K{}", id % KEYS),
            event_type: "UPSERT".into(),
            state_version: id,
            payload_json: format!("{{\"n\":{id}}}"),
        };
        record(&mut pg, &[Settle::succeeded(id, &format!("k{id}"), vec![e])], at);
    }
    let mut settings = dispatch::Settings::from_config(&cfg);
    settings.batch = 20;
    let mut d = Dispatcher::new(
        Pg::connect(&cfg.pg_url).unwrap(),
        KafkaProducer::new(&cfg).unwrap(),
        retry_policy(&cfg.pipeline),
        settings,
        Arc::new(LeaseGate::open()),
        Arc::new(Stats::default()),
        std::sync::Arc::new(msgx::clock::SystemClock),
    );
    let mut c = s.pg();
    let sent = |c: &mut postgres::Client| count(c, "SELECT count(*) FROM msg_event WHERE state = 'SENT'");
    let start = Instant::now();
    let (mut moved, mut downed, mut errored, mut stalls) = (false, false, false, 0);
    while sent(&mut c) < EVENTS {
        assert!(start.elapsed() < Duration::from_secs(180), "not delivered: {} of {EVENTS}", sent(&mut c));
        let n = sent(&mut c);
        if n >= 60 && !moved {
            cluster.partition_leader(&cfg.topic_msg, 0, Some(2)).unwrap();
            moved = true;
        }
        if n >= 120 && !downed {
            cluster.broker_down(2).unwrap();
            std::thread::sleep(Duration::from_millis(500));
            cluster.partition_leader(&cfg.topic_msg, 0, Some(3)).unwrap();
            downed = true;
        }
        if n >= 180 && !errored {
            use RDKafkaRespErr::*;
            cluster.request_errors(
                RDKafkaApiKey::Produce,
                &[
                    RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                    RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
                    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                ],
            );
            cluster.broker_up(2).unwrap();
            errored = true;
        }
        match d.round(now()) {
            Ok(_) => {}
            Err(e) => {
                assert!(e.is_unavailable(), "a cluster's failover is an outage, never a refusal: {e}");
                stalls += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    println!("cluster: {EVENTS} events delivered through a leader move, a broker down and injected errors; {stalls} stalled rounds");
    assert_eq!(count(&mut c, "SELECT count(*) FROM msg_event WHERE state = 'DEAD'"), 0, "nothing DEAD");
    assert_eq!(
        count(&mut c, "SELECT coalesce(max(attempts), 0)::bigint FROM msg_event"),
        0,
        "nothing charged"
    );
    let got = consume_from(&cfg.kafka_brokers, &cfg.topic_msg, EVENTS as usize, Duration::from_secs(60));
    let mut first: BTreeMap<i64, (String, serde_json::Value)> = BTreeMap::new();
    let mut per_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut duplicates = 0;
    for r in &got {
        let id: i64 = r.header("event_id").unwrap().parse().unwrap();
        match first.get(&id) {
            Some(seen) => {
                duplicates += 1;
                assert_eq!(seen, &(r.key.clone(), r.payload.clone()), "a duplicate is an identical re-send");
            }
            None => {
                first.insert(id, (r.key.clone(), r.payload.clone()));
                per_key.entry(r.key.clone()).or_default().push(id);
            }
        }
    }
    println!("cluster: {} records read, {} distinct events, {duplicates} duplicates", got.len(), first.len());
    assert_eq!(first.len() as i64, EVENTS, "every event delivered");
    for (key, ids) in &per_key {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{key} out of order: {ids:?}");
    }
}

/// #19: `msgx check` reads each topic's partitions, replication factor and in-sync replicas
/// from the cluster, and warns about a topic kept on one broker.
#[test]
fn check_reports_the_replication_of_each_topic_and_warns_below_two() {
    let cluster = MockCluster::new(3).expect("mock cluster");
    let s = Services::migrated("");
    let mut cfg = s.cfg.clone();
    cfg.kafka_brokers = cluster.bootstrap_servers();
    cluster.create_topic(&cfg.topic_msg, 2, 3).unwrap();
    cluster.create_topic(&cfg.topic_schd, 1, 1).unwrap();
    let p = KafkaProducer::new(&cfg).unwrap();
    let seen = p.topics(&[&cfg.topic_msg, &cfg.topic_schd], Duration::from_secs(10)).unwrap();
    assert_eq!((seen[0].partitions, seen[0].replication, seen[0].in_sync), (Some(2), 3, 3));
    assert!(seen[0].warnings().is_empty(), "{:?}", seen[0].warnings());
    assert_eq!((seen[1].partitions, seen[1].replication), (Some(1), 1));
    let w = seen[1].warnings();
    assert!(w.iter().any(|w| w.contains("replication factor 1 (below 2")), "{w:?}");
}
