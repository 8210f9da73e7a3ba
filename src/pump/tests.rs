//! The pump driven tick by tick with the fake clock, on the in-memory stores.

use std::time::Duration;

use super::*;
use crate::clock::Clock;
use crate::config::Config;
use crate::domain::{InboundRow, ProcStatus};
use crate::error::ErrorClass;
use crate::fixtures;
use crate::ports::{Applying, Intake};
use crate::store::memory::{Fault, MemFlights, MemMailbox, MemPg};
use crate::testkit::Twins;
use crate::{codec, handlers};

struct World {
    twins: Twins,
    pump: Pump<MemPg, MemMailbox, MemFlights>,
}

impl std::ops::Deref for World {
    type Target = Twins;
    fn deref(&self) -> &Twins {
        &self.twins
    }
}

fn world_with(cfg: crate::config::Pipeline) -> World {
    let twins = Twins::new();
    let pump = twins.pump(&cfg);
    World { twins, pump }
}

fn world() -> World {
    world_with(Config::defaults().pipeline)
}

/// The site that keeps the retry ladder for an unknown kind (SPEC §3a): the tests of the
/// ladder fail the head with one.
fn laddered() -> crate::config::Pipeline {
    let mut cfg = Config::defaults().pipeline;
    cfg.retry_unsupported = true;
    cfg
}

/// SPEC §3a (#68): by default a kind no handler knows is DEAD(UNSUPPORTED) at its first
/// attempt, and the flight behind it is decided in the same round: it never waits a backoff.
#[test]
fn regression_an_unsupported_head_is_parked_in_the_round_that_reads_it() {
    let mut w = world();
    w.arrive(1, Some(UNSUPPORTED));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    let r = w.row(1);
    assert_eq!((r.state, r.error_class, r.attempts), (ProcStatus::Dead, Some(ErrorClass::Unsupported), 1));
    assert_eq!(w.state(2), ProcStatus::Succeeded);
}

const UNSUPPORTED: &str =
    "<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>1</DTTM><TYPE>ZZZZ</TYPE><STYP>Q</STYP></META></MSG>";

impl World {
    fn round(&mut self) -> Result<Round, StoreError> {
        self.pump.round(self.clock.now())
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
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    let r = w.row(1);
    assert_eq!((r.state, r.type_tag.as_deref()), (ProcStatus::Succeeded, Some("FLOP-STND")));
    assert_eq!(r.identity_key.as_deref(), Some("AODB|FLOP|STND|1"));
    assert_eq!(w.flights.flight("1001").unwrap()["STND"], "A12");
    assert_eq!(w.events(), 1);
    assert!(w.pg.proc(1).unwrap().backfill_next_at.is_some(), "INV-8");
    assert_eq!(w.round().unwrap(), Round::Idle);
}

#[test]
fn raw_text_missing_is_dead_malformed_at_once() {
    let mut w = world();
    w.arrive(1, None);
    w.round().unwrap();
    let r = w.row(1);
    assert_eq!((r.state, r.error_class, r.attempts), (ProcStatus::Dead, Some(ErrorClass::Malformed), 1));
    assert!(w.pg.proc(1).unwrap().backfill_next_at.is_some(), "DEAD owes a mark too");
}

#[test]
fn malformed_is_dead_at_once_and_does_not_block_the_next_message() {
    let mut w = world();
    w.arrive(1, Some("<MSG><META>"));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    assert_eq!(w.round().unwrap(), Round::Worked(2), "one round, one commit");
    assert_eq!(w.state(1), ProcStatus::Dead);
    assert_eq!(w.row(1).error_class, Some(ErrorClass::Malformed));
    assert_eq!(w.state(2), ProcStatus::Succeeded);
}

#[test]
fn head_in_backoff_blocks_everything_behind_it_tick_by_tick() {
    let mut w = world_with(laddered());
    w.arrive(1, Some(UNSUPPORTED));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    let r = w.row(1);
    assert_eq!((r.state, r.error_class, r.attempts), (ProcStatus::Failed, Some(ErrorClass::Unsupported), 1));
    let until = w.clock.now() + Duration::from_secs(1);
    for _ in 0..3 {
        assert_eq!(w.round().unwrap(), Round::Wait(until), "HOL: message 2 must not overtake");
        w.clock.advance(Duration::from_millis(300));
    }
    assert_eq!(w.state(2), ProcStatus::Pending);
    w.clock.advance(Duration::from_millis(100)); // backoff expired: the head is tried again
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    assert_eq!(w.row(1).attempts, 2);
}

#[test]
fn poison_by_attempts_is_dead_exhausted_then_the_queue_moves() {
    let mut w = world_with(laddered());
    w.arrive(1, Some(UNSUPPORTED));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    for (i, wait) in [1u64, 2, 4, 8].into_iter().enumerate() {
        assert_eq!(w.round().unwrap(), Round::Worked(1), "attempt {}", i + 1);
        assert!(matches!(w.round().unwrap(), Round::Wait(_)));
        w.clock.advance(Duration::from_secs(wait));
    }
    // Fifth attempt: attempts reach max-attempts → DEAD(EXHAUSTED), and message 2 follows.
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    let r = w.row(1);
    assert_eq!((r.state, r.error_class, r.attempts), (ProcStatus::Dead, Some(ErrorClass::Exhausted), 5));
    assert!(r.last_error.unwrap().contains("UNSUPPORTED after 5 attempts"));
    assert_eq!(w.state(2), ProcStatus::Succeeded);
}

#[test]
fn poison_by_head_deadline_fires_when_attempts_are_not_used_up() {
    let mut cfg = laddered();
    cfg.max_attempts = 1000;
    let mut w = world_with(cfg);
    w.arrive(1, Some(UNSUPPORTED));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    let mut rounds = 0;
    // Keep failing: backoff 1,2,4,8,16,16,… until ten minutes have passed since the first failure.
    while w.state(1) == ProcStatus::Failed || w.state(1) == ProcStatus::Pending {
        match w.round().unwrap() {
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
    assert!(stuck >= Duration::from_secs(600) && stuck <= Duration::from_secs(600 + 16), "{stuck:?}");
    assert!(r.attempts < 1000);
    assert_eq!(w.state(2), ProcStatus::Succeeded, "the poisoned head's round went on to message 2");
}

#[test]
fn a_redis_refusal_is_charged_and_the_retry_emits_the_event() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    w.flights.inject_later(1, Fault::Rejected, 1); // the read passes, the apply is refused
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    let r = w.row(1);
    assert_eq!((r.state, r.error_class), (ProcStatus::Failed, Some(ErrorClass::Infra)));
    assert!(r.last_error.unwrap().contains("redis refused"));
    w.clock.advance(Duration::from_secs(1));
    w.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.events(), 1);
}

#[test]
fn regression_retry_after_redis_applied_but_pg_failed_keeps_the_event() {
    // Redis holds the new value after the first attempt, so a fresh decision would find
    // nothing changed and write no event: the applied decision must be reused (I2).
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    w.pg.inject_later(2, Fault::Unavailable, 1); // unfinished, identities pass; the commit fails
    assert!(w.round().unwrap_err().is_unavailable());
    assert_eq!(w.flights.flight("1001").unwrap()["STND"], "A12", "Redis got it");
    assert_eq!((w.state(1), w.row(1).attempts), (ProcStatus::Pending, 0), "nothing charged");
    w.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.events(), 1, "the event survives the crash window");
}

