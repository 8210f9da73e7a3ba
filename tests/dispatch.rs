//! Dispatch on real services: KAFKA:schd flushes on Tansu, COUTMSGS on MariaDB, and a broker
//! outage on a private Tansu (count what a consumer reads, never reported offsets).

use crate::common;

use msgx::error::Store;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use mysql::prelude::Queryable;

use common::*;
use msgx::dispatch::{self, Dispatcher, OutboundDispatcher, OutboundIntent};
use msgx::domain::{MsgEvent, NewEvent, Target};
use msgx::error::ErrorClass;
use msgx::lease::LeaseGate;
use msgx::policy::retry::retry_policy;
use msgx::ports::{Outbox, Settle, StoreResult};
use msgx::stats::Stats;
use msgx::store::kafka::KafkaProducer;
use msgx::store::mailbox::MysqlOutbound;
use msgx::store::pg::Pg;

/// Commits one message per event list, msg ids counting from `first`.
fn messages(pg: &mut Pg, first: i64, events: Vec<Vec<NewEvent>>) {
    let at = now();
    for (i, evs) in events.into_iter().enumerate() {
        let id = first + i as i64;
        enqueue(pg, &[id], at);
        record(pg, &[Settle::succeeded(id, &format!("k{id}"), evs)], at);
    }
}

fn event(target: Target, key: &str, version: i64, payload: String) -> NewEvent {
    NewEvent {
        target,
        partition_key: key.into(),
        event_type: "UPSERT".into(),
        state_version: version,
        payload_json: payload,
    }
}

fn dispatcher<O: Outbox>(cfg: &msgx::config::Config, outbox: O) -> Dispatcher<O, KafkaProducer> {
    Dispatcher::new(
        outbox,
        KafkaProducer::new(cfg).unwrap(),
        retry_policy(&cfg.pipeline),
        dispatch::Settings::from_config(cfg),
        Arc::new(LeaseGate::open()),
        Arc::new(Stats::default()),
        std::sync::Arc::new(msgx::clock::SystemClock),
    )
}

fn outbound<O: Outbox>(s: &Services, outbox: O) -> OutboundDispatcher<O, MysqlOutbound> {
    OutboundDispatcher::new(
        outbox,
        MysqlOutbound::connect(&s.cfg.mysql_url, &s.cfg.outbound).unwrap(),
        retry_policy(&s.cfg.pipeline),
        10,
        Arc::new(LeaseGate::open()),
        Arc::new(Stats::default()),
        std::sync::Arc::new(msgx::clock::SystemClock),
    )
}

#[test]
fn schd_goes_out_as_one_fltr_array_with_the_latest_state_per_flight() {
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    let fltr = |flid: &str, v: i64| {
        event(Target::KafkaSchd, flid, v, format!("{{\"FLID\":\"{flid}\",\"STND\":\"S{v}\"}}"))
    };
    messages(&mut pg, 1, vec![vec![fltr("A", 1), fltr("B", 1)], vec![fltr("A", 2)], vec![fltr("C", 3)]]);
    let mut d = dispatcher(&s.cfg, Pg::connect(&s.cfg.pg_url).unwrap());
    assert_eq!(d.round(now()).unwrap(), dispatch::Round::Sent { sent: 3, failed: false });
    let got = consume(&s.cfg.topic_schd, 1, Duration::from_secs(20));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].key, "FLTR");
    assert_eq!(
        got[0].payload,
        serde_json::json!([{"FLID": "A", "STND": "S2"}, {"FLID": "B", "STND": "S1"}, {"FLID": "C", "STND": "S3"}])
    );
    assert_eq!(got[0].header("flights"), Some("3"));
    let mut c = s.pg();
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM msg_event WHERE state = 'SENT' AND sent_at IS NOT NULL"),
        3
    );
    // #40: every event folded into the array carries the array's receipt.
    type Receipt = (Option<String>, Option<i32>, Option<i64>);
    let receipts: Vec<(String, Receipt)> = c
        .query(
            "SELECT partition_key, sent_topic, sent_partition, sent_offset FROM msg_event ORDER BY event_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3))))
        .collect();
    let at = (Some(s.cfg.topic_schd.clone()), Some(got[0].partition), Some(got[0].offset));
    for (flid, receipt) in &receipts {
        assert_eq!(receipt, &at, "{flid}: the record the consumer read");
    }
}

/// Pg whose next `mark_sent` fails: the external side effect happened, the SENT mark did not.
struct LosesOneMark(Pg, bool);

