//! The `msgx` binary as an operator runs it: exit codes and what it prints.

use crate::common;

use msgx::domain::SkipReason;
use std::process::{Command, Output};

use common::Services;
use msgx::domain::InboundRow;
use msgx::error::ErrorClass;
use msgx::ports::{Applying, Failure, MarkLedger, Operator, Settle};
use msgx::store::conformance::t0;
use msgx::store::pg::Pg;

fn msgx(s: &Services, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_msgx"))
        .args(args)
        .env("MSGX_PG_URL", &s.cfg.pg_url)
        .env("MSGX_MYSQL_URL", &s.cfg.mysql_url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run msgx")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn dead(class: ErrorClass) -> Failure {
    Failure::Dead { class, error: format!("{class} for the test") }
}

#[test]
fn replay_brings_back_the_whitelist_and_says_why_not_for_the_rest() {
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    let rows: Vec<InboundRow> = (1..=3).map(|id| InboundRow { id, received_at: None }).collect();
    common::enqueue(&mut pg, &rows.iter().map(|r| r.id).collect::<Vec<_>>(), t0());
    common::record(
        &mut pg,
        &[Settle::failed(1, dead(ErrorClass::Exhausted)), Settle::failed(2, dead(ErrorClass::Malformed))],
        t0(),
    );

    let o = msgx(&s, &["replay", "--ids", "1,2,7"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "some were refused: {out}");
    assert!(out.contains("replayed msg_id=1 was=DEAD class=EXHAUSTED -> PENDING"), "{out}");
    assert!(out.contains("refused  msg_id=2 was=DEAD class=MALFORMED: MALFORMED is never replayed"), "{out}");
    assert!(out.contains("refused  msg_id=7 was=absent: no such message"), "{out}");
    let r = pg.row(1).unwrap().unwrap();
    assert_eq!((r.state.as_str(), r.attempts, r.error_class), ("PENDING", 0, Some(ErrorClass::Exhausted)));

    let o = msgx(&s, &["replay", "--class", "malformed"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("MALFORMED messages are never replayed"), "{}", text(&o));
    let o = msgx(&s, &["replay", "--range", "9-3"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("FROM is after TO"));
    let o = msgx(&s, &["replay"]);
    assert_eq!(o.status.code(), Some(2), "a selection is required");
}

#[test]
fn status_shows_the_head_and_the_counts() {
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    let rows: Vec<InboundRow> = (1..=2).map(|id| InboundRow { id, received_at: None }).collect();
    common::enqueue(&mut pg, &rows.iter().map(|r| r.id).collect::<Vec<_>>(), t0());
    let retry = Failure::Retry {
        class: ErrorClass::Unsupported,
        error: "no handler for SCHD-DNLD".into(),
        next_attempt_at: t0(),
        failing_since: t0(),
    };
    common::record(&mut pg, &[Settle::failed(1, retry)], t0());
    let o = msgx(&s, &["status"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("watermark: 2"), "{out}");
    assert!(out.contains("head: msg_id=1 state=FAILED attempts=1 age="), "{out}");
    assert!(out.contains("class=UNSUPPORTED error=\"no handler for SCHD-DNLD\""), "{out}");
    assert!(out.contains("PENDING    1") && out.contains("FAILED     1"), "{out}");
    let o = msgx(&s, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["head"]["msg_id"], 1);
}

#[test]
fn a_bad_configuration_key_is_named_and_exits_2() {
    let s = Services::new("");
    let dir = std::env::temp_dir().join(format!("msgx-cli-{}", s.name));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("msgx.toml");
    std::fs::write(&file, "[msgx.pipeline]\nmax-attemps = 3\n").unwrap();
    let o = msgx(&s, &["--config", file.to_str().unwrap(), "check"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("unknown configuration key `msgx.pipeline.max-attemps` (did you mean `msgx.pipeline.max-attempts`?)"), "{}", text(&o));
    std::fs::write(&file, "[kafka.producers.default]\nmax-in-flight-requests-per-connection = 5\n").unwrap();
    let o = msgx(&s, &["--config", file.to_str().unwrap(), "check"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("D3"), "{}", text(&o));
    let o = msgx(&s, &["--config", dir.join("absent.toml").to_str().unwrap(), "check"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("absent.toml"), "{}", text(&o));
}

#[test]
fn commands_refuse_an_unmigrated_schema_with_exit_3_and_migrate_fixes_it() {
    let s = Services::new("");
    let o = msgx(&s, &["status"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("msgx migrate"));
    let o = msgx(&s, &["migrate"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("applied V001 baseline"));
    assert_eq!(msgx(&s, &["status"]).status.code(), Some(0));
}

#[test]
fn check_passes_on_a_good_setup_and_never_prints_a_password() {
    let s = Services::migrated("");
    let o = msgx(&s, &["check"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains(
        "kafka producer (D3): acks=all enable.idempotence=true max.in.flight.requests.per.connection=1"
    ));
    assert!(out.contains("mailbox: reachable"), "{out}");
    assert!(!out.contains("msgx-secret"), "password leaked: {out}");
}

/// The binary runs on the allocator src/main.rs chooses, with its options (#23). jemalloc prints
/// its options at exit when `stats_print` is asked for, and it reads msgx's `malloc_conf` only
/// under the unprefixed name: a build that lost the allocator says nothing, one that went back to
/// the prefixed build says the default arena count.
#[test]
fn the_binary_allocates_with_jemalloc_and_one_arena() {
    let o = Command::new(env!("CARGO_BIN_EXE_msgx"))
        .arg("--version")
        .env("MALLOC_CONF", "stats_print:true")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Begin jemalloc statistics"), "{err}");
    assert!(err.lines().any(|l| l.trim() == "opt.narenas: 1"), "{err}");
}

#[test]
fn unreachable_store_exits_4_naming_it() {
    let s = Services::migrated("");
    let o = Command::new(env!("CARGO_BIN_EXE_msgx"))
        .args(["status"])
        .env("MSGX_PG_URL", "postgres://msgx:pw-never-logged@127.0.0.1:9/msgx")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("postgres"), "{}", text(&o));
    assert!(!text(&o).contains("pw-never-logged"), "{}", text(&o));
    drop(s);
}

#[test]
fn check_names_a_mailbox_column_that_does_not_exist() {
    let s = Services::migrated("");
    let dir = std::env::temp_dir().join(format!("msgx-cli-col-{}", s.name));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("msgx.toml");
    std::fs::write(&file, "[mailbox.inbound]\nstatus-column = \"CMINMSGS_STATE\"\n").unwrap();
    let o = msgx(&s, &["--config", file.to_str().unwrap(), "check"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("CMINMSGS_STATE"), "{}", text(&o));
}

#[test]
fn replay_events_revives_the_dead_letter_queue() {
    use msgx::domain::{NewEvent, Target};
    use msgx::ports::Outbox;
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    common::enqueue(&mut pg, &[1], t0());
    let ev = |k: &str| NewEvent {
        target: Target::KafkaMsg,
        partition_key: k.into(),
        event_type: "UPSERT".into(),
        state_version: 1,
        payload_json: "{}".into(),
    };
    common::record(&mut pg, &[Settle::succeeded(1, "k", vec![ev("A"), ev("B")])], t0());
    let ids: Vec<i64> = pg.pending(Target::KafkaMsg, 10).unwrap().iter().map(|e| e.event_id).collect();
    pg.dead(&ids[..1], ErrorClass::Exhausted, "broker gone").unwrap();
    let o = msgx(&s, &["status"]);
    assert!(text(&o).contains("KAFKA:msg   DEAD     1"), "the DLQ shows in status: {}", text(&o));
    let list = format!("{},{}", ids[0], ids[1]);
    let o = msgx(&s, &["replay", "--events", "--ids", &list]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("replayed event_id={} target=KAFKA:msg was=DEAD -> PENDING", ids[0])),
        "{out}"
    );
    assert!(out.contains("only DEAD events are replayed"), "{out}");
    assert_eq!(pg.pending(Target::KafkaMsg, 10).unwrap().len(), 2);
}

#[test]
fn reconcile_takes_an_abandoned_mark_off_the_list() {
    use msgx::ports::Settle;
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    let rows: Vec<InboundRow> = (1..=2).map(|id| InboundRow { id, received_at: None }).collect();
    common::enqueue(&mut pg, &rows.iter().map(|r| r.id).collect::<Vec<_>>(), t0());
    common::record(&mut pg, &[Settle::succeeded(1, "k1", vec![]), Settle::succeeded(2, "k2", vec![])], t0());
    pg.backfill_abandon(&[1], "MISSING_ROW", t0()).unwrap();
    let out = text(&msgx(&s, &["status"]));
    assert!(
        out.contains("backfill abandoned, awaiting reconciliation: 1")
            && out.contains("msg_id=1 state=SUCCEEDED reason=MISSING_ROW"),
        "{out}"
    );
    let o =
        msgx(&s, &["reconcile", "--ids", "1,2", "--note", "row purged by the mailbox owner on 2026-03-01"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("reconciled msg_id=1"), "{out}");
    assert!(out.contains("refused    msg_id=2: its mark was not abandoned"), "{out}");
    assert!(text(&msgx(&s, &["status"])).contains("awaiting reconciliation: 0"));
    let o = msgx(&s, &["reconcile", "--ids", "1", "--note", " "]);
    assert_eq!(o.status.code(), Some(2));
    let note: String = s
        .pg()
        .query_one("SELECT backfill_reconciled_note FROM proc_state WHERE msg_id = 1", &[])
        .unwrap()
        .get(0);
    assert_eq!(note, "row purged by the mailbox owner on 2026-03-01");
}

#[test]
fn pre3_a_truncated_mailbox_halts_the_poller_and_reset_watermark_resumes_it() {
    use msgx::clock::{Clock, FakeClock};
    use mysql::prelude::Queryable;
    let s = Services::migrated("");
    let stats = std::sync::Arc::new(msgx::stats::Stats::default());
    let clock = FakeClock::new();
    let mut poller = s.poller_at(&stats, std::sync::Arc::new(clock.clone()));
    s.insert_inbound(&["<MSG/>".to_string(), "<MSG/>".to_string(), "<MSG/>".to_string()]);
    poller.round(clock.now()).unwrap();
    let mut pg = s.pg();
    assert_eq!(common::count(&mut pg, "SELECT last_id FROM ingress_watermark"), 3);

    // The mailbox owner recreates the table: IDs start again at 1.
    s.mysql().query_drop(format!("TRUNCATE TABLE {}", s.cfg.inbound.table)).unwrap();
    let ids = s.insert_inbound(&["<NEW/>".to_string()]);
    assert_eq!(ids, vec![1]);
    clock.advance(std::time::Duration::from_secs(61));
    assert_eq!(poller.round(clock.now()).unwrap(), msgx::ingress::Round::Idle);
    let why = &poller.halted().expect("PRE-3 halts the poller").why;
    assert!(why.contains("highest ID is 1 and its next ID 2, but msgx has read up to 3"), "{why}");

    let o = msgx(&s, &["reset-watermark", "--to", "0"]);
    assert_eq!(o.status.code(), Some(2), "refused without --yes: {}", text(&o));
    assert!(
        text(&o).contains("watermark: 3 -> 0; mailbox cminmsgs: highest ID 1, next ID 2"),
        "{}",
        text(&o)
    );
    let o = msgx(&s, &["reset-watermark", "--to", "0", "--yes"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("3 message(s) above 0 are in PROC_STATE (the highest MSG_ID 3)"),
        "{}",
        text(&o)
    );
    // The old rows archived (as `msgx` jobs would once settled), the reset goes through.
    pg.batch_execute("DELETE FROM proc_state").unwrap();
    let o = msgx(&s, &["reset-watermark", "--to", "0", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("watermark moved from 3 to 0"), "{}", text(&o));

    poller.round(clock.now()).unwrap();
    assert!(poller.halted().is_none());
    assert_eq!(
        common::count(&mut pg, "SELECT count(*) FROM proc_state WHERE msg_id = 1"),
        1,
        "the new row flows"
    );
}

/// `msgx` with this test's whole configuration (topics, key prefix) in a file.
fn msgx_cfg(s: &Services, extra_env: &[(&str, &str)], args: &[&str]) -> Output {
    let file = std::env::temp_dir().join(format!("msgx-cli-{}.toml", s.name));
    std::fs::write(&file, &s.toml).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_msgx"));
    if args.first() != Some(&"--config") {
        c.arg("--config").arg(&file);
    }
    c.args(args);
    c.env("MSGX_PG_URL", &s.cfg.pg_url)
        .env("MSGX_MYSQL_URL", &s.cfg.mysql_url)
        .env("MSGX_REDIS_URL", &s.cfg.redis_url)
        .env("MSGX_KAFKA_BROKERS", &s.cfg.kafka_brokers)
        .env("RUST_LOG", "warn");
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c.output().expect("run msgx")
}

fn claimant(n: u32) -> msgx::ports::Claimant {
    msgx::ports::Claimant { id: format!("test-{n}"), host: "ops-vm".into(), pid: n }
}

#[test]
fn check_fetches_the_broker_metadata_reports_the_lease_and_fails_naming_kafka() {
    use msgx::ports::LeaseStore;
    let s = Services::migrated("");
    let o = msgx_cfg(&s, &[], &["check"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains(&format!("kafka: reachable at {}", s.cfg.kafka_brokers)), "{out}");
    assert!(out.contains(&format!("topic {}: exists, 1 partition(s)", s.cfg.topic_msg)), "{out}");
    assert!(out.contains("lease: free (no instance running)"), "{out}");

    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    pg.claim(&claimant(4242), std::time::Duration::from_secs(60)).unwrap();
    let o = msgx_cfg(&s, &[], &["check"]);
    assert!(text(&o).contains("lease: held by host=ops-vm pid=4242 epoch=1"), "{}", text(&o));

    // A topic nobody created is named, never created by the check.
    let absent = format!("{}.absent", s.cfg.topic_msg);
    let toml = s.toml.replace(&format!("msg = \"{}\"", s.cfg.topic_msg), &format!("msg = \"{absent}\""));
    let file = std::env::temp_dir().join(format!("msgx-cli-{}-absent.toml", s.name));
    std::fs::write(&file, toml).unwrap();
    let o = msgx_cfg(&s, &[], &["--config", file.to_str().unwrap(), "check"]);
    assert!(text(&o).contains(&format!("topic {absent}: absent; created on first send")), "{}", text(&o));

    // A wrong bootstrap-servers fails the check with exit 4, naming kafka.
    let o = msgx_cfg(&s, &[("MSGX_KAFKA_BROKERS", "127.0.0.1:1")], &["check"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(4), "{out}");
    assert!(out.contains("kafka at 127.0.0.1:1"), "{out}");
    assert!(out.contains("redis: reachable") && !out.contains("kafka: reachable"), "{out}");
}

#[test]
fn status_check_speaks_the_nagios_plugin_convention() {
    use msgx::ports::{LeaseStore, MarkLedger};
    let s = Services::migrated("");
    let check = |env: &[(&str, &str)]| {
        let o = msgx_cfg(&s, env, &["status", "--check"]);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert_eq!(out.lines().count(), 1, "one line: {}", text(&o));
        (o.status.code().unwrap(), out)
    };
    let (code, out) = check(&[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("MSGX CRITICAL - no instance holds the lease"), "{out}");

    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    let me = claimant(7);
    let epoch = match pg.claim(&me, std::time::Duration::from_secs(60)).unwrap() {
        msgx::ports::Claim::Acquired { epoch, .. } => epoch,
        other => panic!("{other:?}"),
    };
    let (code, out) = check(&[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("MSGX OK - backlog 0, head none, 0 dead, lease held by host=ops-vm pid=7"),
        "{out}"
    );
    assert!(out.contains("| head_age=0s;300;1800 backlog=0 dead=0;1;"), "{out}");

    let ids: Vec<i64> = (1..=102).collect();
    common::enqueue(&mut pg, &ids, common::now());
    common::record(&mut pg, &[Settle::failed(1, dead(ErrorClass::Protocol))], common::now());
    let (code, out) = check(&[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("MSGX WARNING - 1 dead (messages and events)") && out.contains("backlog=101"),
        "{out}"
    );

    // The holder reports a stage stalled for 11 minutes with its renewal.
    let since = msgx::clock::unix_millis(common::now() - std::time::Duration::from_secs(660));
    let status = format!(r#"{{"stalled":[{{"stage":"process","store":"redis","since_ms":{since}}}]}}"#);
    assert!(pg.renew(&me, epoch, std::time::Duration::from_secs(60), &status).unwrap());
    let (code, out) = check(&[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("stage process stalled on redis for 11m"), "{out}");
    let o = msgx_cfg(&s, &[], &["status"]);
    assert!(text(&o).contains("stalled stage: process on redis for 11m"), "{}", text(&o));

    // True counts: 101 abandoned marks, though the list stops at 100.
    let settled: Vec<Settle> = (2..=102).map(|id| Settle::succeeded(id, &format!("k{id}"), vec![])).collect();
    common::record(&mut pg, &settled, t0());
    pg.backfill_abandon(&ids[1..], "MISSING_ROW", t0()).unwrap();
    let o = msgx_cfg(&s, &[], &["status"]);
    assert!(text(&o).contains("backfill abandoned, awaiting reconciliation: 101"), "{}", text(&o));
    assert!(text(&o).contains("… and 1 more"), "{}", text(&o));
    let o = msgx_cfg(&s, &[], &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!((v["abandoned_count"].as_i64(), v["lease"]["pid"].as_i64()), (Some(101), Some(7)));
    assert_eq!(v["stalled"][0]["store"], "redis");

    let (code, out) = check(&[("MSGX_PG_URL", "postgres://msgx@127.0.0.1:1/none")]);
    assert_eq!(code, 3, "{out}");
    assert!(out.starts_with("MSGX UNKNOWN - "), "{out}");
}

#[test]
fn decode_decide_shows_what_msgx_would_do_against_an_empty_view_or_redis() {
    use msgx::ports::FlightStore;
    let s = Services::migrated("");
    let dir = std::env::temp_dir().join(format!("msgx-decide-{}", s.name));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("stnd.xml");
    std::fs::write(&file, msgx::fixtures::flop_body("STND", "77", "<STND>212</STND>")).unwrap();
    let f = file.to_str().unwrap();

    let o = msgx_cfg(&s, &[], &["decode", "--decide", f]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let d = &v["decision"];
    assert_eq!(
        (d["outcome"].as_str(), d["against"].as_str()),
        (Some("SUCCEEDED"), Some("an empty flight view"))
    );
    assert_eq!(d["flights"][0]["flid"], "77");
    assert_eq!(d["flights"][0]["set"][1], serde_json::json!(["STND", "212"]), "{d}");
    assert_eq!(d["events"][0]["target"], "KAFKA:msg", "{d}");
    assert_eq!(d["events"][0]["payload"]["changes"][0]["new"], "212", "{d}");

    // Redis already holds stand 212 for flight 77: the same message changes nothing.
    let mut redis =
        msgx::store::flights::RedisFlights::connect(&s.cfg.redis_url, &s.cfg.redis_prefix).unwrap();
    let msg = msgx::codec::decode(&msgx::fixtures::flop_body("STND", "77", "<STND>212</STND>")).unwrap();
    let first = msgx::handlers::decide(&msgx::handlers::View::default(), &msg, 1).unwrap();
    redis.apply(&Applying::unnamed_all(&[(1, &first)])).unwrap();
    let o = msgx_cfg(&s, &[], &["decode", "--decide", "--from-redis", f]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let d = &v["decision"];
    assert_eq!(d["against"], "the flights in Redis now");
    assert!(d["events"].as_array().is_none_or(|e| e.is_empty()), "no change, no event: {d}");

    let o = msgx_cfg(&s, &[], &["decode", "--from-redis", f]);
    assert_eq!(o.status.code(), Some(2), "--from-redis needs --decide");
}

#[test]
fn the_man_page_is_generated_from_the_command_line() {
    let o = Command::new(env!("CARGO_BIN_EXE_msgx")).arg("man").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let page = String::from_utf8(o.stdout).unwrap();
    assert!(page.starts_with(".ie") || page.contains(".TH msgx 1"), "{page}");
    for cmd in ["run", "check", "status", "replay", "reconcile", "reset\\-watermark", "decode"] {
        assert!(page.contains(&format!("\\fBmsgx {cmd}\\fR")), "no {cmd} in the man page");
    }
    assert!(page.contains(".SH \"EXIT STATUS\"") || page.contains(".SH EXIT STATUS"), "exit codes");
    assert!(!page.contains("\\fBmsgx man\\fR"), "the man command itself is hidden");
}

/// #21 item 2: `msgx dismiss` takes a DEAD message out of the dead-letter queue (status
/// --check stops counting it), refuses what is not DEAD, and a replay puts a dismissed row back.
#[test]
fn dismiss_takes_a_dead_message_out_of_the_queue_and_says_why_not() {
    use msgx::ports::LeaseStore;
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    pg.claim(&claimant(3), std::time::Duration::from_secs(60)).unwrap();
    common::enqueue(&mut pg, &[1, 2], common::now());
    common::record(
        &mut pg,
        &[Settle::failed(1, dead(ErrorClass::Exhausted)), Settle::succeeded(2, "k2", vec![])],
        common::now(),
    );
    let check = || String::from_utf8_lossy(&msgx_cfg(&s, &[], &["status", "--check"]).stdout).to_string();
    assert!(check().contains(" 1 dead"), "{}", check());
    let o = msgx(&s, &["dismiss", "--ids", "1,2,9", "--note", "resent corrected as 4711"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "some were refused: {out}");
    assert!(out.contains("dismissed msg_id=1"), "{out}");
    assert!(
        out.contains("refused   msg_id=2: state is SUCCEEDED; only DEAD messages are dismissed"),
        "{out}"
    );
    assert!(out.contains("refused   msg_id=9: no such message"), "{out}");
    assert!(check().contains(" 0 dead"), "{}", check());
    let o = msgx(&s, &["status"]);
    assert!(text(&o).contains("DEAD       1 (1 dismissed)"), "{}", text(&o));
    let mut c = s.pg();
    let note: String =
        c.query_one("SELECT dismissed_note FROM proc_state WHERE msg_id = 1", &[]).unwrap().get(0);
    assert_eq!(note, "resent corrected as 4711");
    let o = msgx(&s, &["dismiss", "--ids", "1", "--note", " "]);
    assert_eq!(o.status.code(), Some(2), "a note is required: {}", text(&o));
    assert_eq!(msgx(&s, &["replay", "--ids", "1"]).status.code(), Some(0));
    let gone: Option<std::time::SystemTime> =
        c.query_one("SELECT dismissed_at FROM proc_state WHERE msg_id = 1", &[]).unwrap().get(0);
    assert_eq!(gone, None, "a replayed row is in the queue again if it dies again");
}

/// #21 item 3: a key=value connection string with a password, and one in a `?password=` URL,
/// reach neither `msgx check`'s output nor any log line of a failing command.
#[test]
fn regression_a_key_value_or_query_password_never_reaches_any_output() {
    let s = Services::migrated("");
    let url = s.cfg.pg_url.clone();
    let (hostport, db) = url.trim_start_matches("postgres://msgx@").split_once('/').unwrap();
    let (host, port) = hostport.split_once(':').unwrap();
    let kv = format!("host={host} port={port} user=msgx dbname={db} password=kv-never-shown");
    let o = msgx_cfg(&s, &[("MSGX_PG_URL", &kv), ("RUST_LOG", "info")], &["check"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("password=***"), "{out}");
    assert!(!out.contains("kv-never-shown"), "{out}");
    let bad =
        format!("host=127.0.0.1 port=9 user=msgx dbname={db} password=kv-never-shown connect_timeout=2");
    let o = msgx_cfg(&s, &[("MSGX_PG_URL", &bad)], &["status"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(!text(&o).contains("kv-never-shown"), "{}", text(&o));
    let q = format!("{}?password=q-never-shown", s.cfg.mysql_url.replace("msgx:msgx-secret@", "msgx@"));
    let o = msgx_cfg(&s, &[("MSGX_MYSQL_URL", &q), ("RUST_LOG", "info")], &["check"]);
    assert!(!text(&o).contains("q-never-shown"), "{}", text(&o));
}

/// #21 item 6: `msgx replay --skipped` brings a not-for-msgx message back and says why not for
/// an ignore rule's skip.
#[test]
fn replay_skipped_brings_back_a_kind_msgx_did_not_process() {
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    common::enqueue(&mut pg, &[1, 2], t0());
    common::record(
        &mut pg,
        &[
            Settle::skipped(1, SkipReason::NotForMsgx("a request to the platform (REQE)".into())),
            Settle::skipped(2, SkipReason::Ignored("REGN-*".into())),
        ],
        t0(),
    );
    let o = msgx(&s, &["replay", "--skipped", "--ids", "1,2"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("replayed msg_id=1 was=SKIPPED class=- -> PENDING"), "{out}");
    assert!(out.contains("refused  msg_id=2 was=SKIPPED class=-: SKIPPED as ignored:REGN-*: final"), "{out}");
    assert_eq!(pg.row(1).unwrap().unwrap().state.as_str(), "PENDING");
    let o = msgx(&s, &["replay", "--skipped", "--class", "INFRA"]);
    assert_eq!(o.status.code(), Some(2), "--class does not go with --skipped: {}", text(&o));
}

/// #20: `msgx resend` without --yes says what it would send again and changes nothing; with it,
/// the SENT events are back in the outbox.
#[test]
fn resend_shows_what_it_would_do_and_does_it_with_yes() {
    use msgx::ports::Outbox;
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    common::enqueue(&mut pg, &[1], t0());
    let ev = msgx::domain::NewEvent {
        target: msgx::domain::Target::KafkaMsg,
        partition_key: "F".into(),
        event_type: "UPSERT".into(),
        state_version: 1,
        payload_json: "{}".into(),
    };
    common::record(&mut pg, &[Settle::succeeded(1, "k1", vec![ev])], t0());
    let id = pg.pending(msgx::domain::Target::KafkaMsg, 1).unwrap()[0].event_id;
    pg.mark_sent(&[msgx::ports::Sent::unlanded(id, 1)], t0()).unwrap();
    let o = msgx(&s, &["resend", "--target", "KAFKA:msg", "--from-event", &id.to_string()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("would resend 1 KAFKA:msg event(s) (event_id {id}..={id})")),
        "{}",
        text(&o)
    );
    assert!(pg.pending(msgx::domain::Target::KafkaMsg, 1).unwrap().is_empty(), "nothing changed");
    let o = msgx(&s, &["resend", "--target", "KAFKA:msg", "--since", "2000-01-01T00:00:00Z", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let key = format!("1.0.{}", msgx::domain::payload_digest("{}"));
    assert_eq!(pg.pending(msgx::domain::Target::KafkaMsg, 1).unwrap()[0].key(), key);
    let o = msgx(&s, &["resend", "--target", "COUTMSGS", "--from-event", "1"]);
    assert_eq!(o.status.code(), Some(2));
    let o = msgx(&s, &["resend", "--target", "KAFKA:msg", "--since", "yesterday"]);
    assert!(o.status.code() == Some(2) && text(&o).contains("RFC 3339"), "{}", text(&o));
}

/// #42: a PostgreSQL password holding `/`, `?` and `#` (the driver reads the userinfo up to the
/// first `@`) reaches neither `msgx check`'s output nor the start-up `config` lines of `msgx run`.
#[test]
fn regression_a_postgres_password_with_slash_question_mark_and_hash_never_reaches_any_output() {
    let s = Services::migrated("");
    let url = "postgres://msgx:p/a?s#s@127.0.0.1:9/msgx?connect_timeout=2";
    let o = msgx_cfg(&s, &[("MSGX_PG_URL", url), ("RUST_LOG", "info")], &["check"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(4), "check: {out}");
    assert!(out.contains("postgres://msgx:***@127.0.0.1:9/msgx"), "check: {out}");
    assert!(!out.contains("p/a?s#s") && !out.contains("a?s#"), "check leaked: {out}");
    // `msgx run` waits for its PostgreSQL (#54) and is stopped while it waits.
    let file = std::env::temp_dir().join(format!("msgx-cli-run-{}.toml", s.name));
    std::fs::write(&file, &s.toml).unwrap();
    let log = std::env::temp_dir().join(format!("msgx-cli-run-{}.log", s.name));
    let to_log = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_msgx"))
        .args(["--config", file.to_str().unwrap(), "run"])
        .env("MSGX_PG_URL", url)
        .env("RUST_LOG", "info")
        .stdout(to_log.try_clone().unwrap())
        .stderr(to_log)
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    // Stopped once it says it waits for its PostgreSQL (#66: a signal, not 4 s).
    let waiting = common::eventually(std::time::Duration::from_secs(30), || {
        read().contains("store unavailable store=postgres")
    });
    assert!(waiting, "run waits for postgres: {}", read());
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    let out = read();
    let _ = std::fs::remove_file(&log);
    assert_eq!(status.code(), Some(0), "run, stopped while it waits for postgres: {out}");
    assert!(out.contains("postgres://msgx:***@127.0.0.1:9/msgx"), "run: {out}");
    assert!(!out.contains("p/a?s#s") && !out.contains("a?s#"), "run leaked: {out}");
}

/// #42: logrotate's SIGHUP is the daemon's; a command an operator runs as the same user goes on
/// through it. `msgx status` is held on a PostgreSQL that accepts and never answers, signalled,
/// and still running a second later.
#[test]
fn regression_a_cli_command_survives_the_sighup_meant_for_the_daemon() {
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hole.local_addr().unwrap().port();
    // Accepts and holds every connection, answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in hole.incoming() {
            held.push(c);
        }
    });
    let file = std::env::temp_dir().join(format!("msgx-cli-hup-{}.toml", std::process::id()));
    let defaults = Command::new(env!("CARGO_BIN_EXE_msgx")).arg("config-defaults").output().unwrap();
    std::fs::write(&file, &defaults.stdout).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_msgx"))
        .args(["--config", file.to_str().unwrap(), "status"])
        .env("MSGX_PG_URL", format!("postgres://msgx@127.0.0.1:{port}/msgx?connect_timeout=60"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "status waits for the silent PostgreSQL");
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    std::thread::sleep(std::time::Duration::from_secs(1));
    let after = child.try_wait().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&file);
    assert!(after.is_none(), "a SIGHUP ended `msgx status`: {after:?}");
}

/// #40: `msgx dead` lists the dead-letter queue — class, error, attempts, since when, dismissed
/// or not — filters by class and time, prints a stable JSON document, and names a bad argument.
#[test]
fn dead_lists_the_dead_letter_queue_with_its_filters_and_json() {
    use msgx::ports::Operator;
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    common::enqueue(&mut pg, &[1, 2, 3, 4], common::now());
    let forged = Failure::Dead { class: ErrorClass::Malformed, error: "bad XML\n4 forged row".into() };
    common::record(
        &mut pg,
        &[
            Settle::failed(1, dead(ErrorClass::Exhausted)),
            Settle::failed(2, forged),
            Settle::succeeded(3, "k3", vec![]),
            Settle::failed(4, dead(ErrorClass::Infra)),
        ],
        common::now(),
    );
    pg.dismiss(&[4], "resent by the AODB", common::now()).unwrap();

    let o = msgx(&s, &["dead"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let rows: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "1, 2 and 4, not the SUCCEEDED 3: {out}");
    assert!(
        rows[0].starts_with("1 ")
            && rows[0].contains("EXHAUSTED")
            && rows[0].contains("EXHAUSTED for the test"),
        "{out}"
    );
    assert!(
        rows[1].starts_with("2 ") && rows[1].contains("bad XML 4 forged row"),
        "the error stays on its row: {out}"
    );
    assert!(
        rows[2].starts_with("4 ")
            && rows[2].contains("[dismissed ")
            && rows[2].contains("resent by the AODB"),
        "{out}"
    );

    let o = msgx(&s, &["dead", "--class", "malformed", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    assert_eq!(list[0]["msg_id"], 2);
    assert_eq!(list[0]["error_class"], "MALFORMED");
    assert_eq!(list[0]["dismissed"], false);
    assert!(list[0]["since"].as_str().unwrap().ends_with('Z'), "{v}");

    let o = msgx(&s, &["dead", "--since", "2999-01-01T00:00:00Z"]);
    assert!(text(&o).contains("no DEAD message matches"), "{}", text(&o));
    let o = msgx(&s, &["dead", "--class", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--class \"nope\" is not an error class"), "{}", text(&o));
}

/// #43: a state msgx does not know (a newer msgx's, a hand edit) is an error that names it, never
/// read as ARCHIVED — replay refused it as "archived" before.
#[test]
fn regression_an_unknown_state_is_named_not_read_as_archived() {
    let s = Services::migrated("");
    let mut pg = Pg::connect(&s.cfg.pg_url).unwrap();
    common::enqueue(&mut pg, &[1], t0());
    common::record(&mut pg, &[Settle::failed(1, dead(ErrorClass::Exhausted))], t0());
    let mut c = s.pg();
    c.batch_execute(
        "ALTER TABLE proc_state DROP CONSTRAINT proc_state_state_check;
         UPDATE proc_state SET state = 'PAUSED' WHERE msg_id = 1",
    )
    .unwrap();
    let o = msgx(&s, &["replay", "--ids", "1"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(4), "{out}");
    assert!(out.contains(r#"unknown PROC_STATE.STATE "PAUSED""#), "{out}");
    let state: String = c.query_one("SELECT state FROM proc_state WHERE msg_id = 1", &[]).unwrap().get(0);
    assert_eq!(state, "PAUSED", "nothing changed");
}
