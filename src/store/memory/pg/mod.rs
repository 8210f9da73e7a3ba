//! Own PostgreSQL, in memory: `PROC_STATE`, `MSG_EVENT`, `REF_MASTER`, `PROC_STATE_HST`, the
//! watermark and the lease row.

use crate::error::Store;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{fault_controls, Shared};
use crate::clock::{Clock, FakeClock};
use crate::domain::{EventStatus, InboundRow, MsgEvent, ProcRow, ProcStatus, Target};
use crate::error::{ErrorClass, StoreError};
use crate::handlers::RefChange;
use crate::planted::{self, Bug};
use crate::policy::replay;
use crate::ports::{
    ArchiveCut, ArchivedAs, Claim, Claimant, Fifo, Housekeeping, Intake, Landed, LeaseHolder, LeaseStore,
    MarkLedger, Operator, Outbox, OwedMark, ReplaySelection, Replayed, ReplayedEvent, ResendFrom, Resent,
    RoundRecord, Sent, StoreResult,
};

/// One `PROC_STATE` row with its backfill columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemProc {
    pub row: ProcRow,
    /// When the poller enqueued it (`ENQUEUED_AT`).
    pub enqueued_at: SystemTime,
    pub updated_at: SystemTime,
    pub received_at: Option<SystemTime>,
    pub backfill_next_at: Option<SystemTime>,
    pub backfill_at: Option<SystemTime>,
    pub backfill_attempts: u32,
    pub backfill_error: Option<String>,
    pub backfill_abandoned_at: Option<SystemTime>,
    pub backfill_abandoned_reason: Option<String>,
    pub archived_at: Option<SystemTime>,
    pub backfill_reconciled_at: Option<SystemTime>,
    pub backfill_reconciled_note: Option<String>,
    /// A DEAD message a person dismissed (`msgx dismiss`): it leaves the dead-letter queue.
    pub dismissed_at: Option<SystemTime>,
    pub dismissed_note: Option<String>,
    /// What Redis acknowledged of its decision (`REDIS_RECORD`, #37).
    pub redis_record: Option<crate::domain::RedisRecord>,
    /// `PROC_STATE.RULES_VERSION` (#52).
    pub rules_version: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemEvent {
    pub event: MsgEvent,
    pub state: EventStatus,
    pub error_class: Option<ErrorClass>,
    pub last_error: Option<String>,
    pub sent_at: Option<SystemTime>,
    /// Where it landed (#40).
    pub landed: Option<crate::ports::Landed<'static>>,
}

impl MemEvent {
    /// A new outbox row, PENDING.
    pub(super) fn pending(event: MsgEvent) -> MemEvent {
        MemEvent {
            event,
            state: EventStatus::Pending,
            error_class: None,
            last_error: None,
            sent_at: None,
            landed: None,
        }
    }

    /// A message's event `e` as a new outbox row, PENDING: its place `ordinal` among the
    /// message's events.
    pub(super) fn of(
        event_id: i64,
        msg_id: i64,
        e: &crate::domain::NewEvent,
        ordinal: Option<i32>,
        now: SystemTime,
    ) -> MemEvent {
        MemEvent::pending(MsgEvent {
            event_id,
            msg_id: Some(msg_id),
            target: e.target,
            partition_key: e.partition_key.clone(),
            state_version: e.state_version,
            payload_json: e.payload_json.clone(),
            attempts: 0,
            next_attempt_at: None,
            last_attempt_at: None,
            created_at: Some(now),
            ordinal,
        })
    }
}

/// A season of the seasonal plan (`SEASON_PLAN`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemSeason {
    pub airport: Option<String>,
    pub start: Option<String>,
    pub end: Option<String>,
    /// Flight key → record JSON.
    pub records: BTreeMap<String, String>,
    pub msg_id: i64,
}

/// The lease row (`MSGX_LEASE`), as the fence sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemLease {
    pub epoch: i64,
    pub holder: Option<String>,
    pub host: String,
    pub pid: u32,
    pub acquired_at: Option<SystemTime>,
    pub expires_at: Option<SystemTime>,
    /// What the holder last reported (stalled stages), as JSON.
    pub status: String,
}

