//! A store that forgets (#20) on the real servers, messages flowing, default settings: Redis
//! restored from a dump saved seconds earlier, Redis emptied. msgx notices, heals, and the end
//! state equals a reference replay of the mailbox; nothing lost, nothing DEAD, no identity on
//! two different records. (PostgreSQL rolled back: tests/replicas.rs; the broker restarted
//! empty and `msgx resend`: tests/dispatch.rs.) Each test runs its own Redis.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use msgx::fixtures;

/// A Redis of this test's own, started by hand: no AOF, dumps only when asked (`SAVE`), so a
/// restart loads the last dump — what a restore of an older RDB does.
struct DumpRedis {
    dir: std::path::PathBuf,
    port: u16,
}

impl DumpRedis {
    fn start() -> DumpRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("msgx-dump-redis-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let r = DumpRedis { dir, port };
        r.up();
        r
    }

    fn up(&self) {
        let pidfile = self.dir.join("redis.pid");
        let ok = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &self.port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--dir", self.dir.to_str().unwrap(), "--daemonize", "yes"])
            .args(["--pidfile", pidfile.to_str().unwrap()])
            .args(["--logfile", self.dir.join("server.log").to_str().unwrap()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "redis-server started");
        assert!(eventually(Duration::from_secs(20), || self.conn().is_some()), "redis answers");
    }

    fn conn(&self) -> Option<redis::Connection> {
        let mut c = redis::Client::open(self.url().as_str()).ok()?.get_connection().ok()?;
        redis::cmd("PING").query::<String>(&mut c).ok()?;
        Some(c)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `SHUTDOWN NOSAVE`: what was written since the last dump is gone.
    fn crash(&self) {
        let mut c = self.conn().expect("redis up");
        let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut c);
        assert!(eventually(Duration::from_secs(20), || self.conn().is_none()), "redis down");
    }
}

impl Drop for DumpRedis {
    fn drop(&mut self) {
        if let Some(mut c) = self.conn() {
            let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut c);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn flop(i: u64) -> String {
    fixtures::flop_stnd(i, &format!("R{}", i % 17), &format!("S{i}"))
}

/// Inserts messages `from..=to`, 25 ms apart (messages flowing).
fn flow(s: &Services, from: u64, to: u64) {
    for i in from..=to {
        s.insert_inbound(&[flop(i)]);
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Waits until every message is SUCCEEDED and every event SENT; then the end-state comparison.
fn settles_to_the_reference(s: &Services, n: u64) {
    let mut pg = s.pg();
    let drained = eventually(Duration::from_secs(120), || {
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'") == n as i64
            && count(&mut pg, "SELECT count(*) FROM msg_event WHERE state <> 'SENT'") == 0
    });
    assert!(drained, "not drained");
    assert_eq!(count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'DEAD'"), 0, "nothing DEAD");
    let reference = reference_flights(s);
    let held = redis_flights(s);
    assert_eq!(held.len(), reference.len(), "every flight");
    for (flid, fields) in &reference {
        assert_eq!(held.get(flid), Some(fields), "flight {flid} per field");
    }
    let events = count(&mut pg, "SELECT count(*) FROM msg_event") as usize;
    let got = consume_event_keys(&s.cfg.kafka_brokers, s.topic(), events, Duration::from_secs(60));
    let distinct = deduplicated(&got);
    assert_eq!(distinct.len(), events, "every event on the topic");
    let msgs: std::collections::BTreeSet<&str> = distinct.iter().filter_map(|r| r.header("msg_id")).collect();
    assert_eq!(msgs.len() as u64, n, "every message on the topic");
    println!(
        "end state: {} flights equal the reference per field; {} records, {} distinct",
        held.len(),
        got.len(),
        events
    );
}

/// #20 (2): Redis restored from a dump saved a few seconds earlier, while messages flow.
#[test]
fn redis_restored_from_an_older_dump_is_noticed_and_rebuilt() {
    let redis = DumpRedis::start();
    let s = Services::migrated_on("", Stores { redis: Some(redis.url()), ..Default::default() });
    let msgx = Instance::run(&s, "a", "");
    flow(&s, 1, 120);
    let mut c = redis.conn().unwrap();
    redis::cmd("SAVE").query::<()>(&mut c).unwrap();
    flow(&s, 121, 240); // ~3 s of applies after the dump
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut pg,
        "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'"
    ) == 240));
    redis.crash();
    redis.up(); // the dump of 3 s ago
    let restored = Instant::now();
    let (code, before) = verify(&s);
    assert_eq!(code, Some(1), "msgx verify finds it before msgx does:\n{before}");
    assert!(before.contains("FINDING journal-missing"), "{before}");
    flow(&s, 241, 300);
    assert!(msgx.wait_for_log("healed redis:", Duration::from_secs(60)), "{}", msgx.log_text());
    let healed = restored.elapsed();
    let log = msgx.log_text();
    assert!(log.contains("consistency: redis behind"), "an ERROR names the store and the evidence:\n{log}");
    settles_to_the_reference(&s, 300);
    let (code, after) = verify(&s);
    assert_eq!(code, Some(0), "{after}");
    let line = log.lines().find(|l| l.contains("healed redis:")).unwrap_or_default();
    println!("redis restored from an older dump: healed within {healed:?} of the restart\n{line}");
    println!("msgx verify before:\n{before}\nmsgx verify after:\n{after}");
}

/// #20 (3): Redis emptied (FLUSHALL) while messages flow.
#[test]
fn redis_emptied_is_noticed_and_rebuilt() {
    let redis = DumpRedis::start();
    let s = Services::migrated_on("", Stores { redis: Some(redis.url()), ..Default::default() });
    let msgx = Instance::run(&s, "a", "");
    flow(&s, 1, 150);
    let mut c = redis.conn().unwrap();
    redis::cmd("FLUSHALL").query::<()>(&mut c).unwrap();
    let emptied = Instant::now();
    let (code, before) = verify(&s);
    assert_eq!(code, Some(1), "{before}");
    assert!(before.contains("FINDING flights-empty"), "{before}");
    flow(&s, 151, 220);
    assert!(msgx.wait_for_log("healed redis:", Duration::from_secs(60)), "{}", msgx.log_text());
    let healed = emptied.elapsed();
    settles_to_the_reference(&s, 220);
    let (code, after) = verify(&s);
    assert_eq!(code, Some(0), "{after}");
    let log = msgx.log_text();
    let line = log.lines().find(|l| l.contains("healed redis:")).unwrap_or_default();
    println!("redis emptied: healed within {healed:?}\n{line}");
    println!("msgx verify before:\n{before}\nmsgx verify after:\n{after}");
}
