//! Ingress and backfill against real MariaDB and PostgreSQL: gap safety (PRE-2), the four
//! backfill outcomes (INV-7, C-5, C-16), a mailbox outage, and the compat HTTP path.

use crate::common;

use msgx::domain::SkipReason;
use msgx::error::Store;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use mysql::prelude::Queryable;

use common::*;
use msgx::backfill::{self, Backfill};
use msgx::clock::{Clock, FakeClock, SystemClock};
use msgx::fixtures;
use msgx::ingress::compat::{self, CompatServer};
use msgx::lease::LeaseGate;
use msgx::ports::Settle;
use msgx::stats::Stats;
use msgx::store::mailbox::MysqlMailbox;
use msgx::store::pg::Pg;

fn insert_sql() -> &'static str {
    "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')"
}

#[test]
fn a_lower_id_that_commits_after_a_higher_one_was_polled_is_processed() {
    let s = Services::migrated("");
    let (stop, daemon) = start_daemon(&s.cfg);
    let mut slow = s.mysql();
    let mut fast = s.mysql();
    // Transaction A takes ID 1 and stays open; B takes ID 2 and commits at once.
    let mut tx = slow.start_transaction(mysql::TxOpts::default()).unwrap();
    tx.exec_drop(insert_sql(), (fixtures::flop_stnd(1, "G1", "A1"),)).unwrap();
    let slow_id = tx.last_insert_id().unwrap() as i64;
    fast.exec_drop(insert_sql(), (fixtures::flop_stnd(2, "G2", "B2"),)).unwrap();
    let fast_id = fast.last_insert_id() as i64;
    assert!(slow_id < fast_id);
    let mut pg = s.pg();
    assert!(
        eventually(Duration::from_secs(30), || count(
            &mut pg,
            &format!("SELECT count(*) FROM proc_state WHERE msg_id = {fast_id} AND state = 'SUCCEEDED'")
        ) == 1),
        "the higher id was processed"
    );
    let wm: i64 = pg.query_one("SELECT last_id FROM ingress_watermark", &[]).unwrap().get(0);
    assert!(wm < slow_id, "the watermark is held below the open gap: {wm}");
    tx.commit().unwrap();
    let both = eventually(Duration::from_secs(30), || {
        count(
            &mut pg,
            "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED' AND backfill_at IS NOT NULL",
        ) == 2
    });
    drop(stop);
    daemon.join().unwrap().unwrap();
    assert!(both, "the late row was lost");
    let wm: i64 = pg.query_one("SELECT last_id FROM ingress_watermark", &[]).unwrap().get(0);
    assert_eq!(wm, fast_id);
    let marked: Vec<i64> = s
        .mysql()
        .query("SELECT CMINMSGS_ID FROM cminmsgs WHERE CMINMSGS_DATE_PROCESSED IS NOT NULL ORDER BY 1")
        .unwrap();
    assert_eq!(marked, vec![slow_id, fast_id]);
}

struct BackfillWorld {
    s: Services,
    clock: FakeClock,
    pg: Pg,
    backfill: Backfill<Pg, MysqlMailbox>,
}

fn backfill_world(n: usize) -> (BackfillWorld, Vec<i64>) {
    let s = Services::migrated("");
    let ids = s.insert_inbound(&(0..n).map(|i| fixtures::flop_stnd(i as u64, "F", "S")).collect::<Vec<_>>());
    let clock = FakeClock::new();
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    enqueue(&mut pg, &ids, clock.now());
    let backfill = Backfill::new(
        Pg::connect(&s.cfg.pg_url).unwrap(),
        MysqlMailbox::connect(&s.cfg.mysql_url, &s.cfg.inbound).unwrap(),
        &s.cfg.pipeline,
        Arc::new(LeaseGate::open()),
        Arc::new(Stats::default()),
    );
    (BackfillWorld { s, clock, pg, backfill }, ids)
}

