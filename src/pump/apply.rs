//! Step 4 of a round: Redis first (I2) — every new decision in one script, journalled per
//! message. A refused apply is retried one decision at a time; the decision Redis refuses is
//! charged to its message and the round ends there.

use std::time::SystemTime;

use log::info;

use super::plan::{succeeded, Planned, Step};
use super::rules::Failing;
use super::Pump;
use crate::domain::RedisRecord;
use crate::error::{ErrorClass, StoreError};
use crate::handlers::Decision;
use crate::ports::{Applying, Fifo, FlightStore, MailboxTexts, Outcome, StoreResult};

impl<P: Fifo, M: MailboxTexts, F: FlightStore> Pump<P, M, F> {
    /// Settles every `Apply` step of the round.
    pub(super) fn apply(&mut self, plan: &mut Vec<Planned>, now: SystemTime) -> StoreResult<()> {
        let batch: Vec<Applying> = plan
            .iter()
            .filter_map(|p| match &p.step {
                Step::Apply { identity, decision } => {
                    Some(Applying { msg_id: p.row.msg_id, identity, decision })
                }
                _ => None,
            })
            .collect();
        if batch.is_empty() {
            return Ok(());
        }
        let (flags, refused) = self.apply_batch(&batch)?;
        let mut taken = flags.into_iter();
        for k in 0..plan.len() {
            let p = &mut plan[k];
            if !matches!(p.step, Step::Apply { .. }) {
                continue;
            }
            let Step::Apply { identity, decision } = p.take_step() else { unreachable!() };
            match taken.next() {
                Some(changed) => {
                    let record = match (decision.snapshot, changed) {
                        (false, _) => RedisRecord::Applied,
                        (true, true) => RedisRecord::Generation,
                        (true, false) => RedisRecord::Stale,
                    };
                    p.settle(succeeded(identity, self.as_applied(p, decision, changed), Some(record)))
                }
                None => {
                    let e = refused.as_ref().map(|e| e.to_string()).unwrap_or_default();
                    let error = format!("redis refused the decision: {e}");
                    let row = p.row;
                    let failure = self.policy.on_failure(
                        row.attempts,
                        Failing::of(row),
                        ErrorClass::Infra,
                        &error,
                        now,
                    );
                    p.settle(Outcome::Failed(failure));
                    plan.truncate(k + 1);
                    break;
                }
            }
        }
        Ok(())
    }

    /// The batch in one script; refused, one decision at a time up to the one Redis refuses.
    /// Returns whether each applied decision changed anything, and the refusal if one was.
    fn apply_batch(&mut self, batch: &[Applying<'_>]) -> StoreResult<(Vec<bool>, Option<StoreError>)> {
        let first = match self.flights.apply(batch) {
            Ok(flags) => return Ok((flags, None)),
            Err(e) if e.is_rejected() => e,
            Err(e) => return Err(e),
        };
        let mut flags = Vec::new();
        if batch.len() > 1 {
            for one in batch {
                match self.flights.apply(std::slice::from_ref(one)) {
                    Ok(f) => flags.extend(f),
                    Err(e) if e.is_rejected() => return Ok((flags, Some(e))),
                    Err(e) => return Err(e),
                }
            }
        }
        Ok((flags, Some(first)))
    }

    /// A snapshot Redis refused as not newer than the plan changed nothing, so it says nothing
    /// either (its journal holds the empty decision). It still answers what it answers, under
    /// the rules that decided it (#55).
    fn as_applied(&self, p: &Planned, decision: Decision, changed: bool) -> Decision {
        if changed {
            return decision;
        }
        // Nor does it answer a request: nothing of it was applied, so a heal's window would be
        // called rebuilt and stop being awaited while its flights stay lost (#68). The request
        // waits on; a heal's, once expired, is asked again and its answer is newer.
        let answers = if decision.answer.is_some() {
            "; it answers no request (the request waits for a newer answer)"
        } else {
            ""
        };
        info!(
            target: super::LOG,
            "snapshot msg_id={} is not newer than the daily plan's generation; nothing changed, nothing published{answers}",
            p.row.msg_id
        );
        Decision { rules: decision.rules, ..Decision::default() }
    }
}