#[test]
fn regression_a_redis_apply_whose_answer_was_lost_is_not_applied_twice() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    w.flights.inject_later(1, Fault::Lost, 1); // applied, then the connection dropped
    assert!(w.round().unwrap_err().is_unavailable());
    w.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.events(), 1, "the journal made the retry emit the same event");
}

#[test]
fn regression_a_refused_commit_charges_only_the_message_that_caused_it() {
    // One data-dependent error (a value PostgreSQL refuses) used to charge the head, whatever
    // message caused it, killing innocent messages one by one.
    let mut w = world();
    for i in 1..=5 {
        w.arrive(i, Some(&fixtures::flop_stnd(i as u64, &format!("F{i}"), "A")));
    }
    w.pg.refuse_outcome_of(Some(3));
    assert_eq!(w.round().unwrap(), Round::Worked(3), "1 and 2 committed alone, 3 charged");
    assert_eq!((w.state(1), w.state(2)), (ProcStatus::Succeeded, ProcStatus::Succeeded));
    let r = w.row(3);
    assert_eq!((r.state, r.error_class, r.attempts), (ProcStatus::Failed, Some(ErrorClass::Infra), 1));
    assert!(r.last_error.unwrap().contains("refused"));
    assert_eq!((w.state(4), w.state(5)), (ProcStatus::Pending, ProcStatus::Pending));
    // It stays refused: 3 alone goes to DEAD(EXHAUSTED), everyone else succeeds.
    while w.state(3) == ProcStatus::Failed {
        if let Round::Wait(t) = w.round().unwrap() {
            w.clock.set(t);
        }
    }
    while let Round::Worked(_) = w.round().unwrap() {}
    assert_eq!(w.state(3), ProcStatus::Dead);
    assert_eq!(w.row(3).error_class, Some(ErrorClass::Exhausted));
    for i in [1, 2, 4, 5] {
        assert_eq!(w.state(i), ProcStatus::Succeeded, "msg {i}");
    }
}

#[test]
fn a_store_refusing_even_the_failure_stalls_instead_of_charging() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F", "A")));
    w.pg.inject_later(2, Fault::Rejected, 10); // every write refused: the store, not the message
    let e = w.round().unwrap_err();
    assert!(e.is_rejected(), "{e}");
    assert_eq!(w.row(1).attempts, 0);
}

#[test]
fn a_failure_commits_the_messages_before_it_and_becomes_the_head() {
    let mut w = world_with(laddered());
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1", "A1")));
    w.arrive(2, Some(UNSUPPORTED));
    w.arrive(3, Some(&fixtures::flop_stnd(3, "3", "A3")));
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    assert_eq!(
        (w.state(1), w.state(2), w.state(3)),
        (ProcStatus::Succeeded, ProcStatus::Failed, ProcStatus::Pending)
    );
    assert!(matches!(w.round().unwrap(), Round::Wait(_)));
}

#[test]
fn duplicate_identity_is_skipped_even_within_one_round() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(5, "1", "A1")));
    w.arrive(2, Some(&fixtures::flop_stnd(5, "1", "A2"))); // same SNDR|TYPE|STYP|SEQN
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    let r = w.row(2);
    assert_eq!((r.state, r.last_error.as_deref()), (ProcStatus::Skipped, Some("duplicate-of:1")));
    assert_eq!(r.identity_key, None);
    assert_eq!(w.flights.flight("1").unwrap()["STND"], "A1", "the duplicate changed nothing");
    // …and across rounds.
    w.arrive(3, Some(&fixtures::flop_stnd(5, "1", "A3")));
    w.round().unwrap();
    assert_eq!(w.row(3).last_error.as_deref(), Some("duplicate-of:1"));
}

