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
#[derive(Debug, Default)]
pub(super) struct UnknownNames {
    seen: HashSet<String>,
    full_said: bool,
    /// The minute the lines are counted in, when it began, and how many it had.
    minute: Option<SystemTime>,
    in_minute: u32,
    held_back: u64,
}

impl UnknownNames {
    pub const REMEMBERED: usize = 1024;
    pub const PER_MESSAGE: u32 = 5;
    pub const PER_MINUTE: u32 = 30;

    /// Whether a line may be written now; counts it.
    fn room(&mut self, now: SystemTime) -> bool {
        let fresh = self.minute.is_none_or(|m| now.duration_since(m).map_or(true, |d| d.as_secs() >= 60));
        if fresh {
            if self.held_back > 0 {
                warn!(target: super::LOG, "unknown element lines held back held_back={}: more than {} a minute; every name is counted (msgx_unknown_elements_total)", self.held_back, Self::PER_MINUTE);
            }
            (self.minute, self.in_minute, self.held_back) = (Some(now), 0, 0);
        }
        self.in_minute += 1;
        self.in_minute <= Self::PER_MINUTE
    }

    /// Says what is new among one message's unknown names.
    fn report(&mut self, msg_id: i64, tag: &str, unknown: &[String], now: SystemTime) {
        let mut said = 0;
        for name in unknown {
            let pair = format!("{tag}/{name}");
            if self.seen.contains(&pair) {
                continue;
            }
            if self.seen.len() >= Self::REMEMBERED {
                if !std::mem::replace(&mut self.full_said, true) {
                    warn!(target: super::LOG, "unknown element names remembered={}: further new names are counted (msgx_unknown_elements_total), not listed, until msgx restarts", Self::REMEMBERED);
                }
                return;
            }
            if said == Self::PER_MESSAGE || !self.room(now) {
                self.held_back += 1;
                continue;
            }
            said += 1;
            let (tag, name) = (Upstream(tag), Upstream(name));
            warn!(target: super::LOG, "unknown element msg_id={msg_id} type={tag} element={name}: skipped, the known fields are applied (msgx.codec.strict = false)");
            self.seen.insert(pair);
        }
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
        for _ in unknown {
            stats::inc(&self.stats.unknown_elements);
        }
        if !unknown.is_empty() {
            self.unknown_names.report(msg_id, tag.unwrap_or("-"), unknown, now);
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
