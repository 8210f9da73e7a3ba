//! A store that forgets (#20), and ordinary traffic that must never look like one (#37), on the
//! real servers, messages flowing, default settings. The four forgets of SPEC §4.10 — own
//! PostgreSQL rolled back (an asynchronous replica promoted with a lost tail), Redis restored
//! from an older dump, Redis emptied, the broker emptied and `msgx resend` — are found and
//! healed, and the end state equals a reference replay of the mailbox: nothing lost, nothing
//! DEAD, no identity on two different records. An airport's ordinary day, compressed — late
//! rows, deletes, no-op and vendor-only updates, stale snapshots, rows someone else marks,
//! replays of DEAD messages — with the sentinel comparing every second, raises no finding and
//! no heal. Each test runs its own Redis, PostgreSQL pair or broker where it breaks one.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use msgx::domain::Target;
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

/// A seeded xorshift: the day's traffic is the same on every run.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What the compressed day sent, by kind.
#[derive(Default, Debug)]
struct Day {
    updates: usize,
    restated: usize,
    vendor_only: usize,
    late: usize,
    deletes_then_late_updates: usize,
    ignored: usize,
    duplicates: usize,
    malformed: usize,
    unsupported: usize,
    marked_elsewhere: usize,
    reference: usize,
    snapshots: usize,
    stale_snapshots: usize,
    replayed_dead: usize,
}

impl Day {
    fn total(&self) -> usize {
        self.updates
            + self.restated
            + self.vendor_only
            + self.late
            + 2 * self.deletes_then_late_updates
            + self.ignored
            + self.duplicates
            + self.malformed
            + self.unsupported
            + self.marked_elsewhere
            + self.reference
            + self.snapshots
            + self.stale_snapshots
    }
}

/// A daily-plan snapshot (SCHD-DNLD) of flights `P{n}` on `day` (`05MAR26`).
fn plan(seqn: u64, day: &str, flights: std::ops::Range<u64>) -> String {
    let body: String = flights
        .clone()
        .map(|n| {
            format!(
                "<FLTR><FLID>P{n}</FLID><FLNO>MU{n}</FLNO><SODT>{day}{:02}00</SODT><GATE>G{n}</GATE></FLTR>",
                6 + n % 12
            )
        })
        .collect();
    fixtures::other(seqn, "SCHD", "DNLD", &format!("<SCHD><RECS>{}</RECS>{body}</SCHD>", flights.count()))
}