#[test]
fn ignored_message_is_skipped_before_body_and_identity_and_never_blocks() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::other(1, "ldm", "XX", "<LDM><unreadable a='1'><x/></unreadable></LDM>")));
    w.arrive(2, Some(&fixtures::other(2, "Rsta", "ANY", "")));
    w.arrive(3, Some(&fixtures::flop_stnd(3, "7", "B1")));
    assert_eq!(w.round().unwrap(), Round::Worked(3));
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
    w.round().unwrap();
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
    assert_eq!(w.round().unwrap(), Round::Worked(3));
    assert_eq!(w.round().unwrap(), Round::Worked(3));
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "S7", "applied in MSG_ID order");
}

#[test]
fn reading_the_head_fails_loudly_and_charges_nothing() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    w.pg.fail_next(1);
    assert!(w.round().unwrap_err().is_unavailable(), "the caller must see it");
    assert_eq!((w.state(1), w.row(1).attempts), (ProcStatus::Pending, 0));
}

type Down = fn(&World, bool);

#[test]
fn two_hours_of_any_store_away_cost_no_message_no_attempt_and_no_order() {
    let stores: [(&str, Down); 3] = [
        ("redis", |w, d| w.flights.set_down(d)),
        ("mailbox", |w, d| w.mailbox.set_down(d)),
        ("postgres", |w, d| w.pg.set_down(d)),
    ];
    for (store, down) in stores {
        let mut w = world_with(laddered());
        for i in 1..=10 {
            w.arrive(i, Some(&fixtures::flop_stnd(i as u64, &format!("F{}", i % 3), &format!("S{i}"))));
        }
        assert_eq!(w.round().unwrap(), Round::Worked(10));
        w.arrive(11, Some(UNSUPPORTED)); // a head that was failing on its own before the outage
        w.arrive(12, Some(&fixtures::flop_stnd(12, "F0", "S12")));
        w.round().unwrap();
        assert_eq!(w.row(11).attempts, 1);
        down(&w, true);
        let start = w.clock.now();
        while w.clock.now().duration_since(start).unwrap() < Duration::from_secs(7200) {
            match w.round() {
                Err(e) => assert!(e.is_unavailable(), "{store}: {e}"),
                // PostgreSQL holds the head's backoff: while Redis or the mailbox is away the
                // pump still sees it waiting, and tries it again only when it is due.
                Ok(Round::Wait(_)) => {}
                Ok(other) => panic!("{store}: {other:?} during the outage"),
            }
            w.clock.advance(Duration::from_secs(2));
        }
        down(&w, false);
        let r = w.row(11);
        assert_eq!((r.state, r.attempts), (ProcStatus::Failed, 1), "{store}: the head was not charged");
        let mut rounds = 0;
        while w.state(12) != ProcStatus::Succeeded {
            if let Round::Wait(t) = w.round().unwrap() {
                w.clock.set(t);
            }
            rounds += 1;
            assert!(rounds < 100, "{store}: never drained");
        }
        let dead: Vec<i64> = w.pg.inspect(|s| {
            s.procs.values().filter(|p| p.row.state == ProcStatus::Dead).map(|p| p.row.msg_id).collect()
        });
        assert_eq!(dead, vec![11], "{store}: only the unsupported message, by its own failure");
        // #21 item 1: it died of its own attempts, not of a deadline clock the outage ran.
        let r = w.row(11);
        let error = r.last_error.unwrap_or_default();
        assert_eq!((r.attempts, r.error_class), (5, Some(ErrorClass::Exhausted)), "{store}: {error}");
        assert!(error.contains("UNSUPPORTED after 5 attempts:"), "{store}: {error}");
        assert_eq!(w.flights.flight("F0").unwrap()["STND"], "S12", "{store}: applied in order");
    }
}

#[test]
fn a_head_backing_off_reads_no_mailbox_text() {
    let mut w = world_with(laddered());
    w.arrive(1, Some(UNSUPPORTED));
    w.round().unwrap();
    let reads = w.mailbox.calls();
    for _ in 0..5 {
        assert!(matches!(w.round().unwrap(), Round::Wait(_)));
    }
    assert_eq!(w.mailbox.calls(), reads, "the backoff is checked before the mailbox is read");
}

#[test]
fn redis_round_trips_per_message_fall_to_two_per_round() {
    let mut cfg = Config::defaults().pipeline;
    cfg.process_batch = 50;
    let mut w = world_with(cfg);
    for i in 1..=500 {
        w.arrive(i, Some(&fixtures::flop_stnd(i as u64, &format!("F{}", i % 37), &format!("S{i}"))));
    }
    let before = w.flights.calls();
    while let Round::Worked(_) = w.round().unwrap() {}
    let per_message = (w.flights.calls() - before) as f64 / 500.0;
    assert!(per_message <= 0.05, "{per_message} Redis round trips per message");
    for f in 0..37 {
        let last = (1..=500).filter(|i| i % 37 == f).max().unwrap();
        assert_eq!(w.flights.flight(&format!("F{f}")).unwrap()["STND"], format!("S{last}"));
    }
    assert!(w.flights.applied_ids().is_empty(), "the journal was dropped once PostgreSQL held the outcomes");
}

