//! One behavioural suite for every own-PostgreSQL adapter (all its role ports): the in-memory
//! twin runs it as unit tests, the PostgreSQL adapter as integration tests on a real server,
//! so both keep the same rules (conditional writes, FIFO, INV-3/7/8/9, the replay whitelist,
//! the lease and its fence). Generate the tests with
//! [`conformance_tests!`](crate::conformance_tests). The other stores' suites are in
//! [`flights`] (Redis), [`mailbox`] (the shared MySQL) and [`producer`] (Kafka).

pub mod flights;
mod lineage;
pub mod mailbox;
pub mod producer;
mod requests;

pub use lineage::*;
pub use requests::*;

use crate::domain::SkipReason;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::domain::{InboundRow, NewEvent, ProcStatus, Target};
use crate::error::ErrorClass;
use crate::ports::{
    ArchiveCut, ArchivedAs, Claim, Claimant, Failure, Fifo, Housekeeping, Intake, LeaseStore, MarkLedger,
    Operator, Outbox, Outcome, ReplaySelection, ResendFrom, Resent, RoundRecord, Sent, Settle,
};

/// Everything own PostgreSQL is, for the suite: every role port, the lease, and a second
/// handle on the same store fenced by an epoch.
pub trait OwnStore:
    Intake
    + Fifo
    + MarkLedger
    + Operator
    + Outbox
    + Housekeeping
    + LeaseStore
    + crate::ports::Requests
    + crate::ports::StateAudit
    + crate::ports::LineageReads
    + crate::ports::RulesJobs
    + Sized
{
    /// Another handle on the same store whose writes carry `epoch`.
    fn fenced_twin(&self, epoch: i64) -> Self;
}

impl OwnStore for crate::store::memory::MemPg {
    fn fenced_twin(&self, epoch: i64) -> Self {
        self.fenced(epoch)
    }
}

impl OwnStore for crate::store::pg::Pg {
    fn fenced_twin(&self, epoch: i64) -> Self {
        self.twin().fenced(epoch)
    }
}

fn commit<S: OwnStore>(s: &mut S, settles: &[Settle], t: SystemTime) -> crate::ports::StoreResult<()> {
    Fifo::commit(s, &RoundRecord::of(settles), t)
}

fn due<S: OwnStore>(s: &mut S, t: SystemTime, limit: usize) -> Vec<i64> {
    s.due_backfills(t, limit).unwrap().into_iter().map(|o| o.msg_id).collect()
}

fn holder<S: OwnStore>(s: &mut S, key: &str) -> Option<i64> {
    s.identity_holders(&[key.to_string()]).unwrap().get(key).copied()
}

/// A fixed "now" so both adapters see the same times.
pub fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

fn at(secs: u64) -> SystemTime {
    t0() + Duration::from_secs(secs)
}

fn enqueue<S: OwnStore>(s: &mut S, ids: &[i64]) {
    let rows: Vec<InboundRow> = ids.iter().map(|&id| InboundRow { id, received_at: Some(t0()) }).collect();
    s.enqueue(&rows, ids.iter().max().copied(), t0()).unwrap();
}

fn event(flid: &str, n: i64) -> NewEvent {
    NewEvent {
        target: Target::KafkaMsg,
        partition_key: flid.into(),
        event_type: "UPSERT".into(),
        state_version: n,
        payload_json: format!("{{\"n\":{n}}}"),
    }
}

fn retry(secs: u64) -> Failure {
    Failure::Retry {
        class: ErrorClass::Infra,
        error: "db down".into(),
        next_attempt_at: at(secs),
        failing_since: at(1),
    }
}

fn state<S: OwnStore>(s: &mut S, id: i64) -> ProcStatus {
    s.row(id).unwrap().unwrap().state
}

pub fn enqueue_is_idempotent_and_overwrites_the_watermark<S: OwnStore>(mut s: S) {
    assert_eq!(s.watermark().unwrap(), 0);
    let rows = [InboundRow { id: 3, received_at: None }, InboundRow { id: 7, received_at: Some(t0()) }];
    assert_eq!(s.enqueue(&rows, Some(7), t0()).unwrap(), vec![3, 7]);
    assert_eq!(s.enqueue(&rows, None, t0()).unwrap(), Vec::<i64>::new(), "existing rows are left alone");
    assert_eq!(s.watermark().unwrap(), 7, "None leaves the watermark");
    s.enqueue(&[], Some(5), t0()).unwrap();
    assert_eq!(s.watermark().unwrap(), 5, "an overwrite, not a maximum");
    let held: Vec<i64> = s.held(&[1, 3, 5, 7]).unwrap().iter().map(|h| h.msg_id).collect();
    assert_eq!(held, vec![3, 7]);
    assert_eq!(state(&mut s, 3), ProcStatus::Pending);
    assert_eq!(s.row(4).unwrap(), None);
}

/// The rescan's one read (PRE-3): each ID with a row once, ascending, whether msgx marked it
/// and the identity it recorded.
pub fn held_rows_say_whether_they_were_marked_and_what_identity_they_hold<S: OwnStore>(mut s: S) {
    use crate::ports::Held;
    enqueue(&mut s, &[3, 5, 7]);
    commit(
        &mut s,
        &[Settle::succeeded(3, "A|FLOP|STND|3", vec![]), Settle::skipped(5, SkipReason::Ignored("x".into()))],
        at(1),
    )
    .unwrap();
    s.backfill_settled(&[3, 5], at(2)).unwrap();
    let held = s.held(&[9, 7, 3, 5, 3]).unwrap();
    let want = [
        Held { msg_id: 3, marked: true, identity: Some("A|FLOP|STND|3".into()) },
        Held { msg_id: 5, marked: true, identity: None },
        Held { msg_id: 7, marked: false, identity: None },
    ];
    assert_eq!(held, want);
    assert_eq!(s.held(&[]).unwrap(), vec![]);
}

