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
    ArchiveCut, ArchivedAs, Claim, Claimant, Fifo, Housekeeping, Intake, LeaseHolder, LeaseStore, MarkLedger,
    Operator, Outbox, OwedMark, ReplaySelection, Replayed, ReplayedEvent, ResendFrom, Resent, RoundRecord,
    StoreResult,
};

/// One `PROC_STATE` row with its backfill columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemProc {
    pub row: ProcRow,
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemEvent {
    pub event: MsgEvent,
    pub state: EventStatus,
    pub error_class: Option<ErrorClass>,
    pub last_error: Option<String>,
    pub sent_at: Option<SystemTime>,
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
}

impl Default for PgState {
    fn default() -> Self {
        PgState {
            procs: BTreeMap::new(),
            events: BTreeMap::new(),
            watermark: 0,
            next_event_id: 0,
            hst: BTreeMap::new(),
            refs: BTreeMap::new(),
            seasons: BTreeMap::new(),
            lease: MemLease::default(),
            refuse_outcome_of: None,
            clock: Arc::new(FakeClock::new()),
            timeline: 0,
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
        row: ProcRow {
            msg_id: r.id,
            state: ProcStatus::Pending,
            attempts: 0,
            next_attempt_at: None,
            error_class: None,
            last_error: None,
            identity_key: None,
            first_failed_at: None,
            type_tag: None,
            received_at: r.received_at,
        },
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

    fn known(&mut self, ids: &[i64]) -> StoreResult<Vec<i64>> {
        self.read(|s| Ok(ids.iter().copied().filter(|id| s.procs.contains_key(id)).collect()))
    }

    fn marked_by_us(&mut self, ids: &[i64]) -> StoreResult<Vec<i64>> {
        self.read(|s| {
            Ok(ids
                .iter()
                .copied()
                .filter(|id| s.procs.get(id).is_some_and(|p| p.backfill_at.is_some()))
                .collect())
        })
    }

    fn identities(&mut self, ids: &[i64]) -> StoreResult<Vec<(i64, String)>> {
        self.read(|s| {
            let mut out: Vec<(i64, String)> =
                ids.iter().filter_map(|id| Some((*id, s.procs.get(id)?.row.identity_key.clone()?))).collect();
            out.sort();
            Ok(out)
        })
    }

    fn watermark(&mut self) -> StoreResult<i64> {
        self.read(|s| Ok(s.watermark))
    }
}

/// The tables a round changes, copied (swapped in whole: all or nothing).
struct Tables {
    procs: BTreeMap<i64, MemProc>,
    events: BTreeMap<i64, MemEvent>,
    refs: BTreeMap<(String, String), (String, SystemTime)>,
    seasons: BTreeMap<String, MemSeason>,
    next_event_id: i64,
}

/// Applies one round to copies of the tables, each outcome as its SQL does (`store::pg`).
fn record_round(s: &PgState, round: &RoundRecord<'_>, now: SystemTime) -> StoreResult<Tables> {
    // The refused value is in the message's success or skip; its failure can be recorded.
    if let Some(bad) = s.refuse_outcome_of {
        if round.succeeded.iter().any(|x| x.msg_id == bad) || round.skipped.iter().any(|x| x.msg_id == bad) {
            return Err(StoreError::rejected(
                Store::Postgres,
                format!("value refused for msg_id={bad} (22021, injected)"),
            ));
        }
    }
    let mut t = Tables {
        procs: s.procs.clone(),
        events: s.events.clone(),
        refs: s.refs.clone(),
        seasons: s.seasons.clone(),
        next_event_id: s.next_event_id,
    };
    let mut round_keys: HashMap<&str, i64> = HashMap::new();
    for x in &round.succeeded {
        t.succeed(s, x, &mut round_keys, now)?;
    }
    for x in &round.skipped {
        t.skip(x, now)?;
    }
    for x in &round.retried {
        t.retry(x, now)?;
    }
    for x in &round.dead {
        t.die(x, now)?;
    }
    Ok(t)
}

impl Tables {
    /// SUCCEEDED: the identity (uk_proc_identity, also within the round), the row, its
    /// references and events.
    fn succeed<'a>(
        &mut self,
        s: &PgState,
        x: &crate::ports::Succeeded<'a>,
        round_keys: &mut HashMap<&'a str, i64>,
        now: SystemTime,
    ) -> StoreResult<()> {
        let crate::ports::Succeeded { msg_id: id, tag, identity, events, references } = *x;
        if planted::on(Bug::IdentityUnchecked) {
            round_keys.clear();
        } else if let Some(other) = round_keys.insert(identity, id) {
            return Err(StoreError::rejected(Store::Postgres, format!("identity {identity} twice in one round: msg_id={other} and {id} (uk_proc_identity, 23505)")));
        }
        if let Some(other) = s
            .procs
            .values()
            .filter(|_| !planted::on(Bug::IdentityUnchecked))
            .find(|o| o.row.identity_key.as_deref() == Some(identity) && o.row.msg_id != id)
        {
            return Err(StoreError::rejected(
                Store::Postgres,
                format!(
                    "identity {identity} is held by msg_id={} (uk_proc_identity, 23505)",
                    other.row.msg_id
                ),
            ));
        }
        let p = unfinished(&mut self.procs, id)?;
        if let Some(t) = tag {
            p.row.type_tag = Some(t.to_string());
        }
        p.row.identity_key = Some(identity.to_string());
        terminal(p, ProcStatus::Succeeded, now);
        self.references(id, references, now);
        for (ordinal, e) in events.iter().enumerate() {
            self.event(id, ordinal, e, now)?;
        }
        Ok(())
    }

    /// A SUCCEEDED message's reference changes: upserts, deletes, a type kept to a key set, a
    /// seasonal plan replaced whole.
    fn references(&mut self, id: i64, references: &[RefChange], now: SystemTime) {
        for r in references {
            match r {
                RefChange::Keep { rtype, keys } => {
                    self.refs.retain(|(t, k), _| *t != *rtype || keys.contains(k))
                }
                RefChange::Upsert { rtype, rkey, payload_json } => {
                    self.refs.insert((rtype.clone(), rkey.clone()), (payload_json.clone(), now));
                }
                RefChange::Delete { rtype, rkey } => {
                    self.refs.remove(&(rtype.clone(), rkey.clone()));
                }
                RefChange::Season { season, airport, start, end, records } => {
                    let plan = MemSeason {
                        airport: airport.clone(),
                        start: start.clone(),
                        end: end.clone(),
                        records: records.iter().cloned().collect(),
                        msg_id: id,
                    };
                    self.seasons.insert(season.clone(), plan);
                }
            }
        }
    }

    /// One outbox event; a KAFKA:schd row is the flight's, reset in place by a newer (or
    /// equal) generation and left alone by an older one.
    fn event(
        &mut self,
        id: i64,
        ordinal: usize,
        e: &crate::domain::NewEvent,
        now: SystemTime,
    ) -> StoreResult<()> {
        let target = Target::parse(&e.target).ok_or_else(|| {
            StoreError::rejected(Store::Postgres, format!("unknown event target {:?}", e.target))
        })?;
        let fresh = |event_id| MemEvent {
            event: MsgEvent {
                event_id,
                msg_id: Some(id),
                target,
                partition_key: e.partition_key.clone(),
                state_version: e.state_version,
                payload_json: e.payload_json.clone(),
                attempts: 0,
                next_attempt_at: None,
                last_attempt_at: None,
                created_at: Some(now),
                // As the real adapter: a KAFKA:schd row is the flight's, not one message's.
                ordinal: (target != Target::KafkaSchd).then_some(ordinal as i32),
            },
            state: EventStatus::Pending,
            error_class: None,
            last_error: None,
            sent_at: None,
        };
        let existing = (target == Target::KafkaSchd)
            .then(|| {
                self.events
                    .values_mut()
                    .find(|x| x.event.target == Target::KafkaSchd && x.event.partition_key == e.partition_key)
            })
            .flatten();
        match existing {
            Some(x) if x.event.state_version <= e.state_version => *x = fresh(x.event.event_id),
            Some(_) => {} // an older generation than the one held: stale
            None => {
                self.next_event_id += 1;
                self.events.insert(self.next_event_id, fresh(self.next_event_id));
            }
        }
        Ok(())
    }

    fn skip(&mut self, x: &crate::ports::Skipped<'_>, now: SystemTime) -> StoreResult<()> {
        let p = unfinished(&mut self.procs, x.msg_id)?;
        if let Some(t) = x.tag {
            p.row.type_tag = Some(t.to_string());
        }
        p.row.last_error = Some(x.reason.render());
        terminal(p, ProcStatus::Skipped, now);
        Ok(())
    }

    /// FAILED: one attempt more, the deadline anchor as the pump moved it, the backoff.
    fn retry(&mut self, x: &crate::ports::Retried<'_>, now: SystemTime) -> StoreResult<()> {
        let p = unfinished(&mut self.procs, x.msg_id)?;
        if let Some(t) = x.tag {
            p.row.type_tag = Some(t.to_string());
        }
        p.row.attempts += 1;
        p.row.first_failed_at = Some(x.failing_since);
        p.row.state = ProcStatus::Failed;
        p.row.error_class = Some(x.class);
        p.row.last_error = Some(x.error.to_string());
        p.row.next_attempt_at = Some(x.next_attempt_at);
        p.updated_at = now;
        Ok(())
    }

    /// DEAD, with its backfill intent (INV-8).
    fn die(&mut self, x: &crate::ports::Died<'_>, now: SystemTime) -> StoreResult<()> {
        let p = unfinished(&mut self.procs, x.msg_id)?;
        if let Some(t) = x.tag {
            p.row.type_tag = Some(t.to_string());
        }
        p.row.attempts += 1;
        p.row.first_failed_at.get_or_insert(now);
        p.row.error_class = Some(x.class);
        p.row.last_error = Some(x.error.to_string());
        terminal(p, ProcStatus::Dead, now);
        if planted::on(Bug::IntentForgotten) {
            p.backfill_next_at = None;
        }
        Ok(())
    }
}

impl Fifo for MemPg {
    fn unfinished(&mut self, limit: usize, skip: &[i64]) -> StoreResult<Vec<ProcRow>> {
        self.read(|s| {
            Ok(s.procs
                .values()
                .filter(|p| p.row.state.is_unfinished() && !skip.contains(&p.row.msg_id))
                .take(limit)
                .map(|p| p.row.clone())
                .collect())
        })
    }

