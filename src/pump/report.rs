//! What the pump says about each message: the lifecycle lines operators follow
//! (docs/reference.md), their counters, and unknown elements once per run.

use std::time::SystemTime;

use log::{error, info, warn};

use super::Pump;
use crate::domain::{ProcRow, SkipReason};
use crate::error::ErrorClass;
use crate::ports::{Failure, Outcome, Settle};
use crate::stats;

impl<P, M, F> Pump<P, M, F> {
    /// Unknown element names: one WARN per new TYPE-STYP/element pair per run, and a counter.
    pub(super) fn report_unknown(&mut self, tag: Option<&str>, unknown: &[String]) {
        let tag = tag.unwrap_or("-");
        for name in unknown {
            stats::inc(&self.stats.unknown_elements);
            if self.unknown_seen.insert(format!("{tag}/{name}")) {
                warn!(target: super::LOG, "unknown element type={tag} element={name}: skipped, the known fields are applied (msgx.codec.strict = false)");
            }
        }
    }

    /// One line per recorded outcome.
    pub(super) fn log(&self, row: &ProcRow, settle: &Settle, now: SystemTime) {
        let id = row.msg_id;
        let tag = settle.type_tag.as_deref().or(row.type_tag.as_deref()).unwrap_or("-");
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
                    "failed msg_id={id} type={tag} class={class} attempts={} error={error:?}",
                    row.attempts + 1
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
                        "poison msg_id={id} type={tag} class={class} attempts={} error={error:?}",
                        row.attempts + 1
                    );
                } else {
                    error!(target: super::LOG, "dead msg_id={id} type={tag} class={class} error={error:?}");
                }
            }
        }
    }
}
