//! The one loop every stage runs, as a pure step ([`Runner::turn`]): the lease gate, a round
//! at `now`, and what comes of it — when the next round runs, whether the stages downstream
//! have work, which outage to report, when the stage stops. The daemon's stage threads call it
//! around real rounds and real sleeps; the simulator calls it from its scheduler on the fake
//! clock, so both run the same backoff, alerts and lease branch.

use crate::error::Store;
use std::time::{Duration, SystemTime};

use log::error;

use super::{Next, Notice, OutagePolicy, Outages, RoundReport, Stage, StageId, StallBoard};
use crate::clock::{Clock, Mono};
use crate::error::{StoreError, StoreErrorKind};
use crate::lease::{Gate, LeaseGate};
use crate::stats::{self, Stats};

/// The target of the runner's lines: the daemon's, as they always were (operators filter on it).
const LOG: &str = "msgx::daemon";

/// A stage as the runner drives it (object-safe, so a list of different stages can be run).
pub trait Runs {
    /// One round: when the stage wants the next one, whether it made work downstream, and
    /// what it asks of the instance ([`RoundReport::asks`]).
    fn run(&mut self, now: SystemTime) -> Result<(Next, bool, Option<String>), StoreError>;
    /// Held by a condition only a person can clear (see [`Stage::held`]).
    fn held(&self) -> Option<(&'static str, SystemTime)>;
    fn close(&mut self);
}

impl<S: Stage> Runs for S {
    fn run(&mut self, now: SystemTime) -> Result<(Next, bool, Option<String>), StoreError> {
        self.round(now).map(|r| (r.next(), r.progressed(), r.asks()))
    }

    fn held(&self) -> Option<(&'static str, SystemTime)> {
        Stage::held(self)
    }

    fn close(&mut self) {
        Stage::close(self)
    }
}

/// Why a stage stopped on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Halt {
    /// A newer instance holds the lease (PRE-5): exit 1.
    Fenced(String),
    /// A store forgot what it acknowledged (#19, #20): the stores are compared again.
    Forgot(String),
    /// A stage asks the instance for work between two holdings ([`RoundReport::asks`]): every
    /// stage stops, and the lease is kept.
    Asked(String),
}

/// What the runner decided after one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// The next round runs at `wake`, or earlier when a doorbell rings; `ring`: the stages
    /// downstream have something new.
    Again { wake: SystemTime, ring: bool },
    /// The round could not run or failed on a store that is away or refused it: the stage
    /// waits until `wake` (nothing is charged to a message).
    Stalled { wake: SystemTime, error: StoreError },
    /// The stage stops, and with it every stage of the instance.
    Stop(Halt),
}

/// One stage's runner state: its outages.
pub struct Runner {
    stage: StageId,
    outages: Outages,
    idle: Duration,
    policy: OutagePolicy,
}

impl Runner {
    pub fn new(stage: StageId, policy: OutagePolicy, idle: Duration) -> Runner {
        Runner { stage, outages: Outages::new(stage.name(), policy), idle, policy }
    }

    /// One turn: nothing runs while the lease is not confirmed; a round that fails on a store
    /// that is away stalls the stage with the outage rules (SPEC §4.9); fenced and forgot stop
    /// it. The round runs at the clock's reading before it; what comes after — the next wake,
    /// a backoff, an outage's start or end — is dated by the reading after it, so a round that
    /// blocked for a while still waits its whole backoff (#69).
    pub fn turn(
        &mut self,
        stage: &mut dyn Runs,
        gate: &dyn Gate,
        board: &StallBoard,
        stats: &Stats,
        clock: &dyn Clock,
    ) -> Turn {
        let name = self.stage.name();
        let started = clock.now();
        let ran = gate.check().and_then(|()| stage.run(started));
        let now = clock.after(started);
        match ran {
            Ok((_, _, Some(why))) => {
                log::info!(target: LOG, "work asked stage={name}: {why}; every stage stops, and the instance does it under its lease before they start again");
                Turn::Stop(Halt::Asked(why))
            }
            Ok((next, progressed, None)) => {
                for n in self.outages.recovered(now) {
                    log_notice(&n, stats);
                }
                board.set(name, stage.held());
                let wake = match next {
                    Next::Now => now,
                    // Capped, so work made by another process (a replay) is noticed.
                    Next::At(t) => t.min(now + self.idle),
                    Next::Idle => now + self.idle,
                };
                Turn::Again { wake, ring: progressed }
            }
            Err(e) => self.failed(e, gate, board, stats, now),
        }
    }