    fn identity_holders(&mut self, keys: &[String]) -> StoreResult<HashMap<String, i64>> {
        // ARCHIVED shadow rows keep their identity too (INV-9 after archive).
        self.read(|s| {
            Ok(s.procs
                .values()
                .filter_map(|p| {
                    p.row
                        .identity_key
                        .as_ref()
                        .filter(|k| keys.contains(k))
                        .map(|k| (k.clone(), p.row.msg_id))
                })
                .collect())
        })
    }

    fn commit(&mut self, round: &RoundRecord<'_>, now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            let t = record_round(s, round, now)?;
            s.procs = t.procs;
            s.events = t.events;
            s.refs = t.refs;
            s.seasons = t.seasons;
            s.next_event_id = t.next_event_id;
            Ok(())
        })
    }
}

impl MarkLedger for MemPg {
    fn due_backfills(&mut self, now: SystemTime, limit: usize) -> StoreResult<Vec<OwedMark>> {
        self.read(|s| {
            let mut due: Vec<_> = s
                .procs
                .values()
                .filter(|p| {
                    p.row.state.is_terminal() && p.backfill_at.is_none() && p.backfill_abandoned_at.is_none()
                })
                .filter_map(|p| {
                    p.backfill_next_at.filter(|t| *t <= now).map(|t| (t, p.row.msg_id, p.backfill_attempts))
                })
                .collect();
            due.sort();
            Ok(due
                .into_iter()
                .take(limit)
                .map(|(_, msg_id, attempts)| OwedMark { msg_id, attempts })
                .collect())
        })
    }

