//! Dispatch rules on the in-memory outbox and producer, tick by tick with the fake clock.

use std::time::Duration;

use super::*;
use crate::clock::{Clock, FakeClock};
use crate::config::Config;
use crate::domain::{EventStatus, NewEvent};
use crate::lease::LeaseGate;
use crate::ports::{Operator, Settle};
use crate::store::memory::{Fault, MemOutbound, MemPg, MemProducer};
use crate::testkit::{self, Twins};

struct World {
    twins: Twins,
    producer: MemProducer,
    outbound: MemOutbound,
    d: Dispatcher<MemPg, MemProducer>,
    o: OutboundDispatcher<MemPg, MemOutbound>,
    gate: Arc<LeaseGate>,
    next_msg: i64,
}

impl std::ops::Deref for World {
    type Target = Twins;
    fn deref(&self) -> &Twins {
        &self.twins
    }
}

impl std::ops::DerefMut for World {
    fn deref_mut(&mut self) -> &mut Twins {
        &mut self.twins
    }
}

fn world(batch: usize) -> World {
    let twins = Twins::new();
    let (pg, producer, outbound) = (twins.pg.clone(), MemProducer::new(), MemOutbound::new());
    let cfg = Config::defaults();
    let mut settings = Settings::from_config(&cfg);
    settings.batch = batch;
    settings.topic_msg = "t.msg".into();
    settings.topic_schd = "t.schd".into();
    let gate = Arc::new(LeaseGate::open());
    let policy = crate::policy::retry::retry_policy(&cfg.pipeline);
    let stats = testkit::stats();
    let d = Dispatcher::new(
        pg.clone(),
        producer.clone(),
        policy.clone(),
        settings,
        gate.clone(),
        stats.clone(),
        Arc::new(twins.clock.clone()),
    );
    let o = OutboundDispatcher::new(
        pg.clone(),
        outbound.clone(),
        policy,
        batch,
        gate.clone(),
        stats,
        Arc::new(twins.clock.clone()),
    );
    World { twins, producer, outbound, d, o, gate, next_msg: 0 }
}

impl World {
    fn round(&mut self) -> Result<Round, StoreError> {
        self.d.round(self.clock.now())
    }

    fn outbound_round(&mut self) -> Result<Round, StoreError> {
        self.o.round(self.clock.now())
    }

    /// A message that succeeds with these events (target, key, version, payload).
    fn message(&mut self, events: &[(Target, &str, i64, &str)]) {
        self.next_msg += 1;
        let id = self.next_msg;
        self.pg.arrive(&[id], self.clock.now());
        let evs = events
            .iter()
            .map(|(t, k, v, p)| NewEvent {
                target: *t,
                partition_key: k.to_string(),
                event_type: "UPSERT".into(),
                state_version: *v,
                payload_json: p.to_string(),
            })
            .collect();
        self.pg.record(&[Settle::succeeded(id, &format!("k{id}"), evs)], self.clock.now()).unwrap();
    }

    fn msg(&mut self, n: i64) {
        self.message(&[(Target::KafkaMsg, &format!("F{}", n % 3), n, &format!("{{\"n\":{n}}}"))]);
    }

    fn states(&self, target: Target) -> Vec<EventStatus> {
        self.pg.inspect(|s| s.events.values().filter(|e| e.event.target == target).map(|e| e.state).collect())
    }
}

#[test]
fn kafka_msg_goes_in_event_order_with_key_and_headers_in_batches() {
    let mut w = world(2);
    for n in 1..=3 {
        w.msg(n);
    }
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 2, failed: false });
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 1, failed: false });
    let got = w.producer.delivered();
    let payloads: Vec<_> = got.iter().map(|r| r.payload.as_ref()).collect();
    assert_eq!(payloads, ["{\"n\":1}", "{\"n\":2}", "{\"n\":3}"]);
    assert_eq!((got[0].key.as_ref(), got[0].topic.as_ref()), ("F1", "t.msg"));
    assert_eq!(
        got[0].headers,
        vec![
            ("event_id".into(), "1".into()),
            ("event_key".into(), format!("1.0.{}", crate::domain::payload_digest("{\"n\":1}"))),
            ("msg_id".into(), "1".into()),
            ("schema_version".into(), "2".into()),
            ("time_zone".into(), "UTC".into())
        ]
    );
    assert_eq!(w.states(Target::KafkaMsg), vec![EventStatus::Sent; 3]);
    assert!(w.pg.inspect(|s| s.events.values().all(|e| e.sent_at.is_some())), "SENT_AT with SENT");
}

