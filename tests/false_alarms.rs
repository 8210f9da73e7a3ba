//! #37: ordinary traffic never stops msgx. Each way an ordinary feed, or an ordinary fault, was
//! taken for a store that forgot — found on the real services or by reading the code — is
//! pinned here on the real stores, one regression test each, named after it. A finding must be
//! proof (docs/architecture.md, "A finding is proof"); what only suggests a forget is a WARN.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use msgx::consistency::{self, Depth, Stores};
use msgx::fixtures;
use msgx::handlers::{Decision, FlightChange};
use msgx::ports::{Applying, FlightAudit, FlightStore, FlightsFence};
use msgx::store::flights::RedisFlights;
use msgx::store::mailbox::MysqlMailbox;
use msgx::store::pg::Pg;

/// The sentinel every second: what ordinary traffic leaves is compared many times over.
const SENTINEL_1S: &str = "[msgx.consistency-check]\ninterval = \"1s\"\n";

fn state(pg: &mut postgres::Client, id: i64) -> Option<(String, Option<String>)> {
    pg.query_opt("SELECT state, redis_record FROM proc_state WHERE msg_id = $1", &[&id])
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

fn succeeded(pg: &mut postgres::Client, id: i64) -> bool {
    state(pg, id).is_some_and(|(s, _)| s == "SUCCEEDED")
}

/// A daily-plan snapshot (SCHD-DNLD) of flights on `day` (`05MAR26`).
fn snapshot(seqn: u64, day: &str, flids: &[&str]) -> String {
    let body: String = flids
        .iter()
        .map(|f| {
            format!("<FLTR><FLID>{f}</FLID><FLNO>MU{f}</FLNO><SODT>{day}0900</SODT><STND>S{f}</STND></FLTR>")
        })
        .collect();
    fixtures::other(seqn, "SCHD", "DNLD", &format!("<SCHD><RECS>{}</RECS>{body}</SCHD>", flids.len()))
}

/// The three inputs found on the real services: a FLOP-STND whose only child is an element the
/// tolerant reader skips, a late row whose field a newer message already set, and a late
/// FLOP-STND for a flight a newer FDEL deleted. Each ends SUCCEEDED with nothing for Redis; the
/// sentinel compared them every second and stopped msgx ("redis behind … MSG_IDs 13, 115, 125").
#[test]
fn regression_ordinary_inputs_that_change_no_flight_are_no_finding() {
    let s = Services::migrated("");
    let msgx = Instance::run(&s, "a", SENTINEL_1S);
    let ids = s.insert_inbound(&[fixtures::flop_stnd(1, "F13", "B1")]);
    let vendor = s.insert_inbound(&[fixtures::flop(2, "STND", "F13", &[("XSTND", Some("9"))])])[0];
    let late = Open::insert(&s, &fixtures::flop_stnd(115, "F115", "OLD"));
    let newer = s.insert_inbound(&[fixtures::flop_stnd(120, "F115", "NEW")])[0];
    let stale = Open::insert(&s, &fixtures::flop_stnd(125, "F125", "GONE"));
    let deleted = s.insert_inbound(&[fixtures::flop(130, "FDEL", "F125", &[])])[0];
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(30), || [ids[0], vendor, newer, deleted]
        .iter()
        .all(|m| succeeded(&mut pg, *m))));
    // The newer ones applied and compared with the late ones still open; these commit now.
    assert!(sentinel_compared(&endpoint(&msgx), 3, Duration::from_secs(30)), "{}", msgx.log_text());
    let (late, stale) = (late.commit(), stale.commit());
    assert!(eventually(Duration::from_secs(30), || succeeded(&mut pg, late) && succeeded(&mut pg, stale)));
    for m in [vendor, late, stale] {
        // A vendor-only record restates the flight's FFID (journalled); the late ones change
        // nothing at all and record so.
        let (_, record) = state(&mut pg, m).unwrap();
        println!("msg {m}: redis_record {record:?}");
    }
    assert_eq!(state(&mut pg, late).unwrap().1, None, "superseded: nothing for Redis, none expected");
    assert_eq!(state(&mut pg, stale).unwrap().1, None, "deleted since: nothing for Redis, none expected");
    assert!(sentinel_compared(&endpoint(&msgx), 5, Duration::from_secs(30)), "{}", msgx.log_text());
    let log = msgx.log_text();
    assert!(alarms(&log).is_empty(), "no finding, no heal:\n{}", alarms(&log).join("\n"));
    assert!(!log.contains("forgot"), "{log}");
    let (code, out) = verify_all(&s);
    assert_eq!(code, Some(0), "{out}");
    println!("three ordinary inputs, 5 s of sentinel rounds at 1 s: 0 findings, 0 heals; verify --sample 1:\n{out}");
}

