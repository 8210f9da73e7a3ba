//! Replicated stores on this machine (#19): a PostgreSQL primary with a streaming replica
//! (`pg_basebackup -R`), synchronous or not, and msgx following a switchover through its
//! multi-host URL, or noticing that a promoted replica lost commits. Every server is a private
//! instance on loopback (tests/support/services.sh pg-primary, pg-replica, pg-promote).

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use msgx::fixtures;

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

/// #20 (1b): the same lost tail found at start-up: msgx stopped while the lagging replica is
/// promoted; `msgx verify` names the rows PostgreSQL forgot (exit 1), msgx started again heals
/// them before its stages run, and `msgx verify` is clean afterwards (exit 0).
#[test]
fn a_lost_tail_found_at_start_up_is_healed_before_the_stages_run() {
    let pair = Pair::start("async-stopped", false);
    let s = Services::migrated_on("", Stores { pg: Some(pair.url()), ..Default::default() });
    let db = s.cfg.pg_url.rsplit('/').next().unwrap().to_string();
    let raw = |i: u64| fixtures::flop_stnd(i, &format!("M{}", i % 5), &format!("S{i}"));
    let (stop, daemon) = start_daemon(&s.cfg);
    s.insert_inbound(&(1..=40).map(raw).collect::<Vec<_>>());
    let mut pg = s.pg();
    let sent = |pg: &mut postgres::Client, n: i64| {
        eventually(Duration::from_secs(60), || {
            count(pg, "SELECT count(*) FROM msg_event WHERE state = 'SENT'") == n
        })
    };
    assert!(sent(&mut pg, 40));
    drop(pg);
    script(&["halt", "pg", pair.at("r")]);
    s.insert_inbound(&(41..=100).map(raw).collect::<Vec<_>>());
    let primary_url = format!("host=127.0.0.1 port={} user=msgx dbname={db}", pair.primary);
    let mut primary = postgres::Client::connect(&primary_url, postgres::NoTls).unwrap();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut primary,
        "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED' AND backfill_at IS NOT NULL"
    ) == 100));
    drop(primary);
    drop(stop);
    assert!(daemon.join().unwrap().is_ok());
    script(&["halt", "pg", pair.at("p")]);
    script(&["pg-replica", pair.at("r"), &pair.replica.to_string(), &pair.primary.to_string(), "replica1"]);
    script(&["pg-promote", pair.at("r")]);
    let replica_url = format!("postgres://msgx@127.0.0.1:{}/{db}", pair.replica);
    let (code, before) = verify_on(&s, &replica_url);
    assert_eq!(code, Some(1), "{before}");
    assert!(before.contains("FINDING journal-unknown"), "Redis proves what it forgot: {before}");
    let mut cfg = s.cfg.clone();
    cfg.pg_url = replica_url.clone();
    let started = Instant::now();
    let (stop, daemon) = start_daemon(&cfg);
    let mut pg = postgres::Client::connect(&replica_url, postgres::NoTls).unwrap();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut pg,
        "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'"
    ) == 100));
    let took = started.elapsed();
    let events = count(&mut pg, "SELECT count(*) FROM msg_event");
    assert!(sent(&mut pg, events));
    assert_eq!(count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'DEAD'"), 0);
    assert_eq!(redis_flights(&s), reference_flights(&s), "Redis per field equals a replay of the mailbox");
    let got = consume_event_keys(&s.cfg.kafka_brokers, s.topic(), 100, Duration::from_secs(60));
    assert_eq!(deduplicated(&got).len(), 100);
    drop(stop);
    assert!(daemon.join().unwrap().is_ok());
    let (code, after) = verify_on(&s, &replica_url);
    assert_eq!(code, Some(0), "{after}");
    println!("lost tail found at start-up: every message SUCCEEDED {took:?} after msgx started");
    println!("msgx verify before:\n{before}\nmsgx verify after:\n{after}");
}

/// A Redis master, a replica and three sentinels, each a private process on loopback.
struct Sentinels {
    dir: std::path::PathBuf,
    master: u16,
    replica: u16,
    sentinels: Vec<u16>,
}

impl Sentinels {
    fn start() -> Sentinels {
        let dir = std::env::temp_dir().join(format!("msgx-sentinels-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let s = Sentinels {
            dir,
            master: free_port(),
            replica: free_port(),
            sentinels: vec![free_port(), free_port(), free_port()],
        };
        script(&["instance", "redis", s.at("m"), &s.master.to_string()]);
        script(&["redis-replica", s.at("r"), &s.replica.to_string(), &s.master.to_string()]);
        for (k, port) in s.sentinels.iter().enumerate() {
            script(&[
                "sentinel",
                s.at(&format!("s{k}")),
                &port.to_string(),
                &s.master.to_string(),
                "msgxmaster",
            ]);
        }
        let mut m = Sentinels::conn(s.master);
        assert!(
            eventually(Duration::from_secs(30), || {
                let info: String = redis::cmd("INFO").arg("replication").query(&mut m).unwrap_or_default();
                info.contains("connected_slaves:1") && info.contains("state=online")
            }),
            "the replica is in sync"
        );
        s
    }

    fn at(&self, which: &str) -> &str {
        let d = self.dir.join(which);
        std::fs::create_dir_all(&d).unwrap();
        Box::leak(d.to_string_lossy().into_owned().into_boxed_str())
    }

    fn signal(&self, which: &str, sig: &str) {
        let pid = std::fs::read_to_string(self.dir.join(which).join("redis/redis.pid")).unwrap();
        assert!(Command::new("kill").args([sig, pid.trim()]).status().unwrap().success());
    }

    fn conn(port: u16) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{port}/").as_str()).unwrap().get_connection().unwrap()
    }