pub fn unfinished_is_fifo_and_excludes_terminal_rows<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[5, 1, 3, 2, 4]);
    commit(
        &mut s,
        &[Settle::skipped(1, SkipReason::Ignored("LDM-*".into())), Settle::failed(2, retry(10))],
        at(1),
    )
    .unwrap();
    let ids: Vec<i64> = s.unfinished(10, &[]).unwrap().iter().map(|r| r.msg_id).collect();
    assert_eq!(ids, [2, 3, 4, 5], "FAILED occupies the head; SKIPPED never does (INV-3)");
    assert_eq!(s.unfinished(2, &[]).unwrap().len(), 2, "bounded");
    let ids: Vec<i64> = s.unfinished(2, &[2, 4]).unwrap().iter().map(|r| r.msg_id).collect();
    assert_eq!(ids, [3, 5], "the round still committing is left out, the limit counts what remains");
}

pub fn succeeded_writes_identity_events_in_order_and_the_backfill_intent<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2]);
    commit(&mut s, &[Settle::succeeded(1, "A|FLOP|STND|1", vec![event("F1", 1), event("F2", 2)])], at(5))
        .unwrap();
    let r = s.row(1).unwrap().unwrap();
    assert_eq!((r.state, r.identity_key.as_deref()), (ProcStatus::Succeeded, Some("A|FLOP|STND|1")));
    assert_eq!(holder(&mut s, "A|FLOP|STND|1"), Some(1));
    assert_eq!(holder(&mut s, "nobody"), None);
    let ev = s.pending(Target::KafkaMsg, 10).unwrap();
    let keys: Vec<&str> = ev.iter().map(|e| e.partition_key.as_str()).collect();
    assert_eq!(keys, ["F1", "F2"]);
    assert!(ev[0].event_id < ev[1].event_id);
    assert_eq!(ev[0].msg_id, Some(1));
    assert_eq!(due(&mut s, at(4), 10), Vec::<i64>::new(), "intent is due from its time on");
    assert_eq!(due(&mut s, at(5), 10), vec![1], "INV-8: owed with the terminal state");
}

/// `RULES_APPLY` (#65): a job per rules version, oldest open first; staged once; done once, in
/// one write with its events (after every event before them, under their messages, with their
/// ordinals) and the messages' rules version; failed with its note; listed newest first.
pub fn a_rules_job_is_asked_staged_and_done_once_with_its_events_and_the_messages_rules<S: OwnStore>(
    mut s: S,
) {
    use crate::ports::{RulesDone, RulesJobState};
    enqueue(&mut s, &[5, 6]);
    let settles =
        [Settle::succeeded(5, "k5", vec![event("F1", 5)]), Settle::succeeded(6, "k6", vec![event("F1", 6)])];
    commit(&mut s, &settles, at(1)).unwrap();
    let a = s.ask_rules_apply(5, 2, at(2)).unwrap();
    let b = s.ask_rules_apply(1, 3, at(3)).unwrap();
    assert!(b.job_id > a.job_id);
    assert_eq!((a.since, a.rules, a.state, a.requested_at), (5, 2, RulesJobState::Open, at(2)));
    assert_eq!(s.open_rules_job(2).unwrap().map(|j| j.job_id), Some(a.job_id));
    assert_eq!(s.open_rules_job(9).unwrap(), None, "no job of those rules");
    s.stage_rules_apply(a.job_id, "{\"staged\":1}", at(4)).unwrap();
    let staged = s.open_rules_job(2).unwrap().unwrap();
    assert_eq!((staged.state, staged.staged.as_deref()), (RulesJobState::Applying, Some("{\"staged\":1}")));
    assert!(s.stage_rules_apply(a.job_id, "{}", at(4)).is_err(), "staged once");
    let told = NewEvent { payload_json: "{\"told\":6}".into(), ..event("F1", 6) };
    let events = [(6, 2_000_000, told.clone())];
    let done = RulesDone { events: &events, redecided: &[5, 6], note: "1 flight(s) differ" };
    s.finish_rules_apply(&staged, &done, at(5)).unwrap();
    assert!(s.finish_rules_apply(&staged, &done, at(6)).is_err(), "done once: nothing told twice");
    let pending = s.pending(Target::KafkaMsg, 10).unwrap();
    assert_eq!(pending.len(), 3, "{pending:?}");
    assert_eq!((pending[2].msg_id, pending[2].ordinal), (Some(6), Some(2_000_000)));
    assert_eq!(pending[2].payload_json, told.payload_json);
    let of6: Vec<String> = s.events_of(&[6]).unwrap().into_iter().map(|(_, e)| e.payload_json).collect();
    assert_eq!(of6.last(), Some(&told.payload_json), "after the message's own events");
    let rules: Vec<Option<u32>> = s.succeeded_above(0, 10).unwrap().iter().map(|r| r.rules).collect();
    assert_eq!(rules, [Some(2), Some(2)]);
    s.fail_rules_apply(b.job_id, "a text is gone", at(7)).unwrap();
    assert_eq!(s.open_rules_job(3).unwrap(), None);
    let listed = s.rules_jobs(10).unwrap();
    let seen: Vec<(i64, RulesJobState, Option<&str>)> =
        listed.iter().map(|j| (j.job_id, j.state, j.note.as_deref())).collect();
    assert_eq!(
        seen,
        [
            (b.job_id, RulesJobState::Failed, Some("a text is gone")),
            (a.job_id, RulesJobState::Done, Some("1 flight(s) differ"))
        ]
    );
    assert_eq!((listed[1].done_at, listed[1].staged.as_deref()), (Some(at(5)), None));
}

pub fn commit_is_all_or_nothing<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2]);
    commit(&mut s, &[Settle::skipped(2, SkipReason::Ignored("x".into()))], at(1)).unwrap();
    // 1 would succeed, but 2 is terminal already: the whole round must be refused.
    let err = commit(
        &mut s,
        &[
            Settle::succeeded(1, "k1", vec![event("F", 1)]),
            Settle::skipped(2, SkipReason::Ignored("again".into())),
        ],
        at(2),
    );
    assert!(err.is_err());
    assert_eq!(state(&mut s, 1), ProcStatus::Pending);
    assert!(s.pending(Target::KafkaMsg, 10).unwrap().is_empty(), "no event of a rolled-back round");
    assert_eq!(s.row(2).unwrap().unwrap().last_error.as_deref(), Some("ignored:x"));
}