#[test]
fn backfill_writes_only_empty_marks_and_never_for_unfinished_rows() {
    let (mut w, ids) = backfill_world(3);
    let now = w.clock.now();
    // ids[0] terminal, ids[1] terminal but marked by someone else, ids[2] still PENDING.
    w.s.mysql()
        .exec_drop(
            "UPDATE cminmsgs SET CMINMSGS_DATE_PROCESSED = '2020-01-02 03:04:05', CMINMSGS_STATUS = 'THEIRS' WHERE CMINMSGS_ID = ?",
            (ids[1],),
        )
        .unwrap();
    record(
        &mut w.pg,
        &[
            Settle::succeeded(ids[0], "k0", vec![]),
            Settle::skipped(ids[1], SkipReason::Ignored("LDM-*".into())),
        ],
        now,
    );
    assert_eq!(
        w.backfill.round(w.clock.now()).unwrap(),
        backfill::Round::Marked { written: 1, already: 1, missing: 0 }
    );
    let rows: Vec<(i64, Option<String>, Option<String>)> = w
        .s
        .mysql()
        .query("SELECT CMINMSGS_ID, CAST(CMINMSGS_DATE_PROCESSED AS CHAR), CMINMSGS_STATUS FROM cminmsgs ORDER BY 1")
        .unwrap();
    assert_eq!(rows[0].1.as_deref(), Some("2026-01-01 00:00:00"), "the clock's time, UTC");
    assert_eq!(rows[0].2.as_deref(), Some("PROCESSED"));
    assert_eq!(
        (rows[1].1.as_deref(), rows[1].2.as_deref()),
        (Some("2020-01-02 03:04:05"), Some("THEIRS")),
        "INV-7"
    );
    assert_eq!(
        (rows[2].1.as_deref(), rows[2].2.as_deref()),
        (None, Some("VALID")),
        "PENDING owes no mark (INV-8)"
    );
    assert_eq!(w.backfill.round(w.clock.now()).unwrap(), backfill::Round::Idle);
}

#[test]
fn backfill_abandons_a_missing_row_at_once_and_status_lists_it() {
    let (mut w, ids) = backfill_world(1);
    w.s.mysql().exec_drop("DELETE FROM cminmsgs WHERE CMINMSGS_ID = ?", (ids[0],)).unwrap();
    record(&mut w.pg, &[Settle::succeeded(ids[0], "k0", vec![])], w.clock.now());
    assert_eq!(
        w.backfill.round(w.clock.now()).unwrap(),
        backfill::Round::Marked { written: 0, already: 0, missing: 1 }
    );
    let st = w.pg.status(10).unwrap();
    assert_eq!(st.abandoned.len(), 1);
    assert_eq!((st.abandoned[0].msg_id, st.abandoned[0].reason.as_str()), (ids[0], "MISSING_ROW"));
    assert_eq!(w.backfill.round(w.clock.now()).unwrap(), backfill::Round::Idle);
}

#[test]
fn backfill_stalls_while_the_mailbox_table_is_away_and_charges_nothing() {
    let (mut w, ids) = backfill_world(2);
    record(
        &mut w.pg,
        &[Settle::succeeded(ids[0], "k0", vec![]), Settle::succeeded(ids[1], "k1", vec![])],
        w.clock.now(),
    );
    let mut admin = w.s.mysql();
    admin.query_drop("RENAME TABLE cminmsgs TO cminmsgs_away").unwrap();
    let e = w.backfill.round(w.clock.now()).unwrap_err();
    assert!(
        e.is_unavailable() && e.store == Store::Mailbox,
        "a missing table is the mailbox away (1146): {e}"
    );
    w.clock.advance(Duration::from_secs(40 * 86_400)); // longer than overdue-backfill
    assert!(w.backfill.round(w.clock.now()).unwrap_err().is_unavailable());
    let mut c = w.s.pg();
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM proc_state WHERE backfill_attempts > 0 OR backfill_abandoned_at IS NOT NULL"),
        0,
        "no attempt charged, nothing overdue"
    );
    admin.query_drop("RENAME TABLE cminmsgs_away TO cminmsgs").unwrap();
    assert_eq!(
        w.backfill.round(w.clock.now()).unwrap(),
        backfill::Round::Marked { written: 2, already: 0, missing: 0 }
    );
}