    fn master_now(&self) -> u16 {
        let mut c = Sentinels::conn(self.sentinels[0]);
        let (_, port): (String, u16) =
            redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg("msgxmaster").query(&mut c).unwrap();
        port
    }

    fn role(port: u16) -> String {
        let mut c = Sentinels::conn(port);
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut c).unwrap();
        match role.first() {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        }
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for which in ["m", "r", "s0", "s1", "s2"] {
            let _ = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/services.sh"))
                .args(["halt", "redis", self.at(which)])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// #19 (3): the Redis master frozen (SIGSTOP) for 10 s while messages flow; Sentinel promotes the
/// replica. With `redis.wait-replicas = 1` no flight update is lost: the new master holds the
/// stand of the last message of every flight, nothing is DEAD, and the old master, resumed, is a
/// replica of the new one.
#[test]
fn a_frozen_redis_master_failed_over_by_sentinel_loses_no_flight_update() {
    let set = Sentinels::start();
    let s = Services::migrated("");
    let mut cfg = s.cfg.clone();
    cfg.redis = msgx::store::flights::RedisTarget {
        url: "redis://127.0.0.1:1/".into(), // the host is the sentinels' to name
        sentinels: set.sentinels.iter().map(|p| format!("127.0.0.1:{p}")).collect(),
        master: "msgxmaster".into(),
        wait_replicas: 1,
        ..msgx::store::flights::RedisTarget::single("redis://127.0.0.1:1/")
    };
    let (stop, daemon) = start_daemon(&cfg);
    let n = 240u64;
    let thawed = std::thread::scope(|scope| {
        let mut thaw = None;
        for i in 1..=n {
            s.insert_inbound(&[fixtures::flop_stnd(i, &format!("Q{}", i % 8), &format!("S{i}"))]);
            std::thread::sleep(Duration::from_millis(25));
            if i == 80 {
                set.signal("m", "-STOP");
                thaw = Some(scope.spawn(|| {
                    std::thread::sleep(Duration::from_secs(10));
                    set.signal("m", "-CONT");
                    Instant::now()
                }));
            }
        }
        thaw.unwrap().join().unwrap()
    });
    let mut pg = s.pg();
    let ok = eventually(Duration::from_secs(120), || {
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'") == n as i64
    });
    let drained = thawed.elapsed();
    drop(stop);
    let result = daemon.join().unwrap();
    assert!(ok, "not drained: {:?}", msgx::store::pg::Pg::connect(&cfg.pg_url).unwrap().status(5));
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'DEAD'"), 0);
    let now = set.master_now();
    println!(
        "sentinel failover: master {} -> {now}; drained {drained:?} after the old master resumed",
        set.master
    );
    assert_eq!(now, set.replica, "Sentinel promoted the replica");
    let mut m = Sentinels::conn(now);
    let mut lost = Vec::new();
    for f in 0..8u64 {
        let last = (1..=n).filter(|i| i % 8 == f).max().unwrap();
        let stand: Option<String> = redis::cmd("HGET")
            .arg(format!("{}flight:Q{f}", cfg.redis_prefix))
            .arg("STND")
            .query(&mut m)
            .unwrap();
        if stand != Some(format!("S{last}")) {
            lost.push((f, stand, last));
        }
    }
    assert!(lost.is_empty(), "flight updates lost on the failover: {lost:?}");
    assert!(
        eventually(Duration::from_secs(30), || Sentinels::role(set.master) == "slave"),
        "the old master is demoted"
    );
}

/// #19 (1b): the server msgx writes to turns read-only under it (a primary demoted behind a VIP,
/// `default_transaction_read_only` flipped): writes fail with 25006, msgx drops those sessions,
/// waits as for an outage (nothing charged, nothing DEAD) and goes on once a writable server is
/// there again.
#[test]
fn a_server_turned_read_only_is_an_outage_and_its_sessions_are_dropped() {
    let pair = Pair::start("readonly", false);
    let s = Services::migrated_on("", Stores { pg: Some(pair.url()), ..Default::default() });
    let (stop, daemon) = start_daemon(&s.cfg);
    s.insert_inbound(&(1..=20).map(|i| fixtures::flop_stnd(i, "RO", &format!("S{i}"))).collect::<Vec<_>>());
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut pg,
        "SELECT count(*) FROM msg_event WHERE state = 'SENT'"
    ) == 20));
    let mut admin = pair.admin(pair.primary);
    admin.batch_execute("ALTER SYSTEM SET default_transaction_read_only = on").unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    s.insert_inbound(&(21..=40).map(|i| fixtures::flop_stnd(i, "RO", &format!("S{i}"))).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_secs(3));
    let during = count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'");
    admin.batch_execute("ALTER SYSTEM SET default_transaction_read_only = off").unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let ok = eventually(Duration::from_secs(60), || {
        count(&mut pg, "SELECT count(*) FROM msg_event WHERE state = 'SENT'") == 40
    });
    drop(stop);
    let result = daemon.join().unwrap();
    assert!(ok, "not drained once the server was writable again");
    assert!(result.is_ok(), "{result:?}");
    println!("read-only server: {during} of 40 SUCCEEDED while it was read-only; all 40 after");
    assert_eq!(during, 20, "nothing was written while the server refused writes");
    assert_eq!(
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'DEAD' OR attempts > 0"),
        0,
        "nothing charged"
    );
}
