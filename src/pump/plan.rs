//! One message of a round as the steps rewrite it: read and decoded, decided, applied,
//! settled. The round is a `Vec<Planned>` in MSG_ID order; a step that ends the round early
//! truncates it after the message that ended it.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::codec::Message;
use crate::domain::{ProcRow, RedisRecord, SkipReason};
use crate::handlers::Decision;
use crate::ports::{Failure, Outcome, Settle};

/// A message of the round, in MSG_ID order.
pub(super) struct Planned<'r> {
    pub row: &'r ProcRow,
    /// The type tag, once the META was read (the row's until then).
    pub tag: Option<std::borrow::Cow<'static, str>>,
    pub step: Step,
    /// Unknown element names the tolerant reader skipped (reported once per run).
    pub unknown: Vec<String>,
}

/// Where a message of the round stands.
pub(super) enum Step {
    /// Its outcome is known (DEAD, FAILED, SKIPPED, or SUCCEEDED with its events).
    Settled(Outcome),
    /// It needs a decision.
    Decide { msg: Box<Message>, identity: String },
    /// Decided; Redis takes the decision before the outcome is final (I2).
    Apply { identity: String, decision: Decision },
}

impl<'r> Planned<'r> {
    pub fn new(row: &'r ProcRow, step: Step) -> Planned<'r> {
        Planned { row, tag: row.type_tag.clone().map(std::borrow::Cow::Owned), step, unknown: Vec::new() }
    }

    pub fn settle(&mut self, outcome: Outcome) {
        self.step = Step::Settled(outcome);
    }

    /// Takes the step out to rewrite it (left settled as nothing meanwhile).
    pub fn take_step(&mut self) -> Step {
        std::mem::replace(
            &mut self.step,
            Step::Settled(Outcome::Skipped { reason: SkipReason::Ignored(String::new()) }),
        )
    }

    /// FAILED and backing off: the round ends with this message (it becomes the head).
    pub fn backs_off(&self) -> bool {
        matches!(self.step, Step::Settled(Outcome::Failed(Failure::Retry { .. })))
    }

    /// A snapshot (`MsgKind::is_snapshot`: SCHD DNLD/RESP, DFOE-DFDL): always a round of its
    /// own, so that no message of a round is decided against a window another one changed
    /// (SPEC §4.12; two DFDL tables of different days shared a round, #39).
    pub fn is_snapshot(&self) -> bool {
        matches!(&self.step, Step::Decide { msg, .. } if msg.kind.is_snapshot())
    }

    /// The outcome to record; every message of a round that commits is settled.
    pub fn into_settle(self) -> Settle {
        let Step::Settled(outcome) = self.step else {
            panic!("msg_id={} reached the commit unsettled", self.row.msg_id)
        };
        Settle { msg_id: self.row.msg_id, type_tag: self.tag, outcome }
    }
}

/// The outcome of a decision, with what Redis acknowledged of it (`None`: it needs no Redis).
pub(super) fn succeeded(identity: String, d: Decision, record: Option<RedisRecord>) -> Outcome {
    let (events, references, answer, rules) = (d.events, d.references, d.answer, d.rules);
    Outcome::Succeeded { identity, events, references, record, answer, rules }
}

/// Runs pure code, turning a panic into an error text (logged by the panic hook).
pub(super) fn pure<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        format!("panic in decoder or handler: {what}")
    })
}