impl Outbox for LosesOneMark {
    fn pending(&mut self, t: Target, l: usize) -> StoreResult<Vec<MsgEvent>> {
        self.0.pending(t, l)
    }
    fn mark_sent(&mut self, sent: &[msgx::ports::Sent<'_>], now: SystemTime) -> StoreResult<()> {
        if std::mem::take(&mut self.1) {
            return Err(msgx::error::StoreError::unavailable(Store::Postgres, "connection lost (injected)"));
        }
        self.0.mark_sent(sent, now)
    }
    fn retry(&mut self, ids: &[i64], c: ErrorClass, e: &str, n: SystemTime) -> StoreResult<()> {
        self.0.retry(ids, c, e, n)
    }
    fn dead(&mut self, ids: &[i64], c: ErrorClass, e: &str) -> StoreResult<()> {
        self.0.dead(ids, c, e)
    }
    fn started(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.0.started(ids, now)
    }
}

#[test]
fn coutmsgs_intents_are_inserted_once_even_when_the_sent_mark_is_lost() {
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    let intent = |x: &str| {
        serde_json::to_string(&OutboundIntent { routing_id: "VIEWRQRD".into(), xml: x.into() }).unwrap()
    };
    messages(
        &mut pg,
        1,
        vec![
            vec![event(Target::Coutmsgs, "SLST", 1, intent("<MSG>rq-1</MSG>"))],
            vec![event(Target::Coutmsgs, "GLST", 1, intent("<MSG>rq-2</MSG>"))],
        ],
    );
    let mut o = outbound(&s, LosesOneMark(Pg::connect(&s.cfg.pg_url).unwrap(), true));
    assert!(o.round(now()).unwrap_err().is_unavailable(), "the mark was lost");
    assert_eq!(o.round(now()).unwrap(), dispatch::Round::Sent { sent: 2, failed: false });
    let rows: Vec<(String, String)> =
        s.mysql().query("SELECT ROUTINGID, COUTMSGS_CLOB_MSG FROM coutmsgs ORDER BY COUTMSGS_ID").unwrap();
    assert_eq!(
        rows,
        vec![
            ("VIEWRQRD".to_string(), "<MSG>rq-1</MSG>".to_string()),
            ("VIEWRQRD".to_string(), "<MSG>rq-2</MSG>".to_string())
        ],
        "each intent once, in order"
    );
    // #40: each event names the row it became, the one found after the lost mark included.
    let ids: Vec<i64> = s.mysql().query("SELECT COUTMSGS_ID FROM coutmsgs ORDER BY COUTMSGS_ID").unwrap();
    let landed: Vec<Option<i64>> = s
        .pg()
        .query("SELECT sent_row_id FROM msg_event ORDER BY event_id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(landed, ids.into_iter().map(Some).collect::<Vec<_>>());
}

#[test]
/// Regression: a restarted broker that forgot the idempotent producer id (UNKNOWN_PRODUCER_ID)
/// stalled delivery for ever until the producer was recreated after a failed round.
fn broker_outage_then_a_broker_that_forgot_the_producer_id_still_gets_everything_in_order() {
    // MSGX_TEST_KAFKA_DEBUG=eos,broker,msg and RUST_LOG=msgx=debug show librdkafka's view.
    let _ = env_logger::builder().is_test(true).try_init();
    let s = Services::migrated("");
    let mut broker = Broker::start();
    let topic = format!("{}.outage", s.cfg.topic_msg);
    create_topic_on(&broker.brokers(), &topic);
    let cfg = msgx::config::Config::from_toml_str(
        &format!(
            "[kafka]\nbootstrap-servers = \"{}\"\n[kafka.topics]\nmsg = \"{topic}\"\n\
             [kafka.producers.default]\nmessage-timeout-ms = 2000\ndebug = \"{}\"\n\
             [msgx.pipeline]\nbackoff-ms = [200]\n",
            broker.brokers(),
            std::env::var("MSGX_TEST_KAFKA_DEBUG").unwrap_or_default()
        ),
        |_| None,
    )
    .unwrap();
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    let ev = |n: i64| vec![event(Target::KafkaMsg, &format!("F{}", n % 4), n, format!("{{\"n\":{n}}}"))];
    messages(&mut pg, 1, (1..=10).map(ev).collect());
    let mut d = dispatcher(&cfg, Pg::connect(&s.cfg.pg_url).unwrap());
    let mut c = s.pg();
    let sent = |c: &mut postgres::Client| count(c, "SELECT count(*) FROM msg_event WHERE state = 'SENT'");
    assert!(eventually(Duration::from_secs(30), || {
        d.round(now()).unwrap();
        sent(&mut c) == 10
    }));
    assert_eq!(consume_from(&broker.brokers(), &topic, 10, Duration::from_secs(20)).len(), 10);

    broker.stop();
    messages(&mut pg, 11, (11..=20).map(ev).collect());
    for _ in 0..3 {
        // Each round waits out the message timeout; the broker being away is not the events'
        // fault (SPEC 4.9): the stage stalls, nothing is charged.
        let e = d.round(now()).unwrap_err();
        assert!(e.is_unavailable(), "{e}");
    }
    assert_eq!(sent(&mut c), 10, "nothing is SENT while the broker is down");
    let attempts: i64 = c.query_one("SELECT max(attempts)::bigint FROM msg_event", &[]).unwrap().get(0);
    assert_eq!(attempts, 0, "no event was charged an attempt, at the default max-attempts");

    broker.restart(); // a fresh broker: empty storage, the topic made again
    create_topic_on(&broker.brokers(), &topic);
    let delivered = eventually(Duration::from_secs(90), || {
        let _ = d.round(now());
        std::thread::sleep(Duration::from_millis(100));
        sent(&mut c) == 20
    });
    assert!(delivered, "events did not go out after the broker came back");
    let got = consume_from(&broker.brokers(), &topic, 10, Duration::from_secs(30));
    // At least once: a consumer drops duplicates by event_id; what remains is 11..=20 in order.
    let mut seen = BTreeSet::new();
    let ns: Vec<i64> = got
        .iter()
        .filter(|r| seen.insert(r.header("event_id").unwrap().to_string()))
        .map(|r| r.payload["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, (11..=20).collect::<Vec<_>>(), "nothing lost, nothing reordered");
}
