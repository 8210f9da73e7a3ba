//! The pump (process thread): the single writer of message state and of Redis flight state.
//! Each round takes the FIFO head and the ready messages behind it (INV-3), runs `processOne`
//! on each in the spec's order (SPEC §4.2), and records all their outcomes in one PostgreSQL
//! transaction. Time comes from the injected clock; the rules live in [`rules`].

pub mod replay;
pub mod rules;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use log::{error, info, warn};

use crate::clock::Clock;
use crate::codec::{self, ignore::IgnoreRules, DecodeError};
use crate::config::Pipeline;
use crate::domain::ProcRow;
use crate::error::{ErrorClass, StoreError};
use crate::handlers::{self, Decision, Reject};
use crate::ports::{Failure, FlightStore, Mailbox, Outcome, Prepared, ProcStore, Settle};
use crate::stats::{self, Stats};
use rules::{head_action, HeadAction, RetryPolicy};

/// What one round of the pump did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Nothing unfinished.
    Idle,
    /// The head is backing off until then.
    Wait(SystemTime),
    /// This many messages reached an outcome (terminal or FAILED), recorded together.
    Worked(usize),
}

pub struct Pump<P, M, F> {
    procs: P,
    mailbox: M,
    flights: F,
    clock: Arc<dyn Clock>,
    policy: RetryPolicy,
    head_deadline: Duration,
    ignore: IgnoreRules,
    include_day_boundary: bool,
    batch: usize,
    stats: Arc<Stats>,
}

impl<P: ProcStore, M: Mailbox, F: FlightStore> Pump<P, M, F> {
    pub fn new(
        procs: P,
        mailbox: M,
        flights: F,
        clock: Arc<dyn Clock>,
        cfg: &Pipeline,
        stats: Arc<Stats>,
    ) -> Self {
        Pump {
            procs,
            mailbox,
            flights,
            clock,
            policy: retry_policy(cfg),
            head_deadline: cfg.head_deadline,
            ignore: IgnoreRules::new(&cfg.ignore_rules),
            include_day_boundary: cfg.include_day_boundary,
            batch: cfg.process_batch,
            stats,
        }
    }