/// A TCP proxy in front of a Redis that loses the answers of the apply script, or the script
/// itself, as a network that drops a connection at the wrong moment does.
struct Proxy {
    port: u16,
    mode: Arc<AtomicU8>,
}

const PASS: u8 = 0;
/// The script reaches Redis and runs; its answer never comes back.
const LOSE_ANSWER: u8 = 1;
/// The script never reaches Redis; the connection drops.
const CUT: u8 = 2;

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(AtomicU8::new(PASS));
        let m = mode.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let m = m.clone();
                std::thread::spawn(move || Proxy::upstream(client, server, &m));
                std::thread::spawn(move || Proxy::copy(s2, c2));
            }
        });
        Proxy { port, mode }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    /// Client to server, watching for the apply script (`EVALSHA`).
    fn upstream(mut client: TcpStream, mut server: TcpStream, mode: &AtomicU8) {
        let mut buf = [0u8; 65536];
        loop {
            let n = match client.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let eval = buf[..n].windows(7).any(|w| w == b"EVALSHA");
            match mode.load(Ordering::SeqCst) {
                LOSE_ANSWER if eval => {
                    // The client's side goes first: the answer has nowhere to go; the script runs.
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    let _ = server.write_all(&buf[..n]);
                    std::thread::sleep(Duration::from_millis(300));
                    break;
                }
                CUT if eval => break,
                _ => {
                    if server.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = client.shutdown(std::net::Shutdown::Both);
        let _ = server.shutdown(std::net::Shutdown::Both);
    }

    fn copy(mut from: TcpStream, mut to: TcpStream) {
        let mut buf = [0u8; 65536];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
    }
}

fn stand(flid: &str, value: &str) -> Decision {
    let c =
        FlightChange { flid: flid.into(), set: vec![("STND".into(), value.into())], ..Default::default() };
    Decision { flights: vec![c], ..Default::default() }
}

/// #37 path 1: the apply token accepted only the first write whose answer was lost. Apply 2's
/// answer is lost (it landed); apply 3 is cut before Redis (it did not); apply 4 was refused
/// `MSGX_FORGOT` — Redis held apply 2's token, which the handle had dropped for apply 3's.
#[test]
fn regression_two_applies_whose_answers_were_lost_are_no_forget() {
    let s = Services::migrated("");
    let redis_port: u16 = s.cfg.redis_url.rsplit(':').next().unwrap().trim_end_matches('/').parse().unwrap();
    let proxy = Proxy::start(redis_port);
    let mut h = RedisFlights::connect(&proxy.url(), &s.cfg.redis_prefix).unwrap().fenced(1);
    h.apply(&Applying::unnamed_all(&[(1, &stand("F", "A"))])).unwrap();
    proxy.set(LOSE_ANSWER);
    let lost = h.apply(&Applying::unnamed_all(&[(2, &stand("F", "B"))])).unwrap_err();
    assert!(lost.is_unavailable(), "{lost}");
    // The handle hears of the loss when the proxy drops its side, before the proxy hands the
    // script on: on a loaded machine apply 3 and 4 overtook it, and the fence then refused it.
    let mut audit = RedisFlights::connect(&s.cfg.redis_url, &s.cfg.redis_prefix).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || audit.journal_has(&[2]).unwrap() == [true]),
        "apply 2 landed"
    );
    proxy.set(CUT);
    let cut = h.apply(&Applying::unnamed_all(&[(3, &stand("F", "C"))])).unwrap_err();
    assert!(cut.is_unavailable(), "{cut}");
    proxy.set(PASS);
    h.apply(&Applying::unnamed_all(&[(4, &stand("F", "D"))]))
        .expect("Redis holds a history this handle wrote: apply 2's");
    assert_eq!(audit.journal_has(&[1, 2, 3, 4]).unwrap(), [true, true, false, true], "2 landed, 3 did not");
    let need = msgx::ports::RoundNeed { flids: vec!["F".into()], ..Default::default() };
    let f = audit.prepare(&need, &[], now()).unwrap().flights["F"].clone();
    assert_eq!(f.fields.get("STND").map(String::as_str), Some("D"));
}

