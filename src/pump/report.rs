//! What the pump says about each message: the lifecycle lines operators follow
//! (docs/reference.md), their counters, and unknown elements once per run.

use std::collections::HashSet;
use std::time::SystemTime;

use log::{error, info, warn};

use super::Pump;
use crate::domain::{ProcRow, SkipReason};
use crate::error::ErrorClass;
use crate::logline::{Quoted, Upstream};
use crate::ports::{Failure, Outcome, Settle};
use crate::stats;

/// What the pump remembers and says of unknown names (#53), bounded whatever the input: each
/// new TYPE-STYP/name pair once per run, at most [`UnknownNames::REMEMBERED`] pairs (then one
/// line says further names are counted, not listed), at most [`UnknownNames::PER_MESSAGE`]
/// lines a message and [`UnknownNames::PER_MINUTE`] a minute. A name whose line was held back
/// is not remembered, so a later message names it when there is room. Every name is counted
/// (`msgx_unknown_elements_total`).
///
/// A pair is remembered as a keyed 64-bit hash, not as its text: eight bytes whatever the
/// names' length (#68: 120 names of 1 MB each held 63 MB). The key is random per process, so
/// no input can choose a collision; one that happens anyway leaves a name unlisted, still
/// counted.
#[derive(Debug, Default)]
pub struct UnknownNames {
    seen: HashSet<u64>,
    keys: std::hash::RandomState,
    full_said: bool,
    /// The minute the lines are counted in, when it began, and how many it had.
    minute: Option<SystemTime>,
    in_minute: u32,
    held_back: u64,
}

impl UnknownNames {
    pub const REMEMBERED: usize = 1024;
    pub const PER_MESSAGE: usize = 5;
    pub const PER_MINUTE: u32 = 30;

    /// Whether a line may be written now (counted if so); a new minute first says how many
    /// lines the last one held back.
    fn room(&mut self, now: SystemTime, lines: &mut Vec<String>) -> bool {
        let fresh = self.minute.is_none_or(|m| now.duration_since(m).is_ok_and(|d| d.as_secs() >= 60));
        if fresh {
            if self.held_back > 0 {
                lines.push(format!("unknown element lines held back held_back={}: more than {} a minute; every name is counted (msgx_unknown_elements_total)", self.held_back, Self::PER_MINUTE));
            }
            (self.minute, self.in_minute, self.held_back) = (Some(now), 0, 0);
        }
        self.in_minute += 1;
        self.in_minute <= Self::PER_MINUTE
    }

    /// The lines to write about what is new among one message's unknown names (pure: the pump
    /// writes them).
    pub fn report(&mut self, msg_id: i64, tag: &str, unknown: &[String], now: SystemTime) -> Vec<String> {
        let mut lines = Vec::new();
        let mut said = 0;
        for name in unknown {
            let pair = std::hash::BuildHasher::hash_one(&self.keys, (tag, name));
            if self.seen.contains(&pair) {
                continue;
            }
            if self.seen.len() >= Self::REMEMBERED {
                if !std::mem::replace(&mut self.full_said, true) {
                    lines.push(format!("unknown element names remembered={}: further new names are counted (msgx_unknown_elements_total), not listed, until msgx restarts", Self::REMEMBERED));
                }
                break;
            }
            if said == Self::PER_MESSAGE || !self.room(now, &mut lines) {
                self.held_back += 1;
                continue;
            }
            said += 1;
            let (tag, name) = (Upstream(tag), Upstream(name));
            lines.push(format!("unknown element msg_id={msg_id} type={tag} element={name}: skipped, the known fields are applied (msgx.codec.strict = false)"));
            self.seen.insert(pair);
        }
        lines
    }
}

/// The most `tolerated` lines one message writes (#53).
const TOLERATED_PER_MESSAGE: usize = 5;

/// A handler's warnings about one message, a few of them: what input can make msgx log is
/// bounded (#53).
pub(super) fn tolerated(msg_id: i64, tag: Option<&str>, warnings: &[String]) {
    let tag = Upstream(tag.unwrap_or("-"));
    for w in warnings.iter().take(TOLERATED_PER_MESSAGE) {
        warn!(target: super::LOG, "tolerated msg_id={msg_id} type={tag}: {}", Quoted(w));
    }
    if let Some(more) = warnings.len().checked_sub(TOLERATED_PER_MESSAGE).filter(|n| *n > 0) {
        warn!(target: super::LOG, "tolerated msg_id={msg_id} type={tag}: {more} more warning(s) not listed");
    }
}

impl<P, M, F> Pump<P, M, F> {
    /// Unknown element names: counted, and new ones said within [`UnknownNames`]' bounds.
    pub(super) fn report_unknown(
        &mut self,
        msg_id: i64,
        tag: Option<&str>,
        unknown: &[String],
        now: SystemTime,
    ) {
        stats::add(&self.stats.unknown_elements, unknown.len() as u64);
        if !unknown.is_empty() {
            for line in self.unknown_names.report(msg_id, tag.unwrap_or("-"), unknown, now) {
                warn!(target: super::LOG, "{line}");
            }
        }
    }