#[test]
fn message_k_sees_what_k_minus_1_decided_within_a_round() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F", "A")));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "F", "A"))); // no change after 1
    w.arrive(3, Some(&fixtures::flop_stnd(3, "F", "B")));
    assert_eq!(w.round().unwrap(), Round::Worked(3));
    let evs: Vec<String> =
        w.pg.inspect(|s| s.events.values().map(|e| e.event.payload_json.clone()).collect());
    assert_eq!(evs.len(), 2, "{evs:?}");
    assert!(evs[0].contains("\"created\":true") && evs[1].contains("\"old\":\"A\""), "{evs:?}");
}

#[test]
fn regression_a_late_row_never_overwrites_a_newer_value() {
    // A lower MSG_ID processed after a higher one (a row that committed past the commit grace,
    // or a replay): fields the newer message wrote keep its value, the others are applied.
    let mut w = world();
    w.arrive(5, Some(&fixtures::flop_stnd(5, "F", "NEW")));
    w.round().unwrap();
    w.arrive(3, Some(&fixtures::flop(3, "STND", "F", &[("STND", Some("OLD"))])));
    w.arrive(4, Some(&fixtures::flop(4, "RENO", "F", &[("RENO", Some("B-1"))])));
    while let Round::Worked(_) = w.round().unwrap() {}
    let f = w.flights.flight("F").unwrap();
    assert_eq!((f["STND"].as_str(), f["RENO"].as_str()), ("NEW", "B-1"));
    assert_eq!(w.events(), 2, "the superseded change says nothing; the other one does");
}

#[test]
fn a_stale_snapshot_changes_nothing_and_publishes_nothing() {
    let mut w = world();
    w.arrive(2, Some(&schd_msg(2, "DNLD", &[("A", "05MAR260900")])));
    w.round().unwrap();
    let before = w.events();
    w.arrive(1, Some(&schd_msg(1, "DNLD", &[("B", "05MAR260900")]))); // older, processed later
    w.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert!(w.flights.flight("B").is_none() && w.flights.flight("A").is_some());
    assert_eq!(w.events(), before, "no UPSERT of B, no DELETE of A");
}

#[test]
fn a_snapshot_is_a_round_of_its_own() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "X", "A")));
    w.arrive(2, Some(&schd_msg(2, "DNLD", &[("A", "05MAR260900")])));
    w.arrive(3, Some(&fixtures::flop_stnd(3, "X", "B")));
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    assert_eq!(w.flights.generation(), (1, 2));
    assert_eq!(w.round().unwrap(), Round::Worked(1));
}

#[test]
fn an_event_too_large_for_the_broker_is_refused_before_anything_is_applied() {
    let mut cfg = Config::defaults().pipeline;
    cfg.max_event_bytes = 1024;
    let mut w = world_with(cfg);
    w.arrive(1, Some(&fixtures::flop(1, "REMC", "F", &[("REMC", Some(&"x".repeat(2000)))])));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "F", "A")));
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    let r = w.row(1);
    assert_eq!((r.state, r.error_class), (ProcStatus::Dead, Some(ErrorClass::Protocol)));
    assert!(r.last_error.unwrap().contains("max-event-bytes"));
    assert_eq!(w.flights.flight("F").unwrap().get("REMC"), None, "nothing of it applied");
    assert_eq!(w.events(), 1);
}

#[test]
fn a_body_that_is_not_utf8_or_holds_nul_is_malformed_alone() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F", "A")));
    w.mailbox.insert_bytes(2, Some(b"<MSG>\xff\xfe</MSG>".to_vec()));
    w.pg.arrive(&[2], w.clock.now());
    w.arrive(3, Some(&fixtures::flop_stnd(3, "F", "A\u{0}B")));
    w.arrive(4, Some(&fixtures::flop_stnd(4, "F", "A&#0;B")));
    w.arrive(5, Some(&fixtures::flop_stnd(5, "F", "B")));
    while let Round::Worked(_) = w.round().unwrap() {}
    for (id, words) in
        [(2, "not UTF-8: invalid byte 0xFF at byte offset 5"), (3, "U+0000"), (4, "0x0 character")]
    {
        let r = w.row(id);
        assert_eq!((r.state, r.error_class), (ProcStatus::Dead, Some(ErrorClass::Malformed)), "{id}");
        assert!(r.last_error.as_deref().unwrap().contains(words), "{id}: {:?}", r.last_error);
    }
    assert_eq!(w.state(5), ProcStatus::Succeeded);
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "B");
}

#[test]
fn a_message_over_the_size_limit_is_protocol_before_decoding() {
    let mut cfg = Config::defaults().pipeline;
    cfg.max_message_bytes = 2048;
    let mut w = world_with(cfg);
    w.arrive(1, Some(&fixtures::flop(1, "REMC", "F", &[("REMC", Some(&"y".repeat(4000)))])));
    w.round().unwrap();
    let r = w.row(1);
    assert_eq!((r.state, r.error_class), (ProcStatus::Dead, Some(ErrorClass::Protocol)));
    assert!(r.last_error.unwrap().contains("exceeds msgx.codec.max-message-bytes (2048)"));
}

#[test]
fn an_unknown_element_is_reported_and_the_known_fields_applied() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_body("STND", "F", "<STND>A7</STND><VNDR>extra</VNDR>")));
    w.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "A7");
    assert_eq!(w.pump.stats.unknown_elements.load(std::sync::atomic::Ordering::Relaxed), 1);
    let mut strict = Config::defaults().pipeline;
    strict.strict_codec = true;
    let mut w = world_with(strict);
    w.arrive(1, Some(&fixtures::flop_body("STND", "F", "<STND>A7</STND><VNDR>extra</VNDR>")));
    w.round().unwrap();
    assert_eq!(w.row(1).error_class, Some(ErrorClass::CodecError), "msgx.codec.strict restores the refusal");
}