/// #37 path 1 (b): an older instance, frozen mid-round, applies after a new one took over and
/// read Redis's token. It was refused `MSGX_FORGOT` — and the new instance's own first apply
/// too when the old one's landed first. Now the new holder claims the flights before it reads
/// the token (the daemon's order), and the script tells a stale epoch it is fenced before it
/// compares tokens.
#[test]
fn regression_an_old_instance_applying_after_a_takeover_is_fenced_not_a_forget() {
    let s = Services::migrated("");
    let (url, prefix) = (&s.cfg.redis_url, &s.cfg.redis_prefix);
    let mut old = RedisFlights::connect(url, prefix).unwrap().fenced(1);
    old.apply(&Applying::unnamed_all(&[(1, &stand("F", "OLD"))])).unwrap();
    // The new holder: the flights claimed for its epoch, then the token read (its pass).
    let mut claimer = RedisFlights::connect(url, prefix).unwrap();
    claimer.claim(2).unwrap();
    let token = claimer.audit().unwrap().token;
    let mut new = RedisFlights::connect(url, prefix).unwrap().fenced(2).expecting(token);
    let refused = old.apply(&Applying::unnamed_all(&[(2, &stand("F", "STALE"))])).unwrap_err();
    assert!(refused.is_fenced(), "stale, not forgot: {refused}");
    new.apply(&Applying::unnamed_all(&[(3, &stand("F", "NEW"))]))
        .expect("the new holder's history is intact");
    let refused = old.apply(&Applying::unnamed_all(&[(4, &stand("F", "STALE"))])).unwrap_err();
    assert!(refused.is_fenced(), "after the new holder wrote too: {refused}");
}

/// Every key under `prefix` whose time to live is at most `within` is gone, as a quiet `within`
/// would leave Redis (what expires, expires; the rest stays).
fn time_passes(s: &Services, within: Duration) -> Vec<String> {
    let mut c = s.redis();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{}*", s.cfg.redis_prefix)).query(&mut c).unwrap();
    let mut gone = Vec::new();
    for k in keys {
        let ttl: i64 = redis::cmd("TTL").arg(&k).query(&mut c).unwrap();
        if ttl > 0 && ttl as u64 <= within.as_secs() {
            redis::cmd("DEL").arg(&k).query::<()>(&mut c).unwrap();
            gone.push(k);
        }
    }
    gone
}

