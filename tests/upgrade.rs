//! A new release takes over a live pipeline from the one before (#52), on the real services.
//! Two builds run side by side: the **previous** release (the commit pinned in
//! `packaging/RELEASES`, built by `tests/support/releases.sh` as `msgx-previous` in the main
//! target directory) and the build under test. The **next** release is a value (#65): this
//! release's rulebook plus one mapping (FLOP-STND also reads `<XSTND>`, the rules version one
//! up), its daemon run in the test's process.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use msgx::fixtures;
use mysql::prelude::Queryable;

/// The other releases' binaries.
struct Releases {
    previous: PathBuf,
}

fn releases() -> Releases {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/releases.sh");
    let out = std::process::Command::new(script).output().expect("run tests/support/releases.sh");
    assert!(out.status.success(), "releases.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let at: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let path =
        |name: &str| PathBuf::from(at.get(name).unwrap_or_else(|| panic!("no {name} release in:\n{text}")));
    Releases { previous: path("previous") }
}

/// The sentinel every second: a rolling upgrade is compared many times over.
const CHECKED: &str = "[msgx.consistency-check]\ninterval = \"1s\"\n";

/// The upstream, all along: a FLOP-STND every 20 ms for one of 20 flights, each with a value of
/// its own (so each message changes its flight: one event each) and the vendor element
/// `<XSTND>` the previous and this release skip.
struct Traffic {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<i64>>,
}

impl Traffic {
    fn start(s: &Services) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let url = s.cfg.mysql_url.clone();
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut my = mysql::Conn::new(mysql::Opts::from_url(&url).unwrap()).unwrap();
            let mut ids = Vec::new();
            let mut seqn = 0u64;
            while !flag.load(Ordering::Relaxed) {
                seqn += 1;
                let flid = format!("U{}", seqn % 20);
                let value = format!("S{seqn}");
                let raw =
                    fixtures::flop(seqn, "STND", &flid, &[("STND", Some(&value)), ("XSTND", Some("9"))]);
                my.exec_drop(
                    "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')",
                    (raw,),
                )
                .unwrap();
                ids.push(my.last_insert_id() as i64);
                std::thread::sleep(Duration::from_millis(20));
            }
            ids
        });
        Traffic { stop, handle }
    }

    fn stop(self) -> Vec<i64> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("the traffic thread")
    }
}

/// One host: the instance it runs, and the logs of those it ran.
struct Host {
    name: &'static str,
    running: Option<Instance>,
    logs: Vec<(String, String)>,
}

impl Host {
    fn new(name: &'static str) -> Host {
        Host { name, running: None, logs: Vec::new() }
    }

    /// Starts `bin` on this host; waits until it holds the lease (`active`) or stands by.
    fn start(&mut self, s: &Services, bin: &Path, release: &str, active: bool) {
        assert!(self.running.is_none(), "{} runs an instance already", self.name);
        let name = format!("{}-{release}-{}", self.name, self.logs.len());
        let i = Instance::run_release(s, bin, &name, CHECKED, &[]);
        let want = if active { "lease acquired" } else { "standby: lease held by" };
        assert!(i.wait_for_log(want, Duration::from_secs(60)), "{name}: no `{want}`:\n{}", i.log_text());
        self.running = Some(i);
    }

    /// Stops this host's instance as systemd does (SIGTERM): it must end cleanly.
    fn stop(&mut self) {
        let mut i = self.running.take().expect("an instance to stop");
        i.signal("-TERM");
        let code = i.wait(Duration::from_secs(60));
        self.logs.push((i.name.clone(), i.log_text()));
        assert_eq!(code, Some(0), "{} did not stop cleanly:\n{}", i.name, i.log_text());
    }

    /// Waits until this host's instance took the lease over.
    fn takes_over(&self) {
        let i = self.running.as_ref().expect("an instance");
        assert!(
            i.wait_for_log("lease acquired", Duration::from_secs(60)),
            "{}: no takeover:\n{}",
            i.name,
            i.log_text()
        );
    }