    fn backfill_settled(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            for id in ids {
                if let Some(p) = s.procs.get_mut(id).filter(|p| p.backfill_at.is_none()) {
                    p.backfill_at = Some(now);
                    p.backfill_next_at = None;
                    p.updated_at = now;
                }
            }
            Ok(())
        })
    }

    fn backfill_retry(&mut self, ids: &[i64], error: &str, next_at: &[SystemTime]) -> StoreResult<()> {
        self.write(|s| {
            for (id, next) in ids.iter().zip(next_at) {
                // Only a mark still owed (as PostgreSQL's `backfill_at IS NULL`). A retry is no
                // lifecycle step: UPDATED_AT keeps the terminal time (the overdue anchor).
                if let Some(p) = s.procs.get_mut(id).filter(|p| p.backfill_at.is_none()) {
                    p.backfill_attempts += 1;
                    p.backfill_error = Some(error.to_string());
                    p.backfill_next_at = Some(*next);
                }
            }
            Ok(())
        })
    }

    fn backfill_abandon(&mut self, ids: &[i64], reason: &str, now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            for id in ids {
                if let Some(p) = s.procs.get_mut(id).filter(|p| p.backfill_at.is_none()) {
                    p.backfill_abandoned_at = Some(now);
                    p.backfill_abandoned_reason = Some(reason.to_string());
                    p.backfill_next_at = None;
                    p.updated_at = now;
                }
            }
            Ok(())
        })
    }

    fn backfill_overdue(&mut self, owed_before: SystemTime, limit: usize) -> StoreResult<Vec<i64>> {
        self.read(|s| {
            Ok(s.procs
                .values()
                .filter(|p| {
                    p.row.state.is_terminal()
                        && p.backfill_at.is_none()
                        && p.backfill_abandoned_at.is_none()
                        && p.backfill_next_at.is_some()
                        && p.backfill_attempts > 0
                        && p.updated_at <= owed_before
                })
                .take(limit)
                .map(|p| p.row.msg_id)
                .collect())
        })
    }
}

