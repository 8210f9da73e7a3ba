//! Hostile and variant input on the real services (issue #11): one bad row never stops the
//! airport, real vendor data is kept.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mysql::prelude::Queryable;
use redis::Commands;

use common::*;
use msgx::fixtures;
use msgx::ingress::{self, Poller};
use msgx::pump::{Pump, Round};
use msgx::stats::Stats;
use msgx::store::flights::RedisFlights;
use msgx::store::mailbox::MysqlMailbox;
use msgx::store::pg::Pg;

struct Stack {
    s: Services,
    stats: Arc<Stats>,
    poller: Poller<Pg, MysqlMailbox>,
    pump: Pump<Pg, MysqlMailbox, RedisFlights>,
}

fn stack_with(s: Services) -> Stack {
    let stats = Arc::new(Stats::default());
    let (poller, pump) = (s.poller(&stats), s.pump(&stats));
    Stack { s, stats, poller, pump }
}

impl Stack {
    fn drain(&mut self) {
        while self.poller.round(now()).unwrap() != ingress::Round::Idle {}
        while let Round::Worked(_) = self.pump.round(now()).unwrap() {}
    }

    /// (state, class, last error) by MSG_ID.
    fn outcomes(&self) -> BTreeMap<i64, (String, Option<String>, Option<String>)> {
        self.s
            .pg()
            .query("SELECT msg_id, state, error_class, last_error FROM proc_state", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3))))
            .collect()
    }

    fn insert_bytes(&self, body: &[u8]) -> i64 {
        let mut my = self.s.mysql();
        my.exec_drop(
            "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')",
            (body,),
        )
        .unwrap();
        my.last_insert_id() as i64
    }

    fn flight(&self, flid: &str) -> BTreeMap<String, String> {
        self.s.redis().hgetall(format!("{}flight:{flid}", self.s.cfg.redis_prefix)).unwrap()
    }
}

#[test]
fn a_longblob_mailbox_with_a_row_that_is_not_utf8_keeps_its_neighbours_flowing() {
    let s = Services::migrated("");
    s.mysql().query_drop("ALTER TABLE cminmsgs MODIFY CMINMSGS_CLOB_MSG LONGBLOB NOT NULL").unwrap();
    let mut st = stack_with(s);
    let before = st.insert_bytes(fixtures::flop_stnd(1, "B1", "A1").as_bytes());
    let mut bad = b"<MSG><META><SNDR>X</SNDR>".to_vec();
    bad.extend_from_slice(&[0xC3, 0x28, 0xFF]); // not UTF-8
    bad.extend_from_slice(b"</META></MSG>");
    let bad_id = st.insert_bytes(&bad);
    let after = st.insert_bytes(fixtures::flop_stnd(2, "B1", "A2").as_bytes());
    st.drain();
    let o = st.outcomes();
    assert_eq!(o[&before].0, "SUCCEEDED");
    assert_eq!(o[&after].0, "SUCCEEDED", "the row after the bad one flows");
    let (state, class, error) = &o[&bad_id];
    assert_eq!((state.as_str(), class.as_deref()), ("DEAD", Some("MALFORMED")));
    assert!(
        error.as_deref().unwrap().contains("not UTF-8: invalid byte 0xC3 at byte offset 25"),
        "{error:?}"
    );
    assert_eq!(st.flight("B1")["STND"], "A2", "in order");
}