pub fn an_identity_is_held_once<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2]);
    commit(&mut s, &[Settle::succeeded(1, "same", vec![])], at(1)).unwrap();
    assert!(commit(&mut s, &[Settle::succeeded(2, "same", vec![])], at(2)).is_err(), "uk_proc_identity");
    assert_eq!(state(&mut s, 2), ProcStatus::Pending);
    let holders = s.identity_holders(&["same".to_string(), "nobody".to_string()]).unwrap();
    assert_eq!(holders.into_iter().collect::<Vec<_>>(), vec![("same".to_string(), 1)]);
    assert!(s.identity_holders(&[]).unwrap().is_empty());
}

pub fn failures_count_attempts_and_anchor_the_first_failure<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1]);
    commit(&mut s, &[Settle::failed(1, retry(10))], at(1)).unwrap();
    commit(&mut s, &[Settle::failed(1, retry(20))], at(11)).unwrap();
    let r = s.row(1).unwrap().unwrap();
    assert_eq!((r.state, r.attempts, r.error_class), (ProcStatus::Failed, 2, Some(ErrorClass::Infra)));
    assert_eq!(r.next_attempt_at, Some(at(20)));
    assert_eq!(r.first_failed_at, Some(at(1)), "the deadline anchor is the one the rules computed");
    // #21 item 1: an anchor the rules moved on (the row waited out an outage) is recorded.
    let moved = Failure::Retry {
        class: ErrorClass::Infra,
        error: "db down".into(),
        next_attempt_at: at(25),
        failing_since: at(9),
    };
    commit(&mut s, &[Settle::failed(1, moved)], at(21)).unwrap();
    let r = s.row(1).unwrap().unwrap();
    assert_eq!((r.attempts, r.first_failed_at), (3, Some(at(9))), "the moved anchor is recorded");
    assert!(due(&mut s, at(100), 10).is_empty(), "FAILED owes no mark (INV-8)");
    commit(
        &mut s,
        &[Settle::failed(1, Failure::Dead { class: ErrorClass::Exhausted, error: "poison".into() })],
        at(30),
    )
    .unwrap();
    let r = s.row(1).unwrap().unwrap();
    assert_eq!((r.state, r.attempts, r.error_class), (ProcStatus::Dead, 4, Some(ErrorClass::Exhausted)));
    assert_eq!(due(&mut s, at(30), 10), vec![1], "DEAD owes a mark");
}

pub fn type_tag_is_kept<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1]);
    let mut st = Settle::failed(1, retry(10));
    st.type_tag = Some("FLOP-STND".into());
    commit(&mut s, &[st], at(1)).unwrap();
    commit(&mut s, &[Settle::skipped(1, SkipReason::DuplicateOf(0))], at(2)).unwrap();
    assert_eq!(s.row(1).unwrap().unwrap().type_tag.as_deref(), Some("FLOP-STND"));
}

/// #65, the fleet's seed 10482: the moment own PostgreSQL stands at is its newest enqueue; an
/// outcome or an operator's replay later changes rows but enqueues nothing, and moves it not.
pub fn the_moment_postgres_stands_at_is_its_newest_enqueue<S: OwnStore>(mut s: S) {
    assert_eq!(s.newest_enqueue().unwrap(), None, "nothing enqueued");
    enqueue(&mut s, &[1, 2]);
    let dead = Failure::Dead { class: ErrorClass::Exhausted, error: "e".into() };
    commit(&mut s, &[Settle::failed(1, dead), Settle::succeeded(2, "k2", vec![])], at(5)).unwrap();
    assert!(s.replay(&ReplaySelection::Ids(vec![1]), 10, at(600)).unwrap()[0].verdict.is_ok());
    assert_eq!(s.newest_enqueue().unwrap(), Some(t0()));
}

pub fn replay_follows_the_whitelist<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3, 4, 5]);
    let dead = |class| Failure::Dead { class, error: "e".into() };
    commit(
        &mut s,
        &[
            Settle::failed(1, dead(ErrorClass::Malformed)),
            Settle::failed(2, dead(ErrorClass::Exhausted)),
            Settle::succeeded(3, "k3", vec![]),
            Settle::failed(4, retry(99)),
        ],
        at(1),
    )
    .unwrap();
    let out = s.replay(&ReplaySelection::Ids(vec![1, 2, 3, 4, 9]), 100, at(2)).unwrap();
    let verdicts: Vec<(i64, bool)> = out.iter().map(|r| (r.msg_id, r.verdict.is_ok())).collect();
    assert_eq!(verdicts, [(1, false), (2, true), (3, false), (4, true), (9, false)]);
    assert!(out[0].verdict.as_ref().unwrap_err().contains("MALFORMED is never replayed"));
    assert_eq!(out[4].was, None);
    let r = s.row(2).unwrap().unwrap();
    assert_eq!(
        (r.state, r.attempts, r.next_attempt_at, r.first_failed_at),
        (ProcStatus::Pending, 0, None, None)
    );
    assert_eq!(
        (r.error_class, r.last_error.as_deref()),
        (Some(ErrorClass::Exhausted), Some("e")),
        "kept for audit"
    );
    assert_eq!(state(&mut s, 1), ProcStatus::Dead);
    assert!(!due(&mut s, at(100), 10).contains(&2), "a replayed row owes no mark while unfinished");
}

