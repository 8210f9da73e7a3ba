//! Following a message (#40) on the real services: `msgx trace` from the mailbox row to the
//! record a Kafka consumer reads back (the `event_key` they both name), a DEAD one, an archived
//! one, and one nobody knows.

use crate::common;

use std::time::Duration;

use common::*;
use msgx::fixtures;

fn trace(s: &Services, args: &[&str]) -> (Option<i32>, String) {
    msgx(s, "trace", args)
}

fn msgx(s: &Services, command: &str, args: &[&str]) -> (Option<i32>, String) {
    let o = operator_command(s, &[&[command], args].concat());
    (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

#[test]
fn trace_follows_a_message_from_its_mailbox_row_to_the_record_kafka_holds() {
    let s = Services::migrated("");
    let ids = s.insert_inbound(&[
        fixtures::flop_stnd(1, "9001", "B12"),
        "<MSG><META><NOT-SIS".to_string(),
        fixtures::flop_stnd(3, "9003", "C7"),
    ]);
    let a = Instance::run(&s, "traced", "");
    settled(&s, &a, &[(SENT, 2), ("SELECT count(*) FROM proc_state WHERE backfill_at IS NOT NULL", 3)]);
    let records = consume_event_keys(&s.cfg.kafka_brokers, s.topic(), 2, Duration::from_secs(30));

    // The first: SUCCEEDED, marked, its event SENT under the key the consumer read.
    let (code, out) = trace(&s, &[&ids[0].to_string()]);
    println!("msgx trace {}:\n{out}", ids[0]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("status PROCESSED"), "{out}");
    assert!(out.contains("state:    SUCCEEDED"), "{out}");
    assert!(out.contains("type:     FLOP-STND  flights 9001"), "{out}");
    let (code, json) = trace(&s, &[&ids[0].to_string(), "--json"]);
    assert_eq!(code, Some(0), "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["state"], "SUCCEEDED");
    assert_eq!(v["flights"], serde_json::json!(["9001"]));
    assert_eq!(v["mailbox"]["status"], "PROCESSED");
    let events = v["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{v}");
    assert_eq!(
        (events[0]["target"].as_str(), events[0]["state"].as_str()),
        (Some("KAFKA:msg"), Some("SENT"))
    );
    assert_eq!(events[0]["topic"], s.topic());
    let key = events[0]["event_key"].as_str().unwrap();
    let read =
        records.iter().find(|r| r.header("msg_id") == Some(&ids[0].to_string()[..])).expect("the record");
    assert_eq!(read.header("event_key"), Some(key), "trace names the key the consumer read");
    // #40: and the partition and offset the consumer read it at (the broker's receipt).
    assert_eq!(
        (events[0]["partition"].as_i64(), events[0]["offset"].as_i64()),
        (Some(read.partition as i64), Some(read.offset)),
        "trace names where the record lies: {v}"
    );
    assert!(out.contains(&format!("partition {} offset {}", read.partition, read.offset)), "{out}");

    // The malformed one: DEAD, its class and error, no event.
    let (code, out) = trace(&s, &[&ids[1].to_string()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("state:    DEAD") && out.contains("error:    MALFORMED"), "{out}");
    assert!(out.contains("the text does not decode"), "{out}");
    assert!(out.contains("events:   none"), "{out}");

    // An archived one: archived as the jobs stage archives (a stub stays in PROC_STATE).
    use msgx::ports::Housekeeping;
    let mut own = msgx::store::pg::Pg::connect(&s.cfg.pg_url).unwrap();
    let later = now() + Duration::from_secs(3600);
    let cut = msgx::ports::ArchiveCut { settled_before: later, dead_before: later };
    assert!(own.archive_one(ids[2], &cut, now()).unwrap().is_some(), "archived");
    let (code, out) = trace(&s, &[&ids[2].to_string()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("state:    SUCCEEDED (archived "), "the archived copy, not the stub: {out}");
    assert!(out.contains("type:     FLOP-STND  flights 9003"), "{out}");

    // Nobody knows it.
    let (code, out) = trace(&s, &["999999"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("mailbox:  no such row") && out.contains("never saw it"), "{out}");
    assert!(out.contains("msg_id 999999: not in the mailbox, and msgx never saw it"), "{out}");
}

#[test]
fn flight_says_which_message_set_each_field_and_where_its_event_landed() {
    let s = Services::migrated("");
    let ids = s.insert_inbound(&[
        fixtures::flop_stnd(1, "9001", "A1"),
        fixtures::flop(2, "ACFT", "9001", &[("ACFT", Some("32N"))]),
        fixtures::flop_stnd(3, "9001", "B12"),
    ]);
    let a = Instance::run(&s, "flight", "");
    settled(&s, &a, &[(SENT, 3)]);
    let records = consume_event_keys(&s.cfg.kafka_brokers, s.topic(), 3, Duration::from_secs(30));
    let read =
        |m: i64| records.iter().find(|r| r.header("msg_id") == Some(&m.to_string()[..])).expect("a record");

    let (code, out) = msgx(&s, "flight", &["9001"]);
    println!("msgx flight 9001:\n{out}");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("STND   = B12    set by msg {} FLOP-STND at ", ids[2])), "{out}");
    assert!(out.contains(&format!("ACFT   = 32N    set by msg {} FLOP-ACFT at ", ids[1])), "{out}");
    let (code, json) = msgx(&s, "flight", &["9001", "--json"]);
    assert_eq!(code, Some(0), "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let changes = v["changes"].as_array().unwrap();
    let order: Vec<i64> = changes.iter().map(|c| c["msg_id"].as_i64().unwrap()).collect();
    assert_eq!(order, [ids[2], ids[1], ids[0]], "newest first: {v}");
    for c in changes {
        let r = read(c["msg_id"].as_i64().unwrap());
        assert_eq!(c["event_key"].as_str(), r.header("event_key"), "{v}");
        assert_eq!(
            (c["partition"].as_i64(), c["offset"].as_i64()),
            (Some(r.partition as i64), Some(r.offset))
        );
    }

    let (code, out) = msgx(&s, "flight", &["9001", "--field", "STND"]);
    println!("msgx flight 9001 --field STND:\n{out}");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("flight 9001 STND = B12"), "{out}");
    assert!(out.contains("element:  <STND>B12</STND>"), "{out}");
    assert!(out.contains(&format!("offset {}", read(ids[2]).offset)), "{out}");
    assert!(out.contains(&format!("earlier:  A1 (msg {})", ids[0])), "{out}");

    let (code, out) = msgx(&s, "flight", &["0000"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("flight 0000: Redis holds nothing of it and no event names it"), "{out}");
}
