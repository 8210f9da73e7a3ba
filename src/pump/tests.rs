//! The pump driven tick by tick with the fake clock, on the in-memory stores.

use std::time::Duration;

use super::*;
use crate::clock::FakeClock;
use crate::config::Config;
use crate::domain::{InboundRow, ProcStatus};
use crate::fixtures;
use crate::store::memory::{MemFlights, MemMailbox, MemPg};

struct World {
    clock: FakeClock,
    pg: MemPg,
    mailbox: MemMailbox,
    flights: MemFlights,
    pump: Pump<MemPg, MemMailbox, MemFlights>,
}

fn world_with(cfg: crate::config::Pipeline) -> World {
    let clock = FakeClock::new();
    let (pg, mailbox, flights) = (MemPg::new(), MemMailbox::new(), MemFlights::new());
    let pump = Pump::new(
        pg.clone(),
        mailbox.clone(),
        flights.clone(),
        Arc::new(clock.clone()),
        &cfg,
        Arc::new(Stats::default()),
    );
    World { clock, pg, mailbox, flights, pump }
}

fn world() -> World {
    world_with(Config::defaults().pipeline)
}

const UNSUPPORTED: &str =
    "<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>1</DTTM><TYPE>ZZZZ</TYPE><STYP>Q</STYP></META></MSG>";

impl World {
    fn arrive(&mut self, id: i64, raw: Option<&str>) {
        self.mailbox.insert(id, raw);
        let mut pg = self.pg.clone();
        pg.enqueue(&[InboundRow { id, received_at: None }], Some(id), self.clock.now()).unwrap();
    }

    fn row(&self, id: i64) -> crate::domain::ProcRow {
        self.pg.proc(id).unwrap().row
    }

    fn state(&self, id: i64) -> ProcStatus {
        self.row(id).state
    }

    fn events(&self) -> usize {
        self.pg.inspect(|s| s.events.len())
    }
}

#[test]
fn a_flop_message_updates_the_flight_and_writes_one_event() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(1));
    let r = w.row(1);
    assert_eq!((r.state, r.type_tag.as_deref()), (ProcStatus::Succeeded, Some("FLOP-STND")));
    assert_eq!(r.identity_key.as_deref(), Some("AODB|FLOP|STND|1"));
    assert_eq!(w.flights.flight("1001").unwrap()["STND"], "A12");
    assert_eq!(w.events(), 1);
    assert!(w.pg.proc(1).unwrap().backfill_next_at.is_some(), "INV-8");
    assert_eq!(w.pump.round().unwrap(), Round::Idle);
}

#[test]
fn raw_text_missing_is_dead_malformed_at_once() {
    let mut w = world();
    w.arrive(1, None);
    w.pump.round().unwrap();
    let r = w.row(1);
    assert_eq!((r.state, r.error_class, r.attempts), (ProcStatus::Dead, Some(ErrorClass::Malformed), 1));
    assert!(w.pg.proc(1).unwrap().backfill_next_at.is_some(), "DEAD owes a mark too");
}

#[test]
fn malformed_is_dead_at_once_and_does_not_block_the_next_message() {
    let mut w = world();
    w.arrive(1, Some("<MSG><META>"));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(2), "one round, one commit");
    assert_eq!(w.state(1), ProcStatus::Dead);
    assert_eq!(w.row(1).error_class, Some(ErrorClass::Malformed));
    assert_eq!(w.state(2), ProcStatus::Succeeded);
}