/// The ids a replay selection names, at most `limit`.
fn selected<V>(
    map: &BTreeMap<i64, V>,
    sel: &ReplaySelection,
    limit: usize,
    replayable: impl Fn(&V) -> bool,
    class: impl Fn(&V) -> Option<ErrorClass>,
) -> Vec<i64> {
    match sel {
        ReplaySelection::Ids(ids) => ids.iter().copied().take(limit).collect(),
        ReplaySelection::Range(a, b) => {
            map.range(*a..=*b).filter(|(_, v)| replayable(v)).map(|(id, _)| *id).take(limit).collect()
        }
        ReplaySelection::Class(c) => map
            .iter()
            .filter(|(_, v)| replayable(v) && class(v) == Some(*c))
            .map(|(id, _)| *id)
            .take(limit)
            .collect(),
    }
}

impl MemPg {
    /// A replay: the rows `sel` names (by range or class those `listed`), each back to PENDING
    /// when `verdict` allows it.
    fn replay_where(
        &mut self,
        sel: &ReplaySelection,
        limit: usize,
        now: SystemTime,
        listed: impl Fn(&MemProc) -> bool,
        verdict: impl Fn(&MemProc) -> Result<(), String>,
    ) -> StoreResult<Vec<Replayed>> {
        self.session_write(|s| {
            let ids = selected(&s.procs, sel, limit, &listed, |p| p.row.error_class);
            Ok(ids
                .into_iter()
                .map(|id| match s.procs.get_mut(&id) {
                    None => Replayed { msg_id: id, was: None, verdict: Err("no such message".into()) },
                    Some(p) => {
                        let was = (p.row.state, p.row.error_class);
                        let verdict = verdict(p);
                        if verdict.is_ok() {
                            p.row.state = ProcStatus::Pending;
                            p.row.attempts = 0;
                            p.row.next_attempt_at = None;
                            p.row.first_failed_at = None;
                            p.updated_at = now;
                            p.dismissed_at = None;
                            p.dismissed_note = None;
                            if p.backfill_at.is_none() {
                                // Not terminal any more: no mark is owed until it is (INV-8), and an
                                // abandoned mark is owed again when it ends (C-16).
                                p.backfill_next_at = None;
                                p.backfill_abandoned_at = None;
                                p.backfill_abandoned_reason = None;
                                p.backfill_attempts = 0;
                            }
                        }
                        Replayed { msg_id: id, was: Some(was), verdict }
                    }
                })
                .collect())
        })
    }
}