#[test]
fn an_ignored_message_seen_again_by_a_rescan_stays_skipped_once() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::other(1, "EROR", "X", "<EROR/>")));
    w.round().unwrap();
    let before = w.pg.proc(1).unwrap();
    assert_eq!(before.row.last_error.as_deref(), Some("ignored:EROR-*"));
    // The poller or the rescan meets the row again: it is not enqueued twice, nor re-processed.
    let mut pg = w.pg.clone();
    assert!(pg.enqueue(&[InboundRow { id: 1, received_at: None }], None, w.clock.now()).unwrap().is_empty());
    assert_eq!(w.round().unwrap(), Round::Idle);
    assert_eq!(w.pg.proc(1).unwrap(), before, "untouched");
}

#[test]
fn fdel_removes_the_flight_from_the_live_state() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F9", "A1")));
    w.arrive(2, Some(&fixtures::flop(2, "FDEL", "F9", &[("FDEL", None)])));
    w.round().unwrap();
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
    w.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.flights.generation(), (1, 1));
    // The next snapshot covers 05MAR 09:00..10:30 and lacks B: B goes, C (outside) stays.
    w.arrive(2, Some(&schd_msg(2, "DNLD", &[("A", "05MAR260900"), ("D", "05MAR261030")])));
    w.round().unwrap();
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
    flights.apply(&Applying::unnamed_all(&[(1, &d)])).unwrap();
    flights.forget(&[1], std::time::SystemTime::UNIX_EPOCH).unwrap(); // as if the applied record was gone (expired, replay days later)
    let mut changed = d.clone();
    changed.flights[0].set.push(("STND".into(), "999".into()));
    assert_eq!(
        flights.apply(&Applying::unnamed_all(&[(1, &changed)])).unwrap(),
        vec![false],
        "not newer: refused"
    );
    assert_eq!(w.flights.generation(), (1, 1), "the generation moved once");
    assert_eq!(w.flights.flight("A").unwrap()["STND"], "2A", "the replay changed nothing");
    // The pump meets the message: nothing recorded in Redis any more, the CAS keeps the state.
    w.arrive(1, Some(&raw));
    w.round().unwrap();
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
    w.round().unwrap();
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
    assert_eq!(w.round().unwrap(), Round::Worked(4));
    let keys: Vec<(String, String)> = w.pg.inspect(|s| s.refs.keys().cloned().collect());
    assert_eq!(keys, [("GLST".to_string(), "G1".to_string()), ("SLST".to_string(), "S3".to_string())]);
    assert_eq!(w.events(), 0, "reference data writes no events");
}

#[test]
fn applied_records_are_dropped_once_postgresql_holds_the_outcome() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F", "A1")));
    w.round().unwrap();
    assert_eq!(w.flights.applied_ids(), vec![1], "dropped with the next Redis call, not one of its own");
    assert_eq!(w.round().unwrap(), Round::Idle);
    assert!(w.flights.applied_ids().is_empty(), "an idle pump drops them");
}

mod bytes_through_the_mailbox {
    //! Arbitrary bytes through the mailbox adapter into the pump (issue #11): no panic, and
    //! every refusal is that one message's, never its neighbours'. `PROPTEST_CASES=100000
    //! cargo test --lib pump::tests::bytes` runs it for longer.
    use super::*;
    use proptest::prelude::*;

    fn body() -> impl Strategy<Value = Vec<u8>> {
        let seed = fixtures::flop_stnd(1, "F", "S").into_bytes();
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..400),
            prop::collection::vec((any::<usize>(), any::<u8>()), 1..6).prop_map(move |edits| {
                let mut b = seed.clone();
                for (pos, byte) in edits {
                    let i = pos % b.len();
                    b[i] = byte;
                }
                b
            }),
        ]
    }

    proptest! {
        #[test]
        fn a_hostile_body_fails_alone_and_never_panics(bodies in prop::collection::vec(body(), 1..6)) {
            let mut w = world();
            let mut id = 0;
            for b in &bodies {
                id += 1;
                w.mailbox.insert_bytes(id, Some(b.clone()));
                w.pg.arrive(&[id], w.clock.now());
            }
            let good = id + 1;
            w.arrive(good, Some(&fixtures::flop_stnd(9_999, "GOOD", "OK")));
            // Drain past any backoff a CODEC_ERROR head takes: it must end on its own.
            for _ in 0..50 {
                match w.round() {
                    Ok(Round::Wait(t)) => w.clock.set(t),
                    Ok(Round::Idle) => break,
                    Ok(Round::Worked(_)) => {}
                    Err(e) => prop_assert!(false, "a body made the round fail: {e}"),
                }
            }
            for i in 1..=id {
                let r = w.row(i);
                prop_assert!(r.state.is_terminal(), "msg {i}: {:?}", r);
                prop_assert_ne!(r.error_class, Some(ErrorClass::Infra), "msg {}: a panic or a store error: {:?}", i, r.last_error);
            }
            prop_assert_eq!(w.state(good), ProcStatus::Succeeded);
        }
    }
}

// ---------------------------------------------------------------- the commit lane (#13)

