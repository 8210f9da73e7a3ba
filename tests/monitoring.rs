//! The lines docs/monitoring.md tells operators to alert on, as a running `msgx` writes them
//! to its log — in both log formats: a message that failed and one that died, an outage and
//! its end, an abandoned mark, and a standby.

use crate::common;

use std::time::Duration;

use common::*;
use msgx::fixtures;
use msgx::ports::Settle;

/// One (text pattern, JSON keys) per lifecycle line.
struct Line {
    text: &'static str,
    event: &'static str,
    keys: &'static [(&'static str, &'static str)],
}

const FAILED: Line = Line {
    text: "WARN  msgx::pump] failed msg_id=2 type=XYZW-ABCD class=UNSUPPORTED attempts=1",
    event: "failed",
    keys: &[("msg_id", "2"), ("class", "UNSUPPORTED")],
};
const DEAD: Line = Line {
    text: "ERROR msgx::pump] poison msg_id=2 type=XYZW-ABCD class=EXHAUSTED attempts=2",
    event: "poison",
    keys: &[("msg_id", "2"), ("class", "EXHAUSTED")],
};
const MALFORMED: Line = Line {
    text: "ERROR msgx::pump] dead msg_id=3 type=- class=MALFORMED",
    event: "dead",
    keys: &[("msg_id", "3"), ("class", "MALFORMED")],
};
const ABANDONED: Line = Line {
    text: "ERROR msgx::backfill] backfill abandoned msg_id=999 reason=MISSING_ROW",
    event: "backfill abandoned",
    keys: &[("msg_id", "999"), ("reason", "MISSING_ROW")],
};
const OUTAGE: Line = Line {
    text: "store unavailable store=redis stage=process",
    event: "store unavailable",
    keys: &[("store", "redis"), ("stage", "process")],
};
const BACK: Line = Line {
    text: "store available again store=redis stage=process down_for=",
    event: "store available again",
    keys: &[("store", "redis"), ("stage", "process")],
};
const STANDBY: Line =
    Line { text: "INFO  msgx::daemon] standby: lease held by host=", event: "standby", keys: &[] };

fn found(log: &str, json: bool, want: &Line) -> bool {
    if !json {
        return log.contains(want.text);
    }
    log.lines().any(|l| {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else { return false };
        let value = |k: &str| match &v[k] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        value("event").starts_with(want.event) && want.keys.iter().all(|(k, x)| value(k) == *x)
    })
}

fn lifecycle(json: bool) {
    let redis = Private::start("redis");
    let s = Services::migrated_on(
        // The site that keeps the retry ladder for an unknown kind (SPEC §3a): its failed and
        // poison lines.
        "max-attempts = 2\nbackoff-ms = [200]\nretry-unsupported = true\n",
        Stores { redis: Some(redis.url()), ..Default::default() },
    );
    // A message msgx finished whose mailbox row is gone: its mark is abandoned (C-16).
    let mut pg = msgx::store::pg::Pg::connect(&s.cfg.pg_url).unwrap();
    common::enqueue(&mut pg, &[999], now());
    common::record(&mut pg, &[Settle::succeeded(999, "k999", vec![])], now());
    s.pg().batch_execute("UPDATE ingress_watermark SET last_id = 0").unwrap();

    let format = if json { "[msgx]\nlog-format = \"json\"\n" } else { "" };
    let a = Instance::run(&s, "a", format);
    assert!(
        eventually(Duration::from_secs(20), || a.log_text().contains("lease acquired epoch=1")),
        "{}",
        a.log_text()
    );
    let b = Instance::run(&s, "b", format);
    let raws = [
        fixtures::flop_body("STND", "77", "<STND>212</STND>"),
        fixtures::other(2, "XYZW", "ABCD", "<ANY/>"),
        "<MSG><META>".to_string(),
    ];
    s.insert_inbound(&raws);
    let seen =
        |inst: &Instance, l: &Line| eventually(Duration::from_secs(30), || found(&inst.log_text(), json, l));
    for l in [&FAILED, &DEAD, &MALFORMED, &ABANDONED] {
        assert!(seen(&a, l), "no `{}` line: {}", l.text, a.log_text());
    }
    redis.stop();
    s.insert_inbound(&[fixtures::flop(4, "STND", "78", &[("STND", Some("213"))])]);
    assert!(seen(&a, &OUTAGE), "no outage line: {}", a.log_text());
    redis.restart();
    assert!(seen(&a, &BACK), "no end-of-outage line: {}", a.log_text());
    assert!(seen(&b, &STANDBY), "no standby line: {}", b.log_text());
    if json {
        for l in a.log_text().lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON object a line ({e}): {l}"));
            assert!(v["ts"].is_string() && v["level"].is_string() && v["msg"].is_string(), "{l}");
        }
    }
}

#[test]
fn the_lines_to_alert_on_in_the_text_log() {
    lifecycle(false);
}

#[test]
fn the_lines_to_alert_on_in_the_json_log() {
    lifecycle(true);
}