#[test]
fn arbitrary_bytes_through_the_real_mailbox_never_panic_and_die_alone() {
    let s = Services::migrated("");
    s.mysql().query_drop("ALTER TABLE cminmsgs MODIFY CMINMSGS_CLOB_MSG LONGBLOB NOT NULL").unwrap();
    let mut st = stack_with(s);
    // A cheap deterministic generator: bytes of every kind, and valid messages mutated.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut ids = Vec::new();
    for i in 0..60u64 {
        let mut body = if i % 2 == 0 {
            (0..(next() % 300)).map(|_| next() as u8).collect::<Vec<u8>>()
        } else {
            fixtures::flop_stnd(100 + i, "Z", "S").into_bytes()
        };
        if i % 2 == 1 && !body.is_empty() {
            for _ in 0..3 {
                let k = (next() as usize) % body.len();
                body[k] = next() as u8;
            }
        }
        ids.push(st.insert_bytes(&body));
    }
    let good = st.insert_bytes(fixtures::flop_stnd(999, "Y", "OK").as_bytes());
    st.drain();
    let o = st.outcomes();
    for id in &ids {
        let (state, class, _) = &o[id];
        assert!(
            matches!(state.as_str(), "DEAD" | "SUCCEEDED" | "SKIPPED")
                || (state == "FAILED" && matches!(class.as_deref(), Some("CODEC_ERROR" | "UNSUPPORTED"))),
            "msg {id}: {state} {class:?}"
        );
        assert_ne!(class.as_deref(), Some("INFRA"), "no store or panic failure for msg {id}");
    }
    // A FAILED(CODEC_ERROR) head holds the FIFO until it dies; drain past the backoffs.
    let mut pg = st.s.pg();
    assert!(eventually(Duration::from_secs(60), || {
        let _ = st.pump.round(now());
        count(
            &mut pg,
            &format!("SELECT count(*) FROM proc_state WHERE msg_id = {good} AND state = 'SUCCEEDED'"),
        ) == 1
    }));
}

#[test]
fn a_message_larger_than_the_limit_is_protocol_and_writes_nothing() {
    let mut st = stack_with(Services::migrated(""));
    let big = fixtures::flop(1, "REMC", "BIG", &[("REMC", Some(&"x".repeat(2 * 1024 * 1024)))]);
    let id = st.s.insert_inbound(&[big])[0];
    st.drain();
    let (state, class, error) = st.outcomes()[&id].clone();
    assert_eq!((state.as_str(), class.as_deref()), ("DEAD", Some("PROTOCOL")));
    assert!(error.unwrap().contains("exceeds msgx.codec.max-message-bytes"));
    assert!(st.flight("BIG").is_empty(), "no Redis write");
    assert_eq!(count(&mut st.s.pg(), "SELECT count(*) FROM msg_event"), 0, "no event");
}

#[test]
fn nul_characters_are_malformed() {
    let mut st = stack_with(Services::migrated(""));
    let ids = st.s.insert_inbound(&[
        fixtures::flop_stnd(1, "N", "A&#0;B"),
        fixtures::flop_stnd(2, "N", "A\u{0}B"),
        fixtures::flop_stnd(3, "N", "OK"),
    ]);
    st.drain();
    let o = st.outcomes();
    for id in &ids[..2] {
        assert_eq!((o[id].0.as_str(), o[id].1.as_deref()), ("DEAD", Some("MALFORMED")), "{:?}", o[id]);
    }
    assert_eq!(o[&ids[2]].0, "SUCCEEDED");
    assert_eq!(st.flight("N")["STND"], "OK");
}

#[test]
fn a_flop_with_an_unknown_element_applies_what_is_known_and_counts_it() {
    let mut st = stack_with(Services::migrated(""));
    let raw = fixtures::flop_body("STND", "U1", "<STND>K7</STND><VNDRX>vendor extra</VNDRX>");
    let id = st.s.insert_inbound(&[raw])[0];
    st.drain();
    assert_eq!(st.outcomes()[&id].0, "SUCCEEDED");
    assert_eq!(st.flight("U1")["STND"], "K7");
    assert!(!st.flight("U1").contains_key("VNDRX"));
    assert_eq!(st.stats.unknown_elements.load(Ordering::Relaxed), 1);
}