impl Operator for MemPg {
    fn reset_watermark(&mut self, to: i64, _now: SystemTime) -> StoreResult<Result<i64, String>> {
        self.session_write(|s| {
            let above: Vec<i64> = s.procs.range(to.saturating_add(1)..).map(|(id, _)| *id).collect();
            if let Some(max) = above.last() {
                return Ok(Err(crate::ports::watermark_refusal(to, above.len() as i64, *max)));
            }
            Ok(Ok(std::mem::replace(&mut s.watermark, to)))
        })
    }

    fn row(&mut self, msg_id: i64) -> StoreResult<Option<ProcRow>> {
        self.read(|s| Ok(s.procs.get(&msg_id).map(|p| p.row.clone())))
    }

    fn season(&mut self, season: &str) -> StoreResult<Vec<String>> {
        self.read(|s| {
            Ok(s.seasons.get(season).map(|x| x.records.keys().cloned().collect()).unwrap_or_default())
        })
    }

    fn replay(&mut self, sel: &ReplaySelection, limit: usize, now: SystemTime) -> StoreResult<Vec<Replayed>> {
        self.replay_where(
            sel,
            limit,
            now,
            |p| matches!(p.row.state, ProcStatus::Failed | ProcStatus::Dead),
            |p| replay::verdict(p.row.state, p.row.error_class),
        )
    }

    fn replay_skipped(
        &mut self,
        sel: &ReplaySelection,
        limit: usize,
        now: SystemTime,
    ) -> StoreResult<Vec<Replayed>> {
        let skipped = |p: &MemProc| replay::skipped_verdict(p.row.state, p.row.last_error.as_deref());
        self.replay_where(sel, limit, now, |p| skipped(p).is_ok(), skipped)
    }