#[test]
fn a_refused_head_backs_off_and_nothing_overtakes_it() {
    let mut w = world(10);
    w.msg(1);
    w.msg(2);
    w.producer.inject(Fault::Rejected, 2);
    // The batch refused: it may be for either record, so it is charged to none (#67) ...
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 0, failed: false });
    assert_eq!(w.pg.inspect(|s| s.events[&1].event.attempts), 0);
    // ... and the head goes alone: refused alone, it is the head's.
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 0, failed: true });
    let until = w.clock.now() + Duration::from_secs(1);
    assert_eq!(w.round().unwrap(), Round::Wait(until));
    assert!(w.producer.delivered().is_empty());
    w.clock.advance(Duration::from_secs(1));
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 1, failed: false }, "the refused head still alone");
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 1, failed: false });
}

#[test]
fn regression_an_event_the_broker_refuses_holds_its_topic_and_never_dies_by_itself() {
    // Before #67 a refused record went DEAD after five attempts and the events behind it were
    // delivered: a consumer saw them before it, and a schema fixed at the broker came too late.
    let mut w = world(10);
    w.msg(1);
    w.msg(2);
    w.producer.inject(Fault::Rejected, 52);
    assert_eq!(
        w.round().unwrap(),
        Round::Sent { sent: 0, failed: false },
        "a batch refused: charged to none"
    );
    for _ in 0..50 {
        assert!(matches!(w.round().unwrap(), Round::Sent { sent: 0, failed: true }));
        w.clock.advance(Duration::from_secs(3600));
    }
    assert!(matches!(w.round().unwrap(), Round::Sent { sent: 0, failed: true }));
    assert_eq!(w.states(Target::KafkaMsg), vec![EventStatus::Pending, EventStatus::Pending]);
    assert!(w.producer.delivered().is_empty(), "nothing behind it went");
    let head = w.pg.inspect(|s| s.events[&1].clone());
    assert_eq!(head.event.attempts, 51);
    assert!(head.last_error.as_deref().unwrap().starts_with("refused by the broker: "), "{head:?}");
    let held = head.event.next_attempt_at.unwrap().duration_since(w.clock.now()).unwrap();
    assert!(held <= Duration::from_secs(60), "backing off within the cap, not gone: {held:?}");
    assert_eq!(w.d.delivery.stats.refused.held(), vec![(Target::KafkaMsg, 1)]);
    // The broker takes it (its schema fixed): it resumes by itself, in order.
    w.clock.advance(held);
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 1, failed: false });
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 1, failed: false });
    let order: Vec<String> = w.producer.delivered().iter().map(|r| r.payload.to_string()).collect();
    assert_eq!(order, ["{\"n\":1}", "{\"n\":2}"]);
    assert!(w.d.delivery.stats.refused.held().is_empty(), "the hold is over");
}

#[test]
fn a_refused_event_a_person_parks_goes_dead_with_the_note_and_the_topic_moves_on() {
    let mut w = world(10);
    w.msg(1);
    w.msg(2);
    w.producer.inject(Fault::Rejected, 2);
    assert!(matches!(w.round().unwrap(), Round::Sent { sent: 0, failed: false }));
    assert!(matches!(w.round().unwrap(), Round::Sent { sent: 0, failed: true }));
    let out = w.pg.park(&[2, 1, 9], "schema fix due in 0.4").unwrap();
    assert_eq!(
        out[0],
        (2, Err("event is PENDING and was never refused; only an event the broker refused is parked".into()))
    );
    assert_eq!(out[1], (1, Ok(())));
    assert_eq!(out[2], (9, Err("no such event".into())));
    let parked = w.pg.inspect(|s| s.events[&1].clone());
    assert_eq!(parked.state, EventStatus::Dead);
    assert_eq!(
        parked.last_error.as_deref(),
        Some("parked by msgx park: schema fix due in 0.4 (it was refused by the broker: kafka rejected: injected refusal)")
    );
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 1, failed: false });
    assert_eq!(
        w.pg.park(&[1], "again").unwrap()[0].1,
        Err("event is DEAD; only a PENDING event the broker refused is parked".into())
    );
    // replay --events sends it again, after what overtook it as the person decided.
    let out = w.pg.replay_events(&crate::ports::ReplaySelection::Ids(vec![1]), 10).unwrap();
    assert!(out[0].verdict.is_ok());
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 1, failed: false });
}