#[test]
fn a_snapshot_redis_refuses_as_stale_publishes_nothing_on_the_topic() {
    let mut st = stack_with(Services::migrated(""));
    let dnld = |seqn: u64, flid: &str| {
        fixtures::other(
            seqn,
            "SCHD",
            "DNLD",
            &format!("<SCHD><RECS>1</RECS><FLTR><FLID>{flid}</FLID><SODT>05MAR260900</SODT><STND>1</STND></FLTR></SCHD>"),
        )
    };
    st.s.insert_inbound(&[dnld(1, "P1")]);
    st.drain();
    // A newer snapshot got there first (as for a replayed or late old one): the plan's
    // generation says so.
    let mut redis = st.s.redis();
    let _: () = redis.hset(format!("{}schd:gen", st.s.cfg.redis_prefix), "msg_id", 1_000_000).unwrap();
    let stale = st.s.insert_inbound(&[dnld(2, "P2")])[0];
    st.drain();
    assert_eq!(st.outcomes()[&stale].0, "SUCCEEDED");
    assert!(st.flight("P2").is_empty() && !st.flight("P1").is_empty(), "nothing changed in Redis");
    let mut pg = st.s.pg();
    assert_eq!(count(&mut pg, &format!("SELECT count(*) FROM msg_event WHERE msg_id = {stale}")), 0);
    let mut d = msgx::dispatch::Dispatcher::new(
        Pg::connect(&st.s.cfg.pg_url).unwrap(),
        msgx::store::kafka::KafkaProducer::new(&st.s.cfg).unwrap(),
        msgx::policy::retry::retry_policy(&st.s.cfg.pipeline),
        msgx::dispatch::Settings::from_config(&st.s.cfg),
        Arc::new(msgx::lease::LeaseGate::open()),
        Arc::new(Stats::default()),
        std::sync::Arc::new(msgx::clock::SystemClock),
    );
    while count(&mut pg, "SELECT count(*) FROM msg_event WHERE state = 'PENDING'") > 0 {
        d.round(now()).unwrap();
    }
    let got = consume(&st.s.cfg.topic_schd, 2, Duration::from_secs(4));
    assert_eq!(got.len(), 1, "one FLTR batch: the first snapshot's");
    let flids: Vec<&str> =
        got[0].payload.as_array().unwrap().iter().map(|f| f["FLID"].as_str().unwrap()).collect();
    assert_eq!(flids, ["P1"], "no UPSERT of P2, no DELETE of P1");
}

#[test]
fn a_flood_of_large_texts_is_read_within_the_round_byte_budget() {
    // Five 300 KB messages (each under max-message-bytes) with a 700 KB round budget: the pump
    // never holds more than two of them, and every one is processed, none charged.
    let s = Services::migrated("process-batch-bytes = 700000\nprocess-batch = 100");
    let mut st = stack_with(s);
    let pad = "x".repeat(300_000);
    let ids: Vec<i64> = (1..=5)
        .map(|i| {
            let raw = fixtures::flop_stnd(i, "BIG", &format!("S{i}"))
                .replace("</MSG>", &format!("<!--{pad}--></MSG>"));
            st.insert_bytes(raw.as_bytes())
        })
        .collect();
    let mut texts = MysqlMailbox::connect(&st.s.cfg.mysql_url, &st.s.cfg.inbound).unwrap();
    use msgx::ports::{MailboxTexts, Raw};
    let got = texts.raws(&ids, 1 << 20, 700_000).unwrap();
    let fetched: Vec<bool> = ids.iter().map(|id| matches!(got[id], Raw::Body(_))).collect();
    assert_eq!(fetched, [true, true, false, false, false]);
    assert!(ids[2..].iter().all(|id| got[id] == Raw::Later));
    while st.poller.round(now()).unwrap() != ingress::Round::Idle {}
    let rounds: Vec<Round> = std::iter::from_fn(|| Some(st.pump.round(now()).unwrap()))
        .take_while(|r| matches!(r, Round::Worked(_)))
        .collect();
    assert_eq!(rounds, [Round::Worked(2), Round::Worked(2), Round::Worked(1)]);
    assert!(st.outcomes().values().all(|(state, _, _)| state == "SUCCEEDED"), "{:?}", st.outcomes());
    assert_eq!(st.flight("BIG")["STND"], "S5");
}