/// A pump whose commits wait on a deferred lane: every next round is read while the last
/// commit is still unrecorded — the widest interleaving the daemon's lane allows.
fn world_with_lane(batch: usize) -> World {
    // The lane's tests back a head off with an unknown kind: the ladder kept.
    let mut cfg = laddered();
    cfg.process_batch = batch;
    let mut w = world_with(cfg.clone());
    w.pump = w.twins.pump(&cfg).with_lane(lane::Deferred::new(w.pg.clone()));
    w
}

impl World {
    fn drain(&mut self) {
        for _ in 0..100 {
            match self.round().unwrap() {
                Round::Worked(_) => {}
                Round::Wait(t) => self.clock.set(t),
                Round::Idle => return,
            }
        }
        panic!("not drained in 100 rounds");
    }

    fn event_msgs(&self) -> Vec<i64> {
        self.pg.inspect(|s| s.events.values().filter_map(|e| e.event.msg_id).collect())
    }
}

#[test]
fn the_lane_commits_a_round_while_the_next_is_read_and_nothing_overtakes() {
    let mut w = world_with_lane(2);
    for i in 1..=5 {
        w.arrive(i, Some(&fixtures::flop_stnd(i as u64, "F", &format!("A{i}"))));
    }
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    assert_eq!((w.state(1), w.state(2)), (ProcStatus::Pending, ProcStatus::Pending), "on its way");
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "A2", "Redis first (I2)");
    assert_eq!(w.round().unwrap(), Round::Worked(2), "3 and 4 read past the committing 1 and 2");
    assert_eq!((w.state(1), w.state(2)), (ProcStatus::Succeeded, ProcStatus::Succeeded));
    assert_eq!((w.state(3), w.state(4)), (ProcStatus::Pending, ProcStatus::Pending));
    w.drain();
    for i in 1..=5 {
        assert_eq!(w.state(i), ProcStatus::Succeeded, "msg {i}");
    }
    assert_eq!(w.event_msgs(), [1, 2, 3, 4, 5], "events in MSG_ID order, one each");
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "A5");
}

#[test]
fn a_duplicate_of_the_round_still_committing_is_skipped() {
    let mut w = world_with_lane(1);
    w.arrive(1, Some(&fixtures::flop_stnd(7, "F", "A1")));
    w.arrive(2, Some(&fixtures::flop_stnd(7, "F", "B9"))); // a resend under the same identity
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    w.drain();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    let r = w.row(2);
    assert_eq!((r.state, r.attempts), (ProcStatus::Skipped, 0), "INV-9 across the lane, at the first try");
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "A1", "the duplicate never reached Redis");
    assert_eq!(w.event_msgs(), [1]);
}

/// Seed 3591: a resend (3) was processed while the row it resends (1) was not yet visible
/// (PRE-2), and own PostgreSQL then forgot both the resend and its events before they went
/// out. Processed again in MSG_ID order, the late row took the identity and the resend was
/// SKIPPED: its change stayed in Redis, and its event never reached a consumer. The decision
/// that stands in Redis now keeps its identity, and its journalled event goes out.
#[test]
fn regression_seed_3591_a_journalled_resend_keeps_its_identity_after_postgres_forgot() {
    let cfg = Config::defaults().pipeline;
    let twins = Twins::keeping(Duration::from_secs(3600)); // redis.journal-keep
    let mut w = World { pump: twins.pump(&cfg), twins };
    let dump = w.pg.state();
    w.arrive(2, Some(&fixtures::flop_stnd(8, "F", "B7")));
    w.arrive(3, Some(&fixtures::flop_stnd(7, "F", "A1"))); // resends 1, not visible yet
    w.drain();
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "A1");
    // Forgot 2 and 3, and their events, before they were sent; a new process on the database
    // as it is now.
    w.pg.roll_back_to(dump);
    w.twins.pg = w.pg.session();
    w.pump = w.twins.pump(&cfg);
    w.arrive(1, Some(&fixtures::flop_stnd(7, "F", "A1")));
    w.enqueue(&[2, 3]);
    w.drain();
    let r = w.row(1);
    assert_eq!((r.state, r.last_error.as_deref()), (ProcStatus::Skipped, Some("duplicate-of:3")));
    assert_eq!((w.state(2), w.state(3)), (ProcStatus::Succeeded, ProcStatus::Succeeded));
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "A1", "Redis as it was");
    assert_eq!(w.event_msgs(), [2, 3], "the journalled events go out again, the last one A1's");
}

#[test]
fn a_refused_landing_applies_nothing_of_the_next_round() {
    let mut w = world_with_lane(2);
    for i in 1..=4 {
        w.arrive(i, Some(&fixtures::flop_stnd(i as u64, &format!("F{i}"), "A")));
    }
    w.pg.refuse_outcome_of(Some(2));
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    assert_eq!(w.round().unwrap(), Round::Worked(2), "1 recorded alone, 2 charged");
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.state(2), ProcStatus::Failed);
    assert!(
        w.flights.flight("F3").is_none() && w.flights.flight("F4").is_none(),
        "3 and 4 never reached Redis"
    );
    assert_eq!((w.state(3), w.state(4)), (ProcStatus::Pending, ProcStatus::Pending));
    assert!(matches!(w.round().unwrap(), Round::Wait(_)), "2 is the head, backing off");
    w.pg.refuse_outcome_of(None);
    w.drain();
    for i in 1..=4 {
        assert_eq!(w.state(i), ProcStatus::Succeeded, "msg {i}");
    }
    assert_eq!(w.event_msgs(), [1, 2, 3, 4]);
}

