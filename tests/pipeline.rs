//! End to end on the real services: mailbox (MariaDB) → PROC_STATE (PostgreSQL) → Redis →
//! outbox → Kafka (Tansu) → processed marks.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use mysql::prelude::Queryable;
use redis::Commands;

use common::*;
use msgx::fixtures;

#[test]
fn two_hundred_flop_messages_flow_through_every_store_in_order() {
    let s = Services::migrated("");
    // 200 stand changes over 20 flights; each one changes its flight, so each one notifies.
    let raws: Vec<String> =
        (1..=200u64).map(|i| fixtures::flop_stnd(i, &format!("F{}", i % 20), &format!("S{i}"))).collect();
    let ids = s.insert_inbound(&raws);
    assert_eq!(ids.len(), 200);

    let (stop, daemon) = start_daemon(&s.cfg);
    let mut pg = s.pg();
    let done = eventually(Duration::from_secs(90), || {
        count(&mut pg, "SELECT count(*) FROM msg_event WHERE state = 'SENT'") == 200
            && count(&mut pg, "SELECT count(*) FROM proc_state WHERE backfill_at IS NOT NULL") == 200
    });
    drop(stop);
    daemon.join().expect("daemon thread").expect("daemon stops cleanly");
    assert!(
        done,
        "pipeline did not finish: {:?}",
        msgx::store::pg::Pg::connect(&s.cfg.pg_url).unwrap().status(10)
    );

    // PROC_STATE: 200 rows, all SUCCEEDED.
    assert_eq!(count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'"), 200);
    // Kafka: 200 records, in MSG_ID order, keyed by FLID, with event and message ids.
    let got = consume(s.topic(), 200, Duration::from_secs(30));
    assert_eq!(got.len(), 200, "records read back");
    let msg_ids: Vec<i64> = got.iter().map(|r| r.payload["msg_id"].as_i64().unwrap()).collect();
    assert_eq!(msg_ids, ids, "records arrive in MSG_ID order");
    for (r, i) in got.iter().zip(1..) {
        assert_eq!(r.key, format!("F{}", i % 20));
        assert_eq!(r.payload["type"], "FLOP-STND");
        assert_eq!(r.payload["changes"][0]["new"], format!("S{i}"));
        assert_eq!(r.header("msg_id"), Some(r.payload["msg_id"].to_string().as_str()));
        assert!(r.header("event_id").is_some());
        // #20: the identity consumers deduplicate on is the message's, not the sequence's.
        let payload = serde_json::to_string(&r.payload).unwrap();
        let digest = msgx::domain::payload_digest(&payload);
        assert_eq!(r.header("event_key"), Some(format!("{}.0.{digest}", r.payload["msg_id"]).as_str()));
    }
    // Redis: each flight holds the last stand set for it.
    let mut redis = s.redis();
    for f in 0..20u64 {
        let last = (1..=200u64).filter(|i| i % 20 == f).max().unwrap();
        let flight: BTreeMap<String, String> = redis.hgetall(format!("{}:flight:F{f}", s.name)).unwrap();
        assert_eq!(flight.get("STND"), Some(&format!("S{last}")), "flight F{f}");
    }
    // Mailbox: every row marked once, with the configured status.
    let marked: Vec<(i64, String)> = s
        .mysql()
        .query("SELECT CMINMSGS_ID, CMINMSGS_STATUS FROM cminmsgs WHERE CMINMSGS_DATE_PROCESSED IS NOT NULL ORDER BY CMINMSGS_ID")
        .unwrap();
    assert_eq!(marked.len(), 200);
    assert!(marked.iter().all(|(_, st)| st == "PROCESSED"));
}

#[test]
fn bad_messages_end_dead_or_skipped_and_never_block_the_queue() {
    let s = Services::migrated("");
    let raws = vec![
        "this is not XML".to_string(),                            // DEAD(MALFORMED)
        fixtures::other(1, "LDM", "X", "<LDM><whatever/></LDM>"), // SKIPPED ignored:LDM-*
        fixtures::flop_stnd(7, "F1", "A1"),                       // SUCCEEDED
        fixtures::flop_stnd(7, "F1", "A2"),                       // SKIPPED duplicate-of
        fixtures::flop_stnd(8, "F1", "A3"),                       // SUCCEEDED
    ];
    let ids = s.insert_inbound(&raws);
    let (stop, daemon) = start_daemon(&s.cfg);
    let mut pg = s.pg();
    let done = eventually(Duration::from_secs(60), || {
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE backfill_at IS NOT NULL") == 5
            && count(&mut pg, "SELECT count(*) FROM msg_event WHERE state = 'SENT'") == 2
    });
    drop(stop);
    daemon.join().unwrap().unwrap();
    assert!(done, "not settled");
    let rows: Vec<(i64, String, Option<String>, Option<String>)> = pg
        .query("SELECT msg_id, state, error_class, last_error FROM proc_state ORDER BY msg_id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(rows[0].1, "DEAD");
    assert_eq!(rows[0].2.as_deref(), Some("MALFORMED"));
    assert_eq!((rows[1].1.as_str(), rows[1].3.as_deref()), ("SKIPPED", Some("ignored:LDM-*")));
    assert_eq!(rows[2].1, "SUCCEEDED");
    assert_eq!(rows[3].1, "SKIPPED");
    assert_eq!(rows[3].3, Some(format!("duplicate-of:{}", ids[2])));
    assert_eq!(rows[4].1, "SUCCEEDED");
    let got = consume(s.topic(), 2, Duration::from_secs(20));
    let stands: Vec<_> =
        got.iter().map(|r| r.payload["changes"][0]["new"].as_str().unwrap().to_string()).collect();
    assert_eq!(stands, ["A1", "A3"]);
}

/// SPEC §3a (#68): a kind no handler of this release knows is parked as DEAD(UNSUPPORTED) at its
/// first attempt, so the flight update behind it waits less than one poll (before: the retry
/// ladder, 15 s a message at the defaults, held the whole FIFO). It is counted per kind and
/// replayable.
#[test]
fn regression_an_unsupported_kind_is_parked_at_once_and_never_holds_the_flight_behind_it() {
    let s = Services::migrated("");
    let ids = s.insert_inbound(&[
        fixtures::other(1, "ZZZZ", "Q", "<ZZZZ><FLID>F1</FLID></ZZZZ>"),
        fixtures::flop_stnd(2, "F1", "A1"),
    ]);
    let (stop, daemon) = start_daemon(&s.cfg);
    let mut pg = s.pg();
    let done = eventually(Duration::from_secs(30), || {
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE state IN ('DEAD', 'SUCCEEDED')") == 2
    });
    drop(stop);
    daemon.join().unwrap().unwrap();
    assert!(done, "not settled: {:?}", msgx::store::pg::Pg::connect(&s.cfg.pg_url).unwrap().status(10));
    let mut row = |id: i64| {
        let r = pg
            .query_one(
                "SELECT state, error_class, attempts, last_error, updated_at FROM proc_state WHERE msg_id = $1",
                &[&id],
            )
            .unwrap();
        let row: (String, Option<String>, i32, Option<String>, std::time::SystemTime) =
            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
        row
    };
    let (unknown, flight) = (row(ids[0]), row(ids[1]));
    assert_eq!(
        (unknown.0.as_str(), unknown.1.as_deref(), unknown.2, unknown.3.as_deref()),
        ("DEAD", Some("UNSUPPORTED"), 1, Some("no handler for ZZZZ-Q")),
        "parked at its first attempt"
    );
    assert_eq!(flight.0, "SUCCEEDED");
    let behind = flight.4.duration_since(unknown.4).unwrap_or_default();
    assert!(behind < s.cfg.pipeline.poll_interval, "the flight waited {behind:?} behind the unknown kind");
    // Counted per kind for /metrics, and replayable by a release that knows it.
    let g = msgx::store::pg::Pg::connect(&s.cfg.pg_url).unwrap().gauges().unwrap();
    assert_eq!(g.unsupported, vec![("ZZZZ-Q".to_string(), 1)]);
    let (code, out) = msgx_cli(&s, &s.cfg.pg_url, &["replay", "--class", "UNSUPPORTED"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!("replayed msg_id={} was=DEAD class=UNSUPPORTED -> PENDING", ids[0])),
        "{out}"
    );
}

#[test]
fn a_second_instance_waits_as_a_hot_standby_and_takes_over_when_the_first_stops() {
    let s = Services::migrated("");
    let mut pg = s.pg();
    let epoch = |pg: &mut postgres::Client| -> i64 {
        pg.query_one("SELECT epoch FROM msgx_lease", &[]).unwrap().get(0)
    };
    let (stop_a, a) = start_daemon(&s.cfg);
    assert!(eventually(Duration::from_secs(20), || epoch(&mut pg) == 1), "the first instance took the lease");
    let (stop_b, b) = start_daemon(&s.cfg);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(epoch(&mut pg), 1, "the standby did not take it");
    drop(stop_a); // SIGTERM: the lease is released at once
    a.join().unwrap().unwrap();
    assert!(eventually(Duration::from_secs(10), || epoch(&mut pg) == 2), "the standby took over");
    let ids = s.insert_inbound(&[fixtures::flop_stnd(1, "T1", "A1")]);
    assert!(eventually(Duration::from_secs(30), || count(
        &mut pg,
        &format!("SELECT count(*) FROM proc_state WHERE msg_id = {} AND state = 'SUCCEEDED'", ids[0])
    ) == 1));
    drop(stop_b);
    b.join().unwrap().unwrap();
}

#[test]
fn the_daemon_refuses_an_unmigrated_schema() {
    let s = Services::new("");
    let (_stop, daemon) = start_daemon(&s.cfg);
    let err = daemon.join().unwrap().expect_err("pending migrations must refuse");
    assert!(err.to_string().contains("msgx migrate"), "{err}");
    assert_eq!(err.exit(), msgx::exit::Exit::Schema);
}

#[test]
fn a_daemon_whose_lease_was_taken_over_stops_with_exit_1() {
    let s = Services::migrated("");
    let (_stop, daemon) = start_daemon(&s.cfg);
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(20), || count(
        &mut pg,
        "SELECT count(*) FROM msgx_lease WHERE epoch = 1"
    ) == 1));
    // Another instance took the lease (as after an expiry): this one is stale.
    pg.execute(
        "UPDATE msgx_lease SET epoch = epoch + 1, holder = 'thief', expires_at = now() + interval '1 minute'",
        &[],
    )
    .unwrap();
    let err = daemon.join().unwrap().expect_err("a stale instance must stop");
    assert!(matches!(err, msgx::daemon::DaemonError::Fenced(_)), "{err}");
    assert_eq!(err.exit(), msgx::exit::Exit::Failed);
}
