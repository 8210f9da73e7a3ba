//! One topology for the daemon and the simulator: every stage of an active instance built from
//! one set of stores ([`Stores`]), in [`StageId::ALL`]'s order. The daemon builds them from the
//! real adapters (each stage on its own connections) and runs each on a thread; the simulator
//! builds them from the twins (with its planted bugs wrapped around the ports) and runs them
//! step by step — the same constructors, policies and settings either way.

use std::sync::Arc;

use crate::backfill::Backfill;
use crate::clock::Clock;
use crate::codec::Rulebook;
use crate::config::Config;
use crate::consistency::stage::Sentinel;
use crate::consistency::{FlightsSide, MailboxSide, PgSide};
use crate::dispatch::{self, Dispatcher, OutboundDispatcher};
use crate::error::StoreError;
use crate::ingress::Poller;
use crate::jobs::Jobs;
use crate::lease::Gate;
use crate::policy::retry::retry_policy;
use crate::ports::{
    Fifo, FlightStore, Housekeeping, Intake, MailboxMarks, MailboxScan, MailboxTexts, MarkLedger, Outbound,
    Outbox, Producer, Requests,
};
use crate::pump::lane::CommitLane;
use crate::pump::Pump;
use crate::stage::runner::Runs;
use crate::stage::StageId;
use crate::stats::Stats;

/// Where an active instance's stages get their stores: one store per role and stage, made when
/// the stage is built (fenced by the instance's epoch where the store can be fenced).
pub trait Stores {
    type Intake: Intake + 'static;
    type Scan: MailboxScan + MailboxTexts + 'static;
    type Fifo: Fifo + 'static;
    type Texts: MailboxTexts + 'static;
    type Flights: FlightStore + 'static;
    type Lane: CommitLane + 'static;
    type Outbox: Outbox + 'static;
    type Producer: Producer + 'static;
    type Outbound: Outbound + 'static;
    type Ledger: MarkLedger + 'static;
    type Marks: MailboxMarks + 'static;
    type Housekeeping: Housekeeping + Requests + 'static;
    type Audit: PgSide + 'static;
    type MailboxAudit: MailboxSide + 'static;
    type FlightAudit: FlightsSide + 'static;

    /// The poller's: own PostgreSQL's intake and the mailbox it scans.
    fn poll(&mut self) -> Result<(Self::Intake, Self::Scan), StoreError>;
    /// The pump's: the FIFO, the texts, the flights (starting from the token the consistency
    /// pass read), and the commit lane if it commits on one.
    #[allow(clippy::type_complexity)]
    fn process(&mut self)
        -> Result<(Self::Fifo, Self::Texts, Self::Flights, Option<Self::Lane>), StoreError>;
    fn dispatch(&mut self) -> Result<(Self::Outbox, Self::Producer), StoreError>;
    fn outbound(&mut self) -> Result<(Self::Outbox, Self::Outbound), StoreError>;
    fn backfill(&mut self) -> Result<(Self::Ledger, Self::Marks), StoreError>;
    fn jobs(&mut self) -> Result<Self::Housekeeping, StoreError>;
    #[allow(clippy::type_complexity)]
    fn sentinel(&mut self) -> Result<(Self::Audit, Self::MailboxAudit, Self::FlightAudit), StoreError>;
}

/// Every stage of an active instance, typed, so that each can move to its own thread.
pub struct Stages<S: Stores> {
    pub poll: Poller<S::Intake, S::Scan>,
    pub process: Pump<S::Fifo, S::Texts, S::Flights>,
    pub dispatch: Dispatcher<S::Outbox, S::Producer>,
    pub outbound: OutboundDispatcher<S::Outbox, S::Outbound>,
    pub backfill: Backfill<S::Ledger, S::Marks>,
    pub jobs: Jobs<S::Housekeeping>,
    pub sentinel: Sentinel<S::Audit, S::MailboxAudit, S::FlightAudit>,
}

/// Builds every stage from `stores`, with the configuration's policies and the instance's
/// rules (`rules`: what the pump and the sentinel decode, #65); the stages that write
/// where no fence reaches ask `gate`; the poller reads `clock` after the calls whose results
/// it dates (#69).
pub fn stages<S: Stores>(
    stores: &mut S,
    cfg: &Config,
    rules: &Arc<Rulebook>,
    gate: Arc<dyn Gate>,
    stats: &Arc<Stats>,
    clock: Arc<dyn Clock>,
) -> Result<Stages<S>, StoreError> {
    let p = &cfg.pipeline;
    let (intake, scan) = stores.poll()?;
    let (fifo, texts, flights, lane) = stores.process()?;
    let mut pump = Pump::new(fifo, texts, flights, p, rules.clone(), stats.clone(), clock.clone());
    if let Some(lane) = lane {
        pump = pump.with_lane(lane);
    }
    let (outbox, producer) = stores.dispatch()?;
    let settings = dispatch::Settings::from_config(cfg);
    let (events, outbound) = stores.outbound()?;
    let (ledger, marks) = stores.backfill()?;
    let (audit, mailbox_audit, flight_audit) = stores.sentinel()?;
    Ok(Stages {
        poll: Poller::new(intake, scan, p, stats.clone(), clock.clone()),
        process: pump,
        dispatch: Dispatcher::new(
            outbox,
            producer,
            retry_policy(p),
            settings,
            gate.clone(),
            stats.clone(),
            clock.clone(),
        ),
        outbound: OutboundDispatcher::new(
            events,
            outbound,
            retry_policy(p),
            p.dispatch_batch,
            gate.clone(),
            stats.clone(),
            clock.clone(),
        ),
        backfill: Backfill::new(ledger, marks, p, gate, stats.clone()),
        jobs: Jobs::new(stores.jobs()?, cfg, stats.clone()),
        sentinel: Sentinel::new(audit, mailbox_audit, flight_audit, p, rules.clone(), stats.clone()),
    })
}

impl<S: Stores> Stages<S> {
    /// The stages as one list in [`StageId::ALL`]'s order (the simulator's slots).
    pub fn into_list(self) -> Vec<(StageId, Box<dyn Runs>)> {
        let list: Vec<(StageId, Box<dyn Runs>)> = vec![
            (StageId::Poll, Box::new(self.poll) as Box<dyn Runs>),
            (StageId::Process, Box::new(self.process)),
            (StageId::Dispatch, Box::new(self.dispatch)),
            (StageId::Outbound, Box::new(self.outbound)),
            (StageId::Backfill, Box::new(self.backfill)),
            (StageId::Jobs, Box::new(self.jobs)),
            (StageId::Sentinel, Box::new(self.sentinel)),
        ];
        assert!(list.iter().map(|(id, _)| *id).eq(StageId::ALL), "the list is the topology, in order");
        list
    }
}