#[test]
fn a_round_ending_in_backoff_commits_in_place() {
    let mut w = world_with_lane(5);
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F", "A1")));
    w.arrive(2, Some(UNSUPPORTED));
    w.arrive(3, Some(&fixtures::flop_stnd(3, "F", "A3")));
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    assert_eq!((w.state(1), w.state(2)), (ProcStatus::Succeeded, ProcStatus::Failed), "recorded at once");
    assert!(matches!(w.round().unwrap(), Round::Wait(_)), "the next round sees the head backing off");
    assert_eq!(w.state(3), ProcStatus::Pending);
}

#[test]
fn an_unavailable_landing_is_read_again_and_the_journal_keeps_the_events() {
    let mut w = world_with_lane(2);
    for i in 1..=4 {
        w.arrive(i, Some(&fixtures::flop_stnd(i as u64, "F", &format!("A{i}"))));
    }
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    // Round 2 reads the head and the identities, then waits for the lane: that commit fails.
    w.pg.inject_later(2, Fault::Unavailable, 1);
    assert!(w.round().unwrap_err().is_unavailable());
    assert_eq!((w.state(1), w.state(3)), (ProcStatus::Pending, ProcStatus::Pending));
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "A2", "nothing of 3 and 4 applied");
    w.drain();
    for i in 1..=4 {
        assert_eq!(w.state(i), ProcStatus::Succeeded, "msg {i}");
    }
    assert_eq!(w.event_msgs(), [1, 2, 3, 4], "the same events, once each");
}

#[test]
fn closing_the_stage_lands_the_last_round() {
    let mut w = world_with_lane(2);
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F", "A1")));
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    assert_eq!(w.state(1), ProcStatus::Pending);
    Stage::close(&mut w.pump);
    assert_eq!(w.state(1), ProcStatus::Succeeded);
}

#[test]
fn with_a_lane_the_last_round_lands_before_the_pump_goes_idle() {
    let mut w = world_with_lane(2);
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F", "A1")));
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    assert_eq!(w.round().unwrap(), Round::Worked(0), "landed: the dispatcher is rung");
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.round().unwrap(), Round::Idle);
}

#[test]
fn a_round_holds_at_most_its_byte_budget_of_text() {
    let mut cfg = Config::defaults().pipeline;
    let one = fixtures::flop_stnd(1, "F", "A1").len() as u64;
    cfg.process_batch_bytes = 2 * one + one / 2; // two texts fit, the third would pass it
    let mut w = world_with(cfg);
    for i in 1..=5 {
        w.arrive(i, Some(&fixtures::flop_stnd(i as u64, "F", &format!("A{i}"))));
    }
    assert_eq!(w.round().unwrap(), Round::Worked(2), "the round ends before the third text");
    assert_eq!(w.state(3), ProcStatus::Pending, "not read, not charged");
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    assert_eq!(w.flights.flight("F").unwrap()["STND"], "A5");
}

#[test]
fn a_text_larger_than_the_budget_still_makes_a_round_of_its_own() {
    let mut cfg = Config::defaults().pipeline;
    cfg.process_batch_bytes = 10;
    let mut w = world_with(cfg);
    w.arrive(1, Some(&fixtures::flop_stnd(1, "F", "A1")));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "F", "A2")));
    assert_eq!(w.round().unwrap(), Round::Worked(1), "the first text is always read");
    assert_eq!(w.round().unwrap(), Round::Worked(1));
    assert_eq!(w.state(2), ProcStatus::Succeeded);
}

#[test]
fn the_budget_counts_only_the_texts_it_fetches() {
    use crate::ports::within_budget;
    let sizes = [(1, Some(10)), (2, None), (3, Some(5000)), (4, Some(10)), (5, Some(10))];
    assert_eq!(within_budget(&sizes, 1000, 20), 4, "a missing or too-large text costs nothing");
    assert_eq!(within_budget(&sizes, 1000, 30), 5);
    assert_eq!(within_budget(&sizes[..1], 1000, 0), 1, "one always fits");
    assert_eq!(within_budget(&[], 1000, 0), 0);
}

/// #21 item 5: a row the mailbox refuses to read while it reads the others is that row's
/// failure, charged to it alone; the others go on. A read refused for every row stalls.
#[test]
fn regression_a_row_the_mailbox_cannot_read_is_charged_alone() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A1")));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "1002", "B2")));
    w.arrive(3, Some(&fixtures::flop_stnd(3, "1003", "C3")));
    w.mailbox.tamper(|s| s.unreadable.insert(2));
    assert_eq!(w.round().unwrap(), Round::Worked(2), "1 succeeded, 2 charged; 3 waits behind it");
    let r = w.row(2);
    assert_eq!((r.state, r.error_class, r.attempts), (ProcStatus::Failed, Some(ErrorClass::Infra), 1));
    assert!(r.last_error.unwrap().contains("refused reading this row's text"));
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    w.mailbox.tamper(|s| s.unreadable.clear());
    w.clock.advance(Duration::from_secs(1));
    assert_eq!(w.round().unwrap(), Round::Worked(2));
    assert_eq!((w.state(2), w.state(3)), (ProcStatus::Succeeded, ProcStatus::Succeeded));
    // Alone, a refused read is the store's: the stage stalls, nothing charged.
    w.arrive(4, Some(&fixtures::flop_stnd(4, "1004", "D4")));
    w.mailbox.tamper(|s| s.unreadable.insert(4));
    assert!(w.round().unwrap_err().is_rejected());
    assert_eq!((w.state(4), w.row(4).attempts), (ProcStatus::Pending, 0));
}