#[derive(Debug, Clone)]
pub struct PgState {
    pub procs: BTreeMap<i64, MemProc>,
    pub events: BTreeMap<i64, MemEvent>,
    /// The highest MSG_ID whose events a delete took (`OUTBOX_PRUNED`, V018's trigger).
    pub events_pruned: i64,
    pub watermark: i64,
    next_event_id: i64,
    /// PROC_STATE_HST: archived rows as they were.
    pub hst: BTreeMap<i64, MemProc>,
    /// REF_MASTER: (RTYPE, RKEY) → (payload, refreshed at).
    pub refs: BTreeMap<(String, String), (String, SystemTime)>,
    /// SEASON_PLAN: season → its records.
    pub seasons: BTreeMap<String, MemSeason>,
    pub lease: MemLease,
    /// A message whose outcome the twin refuses to record (a value PostgreSQL would refuse):
    /// a commit that includes it fails as rejected.
    pub refuse_outcome_of: Option<i64>,
    /// The database's clock (lease expiry).
    pub clock: Arc<dyn Clock>,
    /// Bumped by a rollback ([`MemPg::roll_back_to`]).
    pub timeline: u64,
    /// CONSISTENCY_HEAL: the heals recorded, oldest first.
    pub heals: Vec<crate::ports::HealRecord>,
    /// REQ_TRACK: the requests to the AODB by REQ_ID (#41).
    pub requests: BTreeMap<i64, crate::requests::Request>,
    next_req_id: i64,
    /// RULES_APPLY: the `msgx rules apply` jobs by JOB_ID (#65).
    pub rules_jobs: BTreeMap<i64, crate::ports::RulesJob>,
}

impl Default for PgState {
    fn default() -> Self {
        PgState {
            procs: BTreeMap::new(),
            events: BTreeMap::new(),
            events_pruned: 0,
            watermark: 0,
            next_event_id: 0,
            hst: BTreeMap::new(),
            refs: BTreeMap::new(),
            seasons: BTreeMap::new(),
            lease: MemLease::default(),
            refuse_outcome_of: None,
            clock: Arc::new(FakeClock::new()),
            timeline: 0,
            heals: Vec::new(),
            requests: BTreeMap::new(),
            next_req_id: 0,
            rules_jobs: BTreeMap::new(),
        }
    }
}

impl std::fmt::Debug for dyn Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({:?})", self.now())
    }
}

/// `PROC_STATE`, `MSG_EVENT` and the watermark, in memory. A handle made with
/// [`MemPg::fenced`] writes only while the lease's epoch is its own (PRE-5).
#[derive(Debug, Clone, Default)]
pub struct MemPg(pub(crate) Shared<PgState>, Option<i64>, u64);

fault_controls!(MemPg);

impl MemPg {
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle on the same state whose every write checks the lease epoch, as the PostgreSQL
    /// adapter's guard does.
    pub fn fenced(&self, epoch: i64) -> MemPg {
        MemPg(self.0.clone(), Some(epoch), self.0.lock().state.timeline)
    }

    /// A handle as a new process's session is: judged against nothing it saw before, so it
    /// works on the server as it is now (after a rollback, too).
    pub fn session(&self) -> MemPg {
        MemPg(self.0.clone(), None, self.0.lock().state.timeline)
    }

    /// What a replica promoted with a lost tail, or a restore, does: the state goes back to `s`
    /// on a new timeline, and every handle made before answers `forgot` (as the failover
    /// witness makes every session of a process that saw the lost commits do, #19).
    pub fn roll_back_to(&self, mut s: PgState) {
        let mut cell = self.0.lock();
        s.timeline = cell.state.timeline.max(s.timeline) + 1;
        s.clock = cell.state.clock.clone();
        cell.state = s;
    }

    /// The database's clock (for the lease's expiry).
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        self.0.lock().state.clock = clock;
    }

    /// Every commit that includes `msg_id` is refused (rejected), as PostgreSQL refuses a
    /// value it cannot store.
    pub fn refuse_outcome_of(&self, msg_id: Option<i64>) {
        self.0.lock().state.refuse_outcome_of = msg_id;
    }

    /// A copy of the state, for assertions.
    pub fn inspect<R>(&self, f: impl FnOnce(&PgState) -> R) -> R {
        f(&self.0.lock().state)
    }

    /// Changes the state directly (a test's or the simulator's hand, not msgx's).
    pub fn tamper<R>(&self, f: impl FnOnce(&mut PgState) -> R) -> R {
        f(&mut self.0.lock().state)
    }

    /// Records outcomes as the pump's commit does (a test's shortcut).
    pub fn record(&self, settles: &[crate::ports::Settle], now: SystemTime) -> StoreResult<()> {
        self.clone().commit(&RoundRecord::of(settles), now)
    }

    /// Enqueues rows as the poller does, moving the watermark to the highest (a test's shortcut).
    pub fn arrive(&self, ids: &[i64], now: SystemTime) {
        let rows: Vec<InboundRow> = ids.iter().map(|&id| InboundRow { id, received_at: None }).collect();
        self.clone().enqueue(&rows, ids.iter().max().copied(), now).expect("enqueue");
    }

    /// The whole state, as a backup or a replica at this moment holds it (#20).
    pub fn state(&self) -> PgState {
        self.inspect(Clone::clone)
    }

    /// Puts `s` in place of the state: a restore, or a replica promoted with a lost tail.
    pub fn replace_state(&self, s: PgState) {
        self.0.lock().state = s;
    }

    pub fn proc(&self, msg_id: i64) -> Option<MemProc> {
        self.inspect(|s| s.procs.get(&msg_id).cloned())
    }

    /// A write through the fence: refused once a newer lease holder exists.
    fn write<R>(&self, f: impl FnOnce(&mut PgState) -> StoreResult<R>) -> StoreResult<R> {
        let fence = self.1;
        self.session_write(|s| {
            if let Some(epoch) = fence {
                if s.lease.epoch != epoch {
                    return Err(StoreError::fenced(
                        Store::Postgres,
                        format!(
                            "lease epoch is {}, this instance holds {epoch}: a newer holder exists",
                            s.lease.epoch
                        ),
                    ));
                }
            }
            f(s)
        })
    }

    fn read<R>(&self, f: impl FnOnce(&PgState) -> StoreResult<R>) -> StoreResult<R> {
        let seen = self.2;
        self.0.read(Store::Postgres, |s| {
            lost_commits(s, seen)?;
            f(s)
        })
    }

    /// A write that is not fenced (the lease itself, an operator's command).
    fn session_write<R>(&self, f: impl FnOnce(&mut PgState) -> StoreResult<R>) -> StoreResult<R> {
        let seen = self.2;
        self.0.write(Store::Postgres, |s| {
            lost_commits(s, seen)?;
            f(s)
        })
    }
}

