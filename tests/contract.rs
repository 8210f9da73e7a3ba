//! The events are a contract (#67): the broker validates every record msgx writes against the
//! published schema (tests/support/services.sh starts every Tansu with the registry the tests
//! fill, `common::register_schemas`), refuses a record that breaks it, and a record it refuses
//! holds its topic — said in the log, `msgx status`, `/ready` and `/metrics` — until a person
//! parks it or the broker takes it.

use std::time::Duration;

use msgx::domain::Target;
use msgx::ports::{Producer, Record};
use msgx::store::kafka::KafkaProducer;
use serde_json::json;

use crate::common::*;

fn record<'a>(s: &'a Services, key: &'a str, payload: &'a str) -> Record<'a> {
    Record { topic: s.topic().into(), key: key.into(), payload: payload.into(), headers: vec![] }
}

#[test]
fn the_broker_refuses_a_hand_made_record_that_breaks_the_schema_and_takes_one_that_keeps_it() {
    let s = Services::new("");
    let mut producer = KafkaProducer::new(&s.cfg).expect("a producer");
    let good = r#"{"changes":[{"field":"STND","new":"212","old":null}],"ffid":null,"flid":"77","msg_id":1,"type":"FLOP-STND"}"#;
    let renamed = good.replace("\"flid\"", "\"flight_id\"");
    let out = producer.send(&[record(&s, "77", &renamed)]);
    let e = out[0].as_ref().expect_err("a record without flid is refused");
    assert!(e.is_rejected(), "a refusal, not an outage: {e}");
    assert!(e.to_string().contains("InvalidRecord"), "{e}");
    let out = producer.send(&[record(&s, "77", good)]);
    assert!(out[0].is_ok(), "{:?}", out[0]);
    let got = consume(s.topic(), 1, Duration::from_secs(10));
    assert_eq!(got.len(), 1);
    let want: serde_json::Value = serde_json::from_str(good).unwrap();
    assert_eq!(got[0].payload, want, "only the record that keeps the schema is on the topic");
}

/// The test's msg topic refuses `FLOP-ACFT` records: the published schema and one rule more.
fn refuse_acft(s: &Services) {
    let mut doc = msgx::schema::registry_document(Target::KafkaMsg);
    doc["properties"]["value"]["not"] =
        json!({"required": ["type"], "properties": {"type": {"const": "FLOP-ACFT"}}});
    let dir = std::path::PathBuf::from(std::env::var("MSGX_SCHEMA_REGISTRY").unwrap());
    std::fs::write(dir.join(format!("{}.json", s.topic())), doc.to_string()).unwrap();
}

/// A stand for flight 1, an aircraft type for flight 2, a stand for flight 3: values that
/// change something each time (`first` is in them).
fn messages(s: &Services, first: u64) {
    let stand = format!("2{first}");
    let stnd = |n: u64, flid: &str| msgx::fixtures::flop(n, "STND", flid, &[("STND", Some(&stand))]);
    s.insert_inbound(&[
        stnd(first, "1"),
        msgx::fixtures::flop(first + 1, "ACFT", "2", &[("ACFT", Some(&format!("3{first}N")))]),
        stnd(first + 2, "3"),
    ]);
}

fn refused_attempts(s: &Services) -> i64 {
    count(&mut s.pg(), "SELECT coalesce(max(attempts), 0)::bigint FROM msg_event WHERE target = 'KAFKA:msg' AND state = 'PENDING'")
}