/// A daemon started on a mailbox whose IDs are below its watermark (the table was recreated
/// while msgx was down): the poller stops at once, says so, and `msgx status` and
/// `status --check` show the poll stage held on the mailbox.
#[test]
fn a_pre3_halt_is_in_the_log_in_status_and_in_the_health_check() {
    let s = Services::migrated("");
    let mut pg = msgx::store::pg::Pg::connect(&s.cfg.pg_url).unwrap();
    common::enqueue(&mut pg, &[1, 2, 3, 4, 5], now()); // read up to 5; the fresh table's next ID is 1
    s.pg().batch_execute("UPDATE proc_state SET state = 'SKIPPED', backfill_at = now()").unwrap();
    let a = Instance::run(&s, "a", "");
    assert!(
        eventually(Duration::from_secs(20), || {
            a.log_text().contains("ERROR msgx::ingress] poll stopped (PRE-3): the mailbox's highest ID is none and its next ID 1, but msgx has read up to 5")
        }),
        "{}",
        a.log_text()
    );
    let status = |args: &[&str]| {
        let file = std::env::temp_dir().join(format!("msgx-monitoring-{}.toml", s.name));
        std::fs::write(&file, &s.toml).unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_msgx"))
            .arg("--config")
            .arg(&file)
            .args(args)
            .env("MSGX_PG_URL", &s.cfg.pg_url)
            .env("MSGX_MYSQL_URL", &s.cfg.mysql_url)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).to_string())
    };
    assert!(
        eventually(Duration::from_secs(10), || status(&["status"])
            .1
            .contains("stalled stage: poll on mailbox:PRE-3 for")),
        "{}",
        status(&["status"]).1
    );
    // Held for less than stalled-warning (1 min) yet: OK, with the stall in the perfdata.
    assert!(
        eventually(Duration::from_secs(10), || {
            let (code, line) = status(&["status", "--check"]);
            code == Some(0)
                && line.starts_with("MSGX OK")
                && line.contains(" stalled=")
                && !line.contains(" stalled=0s")
        }),
        "{:?}",
        status(&["status", "--check"])
    );
}

/// #22: logrotate (the real one) renames msgx's log file while messages flow and tells msgx
/// with SIGHUP: every lifecycle line is in one of the two files, once; msgx keeps running and
/// keeps its lease.
#[test]
fn a_log_rotated_by_logrotate_while_messages_flow_loses_no_line() {
    let s = Services::migrated("");
    let dir = std::env::temp_dir().join(format!("msgx-rotate-{}", s.name));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("msgx.log");
    let a = Instance::run(&s, "rotated", &format!("[msgx]\nlog-file = \"{}\"\n", log.display()));
    let file = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(30), || file(&log).contains("lease acquired")),
        "{}",
        a.log_text()
    );
    let conf = dir.join("logrotate.conf");
    std::fs::write(
        &conf,
        format!(
            "{} {{\n  rotate 2\n  create 0640\n  missingok\n  postrotate\n    kill -HUP {}\n  endscript\n}}\n",
            log.display(),
            a.pid()
        ),
    )
    .unwrap();
    let n = 300u64;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 1..=n {
                s.insert_inbound(&[msgx::fixtures::flop_stnd(i, &format!("R{}", i % 7), &format!("S{i}"))]);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        // Rotated once msgx has logged a message as succeeded, whatever the machine's load
        // (#66: a fixed 1.5 s was passed by a loaded run before the first line).
        let logged = || std::fs::read_to_string(&log).unwrap_or_default().contains("succeeded msg_id=");
        assert!(eventually(Duration::from_secs(30), logged), "no message succeeded");
        let out = std::process::Command::new("logrotate")
            .args(["-f", "-s", dir.join("state").to_str().unwrap(), conf.to_str().unwrap()])
            .output()
            .expect("logrotate (tests/support/services.sh installs it)");
        assert!(out.status.success(), "logrotate: {}", String::from_utf8_lossy(&out.stderr));
    });
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut pg,
        "SELECT count(*) FROM msg_event WHERE state = 'SENT'"
    ) == n as i64));
    let (old, new) = (file(&dir.join("msgx.log.1")), file(&log));
    let ids = |text: &str| -> Vec<u64> {
        text.lines()
            .filter_map(|l| l.split("succeeded msg_id=").nth(1)?.split_whitespace().next()?.parse().ok())
            .collect()
    };
    let (before, after) = (ids(&old), ids(&new));
    println!("rotation: {} succeeded lines in msgx.log.1, {} in msgx.log", before.len(), after.len());
    assert!(!before.is_empty() && !after.is_empty(), "the rotation fell while messages flowed");
    let mut all: Vec<u64> = before.iter().chain(&after).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (1..=n).collect::<Vec<_>>(), "every lifecycle line once, across the two files");
    assert!(new.contains("signal 1 received: log file reopened"), "{new}");
    assert!(!new.contains("stopping") && !old.contains("stopping"), "SIGHUP is not a stop");
    let epoch: i64 = pg.query_one("SELECT epoch FROM msgx_lease WHERE id = 1", &[]).unwrap().get(0);
    assert_eq!(epoch, 1, "the lease was kept");
    drop(a);
}