#[test]
fn every_record_names_its_schema_version_and_its_time_zone() {
    let mut w = world(10);
    w.msg(1);
    schd(&mut w, "A", 1);
    w.clock.advance(Duration::from_secs(60));
    w.round().unwrap();
    let delivered = w.producer.delivered();
    assert_eq!(delivered.len(), 2);
    for r in &delivered {
        let h = |name: &str| r.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        assert_eq!(h("schema_version").as_deref(), Some(crate::schema::VERSION), "{r:?}");
        assert_eq!(h("time_zone").as_deref(), Some("UTC"), "{r:?}");
    }
}

#[test]
fn ready_prefix_stops_at_a_row_in_backoff() {
    let now = FakeClock::new().now();
    let ev = |id, next: Option<SystemTime>| MsgEvent {
        event_id: id,
        msg_id: None,
        target: Target::KafkaMsg,
        partition_key: "k".into(),
        state_version: 1,
        payload_json: "{}".into(),
        attempts: 0,
        next_attempt_at: next,
        last_attempt_at: None,
        created_at: None,
        ordinal: None,
    };
    let later = now + Duration::from_secs(5);
    let rows = [ev(1, Some(now)), ev(2, None), ev(3, Some(later)), ev(4, None)];
    assert_eq!(ready_prefix(&rows, now).unwrap().len(), 2);
    assert_eq!(ready_prefix(&rows[2..], now), Err(later));
    assert_eq!(ready_prefix(&[], now).unwrap().len(), 0);
}

#[test]
fn latest_per_flid_keeps_the_newest_generation_in_event_order() {
    let ev = |id, key: &str, v| MsgEvent {
        event_id: id,
        msg_id: None,
        target: Target::KafkaSchd,
        partition_key: key.into(),
        state_version: v,
        payload_json: format!("{id}"),
        attempts: 0,
        next_attempt_at: None,
        last_attempt_at: None,
        created_at: None,
        ordinal: None,
    };
    let rows = [ev(1, "A", 1), ev(2, "B", 1), ev(3, "A", 3), ev(4, "C", 1), ev(5, "A", 2)];
    let ids: Vec<i64> = latest_per_flid(&rows).iter().map(|e| e.event_id).collect();
    assert_eq!(ids, [2, 3, 4], "A keeps generation 3, not the later-inserted generation 2");
}

fn schd(w: &mut World, flid: &str, version: i64) {
    w.message(&[(Target::KafkaSchd, flid, version, &format!("{{\"FLID\":\"{flid}\",\"v\":{version}}}"))]);
}

#[test]
fn schd_is_one_fltr_array_per_flush_period_with_the_latest_per_flight() {
    let mut w = world(10);
    schd(&mut w, "A", 1);
    schd(&mut w, "B", 1);
    schd(&mut w, "A", 2); // a new generation resets A's row in place
    assert_eq!(w.pg.inspect(|s| s.events.len()), 2, "one row per flight");
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 2, failed: false });
    let got = w.producer.delivered();
    assert_eq!(got.len(), 1, "never one by one");
    assert_eq!((got[0].topic.as_ref(), got[0].key.as_ref()), ("t.schd", "FLTR"));
    let arr: serde_json::Value = serde_json::from_str(&got[0].payload).unwrap();
    assert_eq!(arr, serde_json::json!([{"FLID": "A", "v": 2}, {"FLID": "B", "v": 1}]));
    // The next flush waits for the period, however much arrives meanwhile.
    schd(&mut w, "C", 1);
    let next = w.clock.now() + Duration::from_secs(3);
    assert_eq!(w.round().unwrap(), Round::Wait(next));
    w.clock.advance(Duration::from_secs(3));
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 1, failed: false });
    assert_eq!(w.producer.delivered().len(), 2);
}

#[test]
fn schd_failure_backs_off_the_whole_batch_and_claims_nothing_before_it_is_due() {
    let mut w = world(10);
    schd(&mut w, "A", 1);
    schd(&mut w, "B", 1);
    w.producer.inject(Fault::Rejected, 1);
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 0, failed: true });
    assert!(w.pg.inspect(|s| s.events.values().all(|e| e.event.attempts == 1)), "the whole batch");
    schd(&mut w, "C", 1); // ready, but behind a head that is not due
    let until = w.clock.now() + Duration::from_secs(1);
    assert_eq!(w.round().unwrap(), Round::Wait(until), "head not due: nothing claimed");
    assert!(w.producer.delivered().is_empty());
    w.clock.advance(Duration::from_secs(1));
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 3, failed: false });
}