/// #37 path 2 (and path 4's expired tombstone): a quiet week. The journal hash expired a week
/// after its last write while `journal:pruned` stayed, and the first check after it reported
/// "redis behind" for every journalled message above it; the version sample re-decided an
/// update of a flight whose tombstone had expired. Now the journal's three keys share one time
/// to live, and the sample looks only at messages younger than a tombstone lives.
#[test]
fn regression_a_quiet_week_leaves_no_journal_mark_that_claims_entries_it_lost() {
    let s = Services::migrated("");
    let mut msgx = Instance::run(&s, "a", "");
    let mut raws: Vec<String> =
        (1..=20).map(|i| fixtures::flop_stnd(i, &format!("Q{}", i % 4), &format!("S{i}"))).collect();
    raws.push(fixtures::flop(21, "FDEL", "Q1", &[]));
    let ids = s.insert_inbound(&raws);
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(30), || ids.iter().all(|m| succeeded(&mut pg, *m))));
    msgx.signal("-TERM");
    assert_eq!(msgx.wait(Duration::from_secs(20)), Some(0));
    let mut c = s.redis();
    let ttl = |k: &str, c: &mut redis::Connection| -> i64 {
        redis::cmd("TTL").arg(format!("{}{k}", s.cfg.redis_prefix)).query(c).unwrap()
    };
    let ttls: Vec<i64> =
        ["journal", "journal:done", "journal:pruned"].iter().map(|k| ttl(k, &mut c)).collect();
    assert!(ttls.iter().all(|t| *t > 0), "every journal key expires: {ttls:?}");
    assert!(ttls.iter().max().unwrap() - ttls.iter().min().unwrap() <= 2, "together: {ttls:?}");
    let gone = time_passes(&s, Duration::from_secs(8 * 86_400));
    pg.execute("UPDATE proc_state SET updated_at = updated_at - interval '8 days'", &[]).unwrap();
    println!("a quiet week: gone from Redis {gone:?}");
    assert!(gone.iter().any(|k| k.ends_with("journal:pruned")) && gone.iter().any(|k| k.contains("fver:Q1")));
    let (code, out) = verify_all(&s);
    assert_eq!(code, Some(0), "a quiet week is no forget:\n{out}");
    let msgx = Instance::run(&s, "b", SENTINEL_1S);
    let more =
        s.insert_inbound(&[fixtures::flop_stnd(30, "Q2", "AFTER"), fixtures::flop_stnd(31, "Q1", "BACK")]);
    assert!(eventually(Duration::from_secs(30), || more.iter().all(|m| succeeded(&mut pg, *m))));
    assert!(sentinel_compared(&endpoint(&msgx), 3, Duration::from_secs(30)), "{}", msgx.log_text());
    let log = msgx.log_text();
    assert!(alarms(&log).is_empty(), "{}", alarms(&log).join("\n"));
    let (code, out) = verify_all(&s);
    assert_eq!(code, Some(0), "and the journal is kept again from the next apply on:\n{out}");
}

/// #37 path 3: mailbox rows marked with msgx's processed value by someone else (the legacy
/// system before the install, a shadow deployment while msgx runs) counted as "PostgreSQL
/// forgot": msgx healed, refused and exited 6 on a first install, and processed those rows
/// while running. Now they are a suspicion: a WARN, a counter, the rows left alone.
#[test]
fn regression_rows_someone_else_marked_are_a_suspicion_never_a_heal() {
    let s = Services::migrated("");
    let legacy: Vec<i64> = (1..=30)
        .map(|i| insert_marked_elsewhere(&s, &fixtures::flop_stnd(i, "L1", &format!("L{i}"))))
        .collect();
    let mut msgx = Instance::run(&s, "a", SENTINEL_1S);
    assert!(msgx.wait_for_log("consistency: suspicion", Duration::from_secs(30)), "{}", msgx.log_text());
    let ours = s.insert_inbound(&[fixtures::flop_stnd(100, "M1", "OURS")])[0];
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(30), || succeeded(&mut pg, ours)));
    let shadow = insert_marked_elsewhere(&s, &fixtures::flop_stnd(101, "M1", "SHADOW"));
    let after = s.insert_inbound(&[fixtures::flop_stnd(102, "M2", "AFTER")])[0];
    assert!(eventually(Duration::from_secs(30), || succeeded(&mut pg, after)));
    let named = format!("MSG_IDs {shadow}");
    assert!(
        msgx.wait_for_log(&named, Duration::from_secs(10)),
        "the shadow row is named: {}",
        msgx.log_text()
    );
    assert_eq!(msgx.wait(Duration::from_secs(3)), None, "still running: no exit 6");
    let log = msgx.log_text();
    assert!(alarms(&log).is_empty(), "{}", alarms(&log).join("\n"));
    for m in legacy.iter().chain([&shadow]) {
        assert_eq!(state(&mut pg, *m), None, "msg {m}, marked by someone else, is never msgx's");
    }
    let (code, out) = verify_all(&s);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("SUSPICION marked-unrecorded"), "{out}");
    let warn = log.lines().filter(|l| l.contains("consistency: suspicion")).collect::<Vec<_>>().join("\n");
    println!(
        "rows someone else marked: 31, none processed, 0 heals; the WARN lines:\n{warn}\nmsgx verify:\n{out}"
    );
}

