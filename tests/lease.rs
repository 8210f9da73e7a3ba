//! One writer, fenced (PRE-5, SPEC §4.9, issue #12), on the real services with the real
//! binary: a hot standby takes over when the active instance is killed or frozen; an instance
//! that wakes up after a takeover writes nothing; killing the lease's session no longer loses
//! the lease; a standby logs no ERROR.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use msgx::fixtures;

/// Records every write of own PostgreSQL with the writer's application_name, so a test can
/// prove which instance wrote what, and when.
fn audit_writes(s: &Services) {
    let mut pg = s.pg();
    pg.batch_execute(
        "CREATE TABLE write_audit (app TEXT, tbl TEXT, at TIMESTAMPTZ DEFAULT clock_timestamp());
         CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO write_audit (app, tbl) VALUES (current_setting('application_name'), TG_TABLE_NAME); RETURN NULL; END $$;
         CREATE TRIGGER a1 AFTER INSERT OR UPDATE OR DELETE ON proc_state FOR EACH STATEMENT EXECUTE FUNCTION audit();
         CREATE TRIGGER a2 AFTER INSERT OR UPDATE OR DELETE ON msg_event FOR EACH STATEMENT EXECUTE FUNCTION audit();
         CREATE TRIGGER a3 AFTER INSERT OR UPDATE OR DELETE ON ingress_watermark FOR EACH STATEMENT EXECUTE FUNCTION audit();",
    )
    .unwrap();
}

fn epoch(s: &Services) -> i64 {
    s.pg().query_one("SELECT epoch FROM msgx_lease", &[]).unwrap().get(0)
}

/// Inserts `n` messages, one every `every`, on a thread.
fn feed(s: &Services, from: u64, n: u64, every: Duration) -> std::thread::JoinHandle<()> {
    let url = s.cfg.mysql_url.clone();
    std::thread::spawn(move || {
        use mysql::prelude::Queryable;
        let mut my = mysql::Conn::new(mysql::Opts::from_url(&url).unwrap()).unwrap();
        for i in from..from + n {
            let raw = fixtures::flop_stnd(i, &format!("L{}", i % 7), &format!("S{i}"));
            my.exec_drop(
                "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')",
                (raw,),
            )
            .unwrap();
            std::thread::sleep(every);
        }
    })
}

fn all_done(s: &Services, n: i64) -> bool {
    let mut pg = s.pg();
    count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED' AND backfill_at IS NOT NULL")
        == n
        && count(&mut pg, "SELECT count(*) FROM msg_event WHERE state = 'SENT'") == n
}

/// Every event on the topic, duplicates dropped by event_id, in order per key; returns how many
/// records were duplicates.
fn check_topic(s: &Services, n: usize) -> usize {
    let got = consume_distinct(&s.cfg.kafka_brokers, s.topic(), n, Duration::from_secs(60));
    let mut seen = std::collections::BTreeSet::new();
    let mut per_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for r in &got {
        let id: i64 = r.header("event_id").unwrap().parse().unwrap();
        if seen.insert(id) {
            per_key.entry(r.key.clone()).or_default().push(id);
        }
    }
    assert_eq!(seen.len(), n, "every event delivered");
    for (k, ids) in per_key {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{k}: first copies out of order {ids:?}");
    }
    got.len() - n
}

#[test]
fn sigkill_the_active_and_the_standby_takes_over_within_the_lease_plus_2s() {
    let s = Services::migrated("");
    let a = Instance::run(&s, "a", "");
    assert!(a.wait_for_log("lease acquired epoch=1", Duration::from_secs(20)));
    let b = Instance::run(&s, "b", "");
    assert!(b.wait_for_log("standby: lease held by", Duration::from_secs(20)));
    let feeder = feed(&s, 1, 100, Duration::from_millis(30));
    std::thread::sleep(Duration::from_secs(1));
    a.signal("-KILL");
    let killed = Instant::now();
    assert!(b.wait_for_log("lease acquired epoch=2", Duration::from_secs(20)), "{}", b.log_text());
    let takeover = killed.elapsed();
    feeder.join().unwrap();
    assert!(eventually(Duration::from_secs(60), || all_done(&s, 100)), "{}", b.log_text());
    println!("takeover after SIGKILL: {:.1}s", takeover.as_secs_f64());
    assert!(takeover <= Duration::from_secs(12), "lease duration (10 s) + 2 s: took {takeover:?}");
    let duplicates = check_topic(&s, 100);
    println!("records sent twice around the SIGKILL takeover: {duplicates}");
}