pub fn replay_by_range_and_class<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3, 4]);
    let f = |class| Failure::Dead { class, error: "e".into() };
    commit(
        &mut s,
        &[
            Settle::failed(1, f(ErrorClass::Unsupported)),
            Settle::failed(2, f(ErrorClass::Protocol)),
            Settle::failed(3, f(ErrorClass::Unsupported)),
        ],
        at(1),
    )
    .unwrap();
    let out = s.replay(&ReplaySelection::Class(ErrorClass::Unsupported), 1, at(2)).unwrap();
    assert_eq!(out.iter().map(|r| r.msg_id).collect::<Vec<_>>(), [1], "bounded by the limit");
    let out = s.replay(&ReplaySelection::Range(1, 4), 100, at(3)).unwrap();
    let got: Vec<(i64, bool)> = out.iter().map(|r| (r.msg_id, r.verdict.is_ok())).collect();
    assert_eq!(got, [(2, false), (3, true)], "the range lists FAILED/DEAD rows only");
    assert_eq!(state(&mut s, 3), ProcStatus::Pending);
}

pub fn backfill_settles_abandons_and_retries<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3]);
    commit(
        &mut s,
        &[
            Settle::skipped(1, SkipReason::Ignored("a".into())),
            Settle::skipped(2, SkipReason::Ignored("b".into())),
            Settle::skipped(3, SkipReason::Ignored("c".into())),
        ],
        at(1),
    )
    .unwrap();
    assert_eq!(due(&mut s, at(1), 2), vec![1, 2], "bounded, oldest first");
    s.backfill_settled(&[1], at(2)).unwrap();
    s.backfill_abandon(&[2], "MISSING_ROW", at(2)).unwrap();
    assert!(s.backfill_overdue(at(1), 10).unwrap().is_empty(), "never refused: never overdue (SPEC 4.9)");
    s.backfill_retry(&[3], "mailbox refused", &[at(40)]).unwrap();
    let owed = s.due_backfills(at(40), 10).unwrap();
    assert_eq!((owed[0].msg_id, owed[0].attempts), (3, 1));
    assert!(due(&mut s, at(39), 10).is_empty());
    s.backfill_abandon(&[1], "late", at(3)).unwrap(); // settled rows cannot be abandoned
    assert!(s.backfill_overdue(at(0), 10).unwrap().is_empty());
    assert_eq!(
        s.backfill_overdue(at(1), 10).unwrap(),
        vec![3],
        "refused, and owed since its terminal time, retries or not"
    );
    s.backfill_retry(&[1, 2], "late", &[at(50), at(50)]).unwrap();
    assert!(!due(&mut s, at(100), 10).contains(&1), "a settled mark is not owed again by a retry");
    s.backfill_settled(&[3], at(41)).unwrap();
    assert!(due(&mut s, at(1000), 10).is_empty());
}

pub fn outbox_is_fifo_per_target_and_conditional<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2]);
    commit(&mut s, &[Settle::succeeded(1, "k1", vec![event("A", 1), event("B", 2)])], at(1)).unwrap();
    commit(&mut s, &[Settle::succeeded(2, "k2", vec![event("C", 3)])], at(2)).unwrap();
    let ev = s.pending(Target::KafkaMsg, 10).unwrap();
    assert_eq!(ev.iter().map(|e| e.partition_key.as_str()).collect::<Vec<_>>(), ["A", "B", "C"]);
    assert!(s.pending(Target::KafkaSchd, 10).unwrap().is_empty());
    s.retry(&[ev[0].event_id], ErrorClass::Infra, "broker down", at(9)).unwrap();
    s.started(&[ev[0].event_id], at(8)).unwrap();
    let head = &s.pending(Target::KafkaMsg, 1).unwrap()[0];
    assert_eq!((head.attempts, head.next_attempt_at, head.last_attempt_at), (1, Some(at(9)), Some(at(8))));
    s.mark_sent(
        &[
            Sent::unlanded(ev[0].event_id, ev[0].state_version),
            Sent::unlanded(ev[1].event_id, ev[1].state_version),
        ],
        at(10),
    )
    .unwrap();
    s.dead(&[ev[2].event_id], ErrorClass::Exhausted, "x").unwrap();
    s.retry(&[ev[0].event_id], ErrorClass::Infra, "late", at(99)).unwrap(); // SENT rows do not move
    s.dead(&[ev[1].event_id], ErrorClass::Exhausted, "late").unwrap();
    assert!(s.pending(Target::KafkaMsg, 10).unwrap().is_empty());
    let out = s.replay_events(&ReplaySelection::Ids(vec![ev[0].event_id, ev[2].event_id, 999]), 10).unwrap();
    let verdicts: Vec<bool> = out.iter().map(|r| r.verdict.is_ok()).collect();
    assert_eq!(verdicts, [false, true, false], "only DEAD events are replayed");
    let back = s.pending(Target::KafkaMsg, 10).unwrap();
    assert_eq!((back.len(), back[0].event_id, back[0].attempts), (1, ev[2].event_id, 0));
}

fn schd_event(flid: &str, version: i64) -> NewEvent {
    NewEvent { target: Target::KafkaSchd, ..event(flid, version) }
}

pub fn schd_rows_are_one_per_flight_and_a_new_generation_resets_them<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3, 4]);
    commit(&mut s, &[Settle::succeeded(1, "k1", vec![schd_event("A", 5), schd_event("B", 5)])], at(1))
        .unwrap();
    let rows = s.pending(Target::KafkaSchd, 10).unwrap();
    assert_eq!(rows.len(), 2);
    let a = rows[0].clone();
    s.mark_sent(&[Sent::unlanded(a.event_id, 5)], at(2)).unwrap();
    s.dead(&[rows[1].event_id], ErrorClass::Exhausted, "x").unwrap();
    assert!(s.pending(Target::KafkaSchd, 10).unwrap().is_empty());
    // A new generation for both flights: the SENT row and the DEAD row come back PENDING.
    commit(&mut s, &[Settle::succeeded(2, "k2", vec![schd_event("A", 6), schd_event("B", 6)])], at(3))
        .unwrap();
    let rows = s.pending(Target::KafkaSchd, 10).unwrap();
    assert_eq!(rows.len(), 2, "reset in place, not added");
    assert_eq!((rows[0].event_id, rows[0].state_version, rows[0].attempts), (a.event_id, 6, 0));
    assert_eq!(rows[0].msg_id, Some(2));
    // An older generation arriving late changes nothing.
    commit(&mut s, &[Settle::succeeded(3, "k3", vec![schd_event("A", 4)])], at(4)).unwrap();
    assert_eq!(s.pending(Target::KafkaSchd, 10).unwrap()[0].state_version, 6);
    // SENT only at the generation that was sent.
    s.mark_sent(&[Sent::unlanded(a.event_id, 5)], at(5)).unwrap();
    assert_eq!(s.pending(Target::KafkaSchd, 10).unwrap().len(), 2, "generation 5 was sent, 6 was not");
    s.mark_sent(&[Sent::unlanded(a.event_id, 6)], at(5)).unwrap();
    assert_eq!(s.pending(Target::KafkaSchd, 10).unwrap().len(), 1);
}