/// #37 path 4: the daily version sample re-decided a stale snapshot — a SCHD-DNLD of one day
/// committed late, after a newer one of another day had set the generation, so never applied —
/// and called Redis behind for the flights it would have written.
#[test]
fn regression_the_version_sample_does_not_redecide_a_snapshot_never_applied() {
    let s = Services::migrated("");
    let mut msgx = Instance::run(&s, "a", SENTINEL_1S);
    let stale = Open::insert(&s, &snapshot(1, "05MAR26", &["71", "72"]));
    let newer = s.insert_inbound(&[snapshot(2, "06MAR26", &["73", "74"])])[0];
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(30), || succeeded(&mut pg, newer)));
    // Compared while the stale snapshot is still open; it commits now.
    assert!(sentinel_compared(&endpoint(&msgx), 3, Duration::from_secs(30)), "{}", msgx.log_text());
    let stale = stale.commit();
    assert!(eventually(Duration::from_secs(30), || succeeded(&mut pg, stale)));
    assert_eq!(state(&mut pg, newer).unwrap().1.as_deref(), Some("generation"));
    assert_eq!(state(&mut pg, stale).unwrap().1.as_deref(), Some("journal"), "journalled, not applied");
    let flagged = "SELECT snapshot_stale FROM proc_state WHERE msg_id = $1";
    assert_eq!(pg.query_one(flagged, &[&stale]).unwrap().get::<_, Option<bool>>(0), Some(true), "V020");
    let (code, out) = verify_all(&s);
    assert_eq!(code, Some(0), "{out}");
    assert!(alarms(&msgx.log_text()).is_empty(), "{}", msgx.log_text());
    // #56 (seeds 13255, 14834): a rebuild replays in MSG_ID order, the stale snapshot first;
    // before V020 it laid day 5's flights on, which the pump never applied.
    msgx.signal("-TERM");
    assert_eq!(msgx.wait(Duration::from_secs(20)), Some(0));
    let before = redis_flights(&s);
    empty_redis(&s);
    let (code, out) = msgx_cli(&s, &s.cfg.pg_url, &["rebuild-flights", "--yes"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(redis_flights(&s), before, "only the newer snapshot's flights: {out}");
    assert_eq!(before.keys().collect::<Vec<_>>(), ["73", "74"]);
}

/// #37 path 6: the PostgreSQL heal enqueued every visible mailbox row above what PostgreSQL
/// knew and moved the watermark past a lower ID whose transaction was still open — the commit
/// grace skipped (§4.9 g): the late row came after the rows above it. Now the heal enqueues the
/// rows up to the highest one Redis proves msgx settled, and the watermark stops there.
#[test]
fn regression_the_postgres_heal_never_moves_the_watermark_past_a_row_not_processed() {
    let s = Services::migrated("");
    let stats = Arc::new(msgx::stats::Stats::default());
    let ids = s.insert_inbound(
        &(1..=10).map(|i| fixtures::flop_stnd(i, "W1", &format!("S{i}"))).collect::<Vec<_>>(),
    );
    let mut poller = s.poller(&stats);
    // The daemon's journal keep (the helper's pump keeps nothing).
    let flights = RedisFlights::connect(&s.cfg.redis_url, &s.cfg.redis_prefix)
        .unwrap()
        .keeping(s.cfg.pipeline.journal_keep);
    let mut pump = msgx::pump::Pump::new(
        Pg::connect(&s.cfg.pg_url).unwrap(),
        MysqlMailbox::connect(&s.cfg.mysql_url, &s.cfg.inbound).unwrap(),
        flights,
        &s.cfg.pipeline,
        msgx::codec::Rulebook::this_release(),
        stats.clone(),
        std::sync::Arc::new(msgx::clock::SystemClock),
    );
    poller.round(now()).unwrap();
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(20), || {
        pump.round(now()).unwrap();
        ids.iter().all(|m| succeeded(&mut pg, *m))
    }));
    pump.round(now()).unwrap(); // idle: Redis is told what PostgreSQL holds
                                // Own PostgreSQL forgets its last five outcomes (a replica promoted with a lost tail).
    pg.execute("DELETE FROM proc_state WHERE msg_id > $1", &[&ids[4]]).unwrap();
    pg.execute("UPDATE ingress_watermark SET last_id = $1", &[&ids[4]]).unwrap();
    let open = Open::insert(&s, &fixtures::flop_stnd(11, "W2", "OPEN")); // committed later
    let above = s.insert_inbound(&[fixtures::flop_stnd(12, "W2", "ABOVE")])[0];
    let (mut apg, mut mb, mut fl) = (
        Pg::connect(&s.cfg.pg_url).unwrap(),
        MysqlMailbox::connect(&s.cfg.mysql_url, &s.cfg.inbound).unwrap(),
        RedisFlights::connect(&s.cfg.redis_url, &s.cfg.redis_prefix).unwrap(),
    );
    let mut st = Stores {
        pg: &mut apg,
        mailbox: &mut mb,
        flights: &mut fl,
        beat: Default::default(),
        limits: Default::default(),
        rules: msgx::codec::Rulebook::this_release(),
    };
    let report = consistency::check(&mut st, Depth::Full { sample: 0.0 }, now()).unwrap();
    let f =
        report.finding(consistency::FindingKind::JournalUnknown).expect("Redis proves what postgres lost");
    assert_eq!((f.count, f.ids.first().copied()), (5, Some(ids[5])));
    let healed = consistency::heal(&mut st, &report, now()).unwrap();
    assert_eq!(healed.range, Some((ids[5], ids[9])));
    assert_eq!(st.pg.watermark().unwrap(), ids[9], "not past the open row {}", open.1);
    assert_eq!(st.pg.unknown(&[above]).unwrap(), [above], "the row above is the poller's, behind the gap");
    let open = open.commit();
    assert!(eventually(Duration::from_secs(20), || {
        poller.round(now()).unwrap();
        pump.round(now()).unwrap();
        succeeded(&mut pg, open) && succeeded(&mut pg, above)
    }));
    let order: Vec<i64> = pg
        .query(
            "SELECT msg_id FROM proc_state WHERE msg_id IN ($1, $2) ORDER BY updated_at, msg_id",
            &[&open, &above],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order, [open, above], "the late row in MSG_ID order, as the commit grace keeps it");
}