#[test]
fn a_record_the_broker_refuses_holds_its_topic_until_a_person_parks_it_or_the_broker_takes_it() {
    let s = Services::migrated("backoff-ms = [100, 200]\nbackoff-cap-ms = 300\n");
    refuse_acft(&s);
    let a = Instance::run(&s, "a", "");
    let addr = endpoint(&a);
    messages(&s, 1);
    assert!(
        a.wait_for_log("ERROR msgx::dispatch] event refused target=KAFKA:msg", Duration::from_secs(60)),
        "{}",
        a.log_text()
    );
    assert!(eventually(Duration::from_secs(30), || refused_attempts(&s) >= 3), "{}", a.log_text());
    // Three refused attempts, and nothing behind the refused record went.
    let got = consume_from(&s.cfg.kafka_brokers, s.topic(), 2, Duration::from_secs(2));
    let flids: Vec<&str> = got.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(flids, ["1"], "only the record before the refused one");
    let log = a.log_text();
    let line = log.lines().find(|l| l.contains("event refused")).unwrap();
    assert!(
        line.contains(&format!("topic={}", s.topic()))
            && line.contains("msg_id=2")
            && line.contains("event_id=2"),
        "{line}"
    );
    assert!(line.contains("InvalidRecord (Broker: Broker failed to validate record)"), "{line}");
    eprintln!("the log: {line}");
    let (code, body) = http_get(&addr, "/ready");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("event-refused") && body.contains("KAFKA:msg"), "{body}");
    let (_, metrics) = http_get(&addr, "/metrics");
    assert!(metrics.contains("msgx_event_refused{target=\"KAFKA:msg\"} 2"), "{metrics}");
    assert!(
        metrics.lines().any(|l| l.starts_with("msgx_events_refused_total{target=\"KAFKA:msg\"} ")),
        "{metrics}"
    );
    let (_, console) = http_get(&addr, "/");
    assert!(console.contains("holds at event 2: the broker refuses it"), "{console}");
    let status = operator_command(&s, &["status"]);
    let text = String::from_utf8_lossy(&status.stdout).to_string();
    let held = text.lines().find(|l| l.contains("holds at")).unwrap_or_else(|| panic!("{text}"));
    assert!(
        held.contains("KAFKA:msg holds at event_id=2 msg_id=2") && held.contains("msgx park --ids 2"),
        "{held}"
    );
    eprintln!("msgx status: {held}");
    let json: serde_json::Value =
        serde_json::from_slice(&operator_command(&s, &["status", "--json"]).stdout).expect("status --json");
    let refused =
        json.pointer("/status/refused").or_else(|| json.get("refused")).unwrap_or_else(|| panic!("{json}"));
    assert_eq!(
        (refused[0]["target"].as_str(), refused[0]["event_id"].as_i64()),
        (Some("KAFKA:msg"), Some(2)),
        "{refused}"
    );
    let check = operator_command(&s, &["status", "--check"]);
    let line = String::from_utf8_lossy(&check.stdout).to_string();
    assert_eq!(check.status.code(), Some(2), "{line}");
    assert!(line.contains("KAFKA:msg holds at event 2: the broker refuses it"), "{line}");
    eprintln!("msgx status --check: {line}");

    // The person's way out: park it with a note. The topic moves on.
    let park = operator_command(
        &s,
        &["park", "--ids", "2", "--note", "ACFT refused by the consumers' registry; asked them to fix"],
    );
    assert!(park.status.success(), "{park:?}");
    assert_eq!(String::from_utf8_lossy(&park.stdout).trim(), "parked  event_id=2");
    let got = consume_from(&s.cfg.kafka_brokers, s.topic(), 2, Duration::from_secs(30));
    let flids: Vec<&str> = got.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(flids, ["1", "3"], "the record behind it follows");
    let error = count_text(&s, "SELECT last_error FROM msg_event WHERE event_id = 2 AND state = 'DEAD'");
    assert!(error.starts_with("parked by msgx park: ACFT refused by the consumers' registry; asked them to fix (it was refused by the broker: "), "{error}");
    assert!(eventually(Duration::from_secs(10), || http_get(&addr, "/ready").0 == 200), "ready again");

    // The other way out: the broker is fixed, and the topic resumes by itself, in order.
    messages(&s, 4);
    assert!(eventually(Duration::from_secs(30), || refused_attempts(&s) >= 2), "{}", a.log_text());
    register_schemas(s.topic(), &format!("{}.schd", s.topic()));
    let got = consume_from(&s.cfg.kafka_brokers, s.topic(), 5, Duration::from_secs(30));
    let flids: Vec<&str> = got.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(flids, ["1", "3", "1", "2", "3"], "resumed in order once the broker takes it");
    assert_eq!(
        count(&mut s.pg(), "SELECT count(*) FROM msg_event WHERE state = 'DEAD'"),
        1,
        "only the parked one"
    );
    assert!(
        !a.log_text().contains("behind a record it refused"),
        "nothing overtook the refused record:\n{}",
        a.log_text()
    );
}

fn count_text(s: &Services, sql: &str) -> String {
    s.pg().query_one(sql, &[]).map(|r| r.get::<_, String>(0)).unwrap_or_default()
}

#[test]
fn msgx_schema_prints_the_published_schemas_and_writes_the_brokers_registry() {
    let s = Services::new("");
    for (name, text) in [("msg", msgx::schema::MSG), ("schd", msgx::schema::SCHD)] {
        let out = operator_command(&s, &["schema", name]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), text);
    }
    let out = operator_command(&s, &["schema", "flights"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no schema named \"flights\""), "{out:?}");
    let dir = std::env::temp_dir().join(format!("msgx-registry-{}", s.name));
    let out = operator_command(&s, &["schema", "--registry", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let written = std::fs::read_to_string(dir.join(format!("{}.json", s.topic()))).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&written).unwrap(),
        msgx::schema::registry_document(Target::KafkaMsg)
    );
    assert!(dir.join(format!("{}.schd.json", s.topic())).exists());
    std::fs::remove_dir_all(dir).unwrap();
}