pub fn retention_deletes_only_old_sent_events<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2]);
    commit(
        &mut s,
        &[Settle::succeeded(1, "k1", vec![event("A", 1), event("B", 2), event("C", 3), event("D", 4)])],
        at(1),
    )
    .unwrap();
    let ev = s.pending(Target::KafkaMsg, 10).unwrap();
    s.mark_sent(&[Sent::unlanded(ev[0].event_id, 1), Sent::unlanded(ev[1].event_id, 2)], at(10)).unwrap();
    s.mark_sent(&[Sent::unlanded(ev[2].event_id, 3)], at(20)).unwrap();
    s.dead(&[ev[3].event_id], ErrorClass::Exhausted, "dlq").unwrap();
    assert_eq!(s.delete_sent_events(at(10), 10).unwrap(), 0, "SENT_AT must be before the cut");
    assert_eq!(s.delete_sent_events(at(21), 1).unwrap(), 1, "bounded, oldest first");
    assert_eq!(s.delete_sent_events(at(21), 10).unwrap(), 2);
    assert_eq!(s.delete_sent_events(at(21), 10).unwrap(), 0, "idempotent");
    let out = s.replay_events(&ReplaySelection::Ids(vec![ev[3].event_id]), 10).unwrap();
    assert!(out[0].verdict.is_ok(), "the DEAD event (DLQ) was kept");
}

pub fn retention_never_deletes_a_schd_row_reset_by_a_new_generation<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2]);
    commit(&mut s, &[Settle::succeeded(1, "k1", vec![schd_event("A", 1)])], at(1)).unwrap();
    let row = s.pending(Target::KafkaSchd, 10).unwrap()[0].clone();
    s.mark_sent(&[Sent::unlanded(row.event_id, 1)], at(2)).unwrap();
    commit(&mut s, &[Settle::succeeded(2, "k2", vec![schd_event("A", 2)])], at(3)).unwrap();
    assert_eq!(s.delete_sent_events(at(100), 10).unwrap(), 0);
    assert_eq!(s.pending(Target::KafkaSchd, 10).unwrap()[0].state_version, 2);
}

/// An archive pass as the jobs stage runs it: (archived, skipped). DEAD rows need a dismissal.
fn archive<S: OwnStore>(
    s: &mut S,
    settled_before: SystemTime,
    limit: usize,
    now: SystemTime,
) -> (usize, usize) {
    let cut = ArchiveCut { settled_before, dead_before: t0() };
    let ids = s.archive_candidates(&cut, limit).unwrap();
    let moved = ids.iter().filter(|id| s.archive_one(**id, &cut, now).unwrap().is_some()).count();
    (moved, ids.len() - moved)
}

pub fn archive_moves_settled_terminal_rows_and_keeps_a_dedup_shadow<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3, 4, 5, 6]);
    commit(
        &mut s,
        &[
            Settle::succeeded(1, "id-1", vec![]),
            Settle::skipped(2, SkipReason::Ignored("LDM-*".into())),
            Settle::failed(3, Failure::Dead { class: ErrorClass::Infra, error: "x".into() }),
            Settle::succeeded(4, "id-4", vec![]),
            Settle::failed(5, retry(99)),
        ],
        at(1),
    )
    .unwrap();
    s.backfill_settled(&[1, 2, 3], at(2)).unwrap();
    s.backfill_abandon(&[4], "MISSING_ROW", at(2)).unwrap();
    assert_eq!(archive(&mut s, at(2), 10, at(50)), (0, 0), "UPDATED_AT must be before the cut");
    assert_eq!(archive(&mut s, at(3), 1, at(50)), (1, 0), "bounded");
    assert_eq!(archive(&mut s, at(3), 10, at(50)), (1, 0), "the DEAD one stays in the dead-letter queue");
    assert_eq!(state(&mut s, 3), ProcStatus::Dead);
    let shadow = s.row(1).unwrap().unwrap();
    assert_eq!((shadow.state, shadow.identity_key.as_deref()), (ProcStatus::Archived, Some("id-1")));
    assert_eq!(holder(&mut s, "id-1"), Some(1), "INV-9 after archive");
    assert_eq!(s.row(4).unwrap().unwrap().state, ProcStatus::Succeeded, "abandoned: stays listed (C-16)");
    let verdicts = s.reconcile(&[4, 4, 1, 99], "mailbox owner purged it", at(60)).unwrap();
    let ok: Vec<(i64, bool)> = verdicts.iter().map(|(id, v)| (*id, v.is_ok())).collect();
    assert_eq!(ok, [(4, true), (4, false), (1, false), (99, false)]);
    assert_eq!(verdicts[1].1, Err("already reconciled".to_string()));
    assert_eq!(archive(&mut s, at(60), 10, at(70)), (0, 0), "reconciled at 60: not before the cut");
    assert_eq!(archive(&mut s, at(61), 10, at(70)), (1, 0));
    assert_eq!(s.row(4).unwrap().unwrap().state, ProcStatus::Archived, "reconciled: archived");
    assert_eq!(s.row(5).unwrap().unwrap().state, ProcStatus::Failed, "unfinished rows are never archived");
    let head: Vec<i64> = s.unfinished(10, &[]).unwrap().iter().map(|r| r.msg_id).collect();
    assert_eq!(head, vec![5, 6], "ARCHIVED never occupies the head (INV-3)");
    assert!(due(&mut s, at(100), 10).is_empty(), "nor the backfill scan");
    let out = s.replay(&ReplaySelection::Ids(vec![1]), 10, at(60)).unwrap();
    assert!(out[0].verdict.is_err(), "an archived row is not replayed");
    assert_eq!(archive(&mut s, at(100), 10, at(170)), (0, 0), "idempotent");
}

