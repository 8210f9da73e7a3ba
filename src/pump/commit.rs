//! Step 5 of a round: every outcome in one transaction, on the lane or in place. A refused
//! commit is retried one message at a time, and only the message whose outcome PostgreSQL
//! refuses is charged.

use std::time::SystemTime;

use log::{info, warn};

use super::lane::{Committing, Entry};
use super::plan::Planned;
use super::rules::Failing;
use super::{Pump, Round};
use crate::error::{ErrorClass, StoreError};
use crate::ports::{Failure, Fifo, FlightStore, MailboxTexts, Outcome, RoundRecord, Settle, StoreResult};
use crate::requests::{self, Answer, Verdict};

/// What waiting for the lane found.
pub(super) enum Landing {
    Nothing,
    /// The round is recorded.
    Recorded,
    /// The round was refused and recorded message by message up to the cause (this many).
    Refused(usize),
}

impl<P: Fifo, M: MailboxTexts, F: FlightStore> Pump<P, M, F> {
    pub(super) fn commit(&mut self, plan: Vec<Planned>, now: SystemTime) -> Result<Round, StoreError> {
        if plan.is_empty() {
            return Ok(Round::Idle);
        }
        // A round that ends backing off commits in place: the next round must see that head.
        let backing_off = plan.last().is_some_and(Planned::backs_off);
        let entries: Vec<Entry> =
            plan.into_iter().map(|p| Entry { row: p.row.clone(), settle: p.into_settle() }).collect();
        let round = Committing { entries, now };
        let n = round.entries.len();
        if let Some(lane) = self.lane.as_mut().filter(|_| !backing_off) {
            lane.start(round);
            return Ok(Round::Worked(n));
        }
        let result = self.fifo.commit(&round.record(), now);
        Ok(Round::Worked(self.landed(round, result)?))
    }

    /// Waits for the round on the lane, if any, and logs it.
    pub(super) fn land(&mut self) -> StoreResult<Landing> {
        let Some((round, result)) = self.lane.as_mut().and_then(|l| l.finish()) else {
            return Ok(Landing::Nothing);
        };
        let refused = matches!(&result, Err(e) if e.is_rejected());
        let n = self.landed(round, result)?;
        Ok(if refused { Landing::Refused(n) } else { Landing::Recorded })
    }

    /// A round's commit result: logged when recorded, found out message by message when
    /// refused; the number of messages recorded.
    fn landed(&mut self, round: Committing, result: StoreResult<()>) -> StoreResult<usize> {
        match result {
            Ok(()) => {
                for e in &round.entries {
                    self.log(&e.row, &e.settle, round.now);
                }
                self.done(round.entries.iter().map(|e| &e.settle));
                self.answered(round.entries.iter().map(|e| &e.settle));
                Ok(round.entries.len())
            }
            Err(e) if e.is_rejected() => self.commit_one_by_one(round, e),
            Err(e) => Err(e),
        }
    }

    fn commit_one_by_one(&mut self, round: Committing, round_error: StoreError) -> StoreResult<usize> {
        let n = round.entries.len();
        warn!(target: super::LOG, "round commit refused ({round_error}); committing its {n} messages one at a time to find the cause");
        let now = round.now;
        for (worked, Entry { row, settle }) in round.entries.into_iter().enumerate() {
            match self.fifo.commit(&RoundRecord::of(std::slice::from_ref(&settle)), now) {
                Ok(()) => {
                    self.log(&row, &settle, now);
                    self.done(std::iter::once(&settle));
                    self.answered(std::iter::once(&settle));
                }
                Err(e) if e.is_rejected() => {
                    let error = format!("the outcome was refused: {e}");
                    let failure = self.policy.on_failure(
                        row.attempts,
                        Failing::of(&row),
                        ErrorClass::Infra,
                        &error,
                        now,
                    );
                    let charged = Settle { outcome: Outcome::Failed(failure), ..settle };
                    // If even the failure cannot be recorded, the store refuses everything:
                    // that is no message's fault, the stage stalls.
                    self.fifo.commit(&RoundRecord::of(std::slice::from_ref(&charged)), now)?;
                    self.log(&row, &charged, now);
                    return Ok(worked + 1);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// PostgreSQL holds these outcomes: Redis is told at its next read — their journal entries
    /// can go, and every terminal one (SUCCEEDED, SKIPPED, DEAD) is recorded as settled: the
    /// evidence that PostgreSQL held it, should it forget (#37).
    fn done<'s>(&mut self, settles: impl Iterator<Item = &'s Settle>) {
        self.forget.extend(
            settles
                .filter(|s| !matches!(s.outcome, Outcome::Failed(Failure::Retry { .. })))
                .map(|s| s.msg_id),
        );
    }

    /// What the recorded answers closed (G-RESP-GUARD), read back after their commit: logged,
    /// and an answer no request explains counted. The commit has closed the requests already;
    /// a failed read costs only these lines.
    fn answered<'s>(&mut self, settles: impl Iterator<Item = &'s Settle>) {
        let answers: Vec<(i64, &Answer)> = settles
            .filter_map(|s| match &s.outcome {
                Outcome::Succeeded { answer: Some(a), .. } => Some((s.msg_id, a)),
                _ => None,
            })
            .collect();
        if answers.is_empty() {
            return;
        }
        let ids: Vec<i64> = answers.iter().map(|(m, _)| *m).collect();
        let answered = match self.fifo.answered(&ids) {
            Ok(r) => r,
            Err(e) => {
                warn!(target: super::LOG, "answers recorded msg_ids={ids:?}; which requests they closed could not be read: {e}");
                return;
            }
        };
        for ((msg_id, verdict), (_, answer)) in
            requests::verdicts(&answers, &answered).into_iter().zip(&answers)
        {
            match verdict {
                Verdict::Closed(r) => info!(
                    target: super::LOG,
                    "request answered req_id={} type={} key={} msg_id={msg_id}: DONE", r.req_id, r.req_type, r.req_key
                ),
                Verdict::Late(r) => info!(
                    target: super::LOG,
                    "request answered after it expired req_id={} type={} key={} msg_id={msg_id}: processed as any message, noted on the request",
                    r.req_id, r.req_type, r.req_key
                ),
                Verdict::Unsolicited => {
                    self.stats.unsolicited_answers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let answer = crate::logline::Quoted(&answer.to_string()).to_string();
                    info!(target: super::LOG, "unsolicited answer msg_id={msg_id} answers={answer}: no request explains it; processed as any message");
                }
            }
        }
    }

    /// Drops journal entries while there is nothing else to do.
    pub(super) fn forget_idle(&mut self, now: SystemTime) -> StoreResult<()> {
        if !self.forget.is_empty() {
            self.flights.forget(&self.forget, now)?;
            self.forget.clear();
        }
        Ok(())
    }
}