    fn all_logs(&mut self) -> Vec<(String, String)> {
        if let Some(i) = &self.running {
            self.logs.push((i.name.clone(), i.log_text()));
        }
        std::mem::take(&mut self.logs)
    }
}

/// Waits until `n` more messages are SUCCEEDED than now: the pipeline serves.
fn serves(s: &Services, n: i64) {
    let q = "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'";
    let mut pg = s.pg();
    let before = count(&mut pg, q);
    assert!(
        eventually(Duration::from_secs(60), || count(&mut pg, q) >= before + n),
        "the pipeline stopped serving at {before} SUCCEEDED"
    );
}

/// Every message SUCCEEDED, every event SENT and on the topic once per `event_key`, in MSG_ID
/// order per flight; nothing DEAD; no heal; no consistency finding in any log; `verify
/// --sample 1` of every release exits 0. Returns one line of figures.
fn nothing_lost_no_alarm(s: &Services, ids: &[i64], logs: &[(String, String)], bins: &[&Path]) -> String {
    let all = ids.len() as i64;
    let mut pg = s.pg();
    let done = eventually(Duration::from_secs(120), || {
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'") == all
            && count(&mut pg, "SELECT count(*) FROM msg_event WHERE target = 'KAFKA:msg' AND state = 'SENT'")
                == all
    });
    let states = pg.query("SELECT state, count(*) FROM proc_state GROUP BY state", &[]).unwrap();
    let states: Vec<(String, i64)> = states.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert!(done, "not every message settled and delivered: {states:?} of {all}");
    assert_eq!(count(&mut pg, "SELECT count(*) FROM consistency_heal"), 0, "no heal");
    for (name, log) in logs {
        assert!(alarms(log).is_empty(), "{name}: {:?}", alarms(log));
        assert!(!log.contains("MSGX_FORGOT"), "{name} took a store for one that forgot:\n{log}");
    }
    let got = consume_event_keys(&s.cfg.kafka_brokers, s.topic(), ids.len(), Duration::from_secs(60));
    let (mut seen, mut last) = (BTreeSet::new(), BTreeMap::<String, i64>::new());
    for r in &got {
        let key = r.header("event_key").expect("an event_key").to_string();
        if !seen.insert(key) {
            continue;
        }
        let m = r.payload["msg_id"].as_i64().expect("msg_id");
        let before = last.insert(r.key.clone(), m).unwrap_or(0);
        assert!(m > before, "flight {}: message {m} delivered after {before}", r.key);
    }
    let delivered: BTreeSet<i64> = got.iter().filter_map(|r| r.payload["msg_id"].as_i64()).collect();
    assert_eq!(delivered, ids.iter().copied().collect(), "every message on the topic");
    for bin in bins {
        let (code, out) = msgx_cli_of(s, bin, &s.cfg.pg_url, &["verify", "--sample", "1"]);
        assert_eq!(code, Some(0), "{}: verify --sample 1:\n{out}", bin.display());
    }
    format!(
        "{all} messages, {} records read ({} duplicates), {} flights in order",
        got.len(),
        got.len() - seen.len(),
        last.len()
    )
}