    fn reconcile(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>> {
        self.session_write(|s| {
            Ok(ids
                .iter()
                .map(|id| {
                    let verdict = match s.procs.get_mut(id) {
                        None => Err("no such message".to_string()),
                        Some(p) if p.backfill_abandoned_at.is_none() => {
                            Err("its mark was not abandoned; nothing to reconcile".to_string())
                        }
                        Some(p) if p.backfill_reconciled_at.is_some() => {
                            Err("already reconciled".to_string())
                        }
                        Some(p) => {
                            p.backfill_reconciled_at = Some(now);
                            p.backfill_reconciled_note = Some(note.to_string());
                            p.updated_at = now;
                            Ok(())
                        }
                    };
                    (*id, verdict)
                })
                .collect())
        })
    }

    fn dismiss(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>> {
        self.session_write(|s| {
            Ok(ids
                .iter()
                .map(|id| {
                    let verdict = match s.procs.get_mut(id) {
                        Some(p) if p.row.state == ProcStatus::Dead && p.dismissed_at.is_none() => {
                            p.dismissed_at = Some(now);
                            p.dismissed_note = Some(note.to_string());
                            p.updated_at = now;
                            Ok(())
                        }
                        other => Err(replay::dismiss_refusal(
                            other.map(|p| (p.row.state, p.dismissed_at.is_some())),
                        )),
                    };
                    (*id, verdict)
                })
                .collect())
        })
    }

    fn resend(&mut self, target: Target, from: ResendFrom, apply: bool) -> StoreResult<Resent> {
        self.session_write(|s| {
            let mut out = Resent::default();
            for (id, e) in s.events.iter_mut() {
                let after = match from {
                    ResendFrom::Event(first) => *id >= first,
                    ResendFrom::Since(t) => e.sent_at.is_some_and(|at| at >= t),
                };
                if e.event.target != target || e.state != EventStatus::Sent || !after {
                    continue;
                }
                out.events += 1;
                out.first.get_or_insert(*id);
                out.last = Some(*id);
                if apply {
                    e.state = EventStatus::Pending;
                    e.event.attempts = 0;
                    e.event.next_attempt_at = None;
                    e.event.last_attempt_at = None;
                    e.sent_at = None;
                }
            }
            Ok(out)
        })
    }

    fn replay_events(&mut self, sel: &ReplaySelection, limit: usize) -> StoreResult<Vec<ReplayedEvent>> {
        self.session_write(|s| {
            let ids = selected(&s.events, sel, limit, |e| e.state == EventStatus::Dead, |e| e.error_class);
            Ok(ids
                .into_iter()
                .map(|id| match s.events.get_mut(&id) {
                    None => ReplayedEvent { event_id: id, was: None, verdict: Err("no such event".into()) },
                    Some(e) => {
                        let was = Some((e.event.target.as_str().to_string(), e.state.as_str().to_string()));
                        let verdict = replay::event_verdict(e.state);
                        if verdict.is_ok() {
                            e.state = EventStatus::Pending;
                            e.event.attempts = 0;
                            e.event.next_attempt_at = None;
                        }
                        ReplayedEvent { event_id: id, was, verdict }
                    }
                })
                .collect())
        })
    }
}

impl Outbox for MemPg {
    fn pending(&mut self, target: Target, limit: usize) -> StoreResult<Vec<MsgEvent>> {
        let fence = self.1;
        self.read(|s| {
            // A stale instance reads nothing to send (the PostgreSQL query checks the epoch too).
            if fence.is_some_and(|e| e != s.lease.epoch) {
                return Ok(Vec::new());
            }
            Ok(s.events
                .values()
                .filter(|e| e.state == EventStatus::Pending && e.event.target == target)
                .take(limit)
                .map(|e| e.event.clone())
                .collect())
        })
    }

    fn mark_sent(&mut self, sent: &[(i64, i64)], now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            for (id, version) in sent {
                if let Some(e) = s
                    .events
                    .get_mut(id)
                    .filter(|e| e.state == EventStatus::Pending && e.event.state_version == *version)
                {
                    e.state = EventStatus::Sent;
                    e.sent_at = Some(now);
                }
            }
            Ok(())
        })
    }

    fn retry(&mut self, ids: &[i64], class: ErrorClass, error: &str, next_at: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            for id in ids {
                if let Some(e) = s.events.get_mut(id).filter(|e| e.state == EventStatus::Pending) {
                    e.event.attempts += 1;
                    e.event.next_attempt_at = Some(next_at);
                    e.error_class = Some(class);
                    e.last_error = Some(error.to_string());
                }
            }
            Ok(())
        })
    }

    fn dead(&mut self, ids: &[i64], class: ErrorClass, error: &str) -> StoreResult<()> {
        self.write(|s| {
            for id in ids {
                if let Some(e) = s.events.get_mut(id).filter(|e| e.state == EventStatus::Pending) {
                    e.event.attempts += 1;
                    e.state = EventStatus::Dead;
                    e.error_class = Some(class);
                    e.last_error = Some(error.to_string());
                }
            }
            Ok(())
        })
    }

    fn started(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            for id in ids {
                if let Some(e) = s.events.get_mut(id).filter(|e| e.state == EventStatus::Pending) {
                    e.event.last_attempt_at = Some(now);
                }
            }
            Ok(())
        })
    }
}

fn archivable(p: &MemProc, cut: &ArchiveCut) -> bool {
    // Settled: the mark written, or abandoned and reconciled by a person (C-16).
    let settled =
        p.backfill_at.is_some() || (p.backfill_abandoned_at.is_some() && p.backfill_reconciled_at.is_some());
    let kept = match p.row.state {
        ProcStatus::Succeeded | ProcStatus::Skipped => true,
        ProcStatus::Dead => p.dismissed_at.is_some() || p.updated_at < cut.dead_before,
        _ => false,
    };
    kept && settled && p.updated_at < cut.settled_before
}