#[test]
fn head_in_backoff_blocks_everything_behind_it_tick_by_tick() {
    let mut w = world();
    w.arrive(1, Some(UNSUPPORTED));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(1));
    let r = w.row(1);
    assert_eq!((r.state, r.error_class, r.attempts), (ProcStatus::Failed, Some(ErrorClass::Unsupported), 1));
    let until = w.clock.now() + Duration::from_secs(1);
    for _ in 0..3 {
        assert_eq!(w.pump.round().unwrap(), Round::Wait(until), "HOL: message 2 must not overtake");
        w.clock.advance(Duration::from_millis(300));
    }
    assert_eq!(w.state(2), ProcStatus::Pending);
    w.clock.advance(Duration::from_millis(100)); // backoff expired: the head is tried again
    assert_eq!(w.pump.round().unwrap(), Round::Worked(1));
    assert_eq!(w.row(1).attempts, 2);
}

#[test]
fn poison_by_attempts_is_dead_exhausted_then_the_queue_moves() {
    let mut w = world();
    w.arrive(1, Some(UNSUPPORTED));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    for (i, wait) in [1u64, 2, 4, 8].into_iter().enumerate() {
        assert_eq!(w.pump.round().unwrap(), Round::Worked(1), "attempt {}", i + 1);
        assert!(matches!(w.pump.round().unwrap(), Round::Wait(_)));
        w.clock.advance(Duration::from_secs(wait));
    }
    // Fifth attempt: attempts reach max-attempts → DEAD(EXHAUSTED), and message 2 follows.
    assert_eq!(w.pump.round().unwrap(), Round::Worked(2));
    let r = w.row(1);
    assert_eq!((r.state, r.error_class, r.attempts), (ProcStatus::Dead, Some(ErrorClass::Exhausted), 5));
    assert!(r.last_error.unwrap().contains("UNSUPPORTED after 5 attempts"));
    assert_eq!(w.state(2), ProcStatus::Succeeded);
}

#[test]
fn poison_by_head_deadline_fires_when_attempts_are_not_used_up() {
    let mut cfg = Config::defaults().pipeline;
    cfg.max_attempts = 1000;
    let mut w = world_with(cfg);
    w.arrive(1, Some(UNSUPPORTED));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    let mut rounds = 0;
    // Keep failing: backoff 1,2,4,8,16,16,… until ten minutes have passed since the first failure.
    while w.state(1) == ProcStatus::Failed || w.state(1) == ProcStatus::Pending {
        match w.pump.round().unwrap() {
            Round::Wait(t) => w.clock.set(t),
            Round::Worked(_) => {}
            Round::Idle => panic!("head vanished"),
        }
        rounds += 1;
        assert!(rounds < 200, "the deadline never fired");
    }
    let r = w.row(1);
    assert_eq!((r.state, r.error_class), (ProcStatus::Dead, Some(ErrorClass::Exhausted)));
    assert!(r.last_error.as_deref().unwrap().contains("head-deadline 10m"), "{:?}", r.last_error);
    let stuck = w.clock.now().duration_since(r.first_failed_at.unwrap()).unwrap();
    assert!(stuck >= Duration::from_secs(600) && stuck < Duration::from_secs(600 + 16), "{stuck:?}");
    assert!(r.attempts < 1000);
    assert_eq!(w.state(2), ProcStatus::Succeeded, "the poisoned head's round went on to message 2");
}

#[test]
fn infra_failure_is_retried_and_the_retry_emits_the_event() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    w.flights.fail_next(1);
    assert_eq!(w.pump.round().unwrap(), Round::Worked(1));
    let r = w.row(1);
    assert_eq!((r.state, r.error_class), (ProcStatus::Failed, Some(ErrorClass::Infra)));
    assert!(r.last_error.unwrap().contains("redis"));
    w.clock.advance(Duration::from_secs(1));
    w.pump.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.events(), 1);
}

#[test]
fn regression_retry_after_redis_applied_but_pg_failed_keeps_the_event() {
    // Redis holds the new value after the first attempt, so a fresh decision would find
    // nothing changed and write no event: the applied decision must be reused (I2).
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    let raw = fixtures::flop_stnd(1, "1001", "A12");
    let msg = codec::decode(&raw).unwrap();
    let d = handlers::decide(&Default::default(), &msg, 1).unwrap();
    let mut flights = w.flights.clone();
    flights.apply(1, &d).unwrap(); // the crashed attempt got this far
    w.pump.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.events(), 1, "the event survives the crash window");
}