/// #37: ten minutes of an airport's ordinary traffic compressed into one (#66), with the
/// sentinel comparing the stores every second and `msgx verify --sample 1` (the full check,
/// every message's versions) run while it flows and after: updates over 200 flights, the same
/// value again, records of vendor elements only, late rows (superseded by the time they commit),
/// deletes with a late update behind them, ignored kinds, duplicates, malformed and unsupported
/// messages (DEAD, then replayed by an operator), reference data, daily plans and a stale one
/// committed late, rows another system marks processed. Not one finding, not one heal.
#[test]
fn an_airports_ordinary_day_raises_no_finding_and_no_heal() {
    // The day runs on the tests' time profile (#66): the backoff ladder a fifth of the
    // default's (31 s → 6.2 s), so the unknown kind is DEAD and replayed, with every other
    // kind flowing, in a 60 s day instead of 120 s.
    let s = Services::migrated("backoff-ms = [200, 400, 800, 1600, 3200]");
    let mut msgx = Instance::run(&s, "a", "[msgx.consistency-check]\ninterval = \"1s\"\n");
    let mut dice = Dice(0x005e_ed37);
    let mut day = Day::default();
    let mut open: Vec<(Instant, Open)> = Vec::new();
    // The updates sent (flight, value), and their texts (for duplicates).
    let mut sent: Vec<(String, &str)> = Vec::new();
    let mut texts: Vec<String> = Vec::new();
    let (mut seqn, mut verified) = (0u64, Vec::new());
    let started = Instant::now();
    let mut next_verify = started + Duration::from_secs(10);
    let mut replayed = false;
    let value = |d: &mut Dice| ["A1", "A2", "B7", "C3", "D9"][d.below(5) as usize];
    while started.elapsed() < Duration::from_secs(60) {
        seqn += 1;
        let flid = format!("T{}", dice.below(200));
        let raw = match dice.below(100) {
            0..=54 => {
                day.updates += 1;
                let v = value(&mut dice);
                sent.push((flid.clone(), v));
                fixtures::flop_stnd(seqn, &flid, v)
            }
            55..=62 => match sent.last() {
                // The same value again, in a message of its own.
                Some((f, v)) => {
                    day.restated += 1;
                    fixtures::flop_stnd(seqn, f, v)
                }
                None => continue,
            },
            63..=66 => {
                day.vendor_only += 1;
                fixtures::flop(seqn, "STND", &flid, &[("XSTND", Some("9"))])
            }
            67..=72 => {
                day.late += 1;
                let late = Open::insert(&s, &fixtures::flop_stnd(seqn, &flid, value(&mut dice)));
                open.push((Instant::now() + Duration::from_millis(500 + dice.below(3500)), late));
                continue;
            }
            73..=75 => {
                // An update written before the flight's delete, committed after it.
                day.deletes_then_late_updates += 1;
                let late = Open::insert(&s, &fixtures::flop_stnd(seqn, &flid, "LATE"));
                open.push((Instant::now() + Duration::from_millis(2500 + dice.below(2000)), late));
                seqn += 1;
                fixtures::flop(seqn, "FDEL", &flid, &[])
            }
            76..=78 => {
                day.ignored += 1;
                fixtures::other(seqn, "LDM", "X", "<LDM><A/></LDM>")
            }
            79..=81 => match texts.get(dice.below(texts.len().max(1) as u64) as usize) {
                // An update sent again as it was: the same identity.
                Some(again) => {
                    day.duplicates += 1;
                    again.clone()
                }
                None => continue,
            },
            82 => {
                day.malformed += 1;
                "<MSG><META><SNDR>AODB".to_string()
            }
            // A kind no handler knows holds the FIFO through its backoffs (~6 s): one a day.
            83 if day.unsupported == 0 => {
                day.unsupported += 1;
                fixtures::other(seqn, "ZZZZ", "Q", "")
            }
            84..=85 => {
                day.marked_elsewhere += 1;
                insert_marked_elsewhere(&s, &fixtures::flop_stnd(seqn, &flid, "ELSEWHERE"));
                continue;
            }
            86..=87 => {
                day.reference += 1;
                let k = ["MU", "CA", "CZ"][dice.below(3) as usize];
                let rec = format!("<AIRL><ITOP>{k}</ITOP><ONAM>{k}{seqn}</ONAM></AIRL>");
                fixtures::other(seqn, "AIRL", "UPD", &format!("<RECS>1</RECS>{rec}"))
            }
            88 if day.snapshots < 4 => {
                // A day's plan, and now and then an older one of another day committed late.
                day.snapshots += 1;
                if day.stale_snapshots < 2 {
                    day.stale_snapshots += 1;
                    let stale = Open::insert(&s, &plan(seqn, "04MAR26", 0..8));
                    open.push((Instant::now() + Duration::from_secs(4), stale));
                    seqn += 1;
                }
                plan(seqn, &format!("{:02}MAR26", 5 + day.snapshots), 0..20)
            }
            _ => {
                day.updates += 1;
                let v = value(&mut dice);
                sent.push((flid.clone(), v));
                fixtures::flop_stnd(seqn, &flid, v)
            }
        };
        if raw.contains("<TYPE>FLOP</TYPE><STYP>STND</STYP>") && !raw.contains("XSTND") {
            texts.push(raw.clone());
        }
        s.insert_inbound(std::slice::from_ref(&raw));
        let now = Instant::now();
        let (due, rest): (Vec<_>, Vec<_>) = open.into_iter().partition(|(at, _)| *at <= now);
        open = rest;
        due.into_iter().for_each(|(_, late)| {
            late.commit();
        });
        if now >= next_verify {
            verified.push(verify_all(&s));
            next_verify = now + Duration::from_secs(10);
        }
        if !replayed && started.elapsed() > Duration::from_secs(30) {
            let mut pg = s.pg();
            let dead: Vec<i64> = pg
                .query(
                    "SELECT msg_id FROM proc_state WHERE state = 'DEAD' AND error_class <> 'MALFORMED'",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            if !dead.is_empty() {
                let ids: Vec<String> = dead.iter().map(i64::to_string).collect();
                let (code, out) = msgx_cli(&s, &s.cfg.pg_url, &["replay", "--ids", &ids.join(",")]);
                assert_eq!(code, Some(0), "{out}");
                day.replayed_dead = dead.len();
                replayed = true;
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    for (_, late) in open.drain(..) {
        late.commit();
    }
    let mut pg = s.pg();
    let drained = eventually(Duration::from_secs(120), || {
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE state IN ('PENDING', 'FAILED')") == 0
            && count(&mut pg, "SELECT count(*) FROM msg_event WHERE state <> 'SENT'") == 0
    });
    assert!(drained, "the day drained");
    assert!(sentinel_compared(&endpoint(&msgx), 3, Duration::from_secs(30)), "{}", msgx.log_text());
    verified.push(verify_all(&s));
    msgx.signal("-TERM");
    assert_eq!(msgx.wait(Duration::from_secs(30)), Some(0), "{}", msgx.log_text());
    let log = msgx.log_text();
    let alarms = alarms(&log);
    assert!(alarms.is_empty(), "an ordinary day raised:\n{}", alarms.join("\n"));
    assert!(!log.contains("forgot"), "no stage stopped as forgot");
    assert_eq!(count(&mut pg, "SELECT count(*) FROM consistency_heal"), 0, "no heal");
    for (code, out) in &verified {
        assert_eq!(*code, Some(0), "msgx verify --sample 1 while the day flowed and after:\n{out}");
    }
    let stats = log.lines().rev().find(|l| l.contains(" stats ")).unwrap_or_default().to_string();
    assert!(stats.contains("consistency_findings=0") && stats.contains(" heals=0"), "{stats}");
    let dead = count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'DEAD'");
    assert_eq!(dead as usize, day.malformed + day.unsupported, "only what cannot be read is DEAD");
    let taken = count(&mut pg, "SELECT count(*) FROM proc_state") as usize;
    assert_eq!(taken, day.total() - day.marked_elsewhere, "every row but the ones marked elsewhere");
    let suspected =
        verified.last().map(|(_, o)| o.lines().filter(|l| l.starts_with("SUSPICION")).count()).unwrap_or(0);
    println!(
        "an ordinary day in {:?}: {} messages {day:?}; 0 findings, 0 heals, {} verify --sample 1 runs all exit 0 ({suspected} suspicion line(s) at the end: rows marked elsewhere)\n{stats}",
        started.elapsed(),
        day.total(),
        verified.len()
    );
    println!("msgx verify --sample 1 at the end:\n{}", verified.last().unwrap().1);
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

/// #20 (1), #19 (2): own PostgreSQL rolled back — an asynchronous replica that lagged is promoted while messages flow: the
/// commits it never received are lost. msgx notices (`postgres lost commits`), stops its stages,
/// finds what PostgreSQL forgot by what Redis recorded of it and enqueues those rows again with
/// the decisions Redis journalled; the end state equals a reference replay of the mailbox, the
/// topic deduplicated by `event_key` holds every message once in order, nothing is DEAD.
#[test]
fn a_lagging_asynchronous_replica_promoted_is_noticed_and_healed() {
    let pair = Pair::start("async", false);
    let s = Services::migrated_on("", Stores { pg: Some(pair.url()), ..Default::default() });
    let (stop, daemon) = start_daemon(&s.cfg);
    let db = s.cfg.pg_url.rsplit('/').next().unwrap().to_string();
    let raw = |i: u64| fixtures::flop_stnd(i, &format!("L{}", i % 7), &format!("S{i}"));
    s.insert_inbound(&(1..=50).map(raw).collect::<Vec<_>>());
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut pg,
        "SELECT count(*) FROM msg_event WHERE state = 'SENT'"
    ) == 50));
    drop(pg);
    // The replica stops receiving; msgx goes on writing on the primary for a few seconds.
    script(&["halt", "pg", pair.at("r")]);
    for i in 51..=150 {
        s.insert_inbound(&[raw(i)]);
        std::thread::sleep(Duration::from_millis(25));
    }
    let mut primary = postgres::Client::connect(
        &format!("host=127.0.0.1 port={} user=msgx dbname={db}", pair.primary),
        postgres::NoTls,
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut primary,
        "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED' AND backfill_at IS NOT NULL"
    ) == 150));
    // A lease renewal after the last of them sees the newest position.
    let done_at = db_now(&mut primary);
    assert!(eventually(Duration::from_secs(30), || lease_renewed_after(&mut primary, done_at)));
    drop(primary);
    script(&["halt", "pg", pair.at("p")]);
    // The lagging replica comes back and is promoted: it has the first 50 only.
    script(&["pg-replica", pair.at("r"), &pair.replica.to_string(), &pair.primary.to_string(), "replica1"]);
    script(&["pg-promote", pair.at("r")]);
    let promoted = Instant::now();
    let url = format!("host=127.0.0.1 port={} user=msgx dbname={db}", pair.replica);
    let mut pg = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let lost = 150 - count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'");
    for i in 151..=200 {
        s.insert_inbound(&[raw(i)]);
        std::thread::sleep(Duration::from_millis(25));
    }
    let healed = eventually(Duration::from_secs(60), || {
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'") == 200
    });
    let took = promoted.elapsed();
    assert!(!daemon.is_finished(), "msgx heals and goes on instead of stopping");
    assert!(healed, "every message SUCCEEDED again on the promoted server");
    assert!(eventually(Duration::from_secs(60), || count(
        &mut pg,
        "SELECT count(*) FROM msg_event WHERE state <> 'SENT'"
    ) == 0));
    assert_eq!(count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'DEAD'"), 0, "nothing DEAD");
    let reference = reference_flights(&s);
    let held = redis_flights(&s);
    assert_eq!(held, reference, "Redis per field equals a replay of the mailbox");
    let events = count(&mut pg, "SELECT count(*) FROM msg_event") as usize;
    let got = consume_event_keys(&s.cfg.kafka_brokers, s.topic(), 200, Duration::from_secs(60));
    let distinct = deduplicated(&got);
    drop(stop);
    let result = daemon.join().unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(distinct.len(), 200, "every message's event once after dropping duplicates");
    println!(
        "asynchronous replica promoted with a lost tail: {lost} SUCCEEDED outcomes lost; every message SUCCEEDED again within {took:?}; {} records on the topic, {} distinct, {events} events in the outbox",
        got.len(),
        distinct.len()
    );
}

/// #20 (4): the broker restarted empty (memory storage) lost every record it acknowledged;
/// `msgx resend` puts the SENT events back in the outbox and the daemon delivers them again, in
/// order, with the identities they had (`event_key`).
#[test]
fn a_broker_that_lost_its_records_gets_them_again_with_msgx_resend() {
    use msgx::ports::{Operator, ResendFrom};
    use msgx::store::pg::Pg;
    let mut broker = Broker::start();
    let s = Services::migrated_on("", Stores { kafka: Some(broker.brokers()), ..Default::default() });
    let (stop, daemon) = start_daemon(&s.cfg);
    let raws: Vec<String> =
        (1..=50).map(|i| msgx::fixtures::flop_stnd(i, &format!("B{}", i % 5), &format!("S{i}"))).collect();
    s.insert_inbound(&raws);
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut pg,
        "SELECT count(*) FROM msg_event WHERE state = 'SENT'"
    ) == 50));
    let first = consume_distinct(&broker.brokers(), s.topic(), 50, Duration::from_secs(30));
    assert_eq!(first.len(), 50);
    broker.restart(); // memory storage: every record is gone
    create_topic_on(&broker.brokers(), s.topic());
    assert!(
        consume_from(&broker.brokers(), s.topic(), 1, Duration::from_secs(3)).is_empty(),
        "the broker forgot"
    );
    let mut op = Pg::connect(&s.cfg.pg_url).unwrap();
    let from = count(&mut pg, "SELECT min(event_id) FROM msg_event");
    let r = op.resend(Target::KafkaMsg, ResendFrom::Event(from), true).unwrap();
    assert_eq!(r.events, 50);
    let again = consume_distinct(&broker.brokers(), s.topic(), 50, Duration::from_secs(60));
    drop(stop);
    assert!(daemon.join().unwrap().is_ok());
    let keys =
        |rs: &[Consumed]| rs.iter().map(|r| r.header("event_key").unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(keys(&again), keys(&first), "the same records, in the same order, with the same identities");
    println!("broker restarted empty: {} records delivered again by msgx resend", again.len());
}