#[test]
fn backfill_backs_off_a_mark_the_mailbox_refuses() {
    let (mut w, ids) = backfill_world(1);
    record(&mut w.pg, &[Settle::succeeded(ids[0], "k0", vec![])], w.clock.now());
    // A status value the column cannot hold is refused (1406 data too long): rejected, charged.
    let mut cfg = w.s.cfg.clone();
    cfg.inbound.processed_status = "P".repeat(40);
    let mut refused = Backfill::new(
        Pg::connect(&cfg.pg_url).unwrap(),
        MysqlMailbox::connect(&cfg.mysql_url, &cfg.inbound).unwrap(),
        &cfg.pipeline,
        Arc::new(LeaseGate::open()),
        Arc::new(Stats::default()),
    );
    assert_eq!(refused.round(w.clock.now()).unwrap(), backfill::Round::Failed { rescheduled: 1 });
    assert_eq!(refused.round(w.clock.now()).unwrap(), backfill::Round::Idle, "backfill-backoff-ms: 30 s");
    w.clock.advance(Duration::from_secs(30));
    assert_eq!(
        w.backfill.round(w.clock.now()).unwrap(),
        backfill::Round::Marked { written: 1, already: 0, missing: 0 }
    );
}

#[test]
fn a_mailbox_outage_while_running_loses_nothing() {
    let s = Services::migrated("backfill-backoff-ms = 200\nbackfill-backoff-cap-ms = 400\n");
    let first = s.insert_inbound(
        &(1..=20u64).map(|i| fixtures::flop_stnd(i, "H", &format!("S{i}"))).collect::<Vec<_>>(),
    );
    let (stop, daemon) = start_daemon(&s.cfg);
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(30), || count(
        &mut pg,
        "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'"
    ) >= 1));
    let mut admin = s.mysql();
    admin.query_drop("RENAME TABLE cminmsgs TO cminmsgs_away").unwrap();
    // The outage lasts a few poll and backfill rounds (the daemon's 50 ms poll interval).
    std::thread::sleep(Duration::from_millis(700));
    admin.query_drop("RENAME TABLE cminmsgs_away TO cminmsgs").unwrap();
    let more = s.insert_inbound(
        &(21..=40u64).map(|i| fixtures::flop_stnd(i, "H", &format!("S{i}"))).collect::<Vec<_>>(),
    );
    let all = eventually(Duration::from_secs(60), || {
        count(
            &mut pg,
            "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED' AND backfill_at IS NOT NULL",
        ) == 40
    });
    drop(stop);
    daemon.join().unwrap().unwrap();
    assert!(
        all,
        "not everything was processed and marked after the outage: {:?}",
        Pg::connect(&s.cfg.pg_url).unwrap().status(5)
    );
    let unmarked: i64 = s
        .mysql()
        .query_first("SELECT count(*) FROM cminmsgs WHERE CMINMSGS_DATE_PROCESSED IS NULL")
        .unwrap()
        .unwrap();
    assert_eq!(unmarked, 0);
    assert_eq!(first.len() + more.len(), 40);
}

/// A compat server on this test's stores, on a free port; drop the sender to stop it.
fn compat_server(
    s: &Services,
    limit: usize,
    read_timeout: Duration,
    workers: usize,
) -> (std::net::SocketAddr, crossbeam_channel::Sender<()>, std::thread::JoinHandle<()>) {
    let server = CompatServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.local_addr().unwrap();
    let limits = compat::Limits { max_body_bytes: limit, read_timeout, workers };
    let pool: Vec<_> = (0..workers)
        .map(|_| {
            compat::Worker::new(
                MysqlMailbox::connect(&s.cfg.mysql_url, &s.cfg.inbound).unwrap(),
                Pg::connect(&s.cfg.pg_url).unwrap(),
                Arc::new(SystemClock),
                limits.clone(),
            )
        })
        .collect();
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    let h = std::thread::spawn(move || server.serve(pool, &rx, || {}));
    (addr, tx, h)
}