#[test]
fn a_refused_schd_batch_holds_whole_and_a_new_generation_waits_behind_it() {
    let mut w = world(10);
    schd(&mut w, "A", 1);
    schd(&mut w, "B", 1);
    w.producer.inject(Fault::Rejected, 5);
    for _ in 0..5 {
        w.clock.advance(Duration::from_secs(60));
        assert!(matches!(w.round().unwrap(), Round::Sent { sent: 0, failed: true }));
    }
    assert_eq!(w.states(Target::KafkaSchd), vec![EventStatus::Pending, EventStatus::Pending]);
    assert_eq!(w.d.delivery.stats.refused.held(), vec![(Target::KafkaSchd, 1)]);
    schd(&mut w, "A", 2);
    w.clock.advance(Duration::from_secs(60));
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 2, failed: false });
    let a = w.pg.inspect(|s| s.events[&1].clone());
    assert_eq!((a.state, a.event.state_version), (EventStatus::Sent, 2));
}

#[test]
fn a_schd_row_reset_during_a_flush_is_not_marked_sent() {
    // The dispatcher sends generation 1; meanwhile the pump resets the row to generation 2.
    // Marking "SENT" must not swallow generation 2.
    let mut w = world(10);
    schd(&mut w, "A", 1);
    let claimed = w.pg.clone().pending(Target::KafkaSchd, 10).unwrap();
    schd(&mut w, "A", 2);
    w.pg.clone()
        .mark_sent(&[Sent::unlanded(claimed[0].event_id, claimed[0].state_version)], w.clock.now())
        .unwrap();
    assert_eq!(w.states(Target::KafkaSchd), vec![EventStatus::Pending]);
    w.clock.advance(Duration::from_secs(3));
    w.round().unwrap();
    let arr: serde_json::Value = serde_json::from_str(&w.producer.delivered()[0].payload).unwrap();
    assert_eq!(arr[0]["v"], 2);
}

fn intent(routing: &str, xml: &str) -> String {
    serde_json::to_string(&OutboundIntent { routing_id: routing.into(), xml: xml.into() }).unwrap()
}

#[test]
fn coutmsgs_inserts_each_intent_once_even_when_the_sent_mark_is_lost() {
    let mut w = world(10);
    w.message(&[(Target::Coutmsgs, "RQRD", 1, &intent("VIEWRQRD", "<MSG>rqrd</MSG>"))]);
    // The round reads COUTMSGS, stamps the start, inserts, and then its mark_sent fails: the
    // insert committed, the mark did not.
    w.pg.inject_later(2, Fault::Unavailable, 1);
    assert!(w.outbound_round().unwrap_err().is_unavailable());
    assert_eq!(w.outbound.rows().len(), 1);
    assert_eq!(w.states(Target::Coutmsgs), vec![EventStatus::Pending]);
    w.outbound_round().unwrap();
    assert_eq!(w.outbound.rows(), vec![("VIEWRQRD".to_string(), "<MSG>rqrd</MSG>".to_string())], "not twice");
    assert_eq!(w.states(Target::Coutmsgs), vec![EventStatus::Sent]);
}

#[test]
fn a_refused_coutmsgs_insert_is_a_head_in_backoff() {
    let mut w = world(10);
    w.message(&[(Target::Coutmsgs, "A", 1, &intent("R", "<a/>"))]);
    w.message(&[(Target::Coutmsgs, "B", 1, &intent("R", "<b/>"))]);
    w.outbound.inject(Fault::Rejected, 1);
    assert_eq!(w.outbound_round().unwrap(), Round::Sent { sent: 0, failed: true });
    assert!(w.outbound.rows().is_empty(), "nothing behind the failed head");
    w.clock.advance(Duration::from_secs(1));
    assert_eq!(w.outbound_round().unwrap(), Round::Sent { sent: 2, failed: false });
    let xs: Vec<String> = w.outbound.rows().into_iter().map(|(_, x)| x).collect();
    assert_eq!(xs, ["<a/>", "<b/>"]);
}