/// #37, #56: what Redis did with each SUCCEEDED message's decision is read back as recorded —
/// a snapshot the pump found stale too (V020) —, from PROC_STATE and, archived, from its history;
/// and so are the rules that decided it (V017, #68: no test failed when the adapter stopped
/// writing them).
pub fn what_redis_did_is_read_back_as_recorded_archived_or_not<S: OwnStore>(mut s: S) {
    use crate::domain::RedisRecord;
    let records = [
        Some(RedisRecord::Stale),
        Some(RedisRecord::Generation),
        Some(RedisRecord::Journal),
        Some(RedisRecord::Applied),
        None,
    ];
    let ids: Vec<i64> = (1..=records.len() as i64).collect();
    enqueue(&mut s, &ids);
    let rules_of = |id: i64| (id % 3 != 0).then_some(id as u32 + 6);
    let settles: Vec<Settle> = ids
        .iter()
        .zip(records)
        .map(|(id, r)| {
            let mut st = Settle::succeeded(*id, &format!("id-{id}"), vec![]);
            if let Outcome::Succeeded { record, rules, .. } = &mut st.outcome {
                (*record, *rules) = (r, rules_of(*id));
            }
            st
        })
        .collect();
    commit(&mut s, &settles, at(1)).unwrap();
    s.backfill_settled(&[1, 3], at(2)).unwrap();
    assert_eq!(archive(&mut s, at(3), 10, at(50)), (2, 0), "1 and 3 archived");
    let read: Vec<(i64, Option<RedisRecord>)> =
        s.succeeded_above(0, 10).unwrap().iter().map(|m| (m.msg_id, m.record)).collect();
    let want: Vec<(i64, Option<RedisRecord>)> = ids.iter().copied().zip(records).collect();
    assert_eq!(read, want);
    let rules: Vec<Option<u32>> = s.succeeded_above(0, 10).unwrap().iter().map(|m| m.rules).collect();
    assert_eq!(rules, ids.iter().map(|id| rules_of(*id)).collect::<Vec<_>>(), "the rules that decided each");
}

/// #21 item 2: a DEAD message stays replayable in PROC_STATE past `archive-after` until a
/// person dismisses it, or until `dead-keep` runs out (archived, reported as undealt).
pub fn regression_a_dead_message_stays_in_the_queue_until_dismissed_or_dead_keep<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3]);
    let dead = || Failure::Dead { class: ErrorClass::Exhausted, error: "poison".into() };
    commit(&mut s, &[Settle::failed(1, dead()), Settle::failed(2, dead()), Settle::failed(3, dead())], at(1))
        .unwrap();
    s.backfill_settled(&[1, 2, 3], at(2)).unwrap();
    let kept = ArchiveCut { settled_before: at(1000), dead_before: at(0) };
    assert!(s.archive_candidates(&kept, 10).unwrap().is_empty(), "archive-after alone moves no DEAD row");
    let verdicts = s.dismiss(&[1, 1, 9], "duplicate of a corrected resend", at(10)).unwrap();
    assert_eq!(
        verdicts,
        [(1, Ok(())), (1, Err("already dismissed".to_string())), (9, Err("no such message".to_string()))]
    );
    assert_eq!(s.archive_candidates(&kept, 10).unwrap(), vec![1], "dismissed: archived like a settled row");
    assert_eq!(s.archive_one(1, &kept, at(20)).unwrap(), Some(ArchivedAs::Settled));
    let out = s.replay(&ReplaySelection::Ids(vec![2]), 10, at(30)).unwrap();
    assert!(out[0].verdict.is_ok(), "still replayable past archive-after: {:?}", out[0].verdict);
    let refused = s.dismiss(&[2], "x", at(31)).unwrap();
    assert_eq!(refused[0].1, Err("state is PENDING; only DEAD messages are dismissed".to_string()));
    let expired = ArchiveCut { settled_before: at(1000), dead_before: at(500) };
    assert_eq!(s.archive_candidates(&expired, 10).unwrap(), vec![3], "dead-keep ran out");
    assert_eq!(s.archive_one(3, &expired, at(600)).unwrap(), Some(ArchivedAs::DeadUndealt));
    assert_eq!(state(&mut s, 3), ProcStatus::Archived);
}

/// #21 item 6: a message SKIPPED as not for msgx can be replayed once msgx learns its kind; an
/// ignore rule's skip and a duplicate stay final.
pub fn regression_a_not_for_msgx_skip_is_replayable_and_no_other_skip_is<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3]);
    commit(
        &mut s,
        &[
            Settle::skipped(1, SkipReason::NotForMsgx("a request to the platform (REQE)".into())),
            Settle::skipped(2, SkipReason::Ignored("REGN-*".into())),
            Settle::skipped(3, SkipReason::DuplicateOf(1)),
        ],
        at(1),
    )
    .unwrap();
    s.backfill_settled(&[1, 2, 3], at(2)).unwrap();
    let out = s.replay_skipped(&ReplaySelection::Ids(vec![1, 2, 3, 9]), 10, at(3)).unwrap();
    let verdicts: Vec<(i64, bool)> = out.iter().map(|r| (r.msg_id, r.verdict.is_ok())).collect();
    assert_eq!(verdicts, [(1, true), (2, false), (3, false), (9, false)]);
    assert!(
        out[1].verdict.as_ref().unwrap_err().contains("SKIPPED as ignored:REGN-*: final"),
        "{:?}",
        out[1]
    );
    let r = s.row(1).unwrap().unwrap();
    assert_eq!((r.state, r.attempts), (ProcStatus::Pending, 0));
    assert_eq!(
        r.last_error.as_deref(),
        Some("not-for-msgx:a request to the platform (REQE)"),
        "kept for audit"
    );
    assert!(s.replay_skipped(&ReplaySelection::Range(1, 3), 10, at(4)).unwrap().is_empty(), "none left");
    assert!(s.replay(&ReplaySelection::Ids(vec![2]), 10, at(4)).unwrap()[0].verdict.is_err());
}