    /// One line per recorded outcome.
    pub(super) fn log(&self, row: &ProcRow, settle: &Settle, now: SystemTime) {
        let id = row.msg_id;
        // A tag of a kind msgx does not know is the message's own TYPE and STYP (#53).
        let tag = Upstream(settle.type_tag.as_deref().or(row.type_tag.as_deref()).unwrap_or("-"));
        match &settle.outcome {
            Outcome::Succeeded { events, .. } => {
                stats::inc(&self.stats.succeeded);
                stats::Latencies::observe(&self.stats.latency.processing, row.received_at, now);
                info!(target: super::LOG, "succeeded msg_id={id} type={tag} events={}", events.len());
            }
            Outcome::Skipped { reason } => {
                let counter = match reason {
                    SkipReason::DuplicateOf(_) => &self.stats.skipped_duplicate,
                    SkipReason::NotForMsgx(_) => &self.stats.skipped_not_for_msgx,
                    SkipReason::Ignored(_) => &self.stats.skipped_ignored,
                };
                stats::inc(counter);
                info!(target: super::LOG, "skipped msg_id={id} type={tag} reason={reason}");
            }
            Outcome::Failed(Failure::Retry { class, error, .. }) => {
                stats::inc(&self.stats.failed);
                warn!(
                    target: super::LOG,
                    "failed msg_id={id} type={tag} class={class} attempts={} error={}",
                    row.attempts + 1,
                    Quoted(error)
                );
            }
            Outcome::Failed(Failure::Dead { class, error }) => {
                stats::inc(&self.stats.dead);
                // Poison is a class, never a text: every rule that gives up on a message says
                // EXHAUSTED (`RetryPolicy::on_failure`, a head whose attempts are used up), and
                // an error text that comes from upstream can begin with anything (#43).
                if *class == ErrorClass::Exhausted {
                    error!(
                        target: super::LOG,
                        "poison msg_id={id} type={tag} class={class} attempts={} error={}",
                        row.attempts + 1,
                        Quoted(error)
                    );
                } else {
                    error!(target: super::LOG, "dead msg_id={id} type={tag} class={class} error={}", Quoted(error));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::UnknownNames;

    fn names(from: usize, n: usize) -> Vec<String> {
        (from..from + n).map(|i| format!("X{i:06}")).collect()
    }

    #[test]
    fn a_message_of_many_new_names_writes_a_few_lines_and_a_minute_a_bounded_number() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut u = UnknownNames::default();
        let lines = u.report(1, "FLOP-STND", &names(0, 100_000), t0);
        assert_eq!(lines.len(), UnknownNames::PER_MESSAGE, "{lines:?}");
        let mut in_minute = lines.len();
        for m in 2..40 {
            in_minute += u
                .report(m, "FLOP-STND", &names(m as usize * 10, 10), t0 + Duration::from_secs(m as u64))
                .len();
        }
        assert_eq!(in_minute, UnknownNames::PER_MINUTE as usize);
        let next = u.report(50, "FLOP-STND", &names(900_000, 1), t0 + Duration::from_secs(61));
        assert!(next[0].starts_with("unknown element lines held back held_back="), "{next:?}");
        assert!(next[1].contains("element=X900000"), "{next:?}");
    }

    #[test]
    fn what_is_remembered_is_capped_and_said_once() {
        let mut u = UnknownNames::default();
        let mut all = Vec::new();
        for m in 0..2_000i64 {
            let at = SystemTime::UNIX_EPOCH + Duration::from_secs(60 * m as u64);
            all.extend(u.report(m, "T", &names(m as usize, 1), at));
        }
        assert!(u.seen.len() <= UnknownNames::REMEMBERED);
        let full = all.iter().filter(|l| l.starts_with("unknown element names remembered=")).count();
        assert_eq!(full, 1, "said once");
        assert_eq!(all.len(), UnknownNames::REMEMBERED + 1);
    }

    /// #68: what is remembered is bounded in bytes, not only in count: names of 100 KB each
    /// (the parser refuses such names now; the pump must not depend on it) cost eight bytes.
    #[test]
    fn regression_what_is_remembered_does_not_grow_with_the_names_length() {
        let mut u = UnknownNames::default();
        let long = |i: usize| vec![format!("{i:08}{}", "N".repeat(100_000))];
        for m in 0..UnknownNames::REMEMBERED + 10 {
            let at = SystemTime::UNIX_EPOCH + Duration::from_secs(60 * m as u64);
            u.report(m as i64, &"T".repeat(100_000), &long(m), at);
        }
        assert_eq!(u.seen.len(), UnknownNames::REMEMBERED);
        let held = u.seen.capacity() * std::mem::size_of::<u64>();
        assert!(held < 64 * 1024, "{held} bytes remembered");
        // A name already said is still known by its hash.
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000_000);
        assert!(u.report(1, &"T".repeat(100_000), &long(3), at).is_empty());
    }

    #[test]
    fn a_name_already_said_is_not_said_again_and_a_hostile_name_is_quoted() {
        let at = SystemTime::UNIX_EPOCH;
        let mut u = UnknownNames::default();
        let evil = vec!["A\nERROR forged".to_string()];
        let lines = u.report(1, "FLOP-STND", &evil, at);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains(r#"element="A\nERROR forged""#), "{lines:?}");
        assert!(u.report(2, "FLOP-STND", &evil, at).is_empty());
    }
}