#[test]
fn commit_failure_records_nothing_of_the_round_but_charges_the_head() {
    // The commit fails: the head gets FAILED(INFRA), the rest stays PENDING.
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1", "A1")));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "2", "A2")));
    w.pg.fail_on_commit(1);
    assert_eq!(w.pump.round().unwrap(), Round::Worked(1));
    let r = w.row(1);
    assert_eq!((r.state, r.error_class), (ProcStatus::Failed, Some(ErrorClass::Infra)));
    assert!(r.last_error.unwrap().starts_with("commit:"));
    assert_eq!(w.state(2), ProcStatus::Pending);
    assert_eq!(w.events(), 0);
    w.clock.advance(Duration::from_secs(1));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(2));
    assert_eq!(w.events(), 2, "Redis decisions were reused, events written once");
}

#[test]
fn a_failure_commits_the_messages_before_it_and_becomes_the_head() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1", "A1")));
    w.arrive(2, Some(UNSUPPORTED));
    w.arrive(3, Some(&fixtures::flop_stnd(3, "3", "A3")));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(2));
    assert_eq!(
        (w.state(1), w.state(2), w.state(3)),
        (ProcStatus::Succeeded, ProcStatus::Failed, ProcStatus::Pending)
    );
    assert!(matches!(w.pump.round().unwrap(), Round::Wait(_)));
}

#[test]
fn duplicate_identity_is_skipped_even_within_one_round() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(5, "1", "A1")));
    w.arrive(2, Some(&fixtures::flop_stnd(5, "1", "A2"))); // same SNDR|TYPE|STYP|SEQN
    assert_eq!(w.pump.round().unwrap(), Round::Worked(2));
    let r = w.row(2);
    assert_eq!((r.state, r.last_error.as_deref()), (ProcStatus::Skipped, Some("duplicate-of:1")));
    assert_eq!(r.identity_key, None);
    assert_eq!(w.flights.flight("1").unwrap()["STND"], "A1", "the duplicate changed nothing");
    // …and across rounds.
    w.arrive(3, Some(&fixtures::flop_stnd(5, "1", "A3")));
    w.pump.round().unwrap();
    assert_eq!(w.row(3).last_error.as_deref(), Some("duplicate-of:1"));
}

#[test]
fn ignored_message_is_skipped_before_body_and_identity_and_never_blocks() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::other(1, "ldm", "XX", "<LDM><unreadable a='1'><x/></unreadable></LDM>")));
    w.arrive(2, Some(&fixtures::other(2, "Rsta", "ANY", "")));
    w.arrive(3, Some(&fixtures::flop_stnd(3, "7", "B1")));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(3));
    let r = w.row(1);
    assert_eq!((r.state, r.last_error.as_deref()), (ProcStatus::Skipped, Some("ignored:LDM-*")));
    assert_eq!((r.identity_key, r.attempts), (None, 0), "no identity, no attempt");
    assert!(w.pg.proc(1).unwrap().backfill_next_at.is_some());
    assert_eq!(w.row(2).last_error.as_deref(), Some("ignored:RSTA-*"));
    assert_eq!(w.state(3), ProcStatus::Succeeded);
    assert_eq!(w.events(), 1, "an ignored message touches no flight and writes no event");
}

#[test]
fn a_dead_duplicate_holder_does_not_bind_its_identity() {
    // Only SUCCEEDED binds: a message that died (e.g. EXHAUSTED) leaves its identity free for
    // a corrected copy.
    let mut w = world();
    w.arrive(1, Some("<MSG><META><SNDR>AODB</SNDR><SEQN>9</SEQN><DTTM>1</DTTM><TYPE>FLOP</TYPE><STYP>STND</STYP></META></MSG>"));
    w.arrive(2, Some(&fixtures::flop_stnd(9, "1", "A1")));
    w.pump.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Dead, "no <FLOP> record: MALFORMED");
    assert_eq!(w.state(2), ProcStatus::Succeeded);
}