/// #21 items 6 and 9: each kind of skip counts on its own counter — an ignore rule's, a
/// duplicate's and a kind not for msgx.
#[test]
fn regression_each_kind_of_skip_has_its_own_counter() {
    use std::sync::atomic::Ordering::Relaxed;
    let mut w = world();
    w.arrive(1, Some(&fixtures::platform(1, "REQE", "RQDF", "<RQDF><RQTP>FLID</RQTP></RQDF>")));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    w.arrive(3, Some(&fixtures::flop_stnd(2, "7", "B1")));
    w.arrive(4, Some("<MSG><META><SNDR>A</SNDR><SEQN>4</SEQN><DTTM>1</DTTM><TYPE>REGN</TYPE><STYP>ADD</STYP></META></MSG>"));
    while !matches!(w.round().unwrap(), Round::Idle) {}
    let s = &w.pump.stats;
    let got = (
        s.skipped_not_for_msgx.load(Relaxed),
        s.skipped_duplicate.load(Relaxed),
        s.skipped_ignored.load(Relaxed),
    );
    assert_eq!(got, (1, 1, 1), "not-for-msgx, duplicate, ignored");
    assert!(w.row(1).last_error.unwrap().starts_with("not-for-msgx:"));
}

/// A request for 5 March sent to the AODB (in COUTMSGS), as the jobs and dispatch leave it.
fn sent_request(w: &World) -> i64 {
    use crate::ports::Requests;
    use crate::requests::{mgid_of, NewRequest, Origin, Outgoing};
    let mut pg = w.pg.clone();
    let new = NewRequest::first("RQFD", "2026-03-05T00:00/2026-03-05T23:59".into(), Origin::Heal);
    let text =
        |id: i64| Outgoing { routing_id: "VIEWRQFD".into(), xml: String::new(), mgid: Some(mgid_of(id)) };
    let r = pg.register(&new, &text, w.clock.now()).unwrap().unwrap();
    crate::testkit::deliver_requests(&pg, w.clock.now());
    r.req_id
}

fn answered_by(w: &World, req_id: i64) -> Option<i64> {
    use crate::ports::Requests;
    let all = w.pg.clone().requests(false, 10).unwrap();
    all.into_iter().find(|r| r.req_id == req_id).and_then(|r| r.answer_msg_id)
}

/// #55 item 2: the commit of the answering round is lost after Redis applied it; the retry reuses
/// the journalled decision, and the answer travels with it (before: it closed nothing).
#[test]
fn regression_an_answer_reused_from_the_journal_closes_its_request() {
    let mut w = world();
    let req = sent_request(&w);
    w.arrive(1, Some(&fixtures::schd(1, "RESP", &[("A1", "05MAR260900")])));
    w.pg.inject_later(2, Fault::Unavailable, 1); // unfinished, identities pass; the commit fails
    assert!(w.round().unwrap_err().is_unavailable());
    assert_eq!(answered_by(&w, req), None);
    w.round().unwrap();
    assert_eq!(w.pg.proc(1).unwrap().redis_record, Some(crate::domain::RedisRecord::Journal), "reused");
    assert_eq!(answered_by(&w, req), Some(1));
}

/// A request sent, a newer daily plan applied, then its answer arrives with a lower MSG_ID (a row
/// committed late): the request, not yet answered.
fn a_stale_answer_arrives() -> (World, i64) {
    let mut w = world();
    let req = sent_request(&w);
    w.arrive(2, Some(&fixtures::schd(2, "DNLD", &[("B1", "06MAR260900")])));
    w.round().unwrap();
    w.arrive(1, Some(&fixtures::schd(1, "RESP", &[("A1", "05MAR260900")])));
    (w, req)
}

/// #68: a stale answer whose commit was lost after Redis journalled it: reused from the journal,
/// it must not close its request either (before: the reuse path attached the answer whatever
/// the snapshot had done).
#[test]
fn regression_a_stale_answer_reused_from_the_journal_closes_no_request() {
    let (mut w, req) = a_stale_answer_arrives();
    w.pg.inject_later(2, Fault::Unavailable, 1); // unfinished, identities pass; the commit fails
    assert!(w.round().unwrap_err().is_unavailable());
    w.round().unwrap();
    assert_eq!(w.pg.proc(1).unwrap().redis_record, Some(crate::domain::RedisRecord::Journal), "reused");
    assert!(w.flights.flight("A1").is_none(), "nothing of it was applied");
    assert_eq!(answered_by(&w, req), None, "the request waits on");
}

/// #68 (meets #55 item 2): a snapshot not newer than the plan changes nothing, so it answers
/// nothing: before, it closed its request DONE, a heal's window stopped being awaited, `/ready`
/// said ready and the lost day was never rebuilt. The request waits on for a newer answer.
#[test]
fn regression_a_stale_answer_closes_no_request() {
    let (mut w, req) = a_stale_answer_arrives();
    w.round().unwrap();
    assert_eq!(
        w.pg.proc(1).unwrap().redis_record,
        Some(crate::domain::RedisRecord::Stale),
        "not newer: not applied"
    );
    assert!(w.flights.flight("A1").is_none());
    assert_eq!(answered_by(&w, req), None, "nothing of it was applied");
    // The newer answer that follows is applied, and closes it.
    w.arrive(3, Some(&fixtures::schd(3, "RESP", &[("A1", "05MAR260900")])));
    w.round().unwrap();
    assert!(w.flights.flight("A1").is_some());
    assert_eq!(answered_by(&w, req), Some(3));
}
