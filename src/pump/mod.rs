//! The pump (process thread): the single writer of message state and of Redis flight state.
//! It takes the FIFO head (INV-3), runs `processOne` in the spec's order (SPEC §4.2) and
//! records the outcome. Time comes from the injected clock; the rules live in [`rules`].

pub mod rules;

use std::sync::Arc;
use std::time::SystemTime;

use log::{error, info, warn};

use crate::clock::Clock;
use crate::codec::{self, ignore::IgnoreRules};
use crate::config::Pipeline;
use crate::domain::ProcRow;
use crate::error::{ErrorClass, StoreError};
use crate::handlers;
use crate::ports::{Bind, Failure, FlightStore, Mailbox, ProcStore};
use crate::stats::{self, Stats};
use rules::{head_action, HeadAction, RetryPolicy};

/// What one round of the pump did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Nothing unfinished.
    Idle,
    /// The head is backing off until then.
    Wait(SystemTime),
    /// This many messages reached an outcome (terminal or FAILED).
    Worked(usize),
}

/// How `processOne` ended for one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Succeeded { events: usize },
    Skipped(String),
    Failed(Failure),
}

pub struct Pump<P, M, F> {
    procs: P,
    mailbox: M,
    flights: F,
    clock: Arc<dyn Clock>,
    policy: RetryPolicy,
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
            ignore: IgnoreRules::new(&cfg.ignore_rules),
            include_day_boundary: cfg.include_day_boundary,
            batch: cfg.process_batch,
            stats,
        }
    }

    /// One round: the head and the ready messages behind it, in MSG_ID order, until one fails
    /// (it becomes the head in backoff) or the batch is done.
    pub fn round(&mut self) -> Result<Round, StoreError> {
        let rows = self.procs.unfinished(self.batch)?;
        let mut worked = 0;
        for row in &rows {
            let now = self.clock.now();
            match head_action(Some(row), now, &self.policy) {
                HeadAction::Idle => break,
                HeadAction::Wait(t) if worked == 0 => return Ok(Round::Wait(t)),
                HeadAction::Wait(_) => break,
                HeadAction::Poison => {
                    let f = Failure::Dead {
                        class: ErrorClass::Exhausted,
                        error: format!(
                            "poison: {} attempts, last {}: {}",
                            row.attempts,
                            row.error_class.map(|c| c.as_str()).unwrap_or("-"),
                            row.last_error.as_deref().unwrap_or("-")
                        ),
                    };
                    self.record_failure(row, "-", &f, now)?;
                    worked += 1;
                }
                HeadAction::Process => {
                    worked += 1;
                    if let Outcome::Failed(Failure::Retry { .. }) = self.process_one(row)? {
                        break;
                    }
                }
            }
        }
        Ok(if worked == 0 { Round::Idle } else { Round::Worked(worked) })
    }

    /// `processOne` (SPEC §4.2). Store errors inside become FAILED(INFRA); only an error
    /// while recording the outcome itself is returned.
    pub fn process_one(&mut self, row: &ProcRow) -> Result<Outcome, StoreError> {
        let now = self.clock.now();
        let mut tag = String::from("-");
        let outcome = match self.attempt(row, now, &mut tag) {
            Ok(o) => o,
            Err(e) => {
                Outcome::Failed(self.policy.on_failure(row.attempts, ErrorClass::Infra, &e.to_string(), now))
            }
        };
        match &outcome {
            Outcome::Succeeded { events } => {
                stats::inc(&self.stats.succeeded);
                info!("succeeded msg_id={} type={tag} events={events}", row.msg_id);
            }
            Outcome::Skipped(reason) => {
                if reason.starts_with("ignored:") {
                    stats::inc(&self.stats.skipped_ignored);
                } else {
                    stats::inc(&self.stats.skipped_duplicate);
                }
                info!("skipped msg_id={} type={tag} reason={reason}", row.msg_id);
            }
            Outcome::Failed(f) => self.record_failure(row, &tag, f, now)?,
        }
        Ok(outcome)
    }

    fn attempt(&mut self, row: &ProcRow, now: SystemTime, tag: &mut String) -> Result<Outcome, StoreError> {
        let msg_id = row.msg_id;
        let fail = |class: ErrorClass, e: &str| self.policy.on_failure(row.attempts, class, e, now);
        // 1. raw text
        let Some(raw) = self.mailbox.raw(msg_id)? else {
            return Ok(Outcome::Failed(fail(ErrorClass::Malformed, "raw text missing in the mailbox")));
        };
        // 2. META, then 3. ignore rules before body, identity and handler (US-04)
        let env = match codec::decode_meta(&raw) {
            Ok(env) => env,
            Err(e) => return Ok(Outcome::Failed(fail(e.class, &e.detail))),
        };
        *tag = codec::MsgKind::of(&env.meta).type_tag();
        if let Some(rule) = self.ignore.matching(&env.meta) {
            let reason = format!("ignored:{rule}");
            self.procs.skip(msg_id, &reason, now)?;
            return Ok(Outcome::Skipped(reason));
        }
        let msg = match codec::decode_body(env) {
            Ok(m) => m,
            Err(e) => return Ok(Outcome::Failed(fail(e.class, &e.detail))),
        };
        // 4. identity (INV-9)
        let key = codec::identity(&msg.meta, self.include_day_boundary);
        if let Bind::TakenBy(other) = self.procs.bind_identity(msg_id, &key, now)? {
            let reason = format!("duplicate-of:{other}");
            self.procs.skip(msg_id, &reason, now)?;
            return Ok(Outcome::Skipped(reason));
        }
        // 5.–6. the handler decides; an earlier attempt's applied decision is reused, so a
        // retry after "Redis applied, PostgreSQL failed" emits the same events (I2).
        let decision = match self.flights.applied(msg_id)? {
            Some(d) => d,
            None => {
                let view = self.flights.view(&handlers::flids_of(&msg))?;
                let d = match handlers::decide(&view, &msg, msg_id) {
                    Ok(d) => d,
                    Err(e) => return Ok(Outcome::Failed(fail(ErrorClass::Unsupported, &e.to_string()))),
                };
                // 7. Redis first (I2), then one PostgreSQL transaction.
                self.flights.apply(msg_id, &d.flights, &d)?;
                d
            }
        };
        self.procs.succeed(msg_id, &decision.events, now)?;
        Ok(Outcome::Succeeded { events: decision.events.len() })
    }

    fn record_failure(
        &mut self,
        row: &ProcRow,
        tag: &str,
        f: &Failure,
        now: SystemTime,
    ) -> Result<(), StoreError> {
        self.procs.fail(row.msg_id, f, now)?;
        match f {
            Failure::Retry { class, error, .. } => {
                stats::inc(&self.stats.failed);
                warn!(
                    "failed msg_id={} type={tag} class={class} attempts={} error={error:?}",
                    row.msg_id,
                    row.attempts + 1
                );
            }
            Failure::Dead { class, error } => {
                stats::inc(&self.stats.dead);
                error!("dead msg_id={} type={tag} class={class} error={error:?}", row.msg_id);
            }
        }
        Ok(())
    }
}

pub fn retry_policy(cfg: &Pipeline) -> RetryPolicy {
    RetryPolicy { max_attempts: cfg.max_attempts, backoff: cfg.backoff.clone(), cap: cfg.backoff_cap }
}

#[cfg(test)]
mod tests;
