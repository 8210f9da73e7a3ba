//! End to end on the real services: mailbox (MariaDB) → PROC_STATE (PostgreSQL) → Redis →
//! outbox → Kafka (Tansu) → processed marks.

mod common;

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

#[test]
fn a_second_instance_refuses_to_start() {
    let s = Services::migrated("");
    let _lease = msgx::daemon::Lease::acquire(&s.cfg.pg_url).expect("first lease");
    let (_stop, daemon) = start_daemon(&s.cfg);
    let err = daemon.join().unwrap().expect_err("second instance must refuse");
    assert!(matches!(err, msgx::daemon::DaemonError::AnotherInstance), "{err}");
    assert_eq!(err.exit_code(), 5);
}

#[test]
fn the_daemon_refuses_an_unmigrated_schema() {
    let s = Services::new("");
    let (_stop, daemon) = start_daemon(&s.cfg);
    let err = daemon.join().unwrap().expect_err("pending migrations must refuse");
    assert!(err.to_string().contains("msgx migrate"), "{err}");
    assert_eq!(err.exit_code(), 3);
}

#[test]
fn a_daemon_that_loses_its_lease_stops() {
    let s = Services::migrated("stats-interval = \"1s\"\n");
    let (_stop, daemon) = start_daemon(&s.cfg);
    let mut pg = s.pg();
    let lock_pid = || -> Option<i32> {
        let mut c = s.pg();
        c.query_opt(
            "SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database
             WHERE l.locktype = 'advisory' AND d.datname = current_database()",
            &[],
        )
        .unwrap()
        .map(|r| r.get(0))
    };
    assert!(eventually(Duration::from_secs(20), || lock_pid().is_some()), "the daemon took the lease");
    let pid = lock_pid().unwrap();
    pg.execute("SELECT pg_terminate_backend($1)", &[&pid]).unwrap();
    let err = daemon.join().unwrap().expect_err("must stop without its lease");
    assert!(matches!(err, msgx::daemon::DaemonError::LeaseLost), "{err}");
    assert_eq!(err.exit_code(), 1);
}