/// #20: an outbox row keeps its message's ordinal (the consumers' identity `MSG_ID.ordinal`); a
/// KAFKA:schd row, the flight's, has none.
pub fn an_event_keeps_its_ordinal_within_its_message<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2]);
    let schd = NewEvent { target: Target::KafkaSchd, ..event("F", 1) };
    commit(&mut s, &[Settle::succeeded(1, "k1", vec![event("A", 1), event("B", 1), schd])], at(1)).unwrap();
    commit(&mut s, &[Settle::succeeded(2, "k2", vec![event("A", 2)])], at(2)).unwrap();
    let keys: Vec<String> = s
        .pending(Target::KafkaMsg, 10)
        .unwrap()
        .iter()
        .map(|e| e.key().rsplit_once('.').map(|(k, _)| k.to_string()).unwrap_or_default())
        .collect();
    assert_eq!(keys, ["1.0", "1.1", "2.0"], "MSG_ID.ordinal, then the payload's digest");
    assert_eq!(s.pending(Target::KafkaSchd, 10).unwrap()[0].ordinal, None);
}

/// #20: `msgx resend` puts SENT events back in the outbox, in order, with their identities;
/// a dry run changes nothing.
pub fn resend_puts_sent_events_back_in_order_with_their_identities<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3]);
    for id in 1..=3 {
        commit(&mut s, &[Settle::succeeded(id, &format!("k{id}"), vec![event("A", id)])], at(1)).unwrap();
    }
    let pending = s.pending(Target::KafkaMsg, 10).unwrap();
    let ids: Vec<i64> = pending.iter().map(|e| e.event_id).collect();
    s.mark_sent(&[Sent::unlanded(ids[0], 1)], at(5)).unwrap();
    s.mark_sent(&[Sent::unlanded(ids[1], 2)], at(10)).unwrap();
    let dry = s.resend(Target::KafkaMsg, ResendFrom::Since(at(6)), false).unwrap();
    assert_eq!(dry, Resent { events: 1, first: Some(ids[1]), last: Some(ids[1]) });
    assert_eq!(s.pending(Target::KafkaMsg, 10).unwrap().len(), 1, "a dry run changes nothing");
    let done = s.resend(Target::KafkaMsg, ResendFrom::Event(ids[0]), true).unwrap();
    assert_eq!(done.events, 2);
    let again: Vec<String> = s.pending(Target::KafkaMsg, 10).unwrap().iter().map(|e| e.key()).collect();
    let before: Vec<String> = pending.iter().map(|e| e.key()).collect();
    assert_eq!(again, before, "in order, with their own identities");
    assert_eq!(s.resend(Target::KafkaSchd, ResendFrom::Event(0), false).unwrap().events, 0);
}

/// #21 item 9: a candidate that changed between the listing and its transaction (a DEAD row
/// replayed meanwhile) is re-checked, skipped, and nothing of it is kept in the history.
pub fn an_archive_candidate_that_changed_is_skipped_and_nothing_is_kept<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1]);
    commit(
        &mut s,
        &[Settle::failed(1, Failure::Dead { class: ErrorClass::Infra, error: "x".into() })],
        at(1),
    )
    .unwrap();
    s.backfill_settled(&[1], at(2)).unwrap();
    let cut = ArchiveCut { settled_before: at(100), dead_before: at(100) };
    assert_eq!(s.archive_candidates(&cut, 10).unwrap(), vec![1]);
    assert!(s.replay(&ReplaySelection::Ids(vec![1]), 10, at(3)).unwrap()[0].verdict.is_ok());
    assert_eq!(s.archive_one(1, &cut, at(4)).unwrap(), None, "re-checked: no longer a candidate");
    let r = s.row(1).unwrap().unwrap();
    assert_eq!((r.state, r.error_class), (ProcStatus::Pending, Some(ErrorClass::Infra)), "untouched");
    assert!(s.archive_candidates(&cut, 10).unwrap().is_empty());
}

pub fn two_identical_identities_in_one_round_are_refused<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2]);
    let err =
        commit(&mut s, &[Settle::succeeded(1, "same", vec![]), Settle::succeeded(2, "same", vec![])], at(1));
    assert!(err.unwrap_err().is_rejected(), "uk_proc_identity refuses the second");
    assert_eq!(state(&mut s, 1), ProcStatus::Pending, "nothing of the round was recorded");
}

pub fn a_replayed_abandoned_row_owes_its_mark_again<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1]);
    commit(
        &mut s,
        &[Settle::failed(1, Failure::Dead { class: ErrorClass::Exhausted, error: "x".into() })],
        at(1),
    )
    .unwrap();
    s.backfill_abandon(&[1], "MISSING_ROW", at(2)).unwrap();
    let out = s.replay(&ReplaySelection::Ids(vec![1]), 10, at(3)).unwrap();
    assert!(out[0].verdict.is_ok());
    commit(&mut s, &[Settle::succeeded(1, "k1", vec![])], at(4)).unwrap();
    assert_eq!(due(&mut s, at(4), 10), vec![1], "the abandonment was cleared by the replay (C-16)");
}

