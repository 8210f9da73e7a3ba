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

fn world() -> World {
    let clock = FakeClock::new();
    let (pg, mailbox, flights) = (MemPg::new(), MemMailbox::new(), MemFlights::new());
    let cfg = Config::defaults().pipeline;
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

impl World {
    fn arrive(&mut self, id: i64, raw: Option<&str>) {
        self.mailbox.insert(id, raw);
        let mut pg = self.pg.clone();
        pg.enqueue(&[InboundRow { id, received_at: None }], id, self.clock.now()).unwrap();
    }

    fn state(&self, id: i64) -> ProcStatus {
        self.pg.proc(id).unwrap().row.state
    }

    fn last_error(&self, id: i64) -> String {
        self.pg.proc(id).unwrap().row.last_error.unwrap_or_default()
    }
}

#[test]
fn a_flop_message_updates_the_flight_and_writes_one_event() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(1));
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.flights.flight("1001").unwrap()["STND"], "A12");
    let events = w.pg.inspect(|s| s.events.values().map(|e| e.event.clone()).collect::<Vec<_>>());
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].msg_id, Some(1));
    // INV-8: the backfill intent came with the terminal state.
    assert!(w.pg.proc(1).unwrap().backfill_next_at.is_some());
    assert_eq!(w.pump.round().unwrap(), Round::Idle);
}

#[test]
fn raw_text_missing_is_dead_malformed_at_once() {
    let mut w = world();
    w.arrive(1, None);
    w.pump.round().unwrap();
    let p = w.pg.proc(1).unwrap();
    assert_eq!(p.row.state, ProcStatus::Dead);
    assert_eq!(p.row.error_class, Some(ErrorClass::Malformed));
    assert!(p.backfill_next_at.is_some(), "DEAD owes a mark too");
}

#[test]
fn malformed_xml_is_dead_and_does_not_block_the_next_message() {
    let mut w = world();
    w.arrive(1, Some("<MSG><META>"));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(2));
    assert_eq!(w.state(1), ProcStatus::Dead);
    assert_eq!(w.state(2), ProcStatus::Succeeded);
}

#[test]
fn unsupported_head_backs_off_and_blocks_everything_behind_it() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::other(1, "ZZZZ", "Q", "")));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(1));
    let p = w.pg.proc(1).unwrap();
    assert_eq!(
        (p.row.state, p.row.error_class, p.row.attempts),
        (ProcStatus::Failed, Some(ErrorClass::Unsupported), 1)
    );
    let until = w.clock.now() + Duration::from_secs(1);
    assert_eq!(w.pump.round().unwrap(), Round::Wait(until), "HOL: message 2 must not overtake");
    assert_eq!(w.state(2), ProcStatus::Pending);
}

#[test]
fn unsupported_head_is_dead_exhausted_after_max_attempts_then_the_queue_moves() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::other(1, "ZZZZ", "Q", "")));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    for (i, wait) in [1u64, 2, 4, 8].into_iter().enumerate() {
        assert_eq!(w.pump.round().unwrap(), Round::Worked(1), "attempt {}", i + 1);
        assert!(matches!(w.pump.round().unwrap(), Round::Wait(_)));
        w.clock.advance(Duration::from_secs(wait));
    }
    // Fifth attempt: attempts reach max-attempts → DEAD(EXHAUSTED); message 2 follows.
    assert_eq!(w.pump.round().unwrap(), Round::Worked(2));
    let p = w.pg.proc(1).unwrap();
    assert_eq!(
        (p.row.state, p.row.error_class, p.row.attempts),
        (ProcStatus::Dead, Some(ErrorClass::Exhausted), 5)
    );
    assert_eq!(w.state(2), ProcStatus::Succeeded);
}

#[test]
fn infra_failure_is_retried_and_the_retry_emits_the_same_events() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    // Redis applies, then PostgreSQL fails: the call sequence is unfinished (ok), raw (mailbox),
    // applied/view/apply (redis), succeed (pg).
    w.pump.round().unwrap(); // dry run to know the happy path works
    assert_eq!(w.state(1), ProcStatus::Succeeded);

    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    w.flights.fail_next(1);
    assert_eq!(w.pump.round().unwrap(), Round::Worked(1));
    let p = w.pg.proc(1).unwrap();
    assert_eq!((p.row.state, p.row.error_class), (ProcStatus::Failed, Some(ErrorClass::Infra)));
    assert!(p.row.last_error.unwrap().contains("redis"));
    w.clock.advance(Duration::from_secs(1));
    w.pump.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.pg.inspect(|s| s.events.len()), 1);
}

#[test]
fn regression_retry_after_redis_applied_but_pg_failed_keeps_the_event() {
    // Redis holds the new value after the first attempt, so a fresh decision would find
    // nothing changed and emit no event: the applied decision must be reused (I2).
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    let decision = {
        let msg = codec::decode(&fixtures::flop_stnd(1, "1001", "A12")).unwrap();
        handlers::decide(&Default::default(), &msg, 1).unwrap()
    };
    let mut flights = w.flights.clone();
    flights.apply(1, &decision.flights, &decision).unwrap();
    w.pump.round().unwrap();
    assert_eq!(w.state(1), ProcStatus::Succeeded);
    assert_eq!(w.pg.inspect(|s| s.events.len()), 1, "the event survives the crash window");
}

#[test]
fn duplicate_identity_is_skipped_with_the_holder() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(5, "1", "A1")));
    w.arrive(2, Some(&fixtures::flop_stnd(5, "1", "A2"))); // same SNDR|TYPE|STYP|SEQN
    w.pump.round().unwrap();
    assert_eq!(w.state(2), ProcStatus::Skipped);
    assert_eq!(w.last_error(2), "duplicate-of:1");
    assert_eq!(w.flights.flight("1").unwrap()["STND"], "A1", "the duplicate changed nothing");
    assert!(w.pg.proc(2).unwrap().backfill_next_at.is_some());
}

#[test]
fn ignored_message_is_skipped_before_body_and_identity_and_never_blocks() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::other(1, "ldm", "XX", "<LDM><unreadable a='1'><x/></unreadable></LDM>")));
    w.arrive(2, Some(&fixtures::flop_stnd(2, "7", "B1")));
    assert_eq!(w.pump.round().unwrap(), Round::Worked(2));
    let p = w.pg.proc(1).unwrap();
    assert_eq!(p.row.state, ProcStatus::Skipped);
    assert_eq!(p.row.last_error.as_deref(), Some("ignored:LDM-*"));
    assert_eq!(p.row.identity_key, None, "an ignored message binds no identity");
    assert_eq!(p.row.attempts, 0);
    assert!(p.backfill_next_at.is_some());
    assert_eq!(w.state(2), ProcStatus::Succeeded);
}

#[test]
fn outcome_store_failure_is_returned_not_swallowed() {
    let mut w = world();
    w.arrive(1, Some(&fixtures::flop_stnd(1, "1001", "A12")));
    w.pg.fail_next(1);
    assert!(w.pump.round().is_err(), "reading the head failed: the caller must see it");
    assert_eq!(w.state(1), ProcStatus::Pending);
}