/// #37 path 5: the heal budget was five heals per process for its whole life, and counted an
/// outage during a heal and a false finding alike. Now a heal that changed something is
/// recorded in own PostgreSQL and counted per hour by every instance; a store away while the
/// stores are compared is an outage, waited out, never a heal.
#[test]
fn regression_a_store_away_during_the_pass_is_no_heal_and_heals_are_limited_by_rate() {
    let mysql = Private::start("mysql");
    let s = Services::migrated_on("", common::Stores { mysql: Some(mysql.url()), ..Default::default() });
    let budget = format!("{SENTINEL_1S}max-heals-per-hour = 1\n");
    let mut a = Instance::run(&s, "a", &budget);
    let ids = s.insert_inbound(
        &(1..=20).map(|i| fixtures::flop_stnd(i, &format!("H{}", i % 3), "X")).collect::<Vec<_>>(),
    );
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(30), || ids.iter().all(|m| succeeded(&mut pg, *m))));
    a.signal("-TERM");
    assert_eq!(a.wait(Duration::from_secs(20)), Some(0));
    // While msgx is down: Redis emptied, and the mailbox away when it starts again.
    empty_redis(&s);
    mysql.stop();
    let mut b = Instance::run(&s, "b", &budget);
    // Compared again after its pause (1 s, then doubling) and still away: an outage twice.
    let tried = |b: &Instance| b.log_text().matches("an outage, not a heal").count();
    assert!(eventually(Duration::from_secs(30), || tried(&b) >= 2), "{}", b.log_text());
    let heals = |pg: &mut postgres::Client| count(pg, "SELECT count(*) FROM consistency_heal");
    assert_eq!(heals(&mut pg), 0, "an outage is no heal");
    assert!(!b.log_text().contains("started epoch"), "no stage on stores never compared");
    mysql.restart();
    assert!(b.wait_for_log("healed redis:", Duration::from_secs(60)), "{}", b.log_text());
    assert!(b.wait_for_log("started epoch", Duration::from_secs(30)), "{}", b.log_text());
    assert_eq!(heals(&mut pg), 1);
    let (_, status) = msgx_cli(&s, &s.cfg.pg_url, &["status"]);
    assert!(status.contains("heals in the last hour: 1 of at most"), "{status}");
    // A second forget within the hour: the budget is spent, a person decides.
    empty_redis(&s);
    assert_eq!(b.wait(Duration::from_secs(60)), Some(6), "{}", b.log_text());
    let log = b.log_text();
    assert!(
        log.contains(
            "1 heal(s) in the last hour, the most msgx.consistency-check.max-heals-per-hour (1) allows"
        ),
        "{log}"
    );
    let outage = log.lines().filter(|l| l.contains("an outage, not a heal")).count();
    println!("a store away during the pass: {outage} WARN(s), 0 heals counted; then 1 heal; the second forget within the hour: exit 6\n{status}");
}