pub fn the_lease_hands_out_epochs_and_a_stale_epoch_writes_nothing<S: OwnStore>(mut s: S) {
    use std::time::Duration;
    let a = Claimant { id: "a:1:0".into(), host: "a".into(), pid: 1 };
    let b = Claimant { id: "b:2:0".into(), host: "b".into(), pid: 2 };
    let Claim::Acquired { epoch: ea, .. } = s.claim(&a, Duration::from_secs(60)).unwrap() else {
        panic!("free lease")
    };
    match s.claim(&b, Duration::from_secs(60)).unwrap() {
        Claim::HeldBy(h) => assert_eq!((h.host.as_deref(), h.epoch, h.free), (Some("a"), ea, false)),
        other => panic!("{other:?}"),
    }
    assert!(s.renew(&a, ea, Duration::from_secs(60), "{}").unwrap());
    s.release(&a, ea).unwrap();
    let Claim::Acquired { epoch: eb, previous } = s.claim(&b, Duration::from_secs(60)).unwrap() else {
        panic!("released")
    };
    assert!(eb > ea, "a new holder increments the epoch");
    assert_eq!(previous, None, "released: nobody held it");
    assert!(!s.renew(&a, ea, Duration::from_secs(60), "{}").unwrap(), "the old holder learns it is stale");
    // Writes: the stale epoch is refused, the current one goes through.
    let mut stale = s.fenced_twin(ea);
    let err = stale.enqueue(&[InboundRow { id: 1, received_at: None }], Some(1), at(1)).unwrap_err();
    assert!(err.is_fenced(), "{err}");
    assert_eq!(s.held(&[1]).unwrap(), vec![], "nothing was written");
    let mut current = s.fenced_twin(eb);
    current.enqueue(&[InboundRow { id: 1, received_at: None }], Some(1), at(1)).unwrap();
    commit(&mut current, &[Settle::succeeded(1, "k1", vec![event("F", 1)])], at(2)).unwrap();
    assert!(
        stale.pending(Target::KafkaMsg, 10).unwrap().is_empty(),
        "a stale instance reads nothing to send"
    );
    assert_eq!(current.pending(Target::KafkaMsg, 10).unwrap().len(), 1);
    let err = stale.mark_sent(&[Sent::unlanded(1, 1)], at(3)).unwrap_err();
    assert!(err.is_fenced());
}

pub fn a_seasonal_plan_is_replaced_whole<S: OwnStore>(mut s: S) {
    use crate::handlers::RefChange;
    let season = |records: &[&str]| RefChange::Season {
        season: "W26".into(),
        airport: Some("CTU".into()),
        start: Some("2026-10-25".into()),
        end: Some("2027-03-27".into()),
        records: records.iter().map(|k| (k.to_string(), format!("{{\"K\":\"{k}\"}}"))).collect(),
    };
    enqueue(&mut s, &[1, 2]);
    let mut first = Settle::succeeded(1, "A|SCHS|DNLD|1", vec![]);
    if let Outcome::Succeeded { references, .. } = &mut first.outcome {
        references.push(season(&["CA1/A/01NOV26", "MU2/D/01NOV26"]));
    }
    commit(&mut s, &[first], at(1)).unwrap();
    assert_eq!(s.season("W26").unwrap(), ["CA1/A/01NOV26", "MU2/D/01NOV26"]);
    let mut second = Settle::succeeded(2, "A|SCHS|DNLD|2", vec![]);
    if let Outcome::Succeeded { references, .. } = &mut second.outcome {
        references.push(season(&["ZH9/A/02NOV26"]));
    }
    commit(&mut s, &[second], at(2)).unwrap();
    assert_eq!(s.season("W26").unwrap(), ["ZH9/A/02NOV26"], "replaced whole, not merged");
    assert!(s.season("S27").unwrap().is_empty());
}

/// Expands to one `#[test]` per conformance case. `$make` builds a fresh, empty store and
/// returns it with a guard that lives until the case ends (a test database, say).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@cases $make;
            enqueue_is_idempotent_and_overwrites_the_watermark,
            unfinished_is_fifo_and_excludes_terminal_rows,
            held_rows_say_whether_they_were_marked_and_what_identity_they_hold,
            succeeded_writes_identity_events_in_order_and_the_backfill_intent,
            commit_is_all_or_nothing,
            an_identity_is_held_once,
            failures_count_attempts_and_anchor_the_first_failure,
            type_tag_is_kept,
            replay_follows_the_whitelist,
            the_moment_postgres_stands_at_is_its_newest_enqueue,
            replay_by_range_and_class,
            backfill_settles_abandons_and_retries,
            outbox_is_fifo_per_target_and_conditional,
            schd_rows_are_one_per_flight_and_a_new_generation_resets_them,
            retention_deletes_only_old_sent_events,
            retention_never_deletes_a_schd_row_reset_by_a_new_generation,
            archive_moves_settled_terminal_rows_and_keeps_a_dedup_shadow,
            what_redis_did_is_read_back_as_recorded_archived_or_not,
            regression_a_dead_message_stays_in_the_queue_until_dismissed_or_dead_keep,
            an_archive_candidate_that_changed_is_skipped_and_nothing_is_kept,
            regression_a_not_for_msgx_skip_is_replayable_and_no_other_skip_is,
            an_event_keeps_its_ordinal_within_its_message,
            resend_puts_sent_events_back_in_order_with_their_identities,
            two_identical_identities_in_one_round_are_refused,
            a_replayed_abandoned_row_owes_its_mark_again,
            the_lease_hands_out_epochs_and_a_stale_epoch_writes_nothing,
            a_seasonal_plan_is_replaced_whole,
            a_request_is_registered_with_its_outbox_event_and_one_per_type_and_key,
            a_burst_of_requests_in_a_tenth_of_a_second_borrows_the_next_numbers,
            a_heals_window_is_awaited_until_answered_asked_again_or_dismissed,
            a_request_is_sent_then_waits_then_expires_and_frees_its_key,
            an_answer_closes_the_oldest_open_request_once_and_notes_a_late_one,
            a_window_answer_closes_the_request_whose_window_holds_it,
            a_request_whose_event_went_dead_expires_as_undeliverable,
            dead_letters_are_listed_in_order_filtered_bounded_and_marked_when_dismissed,
            a_trace_shows_the_row_live_or_archived_and_its_events_in_order,
            a_flights_messages_are_newest_first_bounded_and_decided,
            a_rules_job_is_asked_staged_and_done_once_with_its_events_and_the_messages_rules,
        );
    };
    (@cases $make:expr; $($case:ident,)*) => {
        $(
            #[test]
            fn $case() {
                let (store, _guard) = $make;
                $crate::store::conformance::$case(store);
            }
        )*
    };
}
