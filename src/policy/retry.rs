//! Attempts, backoff and the head deadline of a message or an event that failed on its own
//! account (SPEC §4.9: a store that is away is charged to none), shared by the pump and the
//! dispatchers.

use std::time::{Duration, SystemTime};

use crate::domain::ProcRow;
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
    /// SPEC §3a: retry a kind no handler knows (`msgx.pipeline.retry-unsupported`); off, it is
    /// DEAD(UNSUPPORTED) at its first attempt and never holds the head.
    pub retry_unsupported: bool,
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
    /// A kind no handler knows cannot succeed before the next release, and each retry would
    /// hold every flight behind it: it is DEAD(UNSUPPORTED) at once unless the site keeps the
    /// ladder (SPEC §3a).
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
        if class.is_fatal() || (class == ErrorClass::Unsupported && !self.retry_unsupported) {
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

/// The pump's policy from its configuration.
pub fn retry_policy(cfg: &crate::config::Pipeline) -> RetryPolicy {
    RetryPolicy {
        max_attempts: cfg.max_attempts,
        backoff: cfg.backoff.clone(),
        cap: cfg.backoff_cap,
        head_deadline: cfg.head_deadline,
        retry_unsupported: cfg.retry_unsupported,
    }
}