/// A minimal HTTP/1.1 client: returns the status code and the body.
fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(ct) = content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    head.push_str("\r\n");
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    let status = out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn compat_http_persists_then_answers_and_refuses_clearly() {
    let s = Services::migrated("");
    let (addr, stop, serving) = compat_server(&s, 64 * 1024, Duration::from_secs(10), 2);
    let msg = fixtures::flop_stnd(1, "C1", "航站楼");
    let (status, body) =
        http(addr, "POST", "/cminmsgs/send", Some("text/xml; charset=UTF-8"), msg.as_bytes());
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = v["msg_id"].as_i64().unwrap();
    assert_eq!(v["enqueued"], true);
    let stored: String = s
        .mysql()
        .exec_first("SELECT CMINMSGS_CLOB_MSG FROM cminmsgs WHERE CMINMSGS_ID = ?", (id,))
        .unwrap()
        .unwrap();
    assert_eq!(stored, msg, "persisted byte for byte before the 200");
    let mut pg = s.pg();
    assert_eq!(
        count(&mut pg, &format!("SELECT count(*) FROM proc_state WHERE msg_id = {id} AND state = 'PENDING'")),
        1
    );

    let (status, _) = http(addr, "POST", "/cminmsgs/send", Some("application/xml"), msg.as_bytes());
    assert_eq!(status, 200);
    let (status, body) = http(addr, "POST", "/cminmsgs/send", Some("application/json"), b"{}");
    assert_eq!(status, 415, "{body}");
    let (status, body) = http(addr, "POST", "/cminmsgs/send", Some("text/plain"), b"   ");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("empty"));
    let big = vec![b'x'; 64 * 1024 + 1];
    let (status, body) = http(addr, "POST", "/cminmsgs/send", Some("text/plain"), &big);
    assert_eq!(status, 413, "{body}");
    let (status, _) = http(addr, "GET", "/cminmsgs/send", None, b"");
    assert_eq!(status, 405);
    let (status, _) = http(addr, "POST", "/elsewhere", Some("text/xml"), b"<MSG/>");
    assert_eq!(status, 404);
    drop(stop);
    serving.join().unwrap();
    let rows: i64 = s.mysql().query_first("SELECT count(*) FROM cminmsgs").unwrap().unwrap();
    assert_eq!(rows, 2, "refused requests wrote nothing");
}

/// Two lower IDs commit well inside `commit-grace` (4 s: 0.3 s and 0.6 s after the higher ones),
/// a third only once its higher ID was processed — past the grace by construction, whatever the
/// machine's load (#66: fixed delays of 1.5 s against the 2 s grace failed at eight tests at a
/// time).
#[test]
fn commit_races_within_the_grace_keep_id_order_and_a_later_one_is_processed_late() {
    let s = Services::migrated("commit-grace = \"4s\"");
    let (stop, daemon) = start_daemon(&s.cfg);
    let mut pairs = Vec::new();
    let mut pg = s.pg();
    for (delay, flid, seqn) in [(Some(300), "R1", 10), (Some(600), "R2", 20), (None, "R3", 30)] {
        let (mut slow, mut fast) = (s.mysql(), s.mysql());
        let mut tx = slow.start_transaction(mysql::TxOpts::default()).unwrap();
        tx.exec_drop(insert_sql(), (fixtures::flop_stnd(seqn, flid, "LOW"),)).unwrap();
        let low = tx.last_insert_id().unwrap() as i64;
        fast.exec_drop(insert_sql(), (fixtures::flop_stnd(seqn + 1, flid, "HIGH"),)).unwrap();
        let high = fast.last_insert_id() as i64;
        assert!(low < high);
        match delay {
            Some(ms) => std::thread::sleep(Duration::from_millis(ms)),
            None => {
                let processed =
                    format!("SELECT count(*) FROM proc_state WHERE msg_id = {high} AND state = 'SUCCEEDED'");
                assert!(
                    eventually(Duration::from_secs(60), || count(&mut pg, &processed) == 1),
                    "{flid}: the higher id waits out the grace"
                );
            }
        }
        tx.commit().unwrap();
        pairs.push((flid, low, high));
    }
    let done = eventually(Duration::from_secs(60), || {
        count(
            &mut pg,
            "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED' AND backfill_at IS NOT NULL",
        ) == 6
    });
    drop(stop);
    daemon.join().unwrap().unwrap();
    assert!(done, "nothing lost, the late one included");
    let got = consume(s.topic(), 5, Duration::from_secs(20));
    let mut redis = s.redis();
    for (flid, low, high) in pairs {
        let stand: String = redis::cmd("HGET")
            .arg(format!("{}flight:{flid}", s.cfg.redis_prefix))
            .arg("STND")
            .query(&mut redis)
            .unwrap();
        assert_eq!(stand, "HIGH", "{flid}: Redis holds the higher id's value");
        let on_topic: Vec<i64> =
            got.iter().filter(|r| r.key == flid).map(|r| r.payload["msg_id"].as_i64().unwrap()).collect();
        if flid == "R3" {
            // Past the grace: processed after the higher id, and its stand (older) changes nothing.
            assert_eq!(on_topic, vec![high], "{flid}");
        } else {
            assert_eq!(on_topic, vec![low, high], "{flid}: topic order is by msg_id");
        }
    }
}

