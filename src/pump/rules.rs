//! The pump's rules as plain functions of state and `now` (I1: single-writer FIFO, HOL
//! blocking, poison escalation). No I/O here, so tests drive them tick by tick.

use std::time::SystemTime;

use crate::domain::{ProcRow, ProcStatus};
pub use crate::policy::retry::{retry_policy, Failing, Poison, RetryPolicy};

/// What to do with the head of the FIFO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadAction {
    /// Nothing unfinished.
    Idle,
    /// Process it now.
    Process,
    /// It is backing off: nothing may overtake it before this time (HOL blocking).
    Wait(SystemTime),
    /// DEAD(EXHAUSTED), now.
    Poison(Poison),
}

/// The decision for the head row at `now`: a FAILED head waits out its backoff (nothing
/// overtakes it) unless its attempts are used up. The head deadline is checked when the head
/// fails again ([`RetryPolicy::on_failure`]).
pub fn head_action(head: Option<&ProcRow>, now: SystemTime, policy: &RetryPolicy) -> HeadAction {
    let Some(row) = head else { return HeadAction::Idle };
    debug_assert!(row.state.is_unfinished(), "head must be PENDING or FAILED (INV-3)");
    if row.state != ProcStatus::Failed {
        return HeadAction::Process;
    }
    if row.attempts >= policy.max_attempts {
        return HeadAction::Poison(Poison::Attempts(row.attempts));
    }
    match row.next_attempt_at {
        Some(t) if t > now => HeadAction::Wait(t),
        _ => HeadAction::Process,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::error::ErrorClass;
    use crate::ports::Failure;
    use std::time::Duration;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            backoff: [1, 2, 4, 8, 16].map(Duration::from_secs).to_vec(),
            cap: Duration::from_secs(60),
            head_deadline: Duration::from_secs(600),
            // The ladder's tests fail an unsupported kind: the site that keeps the ladder.
            retry_unsupported: true,
        }
    }

    /// SPEC §3a (#68): by default a kind no handler knows is parked at its first attempt, as
    /// UNSUPPORTED (replayable), never walked up the ladder while it holds the head.
    #[test]
    fn regression_an_unsupported_kind_is_dead_at_its_first_attempt_by_default() {
        let p = RetryPolicy { retry_unsupported: false, ..policy() };
        let now = FakeClock::new().now();
        assert_eq!(
            p.on_failure(0, None, ErrorClass::Unsupported, "no handler for ZZZZ-Q", now),
            Failure::Dead { class: ErrorClass::Unsupported, error: "no handler for ZZZZ-Q".into() }
        );
        assert!(ErrorClass::Unsupported.is_replayable());
        // Every other retryable class keeps the ladder.
        for class in [ErrorClass::CodecError, ErrorClass::Infra] {
            assert!(matches!(p.on_failure(0, None, class, "x", now), Failure::Retry { .. }), "{class}");
        }
    }

    fn row(state: ProcStatus, attempts: u32, next: Option<SystemTime>) -> ProcRow {
        ProcRow {
            msg_id: 1,
            state,
            attempts,
            next_attempt_at: next,
            error_class: None,
            last_error: None,
            identity_key: None,
            first_failed_at: next.map(|t| t - Duration::from_secs(1)),
            type_tag: None,
            received_at: None,
        }
    }

    #[test]
    fn delays_follow_the_table_repeat_its_last_entry_and_are_capped() {
        let p = policy();
        let got: Vec<u64> = (0..=7).map(|a| p.delay(a).as_secs()).collect();
        assert_eq!(got, vec![1, 1, 2, 4, 8, 16, 16, 16]);
        let capped = RetryPolicy { cap: Duration::from_secs(3), ..policy() };
        assert_eq!(capped.delay(5), Duration::from_secs(3));
    }

    #[test]
    fn failures_retry_until_attempts_run_out() {
        let p = policy();
        let now = FakeClock::new().now();
        assert_eq!(
            p.on_failure(0, None, ErrorClass::Infra, "db down", now),
            Failure::Retry {
                class: ErrorClass::Infra,
                error: "db down".into(),
                next_attempt_at: now + Duration::from_secs(1),
                failing_since: now,
            }
        );
        match p.on_failure(
            4,
            Some(Failing { since: now, due: None }),
            ErrorClass::Unsupported,
            "no handler",
            now,
        ) {
            Failure::Dead { class, error } => {
                assert_eq!(class, ErrorClass::Exhausted);
                assert!(error.contains("UNSUPPORTED after 5 attempts"), "{error}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_and_protocol_die_at_once() {
        let now = FakeClock::new().now();
        for class in [ErrorClass::Malformed, ErrorClass::Protocol] {
            assert_eq!(
                policy().on_failure(0, None, class, "x", now),
                Failure::Dead { class, error: "x".into() }
            );
        }
    }

    #[test]
    fn head_in_backoff_blocks_until_its_time_then_is_processed() {
        let clock = FakeClock::new();
        let p = policy();
        let until = clock.now() + Duration::from_secs(2);
        let head = row(ProcStatus::Failed, 1, Some(until));
        assert_eq!(head_action(Some(&head), clock.now(), &p), HeadAction::Wait(until));
        clock.advance(Duration::from_millis(1999));
        assert_eq!(head_action(Some(&head), clock.now(), &p), HeadAction::Wait(until));
        clock.advance(Duration::from_millis(1));
        assert_eq!(head_action(Some(&head), clock.now(), &p), HeadAction::Process);
    }

    #[test]
    fn pending_head_is_processed_none_is_idle_exhausted_is_poison() {
        let now = FakeClock::new().now();
        let p = policy();
        assert_eq!(head_action(None, now, &p), HeadAction::Idle);
        assert_eq!(head_action(Some(&row(ProcStatus::Pending, 0, None)), now, &p), HeadAction::Process);
        let future = now + Duration::from_secs(9);
        assert_eq!(
            head_action(Some(&row(ProcStatus::Failed, 5, Some(future))), now, &p),
            HeadAction::Poison(Poison::Attempts(5))
        );
    }

    #[test]
    fn head_deadline_fires_at_the_first_failure_past_it() {
        // Many attempts allowed, so only the deadline can end it (design.md §3.2: the
        // UPDATED_AT anchor made this branch unreachable).
        let p = RetryPolicy { max_attempts: 1000, ..policy() };
        let clock = FakeClock::new();
        let first = clock.now();
        // Tried the moment each backoff ran out: every second since the first failure counts.
        let failing = |due| Some(Failing { since: first, due: Some(due) });
        clock.advance(Duration::from_secs(599));
        assert!(matches!(
            p.on_failure(3, failing(clock.now()), ErrorClass::Unsupported, "no handler", clock.now()),
            Failure::Retry { .. }
        ));
        clock.advance(Duration::from_secs(1));
        match p.on_failure(3, failing(clock.now()), ErrorClass::Unsupported, "no handler", clock.now()) {
            Failure::Dead { class: ErrorClass::Exhausted, error } => {
                assert!(error.contains("longer than head-deadline 10m"), "{error}")
            }
            other => panic!("{other:?}"),
        }
        // A head waiting (not failing) past the deadline is not poison: it is retried first.
        let mut head = row(ProcStatus::Failed, 3, None);
        head.first_failed_at = Some(first);
        head.next_attempt_at = Some(clock.now() + Duration::from_secs(16));
        assert!(matches!(head_action(Some(&head), clock.now(), &p), HeadAction::Wait(_)));
    }

    /// #21 item 1: a head that failed once and then waited out a 15-minute outage (its backoff
    /// ran out a second after the failure) is not failing for 15 minutes: the second attempt is
    /// a retry, and the moved anchor is what gets recorded.
    #[test]
    fn regression_an_outage_does_not_run_the_head_deadline_clock() {
        let p = policy();
        let clock = FakeClock::new();
        let first = clock.now();
        let due = first + Duration::from_secs(1);
        clock.advance(Duration::from_secs(901));
        let failing = Some(Failing { since: first, due: Some(due) });
        match p.on_failure(1, failing, ErrorClass::Unsupported, "no handler", clock.now()) {
            Failure::Retry { failing_since, .. } => {
                assert_eq!(failing_since, first + Duration::from_secs(900), "moved on by the wait")
            }
            other => panic!("an outage ran the deadline clock: {other:?}"),
        }
        // Failing for real still ends it: ten minutes of attempts each tried when due.
        let since = first + Duration::from_secs(900);
        let now = clock.now() + Duration::from_secs(600);
        let failing = Some(Failing { since, due: Some(now) });
        assert!(matches!(
            p.on_failure(2, failing, ErrorClass::Unsupported, "no handler", now),
            Failure::Dead { class: ErrorClass::Exhausted, .. }
        ));
    }
}
