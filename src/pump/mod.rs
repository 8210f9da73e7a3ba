//! The pump (process thread): the single writer of message state and of Redis flight state.
//! Each round takes the FIFO head and the ready messages behind it (INV-3), runs `processOne`
//! on each in the spec's order (SPEC §4.2), and records all their outcomes in one PostgreSQL
//! transaction. The rules live in [`rules`]; time is the injected clock's, read after each
//! store call whose result it dates: a read may have blocked for seconds, and a backoff or a
//! head's deadline counted from before it would be that much too short (#69).
//!
//! A round is a list of [`Planned`] messages in MSG_ID order, each rewritten in place by the
//! steps, one file each:
//! 1. here: the FIFO's first rows; a head backing off ends the round before anything is read;
//! 2. [`read`]: the raw texts in one mailbox read, every META and body decoded (pure);
//! 3. [`decide`]: the flights the round names (and the journal of decisions an earlier attempt
//!    applied, and whose decision it journals under each identity) in one Redis round trip,
//!    the identity holders in one query, then each message decided in MSG_ID order against an
//!    overlay of the decisions before it, so message k sees what k−1 decided; a daily-plan
//!    snapshot is always a round of its own;
//! 4. [`apply`]: every new decision applied in one Redis script (Redis first, I2), journalled
//!    per message;
//! 5. [`commit`]: every outcome committed in one transaction — on the commit [`lane`] when the
//!    daemon gives the pump one: the next round's steps 1–3 run meanwhile (its head query
//!    leaves the committing round out), and its step 4 waits until this commit has landed, so
//!    nothing reaches Redis ahead of an earlier message's recorded outcome. A round that ends
//!    with a message backing off commits in place: the next round must see that head.
//!
//! Failures (SPEC §4.9): a store that is unavailable aborts the round with nothing charged —
//! the stage stalls and retries, and the journal makes the retry emit the same events. A write
//! the store refuses is charged to the message that caused it: a refused round commit is
//! retried one message at a time to find it, a refused Redis apply one decision at a time.
//! Reads are never a message's fault.

mod apply;
mod commit;
mod decide;
pub mod lane;
mod plan;
mod read;
mod report;
pub mod rules;

/// The log target of every pump line, whichever file says it (operators filter on it).
const LOG: &str = "msgx::pump";

use std::sync::Arc;

use crate::clock::Clock;
use std::time::SystemTime;

use crate::codec::{self, ignore::IgnoreRules};
use crate::config::Pipeline;
use crate::error::StoreError;
use crate::ports::{Fifo, FlightStore, MailboxTexts};
use crate::stage::{Next, RoundReport, Stage};
use crate::stats::Stats;
use commit::Landing;
use lane::{CommitLane, Lane};
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

impl RoundReport for Round {
    fn next(&self) -> Next {
        match self {
            Round::Idle => Next::Idle,
            Round::Wait(t) => Next::At(*t),
            Round::Worked(_) => Next::Now,
        }
    }

    fn progressed(&self) -> bool {
        matches!(self, Round::Worked(_))
    }
}

pub struct Pump<P, M, F> {
    fifo: P,
    texts: M,
    flights: F,
    policy: RetryPolicy,
    ignore: IgnoreRules,
    include_day_boundary: bool,
    batch: usize,
    batch_bytes: u64,
    max_message_bytes: u64,
    max_event_bytes: usize,
    strict: bool,
    /// What this instance's release decodes, and the version its decisions carry (#65).
    rules: Arc<codec::Rulebook>,
    stats: Arc<Stats>,
    /// Journal entries to drop at the next Redis read: their outcomes are in PostgreSQL.
    forget: Vec<i64>,
    /// What the pump has said of unknown names in this run (bounded, #53).
    unknown_names: report::UnknownNames,
    /// The shape a message may have (`msgx.codec.max-*`, #53).
    limits: codec::Limits,
    /// Where a round's commit runs while the next round is read; none: the pump waits.
    lane: Option<Lane>,
    clock: Arc<dyn Clock>,
}

impl<P: Fifo, M: MailboxTexts, F: FlightStore> Stage for Pump<P, M, F> {
    type Round = Round;
    const ID: crate::stage::StageId = crate::stage::StageId::Process;

    fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        Pump::round(self, now)
    }

    fn close(&mut self) {
        if let Err(e) = self.land() {
            log::warn!(target: LOG, "stage=process the last round's commit did not land ({e}); it is read again at the next start");
        }
    }
}

impl<P: Fifo, M: MailboxTexts, F: FlightStore> Pump<P, M, F> {
    pub fn new(
        fifo: P,
        texts: M,
        flights: F,
        cfg: &Pipeline,
        rules: Arc<codec::Rulebook>,
        stats: Arc<Stats>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Pump {
            fifo,
            texts,
            flights,
            policy: rules::retry_policy(cfg),
            ignore: IgnoreRules::new(&cfg.ignore_rules),
            include_day_boundary: cfg.include_day_boundary,
            batch: cfg.process_batch,
            batch_bytes: cfg.process_batch_bytes,
            max_message_bytes: cfg.max_message_bytes,
            max_event_bytes: cfg.max_event_bytes,
            strict: cfg.strict_codec,
            rules,
            stats,
            forget: Vec::new(),
            unknown_names: report::UnknownNames::default(),
            limits: codec::Limits::of(cfg),
            lane: None,
            clock,
        }
    }

    /// Commits on `lane` while the next round is read and decided (the daemon's pump).
    pub fn with_lane(mut self, lane: impl CommitLane + 'static) -> Self {
        self.lane = Some(Lane::new(Box::new(lane)));
        self
    }

    /// One round begun at `started` (see the module documentation for its steps).
    pub fn round(&mut self, started: SystemTime) -> Result<Round, StoreError> {
        let round = self.try_round(started);
        if round.is_err() {
            // Another store failed, not the lane's: what was committing lands now, not after
            // the outage.
            self.land()?;
        }
        round
    }

    fn try_round(&mut self, started: SystemTime) -> Result<Round, StoreError> {
        let committing = self.lane.as_ref().map(Lane::committing).unwrap_or_default();
        let rows = self.fifo.unfinished(self.batch, committing)?;
        let now = self.clock.after(started);
        // The ready prefix: the head and the rows behind it up to the first one backing off.
        let mut ready = 0;
        for row in &rows {
            match head_action(Some(row), now, &self.policy) {
                HeadAction::Wait(t) if ready == 0 => return self.quiet(Round::Wait(t), now),
                HeadAction::Wait(_) | HeadAction::Idle => break,
                HeadAction::Process | HeadAction::Poison(_) => ready += 1,
            }
        }
        if ready == 0 {
            return self.quiet(Round::Idle, now);
        }
        let mut plan = self.read(&rows[..ready], now)?;
        self.decide(&mut plan, self.clock.after(now))?;
        if let Landing::Refused(n) = self.land()? {
            // A message of the last round was charged: the FIFO head moved under this round,
            // which has applied nothing yet and is simply read again.
            return Ok(Round::Worked(n));
        }
        self.apply(&mut plan, self.clock.after(now))?;
        self.commit(plan, self.clock.after(now))
    }

    /// Nothing to read: the commit on its way lands first, then the journal is tidied.
    fn quiet(&mut self, round: Round, now: SystemTime) -> Result<Round, StoreError> {
        match self.land()? {
            Landing::Nothing => {
                self.forget_idle(now)?;
                Ok(round)
            }
            Landing::Recorded => Ok(Round::Worked(0)),
            Landing::Refused(n) => Ok(Round::Worked(n)),
        }
    }
}

#[cfg(test)]
mod tests;