impl Housekeeping for MemPg {
    fn delete_sent_events(&mut self, sent_before: SystemTime, limit: usize) -> StoreResult<usize> {
        self.write(|s| {
            let ids: Vec<i64> = s
                .events
                .values()
                .filter(|e| e.state == EventStatus::Sent && e.sent_at.is_some_and(|t| t < sent_before))
                .take(limit)
                .map(|e| e.event.event_id)
                .collect();
            for id in &ids {
                s.events.remove(id);
            }
            Ok(ids.len())
        })
    }

    fn archive_candidates(&mut self, cut: &ArchiveCut, limit: usize) -> StoreResult<Vec<i64>> {
        self.read(|s| {
            Ok(s.procs.values().filter(|p| archivable(p, cut)).take(limit).map(|p| p.row.msg_id).collect())
        })
    }

    fn archive_one(
        &mut self,
        msg_id: i64,
        cut: &ArchiveCut,
        now: SystemTime,
    ) -> StoreResult<Option<ArchivedAs>> {
        self.write(|s| {
            let Some(p) = s.procs.get_mut(&msg_id).filter(|p| archivable(p, cut)) else {
                return Ok(None); // re-checked: no longer a candidate, nothing kept
            };
            let undealt = p.row.state == ProcStatus::Dead && p.dismissed_at.is_none();
            let mut copy = p.clone();
            copy.archived_at = Some(now);
            s.hst.insert(msg_id, copy);
            p.row = ProcRow {
                msg_id,
                state: ProcStatus::Archived,
                attempts: 0,
                next_attempt_at: None,
                error_class: None,
                last_error: None,
                identity_key: p.row.identity_key.take(),
                first_failed_at: None,
                type_tag: None,
                received_at: None,
            };
            p.updated_at = now;
            p.received_at = None;
            p.backfill_at = None;
            p.backfill_next_at = None;
            p.backfill_attempts = 0;
            p.backfill_error = None;
            p.archived_at = Some(now);
            p.dismissed_at = None;
            p.dismissed_note = None;
            Ok(Some(if undealt { ArchivedAs::DeadUndealt } else { ArchivedAs::Settled }))
        })
    }
}

fn lease_holder(l: &MemLease, now: SystemTime) -> LeaseHolder {
    LeaseHolder {
        holder: l.holder.clone(),
        host: Some(l.host.clone()).filter(|h| !h.is_empty()),
        pid: (l.pid > 0).then_some(l.pid as i32),
        epoch: l.epoch,
        since: l.acquired_at,
        renewed_at: l.acquired_at,
        expires_at: l.expires_at,
        free: l.holder.is_none() || l.expires_at.is_none_or(|t| t < now),
        status: l.status.clone(),
    }
}

impl crate::ports::StateAudit for MemPg {
    fn known_max(&mut self) -> StoreResult<i64> {
        self.read(|s| Ok(s.procs.keys().next_back().copied().unwrap_or(0)))
    }

    fn unknown(&mut self, ids: &[i64]) -> StoreResult<Vec<i64>> {
        self.read(|s| Ok(ids.iter().copied().filter(|m| !s.procs.contains_key(m)).collect()))
    }

    fn succeeded_above(&mut self, after: i64, limit: usize) -> StoreResult<Vec<i64>> {
        self.read(|s| {
            let ok = |p: &MemProc| p.row.state == ProcStatus::Succeeded;
            let mut ids: Vec<i64> = s
                .procs
                .range(after + 1..)
                .chain(s.hst.range(after + 1..))
                .filter(|(_, p)| ok(p))
                .map(|(m, _)| *m)
                .collect();
            ids.sort_unstable();
            ids.truncate(limit);
            Ok(ids)
        })
    }

    fn succeeded_last(&mut self, limit: usize) -> StoreResult<Vec<i64>> {
        self.read(|s| {
            let mut ids: Vec<i64> = s
                .procs
                .iter()
                .rev()
                .filter(|(_, p)| p.row.state == ProcStatus::Succeeded)
                .take(limit)
                .map(|(m, _)| *m)
                .collect();
            ids.reverse();
            Ok(ids)
        })
    }

