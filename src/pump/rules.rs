//! The pump's rules as plain functions of state and `now` (I1: single-writer FIFO, HOL
//! blocking, poison escalation). No I/O here, so tests drive them tick by tick.

use std::time::{Duration, SystemTime};

use crate::domain::{ProcRow, ProcStatus};
use crate::error::ErrorClass;
use crate::ports::Failure;

/// Attempts, backoff and the head deadline, shared by processing and delivery
/// (`msgx.pipeline.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub backoff: Vec<Duration>,
    pub cap: Duration,
    /// A message that keeps failing longer than this since its first failure is poison.
    pub head_deadline: Duration,
}

impl RetryPolicy {
    /// The delay after the `attempts`-th failure (1-based); the table's last entry repeats and
    /// every entry is capped. `attempts <= 0` takes the first entry (design.md §4, N28).
    pub fn delay(&self, attempts: u32) -> Duration {
        let i = (attempts.max(1) as usize - 1).min(self.backoff.len() - 1);
        self.backoff[i].min(self.cap)
    }

    /// What a failure of class `class` makes of a row that had `attempts` attempts before and,
    /// if it failed before, is [`Failing`]. Only failures that are the message's own reach
    /// here — a store that is unavailable is never charged (SPEC §4.9) — so both poison rules
    /// (attempts used up, or failing for longer than the head deadline) are checked when a
    /// failure is recorded. The deadline counts only the time the row spent failing: the time
    /// it waited to be tried after its backoff ran out (the stage stalled on a store, the lease
    /// gate closed, the daemon stopped) moves the anchor on, and the moved anchor is recorded.
    pub fn on_failure(
        &self,
        attempts: u32,
        failing: Option<Failing>,
        class: ErrorClass,
        error: &str,
        now: SystemTime,
    ) -> Failure {
        let attempts = attempts + 1;
        let since = failing.map_or(now, |f| f.anchor(now));
        let stuck = now.duration_since(since).unwrap_or_default();
        if class.is_fatal() {
            Failure::Dead { class, error: error.to_string() }
        } else if attempts >= self.max_attempts {
            Failure::Dead {
                class: ErrorClass::Exhausted,
                error: format!("{class} after {attempts} attempts: {error}"),
            }
        } else if failing.is_some() && stuck >= self.head_deadline {
            Failure::Dead {
                class: ErrorClass::Exhausted,
                error: format!(
                    "{class} after {attempts} attempts, failing for {}s since the first failure, longer than head-deadline {}: {error}",
                    stuck.as_secs(),
                    crate::config::format_duration(self.head_deadline)
                ),
            }
        } else {
            Failure::Retry {
                class,
                error: error.to_string(),
                next_attempt_at: now + self.delay(attempts),
                failing_since: since,
            }
        }
    }
}

/// A row that failed before: the head-deadline anchor recorded with its last failure, and when
/// its backoff ran out (`NEXT_ATTEMPT_AT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failing {
    pub since: SystemTime,
    pub due: Option<SystemTime>,
}

impl Failing {
    /// The row's, if it failed before.
    pub fn of(row: &ProcRow) -> Option<Failing> {
        row.first_failed_at.map(|since| Failing { since, due: row.next_attempt_at })
    }

    /// The anchor at `now`: moved on by the time the row waited past `due` (not failing, only
    /// not tried), never past `now`.
    pub fn anchor(self, now: SystemTime) -> SystemTime {
        let waited = self.due.and_then(|d| now.duration_since(d).ok()).unwrap_or_default();
        (self.since + waited).min(now)
    }
}

/// Why a head is poison before it is even tried (I1): its attempts are used up (possible only
/// when `max-attempts` was lowered since it failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poison {
    Attempts(u32),
}

impl Poison {
    pub fn describe(&self) -> String {
        match self {
            Poison::Attempts(n) => format!("poison: {n} attempts used"),
        }
    }
}

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

/// The pump's policy from its configuration.
pub fn retry_policy(cfg: &crate::config::Pipeline) -> RetryPolicy {
    RetryPolicy {
        max_attempts: cfg.max_attempts,
        backoff: cfg.backoff.clone(),
        cap: cfg.backoff_cap,
        head_deadline: cfg.head_deadline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            backoff: [1, 2, 4, 8, 16].map(Duration::from_secs).to_vec(),
            cap: Duration::from_secs(60),
            head_deadline: Duration::from_secs(600),
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