#[test]
fn a_frozen_active_that_wakes_after_the_takeover_writes_nothing_and_exits_1() {
    let s = Services::migrated("");
    audit_writes(&s);
    let mut a = Instance::run(&s, "a", "");
    assert!(a.wait_for_log("lease acquired epoch=1", Duration::from_secs(20)));
    let b = Instance::run(&s, "b", "");
    assert!(b.wait_for_log("standby: lease held by", Duration::from_secs(20)));
    let feeder = feed(&s, 1, 400, Duration::from_millis(50));
    std::thread::sleep(Duration::from_secs(2));
    a.signal("-STOP");
    let frozen = Instant::now();
    assert!(b.wait_for_log("lease acquired epoch=2", Duration::from_secs(20)), "{}", b.log_text());
    println!("takeover of a frozen instance: {:.1}s", frozen.elapsed().as_secs_f64());
    let took_over: std::time::SystemTime =
        s.pg().query_one("SELECT acquired_at FROM msgx_lease", &[]).unwrap().get(0);
    std::thread::sleep(Duration::from_secs(2));
    a.signal("-CONT");
    assert_eq!(
        a.wait(Duration::from_secs(30)),
        Some(1),
        "the stale instance stops with exit 1: {}",
        a.log_text()
    );
    feeder.join().unwrap();
    assert!(eventually(Duration::from_secs(60), || all_done(&s, 400)), "{}", b.log_text());
    let stale_writes = count(
        &mut s.pg(),
        &format!(
            "SELECT count(*) FROM write_audit WHERE app = 'msgx-a' AND at > '{}'",
            msgx::clock::CivilTime::from_system(took_over).to_rfc3339()
        ),
    );
    println!("writes by the stale instance after the takeover: {stale_writes}");
    assert_eq!(stale_writes, 0, "the stale instance wrote after the takeover");
    assert!(!b.log_text().contains("INV-3 guard"), "no collision on the commit guard");
    let log = a.log_text();
    assert!(log.contains("lease lost") || log.contains("fenced"), "{log}");
    let duplicates = check_topic(&s, 400);
    println!("records sent twice around the freeze takeover: {duplicates}");
    assert!(duplicates <= 200, "at most the produce round in flight: {duplicates}");
}

#[test]
fn killing_the_lease_session_keeps_the_lease_and_nobody_takes_over() {
    let s = Services::migrated("");
    audit_writes(&s);
    // The tests' time profile (#66): a 3 s lease, so "longer than the lease" is seconds.
    let lease = "[msgx.lease]\nduration = \"3s\"\nrenew-interval = \"500ms\"\n";
    let a = Instance::run(&s, "a", lease);
    assert!(a.wait_for_log("lease acquired epoch=1", Duration::from_secs(20)));
    let b = Instance::run(&s, "b", lease);
    assert!(b.wait_for_log("standby: lease held by", Duration::from_secs(20)));
    let feeder = feed(&s, 1, 200, Duration::from_millis(50));
    let mut pg = s.pg();
    // An idle_session_timeout, a DBA, a NAT timeout: the session that renews the lease ends.
    // The keeper renews once its stages started (after the start-up consistency pass).
    let killed = eventually(Duration::from_secs(20), || {
        let n: i64 = pg
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = 'msgx-a'
                   AND query LIKE '%UPDATE msgx_lease SET renewed_at%'",
                &[],
            )
            .unwrap()
            .get(0);
        n >= 1
    });
    assert!(killed, "the lease keeper's session was found and ended");
    // Twice the lease after the kill, as the database's clock tells: a lease held by the ended
    // session would have expired by then, and the standby (looking every 500 ms) taken it.
    let twice_the_lease = db_now(&mut pg) + Duration::from_secs(6);
    let renewed_past = eventually(Duration::from_secs(20), || lease_renewed_after(&mut pg, twice_the_lease));
    assert!(renewed_past, "the lease was renewed beyond twice its duration after the kill: {}", a.log_text());
    assert_eq!(epoch(&s), 1, "the lease is a row, not a session: it was renewed on a new connection");
    assert!(!b.log_text().contains("lease acquired"), "the standby never took over: {}", b.log_text());
    feeder.join().unwrap();
    assert!(eventually(Duration::from_secs(60), || all_done(&s, 200)), "{}", a.log_text());
    assert_eq!(
        count(&mut pg, "SELECT count(*) FROM write_audit WHERE app = 'msgx-b'"),
        0,
        "the standby never wrote"
    );
    assert_eq!(check_topic(&s, 200), 0, "no duplicates: nobody took over");
    assert!(!b.log_text().contains("ERROR"), "a standby logs no ERROR: {}", b.log_text());
}