#[test]
fn a_broker_away_for_two_hours_dead_letters_nothing_and_delivers_in_order_after() {
    let mut w = world(10);
    for n in 1..=6 {
        w.msg(n);
    }
    schd(&mut w, "A", 1);
    w.message(&[(Target::Coutmsgs, "Q", 1, &intent("R", "<q/>"))]);
    w.producer.set_down(true);
    let start = w.clock.now();
    while w.clock.now().duration_since(start).unwrap() < Duration::from_secs(7200) {
        assert!(w.round().unwrap_err().is_unavailable());
        // COUTMSGS is its own stage: a broker outage does not hold it back.
        w.outbound_round().unwrap();
        w.clock.advance(Duration::from_secs(2));
    }
    assert_eq!(w.outbound.rows().len(), 1, "delivered during the broker outage");
    assert!(w
        .pg
        .inspect(|s| s.events.values().all(|e| e.event.attempts == 0 && e.state != EventStatus::Dead)));
    w.producer.set_down(false);
    while w.states(Target::KafkaMsg).contains(&EventStatus::Pending)
        || w.states(Target::KafkaSchd).contains(&EventStatus::Pending)
    {
        w.round().unwrap();
    }
    let ns: Vec<String> =
        w.producer.delivered().iter().filter(|r| r.topic == "t.msg").map(|r| r.payload.to_string()).collect();
    assert_eq!(ns, (1..=6).map(|n| format!("{{\"n\":{n}}}")).collect::<Vec<_>>(), "in order, nothing lost");
}

#[test]
fn a_partly_acknowledged_round_keeps_its_prefix_and_stalls_on_the_rest() {
    let mut w = world(10);
    for n in 1..=5 {
        w.msg(n);
    }
    w.producer.ack_then_fail(2);
    assert!(w.round().unwrap_err().is_unavailable());
    assert_eq!(
        w.states(Target::KafkaMsg),
        [
            EventStatus::Sent,
            EventStatus::Sent,
            EventStatus::Pending,
            EventStatus::Pending,
            EventStatus::Pending
        ]
    );
    assert!(w.pg.inspect(|s| s.events.values().all(|e| e.event.attempts == 0)), "nothing charged");
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 3, failed: false });
}

#[test]
fn a_record_the_broker_refuses_as_too_large_holds_its_topic_until_a_person_parks_it() {
    let mut w = world(10);
    w.msg(1);
    w.message(&[(Target::KafkaMsg, "F9", 2, &"z".repeat(300))]);
    w.msg(3);
    w.producer.max_bytes(100);
    for _ in 0..6 {
        w.round().unwrap();
        w.clock.advance(Duration::from_secs(60));
    }
    assert_eq!(w.states(Target::KafkaMsg), [EventStatus::Sent, EventStatus::Pending, EventStatus::Pending]);
    assert_eq!(w.pg.park(&[2], "larger than the broker's message.max.bytes").unwrap()[0].1, Ok(()));
    w.round().unwrap();
    assert_eq!(w.states(Target::KafkaMsg), [EventStatus::Sent, EventStatus::Dead, EventStatus::Sent]);
}

#[test]
fn a_schd_array_never_exceeds_the_record_limit() {
    let mut w = world(10);
    w.d.settings.max_record_bytes = 64;
    for f in ["A", "B", "C", "D"] {
        schd(&mut w, f, 1); // about 20 bytes each
    }
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 3, failed: false }, "three of 18-19 bytes fit in 64");
    assert_eq!(
        w.round().unwrap(),
        Round::Sent { sent: 1, failed: false },
        "the rest goes at once, not a period later"
    );
    let sizes: Vec<usize> = w.producer.delivered().iter().map(|r| r.payload.len()).collect();
    assert!(sizes.iter().all(|n| *n <= 64), "{sizes:?}");
}

#[test]
fn a_stale_instance_produces_nothing() {
    let mut w = world(10);
    w.msg(1);
    w.gate.stale();
    assert!(w.round().unwrap_err().is_fenced());
    assert!(w.producer.delivered().is_empty());
}

/// #21 item 9: `msgx.schd.flush-limit` bounds one flush: the rest goes at the next period.
#[test]
fn regression_a_flush_claims_at_most_flush_limit_flights() {
    let mut w = world(10);
    w.d.settings.flush_limit = 2;
    for f in ["A", "B", "C", "D", "E"] {
        schd(&mut w, f, 1);
    }
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 2, failed: false });
    let arr: serde_json::Value = serde_json::from_str(&w.producer.delivered()[0].payload).unwrap();
    assert_eq!(arr.as_array().map(Vec::len), Some(2));
    w.clock.advance(Duration::from_secs(3));
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 2, failed: false });
    w.clock.advance(Duration::from_secs(3));
    assert_eq!(w.round().unwrap(), Round::Sent { sent: 1, failed: false });
}