/// #52: the previous release serving, this one as its standby; this release migrates while the
/// previous one serves (it keeps serving on the migrated schema), the previous one stops and
/// this one takes over, the second host is upgraded. Then the way back — the previous release
/// starts on the schema this one migrated and takes over — and forward again, with traffic all
/// along: nothing lost, order per flight kept, nothing DEAD, no finding, no heal.
#[test]
fn a_rolling_upgrade_with_a_standby_and_the_way_back_lose_nothing_and_raise_no_alarm() {
    let r = releases();
    let this = Path::new(env!("CARGO_BIN_EXE_msgx"));
    let s = Services::new("");
    let (code, out) = msgx_cli_of(&s, &r.previous, &s.cfg.pg_url, &["migrate"]);
    assert_eq!(code, Some(0), "the previous release migrates a new database:\n{out}");
    let traffic = Traffic::start(&s);
    let (mut h1, mut h2) = (Host::new("h1"), Host::new("h2"));
    h1.start(&s, &r.previous, "previous", true);
    h2.start(&s, &r.previous, "previous", false);
    serves(&s, 50);
    // Host 2: the package upgraded, the schema migrated while host 1 serves on.
    h2.stop();
    let (code, out) = msgx_cli_of(&s, this, &s.cfg.pg_url, &["migrate"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("applied V"), "this release has a migration the previous one does not know:\n{out}");
    serves(&s, 50);
    h2.start(&s, this, "this", false);
    h1.stop();
    h2.takes_over();
    serves(&s, 50);
    h1.start(&s, this, "this", false);
    serves(&s, 50);
    // The way back: the previous release on the schema this one migrated.
    h1.stop();
    h1.start(&s, &r.previous, "previous", false);
    let back = h1.running.as_ref().unwrap().log_text();
    assert!(
        back.contains("newer than this release"),
        "the previous release says it runs on a newer schema:\n{back}"
    );
    h2.stop();
    h1.takes_over();
    serves(&s, 50);
    h2.start(&s, &r.previous, "previous", false);
    // And forward again.
    h2.stop();
    h2.start(&s, this, "this", false);
    h1.stop();
    h2.takes_over();
    h1.start(&s, this, "this", false);
    serves(&s, 50);
    let ids = traffic.stop();
    let logs: Vec<(String, String)> = h1.all_logs().into_iter().chain(h2.all_logs()).collect();
    let figures = nothing_lost_no_alarm(&s, &ids, &logs, &[&r.previous, this]);
    println!("rolling upgrade, way back and forward again, {} instances: {figures}", logs.len());
}

/// A flight's fields as Redis holds them, through `msgx flight --json` of `bin`.
fn fields(s: &Services, bin: &Path, flid: &str) -> BTreeMap<String, String> {
    let (code, out) = msgx_cli_of(s, bin, &s.cfg.pg_url, &["flight", flid, "--json"]);
    assert_eq!(code, Some(0), "msgx flight {flid}:\n{out}");
    let json = &out[out.find('{').unwrap_or_else(|| panic!("no JSON in:\n{out}"))..];
    let v: serde_json::Value = serde_json::Deserializer::from_str(json)
        .into_iter()
        .next()
        .expect("a JSON value")
        .unwrap_or_else(|e| panic!("{e}:\n{out}"));
    let list = v["fields"].as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|f| {
            (f["name"].as_str().unwrap().to_string(), f["value"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

/// `msgx verify --sample 1` as an instance carrying `rules` runs it: the report.
fn verify_under(s: &Services, rules: &Arc<msgx::codec::Rulebook>) -> msgx::consistency::Report {
    use msgx::store::{flights::RedisFlights, mailbox::MysqlMailbox, pg::Pg};
    let (mut pg, mut mb, mut fl) = (
        Pg::connect(&s.cfg.pg_url).unwrap(),
        MysqlMailbox::connect(&s.cfg.mysql_url, &s.cfg.inbound).unwrap(),
        RedisFlights::connect(&s.cfg.redis_url, &s.cfg.redis_prefix).unwrap(),
    );
    let mut st = msgx::consistency::Stores {
        pg: &mut pg,
        mailbox: &mut mb,
        flights: &mut fl,
        beat: Default::default(),
        limits: msgx::codec::Limits::of(&s.cfg.pipeline),
        rules: rules.clone(),
    };
    msgx::consistency::check(&mut st, msgx::consistency::Depth::Full { sample: 1.0 }, now()).unwrap()
}

/// #52, the probe: this release processed 300 FLOPs carrying `<XSTND>9</XSTND>`, which
/// it skips; the next one maps it. The next release's check (`verify --sample 1`) counts those
/// messages as decided under other rules (no `versions-behind`), it starts without a finding or
/// a heal, and after Redis is emptied under it, it rebuilds what was announced: flight 7050
/// without XSTND (no event announced one), flight 7200 with the XSTND an event of its own
/// announced. #65: the next release is a rulebook value, its daemon run in this process.
#[test]
fn the_next_release_with_one_more_mapping_raises_no_finding_and_heals_only_what_was_announced() {
    let next = fixtures::next_release();
    let this = Path::new(env!("CARGO_BIN_EXE_msgx"));
    let s = Services::migrated("");
    let raws: Vec<String> = (0..300)
        .map(|i| {
            fixtures::flop(
                i + 1,
                "STND",
                &format!("{}", 7000 + i),
                &[("STND", Some("12")), ("XSTND", Some("9"))],
            )
        })
        .collect();
    s.insert_inbound(&raws);
    let mut a = Instance::run(&s, "this", CHECKED);
    settled(&s, &a, &[("SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'", 300), (SENT, 300)]);
    let (code, out) = msgx_cli_of(&s, this, &s.cfg.pg_url, &["verify", "--sample", "1"]);
    assert_eq!(code, Some(0), "{out}");
    a.signal("-TERM");
    assert_eq!(a.wait(Duration::from_secs(60)), Some(0), "{}", a.log_text());
    let r = verify_under(&s, &next);
    assert!(r.is_clean(), "the next release finds nothing: {r:?}");
    assert_eq!((r.other_rules, r.sampled), (300, 0), "decided under other rules, none decided again");
    let log = captured::log();
    let mut cfg = s.cfg.clone();
    cfg.pipeline.check_interval = Duration::from_secs(1); // CHECKED
    let (stop, daemon) = start_daemon_with(&cfg, next.clone());
    assert!(log.wait_for("lease acquired", Duration::from_secs(60)), "{}", log.text());
    // A new message under the next release's rules: its event announces XSTND.
    s.insert_inbound(&[fixtures::flop(301, "STND", "7200", &[("STND", Some("14")), ("XSTND", Some("10"))])]);
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(60), || count(&mut pg, SENT) == 301), "{}", log.text());
    let recorded = "SELECT rules_version FROM proc_state WHERE msg_id = (SELECT max(msg_id) FROM proc_state)";
    let version: Option<i32> = pg.query_one(recorded, &[]).unwrap().get(0);
    assert_eq!(version, Some(next.version() as i32), "decided under the next release's rules");
    // The sentinel compares every second: three rounds on the next release's rules.
    assert!(log.wait_for(LISTENING, Duration::from_secs(30)), "{}", log.text());
    let ops = listening_on(&log.text()).unwrap();
    assert!(sentinel_compared(&ops, 3, Duration::from_secs(30)), "{}", log.text());
    assert_eq!(
        count(&mut pg, "SELECT count(*) FROM consistency_heal"),
        0,
        "no heal at the start:\n{}",
        log.text()
    );
    assert!(alarms(&log.text()).is_empty(), "{:?}", alarms(&log.text()));
    // Redis emptied under the next release: a real loss, healed from what was announced.
    assert!(empty_redis(&s) > 0);
    assert!(log.wait_for("healed redis:", Duration::from_secs(60)), "{}", log.text());
    let f7050 = fields(&s, this, "7050");
    assert_eq!(f7050.get("STND").map(String::as_str), Some("12"), "{f7050:?}");
    assert!(!f7050.contains_key("XSTND"), "no event announced XSTND for 7050: {f7050:?}");
    let f7200 = fields(&s, this, "7200");
    assert_eq!(
        f7200.get("XSTND").map(String::as_str),
        Some("10"),
        "announced by message 301's event: {f7200:?}"
    );
    let r = verify_under(&s, &next);
    assert!(r.is_clean(), "{r:?}");
    let text = log.text();
    let heal = text.lines().find(|l| l.contains("healed redis:")).unwrap_or_default();
    assert!(
        heal.contains(&format!(
            "300 message(s) decided under other rules laid on as announced, 0 decided again under rules {}",
            next.version()
        )),
        "{heal}"
    );
    drop(stop);
    daemon.join().expect("the daemon's thread").expect("the next release stops cleanly");
    assert!(log.wait_for("lease released", Duration::from_secs(1)), "{text}");
    println!("next release: {heal}");
}

/// #65, `msgx rules apply` on the real services: this release processed 40 FLOPs carrying
/// `<XSTND>`, which it skips. Its `msgx rules apply --since 1` shows that nothing differs under
/// its own rules. The next release serves; its job is asked while it does (as its own
/// `msgx rules apply --since 1 --yes` asks it): its sentinel stops the stages, its pass decides
/// the 40 messages again under its rules under the lease it holds, writes Redis, and tells one
/// event per flight — each under its message, with a new `event_key`, valid against the
/// published schema the broker enforces — and the stages go on. Redis, the topic and the
/// next release's check then agree.
#[test]
fn the_next_releases_rules_applied_to_old_messages_tell_each_difference_on_the_real_services() {
    use msgx::ports::RulesJobs;
    let next = fixtures::next_release();
    let this = Path::new(env!("CARGO_BIN_EXE_msgx"));
    let s = Services::migrated("");
    let raws: Vec<String> = (0..40)
        .map(|i| {
            fixtures::flop(
                i + 1,
                "STND",
                &format!("{}", 8000 + i),
                &[("STND", Some("12")), ("XSTND", Some("9"))],
            )
        })
        .collect();
    s.insert_inbound(&raws);
    let mut a = Instance::run(&s, "this", CHECKED);
    settled(&s, &a, &[("SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'", 40), (SENT, 40)]);
    a.signal("-TERM");
    assert_eq!(a.wait(Duration::from_secs(60)), Some(0), "{}", a.log_text());
    let (code, out) = msgx_cli_of(&s, this, &s.cfg.pg_url, &["rules", "apply", "--since", "1"]);
    assert_eq!(code, Some(2), "a preview refuses to act:\n{out}");
    assert!(out.contains("40 message(s) from the first decided again under rules 1 (0 of them decided under other rules before): 0 flight(s) differ, 0 event(s) told"), "{out}");
    let log = captured::log();
    let mut cfg = s.cfg.clone();
    cfg.pipeline.check_interval = Duration::from_secs(1); // CHECKED
    let (stop, daemon) = start_daemon_with(&cfg, next.clone());
    assert!(log.wait_for("lease acquired", Duration::from_secs(60)), "{}", log.text());
    let mut own = msgx::store::pg::Pg::connect(&s.cfg.pg_url).unwrap();
    let job = own.ask_rules_apply(1, next.version(), now()).unwrap();
    assert!(log.wait_for("rules applied job=", Duration::from_secs(60)), "{}", log.text());
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(60), || count(&mut pg, SENT) == 80), "{}", log.text());
    let records = consume(s.topic(), 80, Duration::from_secs(30));
    let told: Vec<&Consumed> =
        records.iter().filter(|r| r.header("event_key").is_some_and(|k| k.contains(".2000000."))).collect();
    assert_eq!(told.len(), 40, "one event per flight, a new event_key each: {records:?}");
    for r in &told {
        let m = r.header("msg_id").unwrap();
        assert_eq!(r.payload["msg_id"].to_string(), m, "told under its message: {r:?}");
        assert_eq!(
            r.payload["changes"],
            serde_json::json!([{"field": "XSTND", "old": null, "new": "9"}]),
            "{r:?}"
        );
        let key = r.header("event_key").unwrap();
        assert!(key.starts_with(&format!("{m}.2000000.")), "{key}");
    }
    // The stages went on: a new message, decided under the next release's rules.
    s.insert_inbound(&[fixtures::flop(41, "STND", "8003", &[("STND", Some("14")), ("XSTND", Some("10"))])]);
    assert!(eventually(Duration::from_secs(60), || count(&mut pg, SENT) == 81), "{}", log.text());
    let f = fields(&s, this, "8007");
    assert_eq!(f.get("XSTND").map(String::as_str), Some("9"), "{f:?}");
    assert_eq!(fields(&s, this, "8003").get("XSTND").map(String::as_str), Some("10"));
    let other = "SELECT count(*) FROM proc_state WHERE rules_version IS DISTINCT FROM 2";
    assert_eq!(count(&mut pg, other), 0, "every message now decided under rules 2");
    let r = verify_under(&s, &next);
    assert!(r.is_clean() && r.other_rules == 0, "{r:?}");
    let (code, out) = msgx_cli_of(&s, this, &s.cfg.pg_url, &["rules", "list"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("job_id={} since=1 rules=2 state=DONE", job.job_id)), "{out}");
    assert!(out.contains("40 flight(s) differ, 40 event(s) told"), "{out}");
    // A job of rules no instance carries waits, and `msgx status` says so.
    let waiting = own.ask_rules_apply(5, 9, now()).unwrap();
    let (code, out) = msgx_cli_of(&s, this, &s.cfg.pg_url, &["status"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("rules apply jobs open: 1"), "{out}");
    assert!(out.contains(&format!("job_id={} since=5 rules=9 OPEN since", waiting.job_id)), "{out}");
    let (code, out) = msgx_cli_of(&s, this, &s.cfg.pg_url, &["status", "--json"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("\"job_id\": {}", waiting.job_id)), "{out}");
    let text = log.text();
    assert!(alarms(&text).is_empty(), "{:?}", alarms(&text));
    assert_eq!(count(&mut pg, "SELECT count(*) FROM consistency_heal"), 0, "a job is no heal:\n{text}");
    drop(stop);
    daemon.join().expect("the daemon's thread").expect("the next release stops cleanly");
    let applied = text.lines().find(|l| l.contains("rules applied job=")).unwrap_or_default();
    println!("next release: {applied}");
    println!("told: key={} headers={:?} value={}", told[0].key, told[0].headers, told[0].payload);
}

/// #68, releases side by side: this release records a daily-plan snapshot it found stale (V020,
/// `snapshot_stale`: a lower MSG_ID committed after a newer snapshot moved the plan's
/// generation), and the previous release, on the same schema, heals a Redis that forgot without
/// laying that snapshot on. A release that read it back as a plain `journal` (0.1.0 did) would
/// have brought its flight back in the heal: a flight the AODB's newer plan never had.
#[test]
fn a_stale_snapshot_this_release_recorded_is_not_laid_on_by_the_previous_releases_heal() {
    let r = releases();
    let this = Path::new(env!("CARGO_BIN_EXE_msgx"));
    let s = Services::new("commit-grace = \"1s\"");
    let (code, out) = msgx_cli_of(&s, this, &s.cfg.pg_url, &["migrate"]);
    assert_eq!(code, Some(0), "{out}");
    let mut a = Instance::run_release(&s, this, "this", "", &[]);
    let succeeded = "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'";
    let late = Open::insert(&s, &fixtures::schd(1, "DNLD", &[("A1", "05MAR260900")]));
    s.insert_inbound(&[fixtures::schd(2, "DNLD", &[("B1", "05MAR261000")])]);
    settled(&s, &a, &[(succeeded, 1)]);
    let late = late.commit();
    settled(&s, &a, &[(succeeded, 2)]);
    let mut pg = s.pg();
    let flagged = "SELECT snapshot_stale FROM proc_state WHERE msg_id = $1";
    assert_eq!(pg.query_one(flagged, &[&late]).unwrap().get::<_, Option<bool>>(0), Some(true));
    let flights = |s: &Services| redis_flights(s).into_keys().collect::<Vec<String>>();
    assert_eq!(flights(&s), ["B1"], "the stale snapshot changed nothing");
    a.signal("-TERM");
    assert_eq!(a.wait(Duration::from_secs(30)), Some(0), "{}", a.log_text());
    assert!(empty_redis(&s) > 0, "Redis forgot");
    let mut b = Instance::run_release(&s, &r.previous, "previous", "", &[]);
    assert!(b.wait_for_log("healed redis", Duration::from_secs(60)), "{}", b.log_text());
    assert!(b.wait_for_log("lease acquired", Duration::from_secs(30)), "{}", b.log_text());
    assert_eq!(
        flights(&s),
        ["B1"],
        "the previous release's heal laid the stale snapshot on:\n{}",
        b.log_text()
    );
    let (code, out) = msgx_cli_of(&s, &r.previous, &s.cfg.pg_url, &["verify", "--sample", "1"]);
    assert_eq!(code, Some(0), "{out}");
    b.signal("-TERM");
    assert_eq!(b.wait(Duration::from_secs(30)), Some(0), "{}", b.log_text());
}