    /// A turn whose round could not run or failed, read at `now`.
    fn failed(
        &mut self,
        e: StoreError,
        gate: &dyn Gate,
        board: &StallBoard,
        stats: &Stats,
        now: SystemTime,
    ) -> Turn {
        let name = self.stage.name();
        match e {
            e if e.kind == StoreErrorKind::Forgot => {
                gate.forgot();
                error!(target: LOG, "stopped stage={name} {e}: this instance writes nothing more");
                Turn::Stop(Halt::Forgot(e.to_string()))
            }
            e if e.is_fenced() => {
                gate.stale();
                error!(target: LOG, "fenced stage={name} {e}: a newer instance holds the lease; this one stops");
                Turn::Stop(Halt::Fenced(e.to_string()))
            }
            // The lease not confirmed: the lease keeper reports its store's outage once; the
            // stages only wait for it.
            e if e.store == Store::Lease => {
                board.set(name, Some((Store::Lease.name(), now)));
                Turn::Stalled { wake: now + self.policy.retry_in(1), error: e }
            }
            e => {
                let (notices, wait) = self.outages.failed(&e, now);
                for n in &notices {
                    log_notice(n, stats);
                }
                board.set(name, self.outages.stalled_on());
                Turn::Stalled { wake: now + wait, error: e }
            }
        }
    }
}

/// An outage line, and its counters.
pub fn log_notice(n: &Notice, stats: &Stats) {
    match n {
        Notice::Started { .. } => stats::inc(&stats.outages),
        Notice::Ended { down_for, .. } => stats::add(&stats.outage_ms, down_for.as_millis() as u64),
        Notice::StillDown { .. } => {}
    }
    log::log!(target: LOG, n.level(), "{n}");
}

/// The lease keeper's step (PRE-5), shared like [`Runner::turn`]: what the answer to one
/// renewal means. A renewal confirms the gate from the moment it was sent; a newer holder
/// closes it for good and stops the instance; a lease store that forgot stops it too; a lease
/// store that is away is an outage (the gate closes by itself when the last confirmation runs
/// out, and opens again if a late renewal finds the lease still ours).
pub struct Keeper {
    outages: Outages,
    duration: Duration,
}

impl Keeper {
    pub fn new(duration: Duration, outage: OutagePolicy) -> Keeper {
        Keeper { outages: Outages::new(Store::Lease.name(), outage), duration }
    }

    /// What the instance reports with each renewal: the stages stalled on the board, so that
    /// `msgx status` shows them from any machine.
    pub fn status(board: &StallBoard) -> String {
        let stalled: Vec<serde_json::Value> = board
            .snapshot()
            .iter()
            .map(|(stage, store, since)| {
                serde_json::json!({"stage": stage, "store": store, "since_ms": crate::clock::unix_millis(*since)})
            })
            .collect();
        serde_json::json!({ "stalled": stalled }).to_string()
    }

    /// `renewed`: the answer to a renewal sent at `sent` (the monotonic clock), read at `now`.
    pub fn turn(
        &mut self,
        renewed: Result<bool, StoreError>,
        sent: Mono,
        gate: &LeaseGate,
        stats: &Stats,
        now: SystemTime,
    ) -> Option<Halt> {
        let epoch = gate.epoch();
        match renewed {
            Ok(true) => {
                gate.confirm(sent, self.duration);
                for n in self.outages.recovered(now) {
                    log_notice(&n, stats);
                }
                None
            }
            Ok(false) => {
                gate.stale();
                error!(target: LOG, "lease lost epoch={epoch}: a newer instance took it over; this one stops and writes nothing more (PRE-5)");
                Some(Halt::Fenced(format!("lease epoch {epoch} taken over")))
            }
            Err(e) if e.stops() => {
                gate.forgot();
                error!(target: LOG, "stopped stage=lease {e}: this instance writes nothing more");
                Some(Halt::Forgot(e.to_string()))
            }
            Err(e) => {
                for n in self.outages.failed(&e, now).0 {
                    log_notice(&n, stats);
                }
                None
            }
        }
    }
}