/// The witness: a handle made before a rollback finds the server behind what it saw.
fn lost_commits(s: &PgState, seen: u64) -> StoreResult<()> {
    if seen < s.timeline {
        return Err(StoreError::forgot(
            Store::Postgres,
            format!("lost commits: the server is on timeline {} behind what this process saw", s.timeline),
        ));
    }
    Ok(())
}

fn terminal(p: &mut MemProc, state: ProcStatus, now: SystemTime) {
    debug_assert!(state.is_terminal());
    p.row.state = state;
    p.row.next_attempt_at = None;
    p.updated_at = now;
    // INV-8: the backfill intent is written with the terminal state.
    p.backfill_next_at = Some(now);
}

fn unfinished(procs: &mut BTreeMap<i64, MemProc>, id: i64) -> StoreResult<&mut MemProc> {
    let p =
        procs.get_mut(&id).ok_or_else(|| StoreError::rejected(Store::Postgres, format!("no msg_id={id}")))?;
    if p.row.state.is_unfinished() {
        Ok(p)
    } else {
        Err(StoreError::rejected(
            Store::Postgres,
            format!(
                "msg_id={id} is {}, not unfinished (INV-3 guard); nothing of the round was recorded",
                p.row.state.as_str()
            ),
        ))
    }
}

fn new_proc(r: &InboundRow, now: SystemTime) -> MemProc {
    MemProc {
        row: ProcRow::pending(r.id, r.received_at),
        enqueued_at: now,
        updated_at: now,
        received_at: r.received_at,
        backfill_next_at: None,
        backfill_at: None,
        backfill_attempts: 0,
        backfill_error: None,
        backfill_abandoned_at: None,
        backfill_abandoned_reason: None,
        archived_at: None,
        backfill_reconciled_at: None,
        backfill_reconciled_note: None,
        dismissed_at: None,
        dismissed_note: None,
        redis_record: None,
        rules_version: None,
    }
}

impl Intake for MemPg {
    fn enqueue(
        &mut self,
        rows: &[InboundRow],
        watermark: Option<i64>,
        now: SystemTime,
    ) -> StoreResult<Vec<i64>> {
        self.write(|s| {
            let mut new = Vec::new();
            for r in rows {
                s.procs.entry(r.id).or_insert_with(|| {
                    new.push(r.id);
                    new_proc(r, now)
                });
            }
            if let Some(w) = watermark {
                s.watermark = w;
            }
            new.sort_unstable();
            Ok(new)
        })
    }

    fn held(&mut self, ids: &[i64]) -> StoreResult<Vec<crate::ports::Held>> {
        self.read(|s| {
            let mut out: Vec<crate::ports::Held> = ids
                .iter()
                .filter_map(|id| {
                    let p = s.procs.get(id)?;
                    let (marked, identity) = (p.backfill_at.is_some(), p.row.identity_key.clone());
                    Some(crate::ports::Held { msg_id: *id, marked, identity })
                })
                .collect();
            // As the server answers `= ANY`: each row once, by MSG_ID.
            out.sort_by_key(|h| h.msg_id);
            out.dedup_by_key(|h| h.msg_id);
            Ok(out)
        })
    }

    fn watermark(&mut self) -> StoreResult<i64> {
        self.read(|s| Ok(s.watermark))
    }
}

mod audit;
mod housekeeping;
mod lease;
mod ledger;
mod lineage;
mod operator;
mod outbox;
mod requests;
mod round;
mod rules;

#[cfg(test)]
mod conformance {
    crate::conformance_tests!((super::MemPg::new(), ()));
}