#[test]
fn sigterm_on_the_active_hands_over_at_once() {
    let s = Services::migrated("");
    let mut a = Instance::run(&s, "a", "");
    assert!(a.wait_for_log("lease acquired epoch=1", Duration::from_secs(20)));
    let b = Instance::run(&s, "b", "");
    assert!(b.wait_for_log("standby: lease held by", Duration::from_secs(20)));
    a.signal("-TERM");
    let asked = Instant::now();
    assert_eq!(a.wait(Duration::from_secs(30)), Some(0));
    assert!(a.log_text().contains("lease released epoch=1"));
    assert!(b.wait_for_log("lease acquired epoch=2", Duration::from_secs(5)), "{}", b.log_text());
    println!("takeover after SIGTERM: {:.1}s", asked.elapsed().as_secs_f64());
    let standby_log = b.log_text();
    let standby_part = standby_log.split("lease acquired").next().unwrap();
    assert!(!standby_part.contains("ERROR"), "no ERROR while standing by: {standby_part}");
    assert_eq!(
        standby_part.matches("] config ").count(),
        s.cfg.describe().len(),
        "the configuration is logged once"
    );
}

/// #54: a consistency pass (or heal) that hangs kept the lease for ever — a thread renewed it
/// whatever the pass did, so no standby took over. Now a step that makes no progress for
/// `msgx.watchdog.stuck-after` stops the renewals: the standby takes the lease within
/// stuck-after plus the lease. A pass that moves (it beats page by page) keeps it however long
/// it takes. On the real lease store.
#[test]
fn a_hung_pass_lets_a_standby_take_over_and_a_moving_one_keeps_the_lease() {
    use msgx::clock::{Clock, SystemClock};
    use msgx::ports::{Claim, Claimant, LeaseStore};
    let s = Services::migrated(
        "[msgx.lease]\nduration = \"3s\"\nrenew-interval = \"1s\"\n[msgx.watchdog]\nstuck-after = \"2s\"\n",
    );
    let claimant = |id: &str| Claimant { id: id.into(), host: "test".into(), pid: 1 };
    let (active, standby) = (claimant("active"), claimant("standby"));
    let clock = SystemClock;
    for moving in [true, false] {
        let mut pg = msgx::store::pg::Pg::connect(&s.cfg.pg_url).unwrap();
        let Claim::Acquired { epoch, .. } = pg.claim(&active, s.cfg.lease.duration).unwrap() else {
            panic!("the lease is free")
        };
        let pulse = msgx::stage::Pulse::default();
        let watch =
            msgx::daemon::Watch { pulse: &pulse, clock: &clock, stuck_after: s.cfg.watchdog_stuck_after };
        let turn = pulse.turning("start-up pass", clock.mono());
        let start = Instant::now();
        let taken = msgx::daemon::renewing(&s.cfg, &active, epoch, watch, || {
            let mut other = msgx::store::pg::Pg::connect(&s.cfg.pg_url).unwrap();
            while start.elapsed() < Duration::from_secs(12) {
                if moving {
                    pulse.beat("start-up pass", clock.mono());
                }
                if let Ok(Claim::Acquired { .. }) = other.claim(&standby, s.cfg.lease.duration) {
                    return Some(start.elapsed());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            None
        });
        drop(turn);
        let _ = pg.release(&active, epoch);
        match moving {
            true => assert_eq!(taken, None, "a pass that moves keeps its lease for 12 s"),
            false => {
                let took = taken.expect("a standby took over from the hung pass");
                println!(
                    "hung pass: the standby took the lease after {took:?} (stuck-after 2 s + lease 3 s)"
                );
                assert!(took <= Duration::from_secs(2 + 3 + 2), "taken over after {took:?}");
            }
        }
    }
}