#[test]
fn the_round_is_bounded_by_process_batch() {
    let mut cfg = Config::defaults().pipeline;
    cfg.process_batch = 3;
    let mut w = world_with(cfg);
    for i in 1..=7 {
        w.arrive(i, Some(&fixtures::flop_stnd(i as u64, "F", &format!("S{i}"))));
    }
    assert_eq!(w.pump.round().unwrap(), Round::Worked(3));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(3));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(1));
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "S7", "applied in MSG_ID order");
}

#[test]
fn reading_the_head_fails_loudly() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    w.pg.fail_next(1);
    assert!(w.pump.round().is_err(), "the caller must see it");
    assert_eq!(w.state(1), ProcStatus::Pending);
}

#[test]
fn a_mailbox_outage_fails_the_head_as_infra_and_it_recovers() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1", "A1")));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "2", "A2")));
    w.mailbox.fail_next(1);
    assert_eq!(w.pump.round().unwrap(), Round::Worked(1));
    let r = w.row(1);
    assert_eq!((r.state, r.error_class), (ProcStatus::Failed, Some(ErrorClass::Infra)));
    assert!(r.last_error.unwrap().starts_with("mailbox:"));
    assert_eq!(w.state(2), ProcStatus::Pending);
    w.clock.advance(Duration::from_secs(1));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(2));
}

#[test]
fn an_ignored_message_seen_again_by_a_rescan_stays_skipped_once() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::other(1, "EROR", "X", "<EROR/>")));
    w.pump.round().unwrap();
    let before = w.pg.proc(1).unwrap();
    assert_eq!(before.row.last_error.as_deref(), Some("ignored:EROR-*"));
    // The poller or the rescan meets the row again: it is not enqueued twice, nor re-processed.
    let mut pg = w.pg.clone();
    assert!(pg.enqueue(&[InboundRow { id: 1, received_at: None }], None, w.clock.now()).unwrap().is_empty());
    assert_eq!(w.pump.round().unwrap(), Round::Idle);
    assert_eq!(w.pg.proc(1).unwrap(), before, "untouched");
}

#[test]
fn fdel_removes_the_flight_from_the_live_state() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F9", "A1")));
    w.arrive(2, Some(&fixtures::flop(2, "FDEL", "F9", &[("FDEL", None)])));
    w.pump.round().unwrap();
    assert_eq!(w.flights.flight("F9"), None);
    assert_eq!(w.events(), 2, "the delete is said downstream");
}

fn schd_msg(seqn: u64, styp: &str, flights: &[(&str, &str)]) -> String {
    let body: String = flights
        .iter()
        .map(|(f, s)| {
            format!("<FLTR><FLID>{f}</FLID><FLNO>MU{f}</FLNO><SODT>{s}</SODT><STND>2{f}</STND></FLTR>")
        })
        .collect();
    fixtures::other(seqn, "SCHD", styp, &format!("<SCHD><RECS>{}</RECS>{body}</SCHD>", flights.len()))
}

#[test]
fn a_daily_plan_snapshot_replaces_its_window_and_advances_the_generation() {
    let mut w = world();
    w.arrive(
        1,
        Some(&schd_msg(1, "DNLD", &[("A", "05MAR260900"), ("B", "05MAR261000"), ("C", "06MAR260900")])),
    );
    w.pump.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.flights.generation(), (1, 1));
    // The next snapshot covers 05MAR 09:00..10:30 and lacks B: B goes, C (outside) stays.
    w.arrive(2, Some(&schd_msg(2, "DNLD", &[("A", "05MAR260900"), ("D", "05MAR261030")])));
    w.pump.round().unwrap();
    assert!(w.flights.flight("B").is_none(), "absent from the window: deleted");
    assert!(w.flights.flight("C").is_some(), "outside the window: kept");
    assert_eq!(w.flights.flight("D").unwrap()["STND"], "2D");
    assert_eq!(w.flights.generation(), (2, 2));
    let schd_events = w.pg.inspect(|s| {
        s.events.values().filter(|e| e.event.target == crate::domain::Target::KafkaSchd).count()
    });
    assert_eq!(schd_events, 4, "one row per flight: A, B (its DELETE), C, D");
}