/// Found writing the PRE-3 identity check: META fields have no length limit and IDENTITY_KEY
/// is VARCHAR(200). The key was clipped on write but looked up whole, so the resend of a
/// message with a 300-character sender failed the unique index (INFRA, retried, DEAD)
/// instead of being SKIPPED as a duplicate.
#[test]
fn regression_a_sender_longer_than_the_identity_column_is_still_deduplicated() {
    let mut st = stack_with(Services::migrated(""));
    let long = "S".repeat(300);
    let other = format!("{}T", "S".repeat(299));
    let with_sender = |sndr: &str, stand: &str| {
        fixtures::flop_stnd(7, "L", stand).replace("<SNDR>AODB</SNDR>", &format!("<SNDR>{sndr}</SNDR>"))
    };
    let ids =
        st.s.insert_inbound(&[with_sender(&long, "A1"), with_sender(&long, "A1"), with_sender(&other, "A2")]);
    st.drain();
    let o = st.outcomes();
    assert_eq!(o[&ids[0]].0, "SUCCEEDED", "{:?}", o[&ids[0]]);
    assert_eq!(
        (o[&ids[1]].0.as_str(), o[&ids[1]].2.clone()),
        ("SKIPPED", Some(format!("duplicate-of:{}", ids[0])))
    );
    assert_eq!(o[&ids[2]].0, "SUCCEEDED", "a sender differing past the 200th character is another message");
}

/// Own PostgreSQL keeps 32 characters of an event's flight key; the adapter clipped longer
/// ones, so two long FLIDs sharing 32 characters would have shared one `KAFKA:schd` outbox
/// row. Such a message is now PROTOCOL when it is decided, and the ones after it flow.
#[test]
fn a_flight_key_longer_than_msgx_keeps_is_protocol_and_writes_nothing() {
    let mut st = stack_with(Services::migrated(""));
    let long = "9".repeat(40);
    let ids = st.s.insert_inbound(&[fixtures::flop_stnd(1, &long, "A1"), fixtures::flop_stnd(2, "K1", "B2")]);
    st.drain();
    let o = st.outcomes();
    assert_eq!(
        (o[&ids[0]].0.as_str(), o[&ids[0]].1.as_deref()),
        ("DEAD", Some("PROTOCOL")),
        "{:?}",
        o[&ids[0]]
    );
    assert!(o[&ids[0]].2.as_deref().unwrap().contains("flight key of 40 characters"), "{:?}", o[&ids[0]]);
    assert!(st.flight(&long).is_empty(), "nothing applied to Redis");
    assert_eq!(o[&ids[1]].0, "SUCCEEDED");
    let events = format!("SELECT count(*) FROM msg_event WHERE msg_id = {}", ids[0]);
    assert_eq!(count(&mut st.s.pg(), &events), 0, "no event");
}

/// Counts what msgx logs in this test process (nextest runs each test in a process of its own).
struct LogMeter {
    bytes: std::sync::atomic::AtomicUsize,
    lines: std::sync::atomic::AtomicUsize,
}

impl log::Log for LogMeter {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }

    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            let line = format!("{} {} {}", r.level(), r.target(), r.args());
            assert_eq!(line.lines().count(), 1, "a log line that spans lines: {line:?}");
            self.bytes.fetch_add(line.len() + 1, Ordering::Relaxed);
            self.lines.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn flush(&self) {}
}

static METER: LogMeter =
    LogMeter { bytes: std::sync::atomic::AtomicUsize::new(0), lines: std::sync::atomic::AtomicUsize::new(0) };