    /// One round: the head and up to `process-batch − 1` ready messages behind it, in MSG_ID
    /// order, until one fails (it becomes the head in backoff). All outcomes are committed in
    /// one transaction, failure included: the messages before a failure are never lost to it.
    pub fn round(&mut self) -> Result<Round, StoreError> {
        let rows = self.procs.unfinished(self.batch)?;
        if rows.is_empty() {
            return Ok(Round::Idle);
        }
        // The round's raw texts in one read (messages are immutable, PRE-7).
        let ids: Vec<i64> = rows.iter().map(|r| r.msg_id).collect();
        let mut raws = self.mailbox.raws(&ids);
        // Every META of the round, then every identity holder in one read (messages are
        // immutable, PRE-7; the pump is the only writer of identities).
        let mut metas: HashMap<i64, Result<codec::Envelope, DecodeError>> = HashMap::new();
        if let Ok(r) = &raws {
            for (id, raw) in r {
                let env = pure(|| codec::decode_meta(raw))
                    .unwrap_or_else(|p| Err(DecodeError { class: ErrorClass::Infra, detail: p }));
                metas.insert(*id, env);
            }
        }
        let keys: Vec<String> = metas
            .values()
            .filter_map(|m| m.as_ref().ok())
            .filter(|env| self.ignore.matching(&env.meta).is_none())
            .map(|env| codec::identity(&env.meta, self.include_day_boundary))
            .collect();
        let holders = self.procs.identity_holders(&keys)?;
        let mut settles: Vec<Settle> = Vec::with_capacity(rows.len());
        let mut taken: HashMap<String, i64> = HashMap::new(); // identities bound in this round
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            let now = self.clock.now();
            match head_action(Some(row), now, &self.policy, self.head_deadline) {
                HeadAction::Idle => break,
                HeadAction::Wait(t) if settles.is_empty() => return Ok(Round::Wait(t)),
                HeadAction::Wait(_) => break,
                HeadAction::Poison(p) => {
                    let reason = format!(
                        "{}; last {}: {}",
                        p.describe(now),
                        row.error_class.map(|c| c.as_str()).unwrap_or("-"),
                        row.last_error.as_deref().unwrap_or("-")
                    );
                    settles.push(Settle {
                        msg_id: row.msg_id,
                        type_tag: None,
                        outcome: Outcome::Failed(Failure::Dead {
                            class: ErrorClass::Exhausted,
                            error: reason,
                        }),
                    });
                    events.push(0);
                }
                HeadAction::Process => {
                    let pre = match raws.as_mut() {
                        Ok(r) => Ok(r.remove(&row.msg_id).and_then(|_| metas.remove(&row.msg_id))),
                        Err(e) => Err(StoreError::new(e.store, &e.detail)),
                    };
                    let (settle, n) = self.process_one(row, pre, now, &taken, &holders);
                    if let Outcome::Succeeded { identity, .. } = &settle.outcome {
                        taken.insert(identity.clone(), row.msg_id);
                    }
                    let stop = matches!(settle.outcome, Outcome::Failed(Failure::Retry { .. }));
                    settles.push(settle);
                    events.push(n);
                    if stop {
                        break;
                    }
                }
            }
        }
        let Some(head) = rows.first() else { return Ok(Round::Idle) };
        if settles.is_empty() {
            return Ok(Round::Idle);
        }
        let now = self.clock.now();
        if let Err(e) = self.procs.commit(&settles, now) {
            // Nothing of the round was recorded; the Redis side is replayable (applied
            // decisions). Charge the head an INFRA attempt so a commit that can never succeed
            // still ends in DEAD(EXHAUSTED) instead of looping.
            let failure =
                self.policy.on_failure(head.attempts, ErrorClass::Infra, &format!("commit: {e}"), now);
            let settle = Settle { msg_id: head.msg_id, type_tag: None, outcome: Outcome::Failed(failure) };
            self.procs.commit(std::slice::from_ref(&settle), now)?;
            self.log(head, &settle, 0);
            return Ok(Round::Worked(1));
        }
        for ((settle, row), n) in settles.iter().zip(&rows).zip(events) {
            self.log(row, settle, n);
        }
        // PostgreSQL holds the outcomes now: the applied records in Redis have done their job.
        let done: Vec<i64> = settles
            .iter()
            .filter(|s| matches!(s.outcome, Outcome::Succeeded { .. }))
            .map(|s| s.msg_id)
            .collect();
        if !done.is_empty() {
            if let Err(e) = self.flights.forget(&done) {
                warn!("could not drop applied records msg_ids={done:?} error={e}; they expire by themselves");
            }
        }
        Ok(Round::Worked(settles.len()))
    }

    /// `processOne` (SPEC §4.2) for one message; returns its outcome and how many events it
    /// wrote. Nothing is recorded here. Store errors become FAILED(INFRA); a panic in the
    /// pure decoding or deciding code becomes FAILED(INFRA) too, so one bad message cannot
    /// crash-loop the service (it ends DEAD(EXHAUSTED) after max-attempts).
    fn process_one(
        &mut self,
        row: &ProcRow,
        meta: Result<Option<Result<codec::Envelope, DecodeError>>, StoreError>,
        now: SystemTime,
        taken: &HashMap<String, i64>,
        holders: &HashMap<String, i64>,
    ) -> (Settle, usize) {
        let mut tag = row.type_tag.clone();
        let outcome = match meta.and_then(|m| self.attempt(row, m, now, taken, holders, &mut tag)) {
            Ok(o) => o,
            Err(e) => {
                Outcome::Failed(self.policy.on_failure(row.attempts, ErrorClass::Infra, &e.to_string(), now))
            }
        };
        let n = match &outcome {
            Outcome::Succeeded { events, .. } => events.len(),
            _ => 0,
        };
        (Settle { msg_id: row.msg_id, type_tag: tag, outcome }, n)
    }

    fn attempt(
        &mut self,
        row: &ProcRow,
        meta: Option<Result<codec::Envelope, DecodeError>>,
        now: SystemTime,
        taken: &HashMap<String, i64>,
        holders: &HashMap<String, i64>,
        tag: &mut Option<String>,
    ) -> Result<Outcome, StoreError> {
        let msg_id = row.msg_id;
        let fail =
            |class: ErrorClass, e: &str| Outcome::Failed(self.policy.on_failure(row.attempts, class, e, now));
        // 1. raw text
        let Some(meta) = meta else {
            return Ok(fail(ErrorClass::Malformed, "raw text missing in the mailbox"));
        };
        // 2. META (decoded for the whole round); 3. ignore rules before body, identity and
        // handler (US-04)
        let env = match meta {
            Ok(env) => env,
            Err(e) => return Ok(fail(e.class, &e.detail)),
        };
        *tag = Some(codec::MsgKind::of(&env.meta).type_tag());
        if let Some(rule) = self.ignore.matching(&env.meta) {
            return Ok(Outcome::Skipped { reason: format!("ignored:{rule}") });
        }
        let msg = match pure(|| codec::decode_body(env)) {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return Ok(fail(e.class, &e.detail)),
            Err(p) => return Ok(fail(ErrorClass::Infra, &p)),
        };
        // 4. identity (INV-9): held by an earlier message, or by one earlier in this round.
        let identity = codec::identity(&msg.meta, self.include_day_boundary);
        let holder = taken.get(&identity).or_else(|| holders.get(&identity)).copied();
        if let Some(other) = holder.filter(|h| *h != msg_id) {
            return Ok(Outcome::Skipped { reason: format!("duplicate-of:{other}") });
        }
        // 5.–6. the handler decides; an earlier attempt's applied decision is reused, so a
        // retry after "Redis applied, PostgreSQL failed" writes the same events (I2).
        let decision: Decision = match self.flights.prepare(msg_id, &handlers::need_of(&msg))? {
            Prepared::Applied(d) => d,
            Prepared::Fresh(view) => {
                let d = match pure(|| handlers::decide(&view, &msg, msg_id)) {
                    Ok(Ok(d)) => d,
                    Ok(Err(Reject::Unsupported(e))) => {
                        return Ok(fail(ErrorClass::Unsupported, &format!("no handler for {e}")))
                    }
                    Ok(Err(Reject::Protocol(e))) => return Ok(fail(ErrorClass::Protocol, &e)),
                    Err(p) => return Ok(fail(ErrorClass::Infra, &p)),
                };
                // 7. Redis first (I2); PostgreSQL when the round commits.
                self.flights.apply(msg_id, &d)?;
                d
            }
        };
        Ok(Outcome::Succeeded { identity, events: decision.events, references: decision.references })
    }

    fn log(&self, row: &ProcRow, settle: &Settle, events: usize) {
        let id = row.msg_id;
        let tag = settle.type_tag.as_deref().or(row.type_tag.as_deref()).unwrap_or("-");
        match &settle.outcome {
            Outcome::Succeeded { .. } => {
                stats::inc(&self.stats.succeeded);
                info!("succeeded msg_id={id} type={tag} events={events}");
            }
            Outcome::Skipped { reason } => {
                if reason.starts_with("ignored:") {
                    stats::inc(&self.stats.skipped_ignored);
                } else {
                    stats::inc(&self.stats.skipped_duplicate);
                }
                info!("skipped msg_id={id} type={tag} reason={reason}");
            }
            Outcome::Failed(Failure::Retry { class, error, .. }) => {
                stats::inc(&self.stats.failed);
                warn!(
                    "failed msg_id={id} type={tag} class={class} attempts={} error={error:?}",
                    row.attempts + 1
                );
            }
            Outcome::Failed(Failure::Dead { class, error }) => {
                stats::inc(&self.stats.dead);
                if error.starts_with("poison:") {
                    error!(
                        "poison msg_id={id} type={tag} class={class} attempts={} error={error:?}",
                        row.attempts + 1
                    );
                } else {
                    error!("dead msg_id={id} type={tag} class={class} error={error:?}");
                }
            }
        }
    }
}

/// Runs pure code, turning a panic into an error text (logged by the panic hook).
fn pure<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        format!("panic in decoder or handler: {what}")
    })
}

pub fn retry_policy(cfg: &Pipeline) -> RetryPolicy {
    RetryPolicy { max_attempts: cfg.max_attempts, backoff: cfg.backoff.clone(), cap: cfg.backoff_cap }
}

#[cfg(test)]
mod tests;