/// #20 (identities that survive a rollback): a KAFKA:msg record carries `event_key` =
/// `MSG_ID.ordinal.digest`, the same however the EVENT_ID sequence went; a KAFKA:schd array carries
/// `batch_key`, derived from the flights and generations it aggregates.
#[test]
fn regression_a_message_decided_again_differently_carries_another_event_key() {
    let e = |payload: &str| MsgEvent {
        event_id: 9,
        msg_id: Some(3),
        target: Target::KafkaMsg,
        partition_key: "F0".into(),
        state_version: 3,
        payload_json: payload.into(),
        attempts: 0,
        next_attempt_at: None,
        last_attempt_at: None,
        created_at: None,
        ordinal: Some(0),
    };
    let first = e(r#"{"created":true,"msg_id":3}"#);
    assert_eq!(first.key(), e(r#"{"created":true,"msg_id":3}"#).key(), "the same event: the same key");
    assert_ne!(first.key(), e(r#"{"msg_id":3}"#).key(), "found by the simulator, seed 153");
}

#[test]
fn records_carry_an_identity_derived_from_the_message_not_the_sequence() {
    let mut w = world(10);
    w.message(&[(Target::KafkaMsg, "A", 1, "{}"), (Target::KafkaMsg, "B", 1, "{}")]);
    w.message(&[(Target::KafkaMsg, "A", 2, "{}")]);
    w.round().unwrap();
    let keys: Vec<String> = w
        .producer
        .delivered()
        .iter()
        .map(|r| r.headers.iter().find(|(k, _)| k == "event_key").map(|(_, v)| v.clone()).unwrap_or_default())
        .collect();
    let d = crate::domain::payload_digest("{}");
    assert_eq!(keys, [format!("1.0.{d}"), format!("1.1.{d}"), format!("2.0.{d}")]);
    let e = |flid: &str, v: i64, id: i64| MsgEvent {
        event_id: id,
        msg_id: Some(id),
        target: Target::KafkaSchd,
        partition_key: flid.into(),
        state_version: v,
        payload_json: "{}".into(),
        attempts: 0,
        next_attempt_at: None,
        last_attempt_at: None,
        created_at: None,
        ordinal: None,
    };
    let (a, b, b2) = (e("A", 1, 5), e("B", 3, 6), e("B", 4, 9));
    assert_eq!(batch_key(&[&a, &b]), batch_key(&[&b, &a]), "the same flights and generations: the same key");
    let again = e("A", 1, 77); // the same content under a re-issued EVENT_ID
    assert_eq!(batch_key(&[&again, &b]), batch_key(&[&a, &b]));
    assert_ne!(batch_key(&[&a, &b]), batch_key(&[&a, &b2]), "another generation: another batch");
}

/// A producer whose round takes `takes` (a broker slow to answer: up to message-timeout-ms).
struct SlowProducer {
    inner: MemProducer,
    clock: FakeClock,
    takes: Duration,
}

impl Producer for SlowProducer {
    fn send(&mut self, records: &[Record]) -> Vec<Result<crate::ports::Position, StoreError>> {
        self.clock.advance(self.takes);
        self.inner.send(records)
    }
}

#[test]
fn regression_a_refused_record_backs_off_from_when_the_broker_answered() {
    // #69: the round began, the produce round took 30 s, the broker refused the record. Its
    // retry is due a backoff after the answer; counted from the round's start, the backoff (1 s)
    // was over before the answer came, and the record was sent again at once.
    let mut w = world(10);
    w.msg(1);
    let cfg = Config::defaults();
    let producer =
        SlowProducer { inner: w.producer.clone(), clock: w.clock.clone(), takes: Duration::from_secs(30) };
    let mut d = Dispatcher::new(
        w.pg.clone(),
        producer,
        crate::policy::retry::retry_policy(&cfg.pipeline),
        Settings::from_config(&cfg),
        w.gate.clone(),
        testkit::stats(),
        Arc::new(w.clock.clone()),
    );
    w.producer.inject(Fault::Rejected, 1);
    let started = w.clock.now();
    assert!(matches!(d.round(started).unwrap(), Round::Sent { sent: 0, failed: true }));
    let answered = started + Duration::from_secs(30);
    let next = w.pg.inspect(|s| s.events[&1].event.next_attempt_at).expect("backing off");
    assert_eq!(next, answered + cfg.pipeline.backoff[0], "a backoff after the answer, not after the start");
    assert!(matches!(d.round(w.clock.now()).unwrap(), Round::Wait(_)), "not sent again at once");
}
