//! Replicated stores on this machine (#19): a PostgreSQL primary with a streaming replica
//! (`pg_basebackup -R`), synchronous or not, and msgx following a switchover through its
//! multi-host URL, or noticing that a promoted replica lost commits. Every server is a private
//! instance on loopback (tests/support/services.sh pg-primary, pg-replica, pg-promote).

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use msgx::fixtures;

fn script(args: &[&str]) {
    let s = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/services.sh");
    let out = Command::new(s).args(args).output().expect("services.sh");
    assert!(out.status.success(), "services.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A primary and its replica, each in its own directory.
struct Pair {
    dir: std::path::PathBuf,
    primary: u16,
    replica: u16,
}

impl Pair {
    fn start(name: &str, synchronous: bool) -> Pair {
        let dir = std::env::temp_dir().join(format!("msgx-pair-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = Pair { dir, primary: free_port(), replica: free_port() };
        script(&["pg-primary", p.at("p"), &p.primary.to_string()]);
        script(&["pg-replica", p.at("r"), &p.replica.to_string(), &p.primary.to_string(), "replica1"]);
        if synchronous {
            let mut c = p.admin(p.primary);
            c.batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'replica1'").unwrap();
            c.batch_execute("SELECT pg_reload_conf()").unwrap();
            assert!(eventually(Duration::from_secs(20), || count(
                &mut c,
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
            ) == 1));
        }
        p
    }

    fn at(&self, which: &str) -> &str {
        let d = self.dir.join(which);
        std::fs::create_dir_all(&d).unwrap();
        Box::leak(d.to_string_lossy().into_owned().into_boxed_str())
    }

    fn admin(&self, port: u16) -> postgres::Client {
        postgres::Client::connect(
            &format!("host=127.0.0.1 port={port} user=msgx dbname=postgres"),
            postgres::NoTls,
        )
        .unwrap()
    }

    /// The admin URL, primary first (where the test's database is created).
    fn url(&self) -> String {
        format!("postgres://msgx@127.0.0.1:{},127.0.0.1:{}/msgx", self.primary, self.replica)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/services.sh"))
            .args(["halt", "pg", self.at("p")])
            .output();
        let _ = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/services.sh"))
            .args(["halt", "pg", self.at("r")])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// #19 (1) and (1b): msgx's URL names the standby *first*; it writes to the primary all the
/// same (read-write sessions only). The primary is stopped while messages flow and the
/// synchronous replica promoted: msgx follows within seconds, nothing lost, nothing DEAD, order
/// kept, no event id on two different records.
#[test]
fn a_switchover_to_the_synchronous_replica_is_followed_and_costs_nothing() {
    let pair = Pair::start("sync", true);
    let s = Services::migrated_on("", Stores { pg: Some(pair.url()), ..Default::default() });
    let mut cfg = s.cfg.clone();
    let db = s.cfg.pg_url.rsplit('/').next().unwrap().to_string();
    cfg.pg_url = format!("postgres://msgx@127.0.0.1:{},127.0.0.1:{}/{db}", pair.replica, pair.primary);
    let (stop, daemon) = start_daemon(&cfg);
    let n = 300u64;
    let mut stopped_at = None;
    let mut followed = None;
    let mut c = postgres::Client::connect(&cfg.pg_url, postgres::NoTls).ok();
    for i in 1..=n {
        s.insert_inbound(&[fixtures::flop_stnd(i, &format!("P{}", i % 9), &format!("S{i}"))]);
        std::thread::sleep(Duration::from_millis(20));
        if i == 120 {
            script(&["halt", "pg", pair.at("p")]);
            script(&["pg-promote", pair.at("r")]);
            stopped_at = Some(Instant::now());
            c = None;
        }
        if let (Some(t), None) = (stopped_at, followed) {
            let client = c.get_or_insert_with(|| {
                postgres::Client::connect(
                    &format!("host=127.0.0.1 port={} user=msgx dbname={db}", pair.replica),
                    postgres::NoTls,
                )
                .unwrap()
            });
            let done = count(client, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'");
            if done > 120 {
                followed = Some(t.elapsed());
            }
        }
    }
    let mut pg = postgres::Client::connect(
        &format!("host=127.0.0.1 port={} user=msgx dbname={db}", pair.replica),
        postgres::NoTls,
    )
    .unwrap();
    let ok = eventually(Duration::from_secs(120), || {
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'") == n as i64
            && count(&mut pg, "SELECT count(*) FROM msg_event WHERE state = 'SENT'") == n as i64
    });
    let followed = followed.or_else(|| stopped_at.map(|t| t.elapsed()));
    drop(stop);
    let result = daemon.join().unwrap();
    assert!(ok, "not drained after the switchover");
    assert!(result.is_ok(), "the daemon followed the failover: {result:?}");
    println!("switchover (synchronous): followed within {followed:?} of the primary's stop");
    assert_eq!(count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'DEAD'"), 0);
    let got = consume_distinct(&cfg.kafka_brokers, &cfg.topic_msg, n as usize, Duration::from_secs(60));
    let mut by_id: BTreeMap<i64, String> = BTreeMap::new();
    let mut per_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for r in &got {
        let id: i64 = r.header("event_id").unwrap().parse().unwrap();
        let msg = r.header("msg_id").unwrap().to_string();
        if let Some(other) = by_id.insert(id, msg.clone()) {
            assert_eq!(other, msg, "event_id {id} carried by two different messages");
        } else {
            per_key.entry(r.key.clone()).or_default().push(msg.parse().unwrap());
        }
    }
    assert_eq!(by_id.len() as u64, n, "every event delivered");
    for (k, ids) in &per_key {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{k} out of order: {ids:?}");
    }
}

/// #19 (2): an asynchronous replica that lagged is promoted: the commits it never received are
/// lost, and msgx says so — `postgres lost commits` — and stops writing (exit 6) instead of
/// carrying on.
#[test]
fn a_lagging_asynchronous_replica_promoted_is_noticed_and_msgx_stops_writing() {
    let pair = Pair::start("async", false);
    let s = Services::migrated_on("", Stores { pg: Some(pair.url()), ..Default::default() });
    let (stop, daemon) = start_daemon(&s.cfg);
    let db = s.cfg.pg_url.rsplit('/').next().unwrap().to_string();
    s.insert_inbound(&(1..=50).map(|i| fixtures::flop_stnd(i, "L1", &format!("S{i}"))).collect::<Vec<_>>());
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut pg,
        "SELECT count(*) FROM msg_event WHERE state = 'SENT'"
    ) == 50));
    drop(pg);
    // The replica stops receiving; msgx goes on writing on the primary for a while.
    script(&["halt", "pg", pair.at("r")]);
    s.insert_inbound(&(51..=150).map(|i| fixtures::flop_stnd(i, "L1", &format!("S{i}"))).collect::<Vec<_>>());
    let mut primary = postgres::Client::connect(
        &format!("host=127.0.0.1 port={} user=msgx dbname={db}", pair.primary),
        postgres::NoTls,
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut primary,
        "SELECT count(*) FROM msg_event WHERE state = 'SENT'"
    ) == 150));
    std::thread::sleep(Duration::from_secs(2)); // a lease renewal sees the newest position
    drop(primary);
    script(&["halt", "pg", pair.at("p")]);
    // The lagging replica comes back and is promoted: it has the first 50 only.
    script(&["pg-replica", pair.at("r"), &pair.replica.to_string(), &pair.primary.to_string(), "replica1"]);
    script(&["pg-promote", pair.at("r")]);
    let promoted = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !daemon.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let noticed = promoted.elapsed();
    assert!(daemon.is_finished(), "msgx carried on writing on a server that lost commits");
    let result = daemon.join().unwrap();
    drop(stop);
    let e = result.expect_err("msgx stops");
    println!("asynchronous replica promoted with a lost tail: msgx stopped after {noticed:?}: {e}");
    assert_eq!(e.exit_code(), 6, "{e}");
    assert!(e.to_string().contains("lost commits"), "{e}");
}