/// #38 (the heal's part, found while fixing #37): `msgx rebuild-flights --yes` checked the lease
/// once and then wrote unfenced. It now takes the lease as an instance does — refused while one
/// holds it —, writes under its epoch and gives the lease back; and a heal whose epoch a newer
/// holder superseded writes nothing (tests/flights_store.rs, `a_restore_by_a_superseded_epoch_writes_nothing`).
#[test]
fn regression_rebuild_flights_takes_the_lease_and_writes_fenced() {
    let s = Services::migrated("");
    let mut a = Instance::run(&s, "a", "");
    let ids = s.insert_inbound(&[fixtures::flop_stnd(1, "R1", "A"), fixtures::flop_stnd(2, "R2", "B")]);
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(30), || ids.iter().all(|m| succeeded(&mut pg, *m))));
    let (code, out) = msgx_cli(&s, &s.cfg.pg_url, &["rebuild-flights", "--yes"]);
    assert_eq!(code, Some(1), "refused while an instance runs: {out}");
    assert!(out.contains("an instance holds the lease"), "{out}");
    a.signal("-TERM");
    assert_eq!(a.wait(Duration::from_secs(20)), Some(0));
    empty_redis(&s);
    let epoch = |pg: &mut postgres::Client| count(pg, "SELECT epoch FROM msgx_lease");
    let before = epoch(&mut pg);
    let (code, out) = msgx_cli(&s, &s.cfg.pg_url, &["rebuild-flights", "--yes"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("rewrote 2 flight(s)"), "{out}");
    assert_eq!(epoch(&mut pg), before + 1, "it held the lease under an epoch of its own");
    let mut c = s.redis();
    let held: i64 =
        redis::cmd("GET").arg(format!("{}lease:epoch", s.cfg.redis_prefix)).query(&mut c).unwrap();
    assert_eq!(held, before + 1, "the flights were claimed for it");
    let holder = pg
        .query_one("SELECT holder IS NULL OR expires_at <= clock_timestamp() FROM msgx_lease", &[])
        .unwrap();
    assert!(holder.get::<_, bool>(0), "and the lease was given back");
    assert_eq!(redis_flights(&s).len(), 2);
}