#[test]
fn applying_the_same_snapshot_twice_changes_nothing_the_second_time() {
    let mut w = world();
    let raw = schd_msg(1, "DNLD", &[("A", "05MAR260900")]);
    let msg = codec::decode(&raw).unwrap();
    let d = handlers::decide(&Default::default(), &msg, 1).unwrap();
    let mut flights = w.flights.clone();
    flights.apply(1, &d).unwrap();
    flights.forget(&[1]).unwrap(); // as if the applied record was gone (expired, replay days later)
    let mut changed = d.clone();
    changed.flights[0].set.push(("STND".into(), "999".into()));
    flights.apply(1, &changed).unwrap();
    assert_eq!(w.flights.generation(), (1, 1), "the generation moved once");
    assert_eq!(w.flights.flight("A").unwrap()["STND"], "2A", "the replay changed nothing");
    // The pump meets the message: nothing recorded in Redis any more, the CAS keeps the state.
    w.arrive(1, Some(&raw));
    w.pump.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
}

#[test]
fn a_protocol_violation_is_dead_at_once_and_applies_nothing() {
    let mut w = world();
    let raw = fixtures::other(
        1,
        "SCHD",
        "DNLD",
        "<SCHD><RECS>5</RECS><FLTR><FLID>A</FLID><SODT>05MAR260900</SODT></FLTR></SCHD>",
    );
    w.arrive(1, Some(&raw));
    w.pump.round().unwrap();
    let r = w.row(1);
    assert_eq!((r.state, r.error_class, r.attempts), (ProcStatus::Dead, Some(ErrorClass::Protocol), 1));
    assert!(r.last_error.unwrap().contains("RECS declares 5"));
    assert!(w.flights.flight("A").is_none());
    assert_eq!(w.flights.generation(), (0, 0));
    assert_eq!(w.events(), 0);
}

#[test]
fn reference_data_lands_in_ref_master_with_the_message() {
    let mut w = world();
    let rec = |k: &str| format!("<SLST><SCOD>{k}</SCOD><STNM>Stand {k}</STNM></SLST>");
    w.arrive(
        1,
        Some(&fixtures::other(1, "SLST", "DNLD", &format!("<RECS>2</RECS>{}{}", rec("S1"), rec("S2")))),
    );
    w.arrive(2, Some(&fixtures::other(2, "SLST", "DEL", &format!("<RECS>1</RECS>{}", rec("S1")))));
    w.arrive(3, Some(&fixtures::other(3, "SLST", "DNLD", &format!("<RECS>1</RECS>{}", rec("S3")))));
    w.arrive(4, Some(&fixtures::other(4, "GLST", "ADD", "<RECS>1</RECS><GLST><GCOD>G1</GCOD></GLST>")));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(4));
    let keys: Vec<(String, String)> = w.pg.inspect(|s| s.refs.keys().cloned().collect());
    assert_eq!(keys, [("GLST".to_string(), "G1".to_string()), ("SLST".to_string(), "S3".to_string())]);
    assert_eq!(w.events(), 0, "reference data writes no events");
}

#[test]
fn applied_records_are_dropped_once_postgresql_holds_the_outcome() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F", "A1")));
    w.pump.round().unwrap();
    assert!(w.flights.applied_ids().is_empty());
}