/// Seed 3591, on the real stores: a resend was processed while the row it resends was not yet
/// visible (PRE-2, a transaction still open), and own PostgreSQL then forgot the resend and its
/// events before they went out (a restore). Processed again in MSG_ID order, the late row took
/// the identity and the resend was SKIPPED: its change stayed in Redis and its event never
/// reached a consumer. The decision that stands in Redis keeps its identity
/// (`journal:identity`), and its journalled event is in the outbox again.
#[test]
fn regression_seed_3591_a_journalled_resend_keeps_its_identity_after_postgres_forgot() {
    use msgx::store::{flights::RedisFlights, mailbox::MysqlMailbox, pg::Pg};
    let s = Services::migrated("");
    let stats = std::sync::Arc::new(msgx::stats::Stats::default());
    let pump = || {
        let flights = RedisFlights::connect(&s.cfg.redis_url, &s.cfg.redis_prefix).unwrap();
        msgx::pump::Pump::new(
            Pg::connect(&s.cfg.pg_url).unwrap(),
            MysqlMailbox::connect(&s.cfg.mysql_url, &s.cfg.inbound).unwrap(),
            flights.keeping(s.cfg.pipeline.journal_keep),
            &s.cfg.pipeline,
            msgx::codec::Rulebook::this_release(),
            stats.clone(),
            std::sync::Arc::new(msgx::clock::SystemClock),
        )
    };
    let late = Open::insert(&s, &fixtures::flop_stnd(7, "F3591", "A1"));
    let ids =
        s.insert_inbound(&[fixtures::flop_stnd(8, "F3591", "B7"), fixtures::flop_stnd(7, "F3591", "A1")]);
    let (mut poller, mut first) = (s.poller(&stats), pump());
    let mut pg = s.pg();
    let state = |pg: &mut postgres::Client, id: i64| -> Option<(String, Option<String>)> {
        pg.query_opt("SELECT state, last_error FROM proc_state WHERE msg_id = $1", &[&id])
            .unwrap()
            .map(|r| (r.get(0), r.get(1)))
    };
    let settled = |pg: &mut postgres::Client, ids: &[i64]| {
        ids.iter().all(|m| state(pg, *m).is_some_and(|(st, _)| st != "PENDING" && st != "FAILED"))
    };
    assert!(eventually(Duration::from_secs(20), || {
        poller.round(now()).unwrap();
        first.round(now()).unwrap();
        settled(&mut pg, &ids)
    }));
    let field = |s: &Services| -> Option<String> {
        redis::cmd("HGET")
            .arg(format!("{}flight:F3591", s.cfg.redis_prefix))
            .arg("STND")
            .query(&mut s.redis())
            .unwrap()
    };
    assert_eq!(field(&s).as_deref(), Some("A1"));
    drop(first);
    // Own PostgreSQL restored from a backup taken before either: rows, events and watermark.
    pg.batch_execute(&format!(
        "DELETE FROM msg_event WHERE msg_id >= {0}; DELETE FROM proc_state WHERE msg_id >= {0};
         UPDATE ingress_watermark SET last_id = {1}",
        ids[0],
        late.1 - 1
    ))
    .unwrap();
    let late = late.commit();
    let (mut poller, mut again) = (s.poller(&stats), pump());
    let all = [late, ids[0], ids[1]];
    assert!(eventually(Duration::from_secs(20), || {
        poller.round(now()).unwrap();
        again.round(now()).unwrap();
        settled(&mut pg, &all)
    }));
    let dup = format!("duplicate-of:{}", ids[1]);
    assert_eq!(
        state(&mut pg, late),
        Some(("SKIPPED".into(), Some(dup))),
        "the late row is the duplicate now"
    );
    assert_eq!(state(&mut pg, ids[1]).unwrap().0, "SUCCEEDED", "the resend whose decision stands");
    let events: Vec<(i64, String)> = pg
        .query("SELECT msg_id, payload_json FROM msg_event WHERE target = 'KAFKA:msg' ORDER BY event_id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(events.iter().map(|(m, _)| *m).collect::<Vec<_>>(), [ids[0], ids[1]], "{events:?}");
    assert!(events[1].1.contains("A1"), "the last change consumers get is Redis's value: {events:?}");
    assert_eq!(field(&s).as_deref(), Some("A1"));
}