    fn newest_succeeded_of(&mut self, tags: &[String]) -> StoreResult<Option<i64>> {
        self.read(|s| {
            Ok(s.procs
                .values()
                .chain(s.hst.values())
                .filter(|p| p.row.state == ProcStatus::Succeeded)
                .filter(|p| p.row.type_tag.as_ref().is_some_and(|t| tags.contains(t)))
                .map(|p| p.row.msg_id)
                .max())
        })
    }

    fn newest_write(&mut self) -> StoreResult<Option<SystemTime>> {
        self.read(|s| Ok(s.procs.values().rev().take(1000).map(|p| p.updated_at).max()))
    }

    fn events_of(&mut self, ids: &[i64]) -> StoreResult<Vec<(i64, crate::domain::NewEvent)>> {
        self.read(|s| Ok(MemPg::outbox_of(s, ids)))
    }
}

impl MemPg {
    /// As `StateAudit::events_of` (the twin keeps no event type: every one is an upsert).
    fn outbox_of(s: &PgState, ids: &[i64]) -> Vec<(i64, crate::domain::NewEvent)> {
        let mut out: Vec<(i64, Option<i32>, i64, crate::domain::NewEvent)> = s
            .events
            .values()
            .filter_map(|e| {
                let m = e.event.msg_id.filter(|m| ids.contains(m))?;
                let ev = crate::domain::NewEvent {
                    target: e.event.target.as_str().to_string(),
                    partition_key: e.event.partition_key.clone(),
                    event_type: "UPSERT".into(),
                    state_version: e.event.state_version,
                    payload_json: e.event.payload_json.clone(),
                };
                Some((m, e.event.ordinal, e.event.event_id, ev))
            })
            .collect();
        out.sort_by_key(|(m, o, id, _)| (*m, o.unwrap_or(i32::MAX), *id));
        out.into_iter().map(|(m, _, _, e)| (m, e)).collect()
    }
}

impl LeaseStore for MemPg {
    fn claim_above(&mut self, me: &Claimant, duration: Duration, floor: i64) -> StoreResult<Claim> {
        self.session_write(|s| {
            let now = s.clock.now();
            let before = lease_holder(&s.lease, now);
            if !before.free && before.holder.as_deref() != Some(me.id.as_str()) {
                return Ok(Claim::HeldBy(before));
            }
            s.lease = MemLease {
                epoch: s.lease.epoch.max(floor) + 1,
                holder: Some(me.id.clone()),
                host: me.host.clone(),
                pid: me.pid,
                acquired_at: Some(now),
                expires_at: Some(now + duration),
                status: "{}".into(),
            };
            let previous = before.holder.is_some().then_some(before);
            Ok(Claim::Acquired { epoch: s.lease.epoch, previous })
        })
    }

    fn renew(&mut self, me: &Claimant, epoch: i64, duration: Duration, status: &str) -> StoreResult<bool> {
        self.session_write(|s| {
            if s.lease.epoch != epoch || s.lease.holder.as_deref() != Some(me.id.as_str()) {
                return Ok(false);
            }
            s.lease.expires_at = Some(s.clock.now() + duration);
            s.lease.status = status.to_string();
            Ok(true)
        })
    }

    fn release(&mut self, me: &Claimant, epoch: i64) -> StoreResult<()> {
        self.session_write(|s| {
            if s.lease.epoch == epoch && s.lease.holder.as_deref() == Some(me.id.as_str()) {
                s.lease.holder = None;
                s.lease.expires_at = Some(s.clock.now());
                s.lease.status = "{}".into();
            }
            Ok(())
        })
    }

    fn holder(&mut self) -> StoreResult<LeaseHolder> {
        self.read(|s| Ok(lease_holder(&s.lease, s.clock.now())))
    }
}

#[cfg(test)]
mod conformance {
    crate::conformance_tests!((super::MemPg::new(), ()));
}