/// This process's peak resident memory in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// #53: a hostile row decoded at a cost that grew with the square of its size held a pump turn
/// for minutes (13 s for one 1 MiB row of 100 000 attributes, 18 s for 100 000 unknown
/// elements), past the watchdog, and the strict-FIFO pipeline never moved again. Sixteen such
/// rows between ordinary ones now flow: the ordinary rows SUCCEEDED in order, each hostile one
/// DEAD with its class or SUCCEEDED, every turn short, memory and log bounded.
#[test]
fn sixteen_hostile_rows_of_a_mebibyte_between_ordinary_ones_never_stall_the_pump() {
    let _ = log::set_logger(&METER).map(|()| log::set_max_level(log::LevelFilter::Info));
    let mut st = stack_with(Services::migrated(""));
    let rss_before = peak_rss_kib();
    let hostile: Vec<(&str, fixtures::shapes::Shape)> = fixtures::shapes::ALL[1..].to_vec();
    let mut rows = Vec::new();
    for k in 0..16 {
        rows.push((None, fixtures::flop_stnd(1000 + k, "H1", &format!("S{k:02}"))));
        let (name, shape) = hostile[k as usize % hostile.len()];
        let text = shape((1 << 20) - 64).replacen("<SEQN>1</SEQN>", &format!("<SEQN>{}</SEQN>", 5000 + k), 1);
        assert!(text.len() <= 1 << 20, "{name}: {} bytes", text.len());
        rows.push((Some(name), text));
    }
    rows.push((None, fixtures::flop_stnd(2000, "H1", "S99")));
    let ids = st.s.insert_inbound(&rows.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>());
    let (mut turns, mut longest) = (0, Duration::ZERO);
    while st.poller.round(now()).unwrap() != ingress::Round::Idle {}
    loop {
        let start = std::time::Instant::now();
        let worked = st.pump.round(now()).unwrap();
        longest = longest.max(start.elapsed());
        turns += 1;
        if !matches!(worked, Round::Worked(_)) {
            break;
        }
    }
    let o = st.outcomes();
    let mut ordinary = Vec::new();
    for ((name, _), id) in rows.iter().zip(&ids) {
        let (state, class, error) = &o[id];
        match name {
            None => {
                assert_eq!(state, "SUCCEEDED", "ordinary row {id}: {:?}", o[id]);
                ordinary.push(*id);
            }
            Some(name) => {
                let ok = state == "SUCCEEDED" || (state == "DEAD" && class.is_some());
                assert!(ok, "{name} (row {id}): {state} {class:?} {error:?}");
                println!(
                    "  {name:<32} {state:<9} {:<9} {}",
                    class.as_deref().unwrap_or("-"),
                    error.as_deref().unwrap_or("")
                );
            }
        }
    }
    assert_eq!(st.flight("H1")["STND"], "S99", "the last ordinary row's stand stands");
    // Order: H1's events were written in MSG_ID order, one per ordinary row (each changes the stand).
    let events: Vec<i64> =
        st.s.pg()
            .query("SELECT msg_id FROM msg_event WHERE partition_key = 'H1' ORDER BY event_id", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
    assert_eq!(events, ordinary, "one event per ordinary row, in MSG_ID order");
    let (rss, log_bytes) = (peak_rss_kib(), METER.bytes.load(Ordering::Relaxed));
    println!(
        "{} rows in {turns} pump turns, the longest {longest:?}; peak RSS {} MiB (was {} MiB); log {log_bytes} bytes in {} lines",
        rows.len(),
        rss / 1024,
        rss_before / 1024,
        METER.lines.load(Ordering::Relaxed)
    );
    // The watchdog restarts a stage whose turn lasts `stuck-after` (120 s): a turn is far from it.
    assert!(longest < Duration::from_secs(30), "a pump turn of {longest:?}");
    assert!(rss - rss_before < 1024 * 1024, "peak RSS grew by {} MiB", (rss - rss_before) / 1024);
    assert!(log_bytes < 64 * 1024, "{log_bytes} bytes of log for {} rows", rows.len());
}