#[test]
fn a_slow_client_holds_one_worker_and_never_the_others() {
    let s = Services::migrated("");
    let (addr, stop, serving) = compat_server(&s, 1024 * 1024, Duration::from_secs(3), 4);
    // A client promises a megabyte and sends a byte a second.
    let slow = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(
            b"POST /cminmsgs/send HTTP/1.1\r\nContent-Type: text/xml\r\nContent-Length: 1000000\r\n\r\n",
        )
        .unwrap();
        let started = std::time::Instant::now();
        for _ in 0..10 {
            if c.write_all(b"x").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        (out, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut slowest = Duration::ZERO;
    for i in 0..100u64 {
        let msg = fixtures::flop_stnd(i, "C", "S");
        let t = std::time::Instant::now();
        let (status, body) = http(addr, "POST", "/cminmsgs/send", Some("text/xml"), msg.as_bytes());
        slowest = slowest.max(t.elapsed());
        assert_eq!(status, 200, "{body}");
    }
    let (answer, took) = slow.join().unwrap();
    assert!(answer.contains(" 408 "), "the slow client gets 408: {answer}");
    // The worker answers at read-timeout (3 s) and drains the client's input for at most 2 s
    // more so that the 408 is read, not reset; the client notices at its next writes.
    assert!(took < Duration::from_secs(8), "bounded by read-timeout (3 s) and the 2 s linger: {took:?}");
    drop(stop);
    serving.join().unwrap();
    println!("100 requests beside a slow client: slowest {slowest:?}");
    assert!(slowest < Duration::from_secs(2), "a slow client never blocks the others: {slowest:?}");
}

/// PRE-3 (b) on MariaDB: a row msgx processed (its mark still owed) that the mailbox now shows
/// holding another message stops the poller, naming both identities.
#[test]
fn pre3_a_mailbox_row_replaced_under_its_id_stops_the_poller() {
    let s = Services::migrated("");
    let stats = Arc::new(Stats::default());
    let clock = FakeClock::new();
    let mut poller = s.poller_at(&stats, std::sync::Arc::new(clock.clone()));
    let first = fixtures::flop_stnd(12, "B1", "A1");
    let ids = s.insert_inbound(&["<MSG/>".to_string(), first.clone(), "<MSG/>".to_string()]);
    poller.round(clock.now()).unwrap();
    let identity = msgx::codec::identity(&msgx::codec::decode_meta(&first).unwrap().meta, false);
    s.pg()
        .execute(
            "UPDATE proc_state SET state = 'SUCCEEDED', identity_key = $1 WHERE msg_id = $2",
            &[&identity, &ids[1]],
        )
        .unwrap();
    s.mysql()
        .exec_drop(
            "UPDATE cminmsgs SET CMINMSGS_CLOB_MSG = ? WHERE CMINMSGS_ID = ?",
            (fixtures::flop_stnd(99, "B7", "C3"), ids[1]),
        )
        .unwrap();
    for _ in 0..3 {
        clock.advance(Duration::from_secs(61));
        poller.round(clock.now()).unwrap();
    }
    let halt = poller.halted().expect("the poller stops");
    assert_eq!(halt.reused, Some(ids[1]));
    assert!(
        halt.why.contains("now holds identity AODB|FLOP|STND|99")
            && halt.why.contains("as identity AODB|FLOP|STND|12"),
        "{}",
        halt.why
    );
}

/// Sends `head` and then `body` (in one go), reads the whole answer.
fn raw_http(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    let _ = c.write_all(body); // the server may answer before it read the body
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// #21 item 13 and #24: the head is parsed by httparse — a head past 16 KiB is 431 however the
/// reads fall, two different Content-Lengths are 400, Expect: 100-continue gets its 100 before
/// the body; a 20 MiB body sent at once reads its 413, not a reset.
#[test]
fn regression_compat_refusals_reach_the_client_as_documented() {
    let s = Services::migrated("");
    let (addr, stop, serving) = compat_server(&s, 1024 * 1024, Duration::from_secs(5), 2);
    let big = format!(
        "POST /cminmsgs/send HTTP/1.1\r\nContent-Type: text/xml\r\nX-Pad: {}\r\nContent-Length: 6\r\n\r\n",
        "p".repeat(18 * 1024)
    );
    let out = raw_http(addr, &big, b"<MSG/>");
    assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    let twice = "POST /cminmsgs/send HTTP/1.1\r\nContent-Type: text/xml\r\nContent-Length: 6\r\nContent-Length: 60\r\n\r\n";
    let out = raw_http(addr, twice, b"<MSG/>");
    assert!(out.starts_with("HTTP/1.1 400 ") && out.contains("Content-Length given twice"), "{out}");
    let huge = vec![b'x'; 20 * 1024 * 1024];
    let head = format!(
        "POST /cminmsgs/send HTTP/1.1\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\r\n",
        huge.len()
    );
    let out = raw_http(addr, &head, &huge);
    assert!(out.starts_with("HTTP/1.1 413 "), "a 20 MiB body sent at once reads its 413: {out:?}");
    // Expect: 100-continue: the 100 comes before the body is sent, then the 200.
    let msg = fixtures::flop_stnd(7, "E1", "S7");
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let head = format!(
        "POST /cminmsgs/send HTTP/1.1\r\nContent-Type: text/xml\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        msg.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    let mut first = [0u8; 25];
    c.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n");
    c.write_all(msg.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    drop(stop);
    serving.join().unwrap();
}

/// #21 item 13: a client dripping its body sees the 408; with every worker held by slow
/// clients, a valid request is answered 503 at once instead of waiting behind them.
#[test]
fn regression_a_dripping_client_sees_its_408_and_a_full_pool_answers_503_at_once() {
    let s = Services::migrated("");
    let (addr, stop, serving) = compat_server(&s, 1024 * 1024, Duration::from_secs(2), 1);
    let drip = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(
            b"POST /cminmsgs/send HTTP/1.1\r\nContent-Type: text/xml\r\nContent-Length: 100000\r\n\r\n",
        )
        .unwrap();
        // Keeps dripping past the deadline, as the client did.
        for _ in 0..30 {
            if c.write_all(b"x").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    std::thread::sleep(Duration::from_millis(300));
    let t = std::time::Instant::now();
    let (status, body) = http(addr, "POST", "/cminmsgs/send", Some("text/xml"), b"<MSG/>");
    let took = t.elapsed();
    assert_eq!(status, 503, "{body}");
    assert!(took < Duration::from_secs(1), "answered at once, not after the slow client: {took:?}");
    let answer = drip.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 408 "), "the dripping client reads its 408: {answer:?}");
    drop(stop);
    serving.join().unwrap();
}
