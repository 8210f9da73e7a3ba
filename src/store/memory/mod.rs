//! In-memory adapters of every port, for unit tests and `msgx decode`-style dry runs. They
//! keep the same rules as the real adapters (conditional writes, FIFO order, unique
//! identities), and each can be told to fail its next calls to exercise the INFRA paths.
//! Clones share state, so a test can hand one to a stage and inspect the other.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use crate::domain::{EventStatus, InboundRow, MailboxRow, MsgEvent, ProcRow, ProcStatus, Target};
use crate::error::{ErrorClass, StoreError};
use crate::handlers::{Decision, FlightView, Need, RefChange, View};
use crate::ports::{
    Archived, Failure, FlightStore, Housekeeping, Mailbox, Mark, Outbound, Outbox, Outcome, Prepared,
    ProcStore, Producer, Record, ReplaySelection, Replayed, ReplayedEvent, Settle, StoreResult,
};
use crate::pump::replay;

/// Shared state plus an injectable failure budget.
#[derive(Debug, Default)]
struct Cell<T> {
    state: T,
    /// Calls to let through before `fail_next` starts counting.
    pass_first: u32,
    fail_next: u32,
}

#[derive(Debug)]
struct Shared<T>(Arc<Mutex<Cell<T>>>);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T: Default> Default for Shared<T> {
    fn default() -> Self {
        Shared(Arc::new(Mutex::new(Cell { state: T::default(), pass_first: 0, fail_next: 0 })))
    }
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, Cell<T>> {
        self.0.lock().expect("memory store poisoned")
    }

    /// Runs `f` on the state unless a failure is due.
    fn with<R>(&self, store: &'static str, f: impl FnOnce(&mut T) -> StoreResult<R>) -> StoreResult<R> {
        let mut cell = self.lock();
        if cell.pass_first > 0 {
            cell.pass_first -= 1;
        } else if cell.fail_next > 0 {
            cell.fail_next -= 1;
            return Err(StoreError::new(store, "injected failure"));
        }
        f(&mut cell.state)
    }
}

// ---------------------------------------------------------------- own PostgreSQL

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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemEvent {
    pub event: MsgEvent,
    pub state: EventStatus,
    pub error_class: Option<ErrorClass>,
    pub last_error: Option<String>,
    pub sent_at: Option<SystemTime>,
}

#[derive(Debug, Default)]
pub struct PgState {
    pub procs: BTreeMap<i64, MemProc>,
    pub events: BTreeMap<i64, MemEvent>,
    pub watermark: i64,
    next_event_id: i64,
    fail_commits: u32,
    /// PROC_STATE_HST: archived rows as they were.
    pub hst: BTreeMap<i64, MemProc>,
    /// REF_MASTER: (RTYPE, RKEY) → (payload, refreshed at).
    pub refs: BTreeMap<(String, String), (String, SystemTime)>,
}

/// `PROC_STATE`, `MSG_EVENT` and the watermark, in memory.
#[derive(Debug, Clone, Default)]
pub struct MemPg(Shared<PgState>);

impl MemPg {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `n` calls fail with an INFRA-class store error.
    pub fn fail_next(&self, n: u32) {
        self.0.lock().fail_next = n;
    }

    /// Lets `pass` calls through, then fails the `n` after them.
    pub fn fail_later(&self, pass: u32, n: u32) {
        let mut c = self.0.lock();
        c.pass_first = pass;
        c.fail_next = n;
    }

    /// Makes the next `n` calls of `commit` fail (reads keep working).
    pub fn fail_on_commit(&self, n: u32) {
        self.0.lock().state.fail_commits = n;
    }

    /// A copy of the state, for assertions.
    pub fn inspect<R>(&self, f: impl FnOnce(&PgState) -> R) -> R {
        f(&self.0.lock().state)
    }

    pub fn proc(&self, msg_id: i64) -> Option<MemProc> {
        self.inspect(|s| s.procs.get(&msg_id).cloned())
    }
}

fn terminal(p: &mut MemProc, state: ProcStatus, now: SystemTime) {
    debug_assert!(state.is_terminal());
    p.row.state = state;
    p.row.next_attempt_at = None;
    p.updated_at = now;
    // INV-8: the backfill intent is written with the terminal state.
    p.backfill_next_at = Some(now);
}

fn unfinished(p: &MemProc, msg_id: i64) -> StoreResult<()> {
    if p.row.state.is_unfinished() {
        Ok(())
    } else {
        Err(StoreError::new(
            "postgres",
            format!("msg_id={msg_id} is {}, not unfinished", p.row.state.as_str()),
        ))
    }
}

impl ProcStore for MemPg {
    fn known(&mut self, ids: &[i64]) -> StoreResult<Vec<i64>> {
        self.0.with("postgres", |s| Ok(ids.iter().copied().filter(|id| s.procs.contains_key(id)).collect()))
    }

    fn enqueue(
        &mut self,
        rows: &[InboundRow],
        watermark: Option<i64>,
        now: SystemTime,
    ) -> StoreResult<Vec<i64>> {
        self.0.with("postgres", |s| {
            let mut new = Vec::new();
            for r in rows {
                s.procs.entry(r.id).or_insert_with(|| {
                    new.push(r.id);
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
                    }
                });
            }
            if let Some(w) = watermark {
                s.watermark = w;
            }
            new.sort_unstable();
            Ok(new)
        })
    }

    fn watermark(&mut self) -> StoreResult<i64> {
        self.0.with("postgres", |s| Ok(s.watermark))
    }

    fn row(&mut self, msg_id: i64) -> StoreResult<Option<ProcRow>> {
        self.0.with("postgres", |s| Ok(s.procs.get(&msg_id).map(|p| p.row.clone())))
    }

    fn unfinished(&mut self, limit: usize) -> StoreResult<Vec<ProcRow>> {
        self.0.with("postgres", |s| {
            Ok(s.procs
                .values()
                .filter(|p| p.row.state.is_unfinished())
                .take(limit)
                .map(|p| p.row.clone())
                .collect())
        })
    }

    fn identity_holder(&mut self, key: &str) -> StoreResult<Option<i64>> {
        // ARCHIVED shadow rows keep their identity too (INV-9 after archive).
        self.0.with("postgres", |s| {
            Ok(s.procs.values().find(|p| p.row.identity_key.as_deref() == Some(key)).map(|p| p.row.msg_id))
        })
    }

    fn commit(&mut self, settles: &[Settle], now: SystemTime) -> StoreResult<()> {
        self.0.with("postgres", |s| {
            if s.fail_commits > 0 {
                s.fail_commits -= 1;
                return Err(StoreError::new("postgres", "injected commit failure"));
            }
            // All or nothing: work on copies, swap them in at the end.
            let mut procs = s.procs.clone();
            let mut events = s.events.clone();
            let mut refs = s.refs.clone();
            let mut next_event_id = s.next_event_id;
            for st in settles {
                let id = st.msg_id;
                let p = procs
                    .get_mut(&id)
                    .ok_or_else(|| StoreError::new("postgres", format!("no msg_id={id}")))?;
                unfinished(p, id)?;
                if st.type_tag.is_some() {
                    p.row.type_tag = st.type_tag.clone();
                }
                match &st.outcome {
                    Outcome::Succeeded { identity, events: new, references } => {
                        for r in references {
                            match r {
                                RefChange::Keep { rtype, keys } => {
                                    refs.retain(|(t, k), _| *t != *rtype || keys.contains(k))
                                }
                                RefChange::Upsert { rtype, rkey, payload_json } => {
                                    refs.insert((rtype.clone(), rkey.clone()), (payload_json.clone(), now));
                                }
                                RefChange::Delete { rtype, rkey } => {
                                    refs.remove(&(rtype.clone(), rkey.clone()));
                                }
                            }
                        }
                        if let Some(other) = s.procs.values().find(|o| {
                            o.row.identity_key.as_deref() == Some(identity.as_str()) && o.row.msg_id != id
                        }) {
                            return Err(StoreError::new(
                                "postgres",
                                format!(
                                    "identity {identity} is held by msg_id={} (uk_proc_identity)",
                                    other.row.msg_id
                                ),
                            ));
                        }
                        p.row.identity_key = Some(identity.clone());
                        terminal(p, ProcStatus::Succeeded, now);
                        for e in new {
                            let target = Target::parse(&e.target).ok_or_else(|| {
                                StoreError::new("postgres", format!("unknown event target {:?}", e.target))
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
                                },
                                state: EventStatus::Pending,
                                error_class: None,
                                last_error: None,
                                sent_at: None,
                            };
                            // KAFKA:schd: one row per flight, reset in place by a newer generation.
                            let existing = (target == Target::KafkaSchd)
                                .then(|| {
                                    events.values_mut().find(|x| {
                                        x.event.target == Target::KafkaSchd
                                            && x.event.partition_key == e.partition_key
                                    })
                                })
                                .flatten();
                            match existing {
                                Some(x) if x.event.state_version <= e.state_version => {
                                    *x = fresh(x.event.event_id)
                                }
                                Some(_) => {} // an older generation than the one held: stale
                                None => {
                                    next_event_id += 1;
                                    events.insert(next_event_id, fresh(next_event_id));
                                }
                            }
                        }
                    }
                    Outcome::Skipped { reason } => {
                        p.row.last_error = Some(reason.clone());
                        terminal(p, ProcStatus::Skipped, now);
                    }
                    Outcome::Failed(f) => {
                        p.row.attempts += 1;
                        p.row.first_failed_at.get_or_insert(now);
                        match f {
                            Failure::Retry { class, error, next_attempt_at } => {
                                p.row.state = ProcStatus::Failed;
                                p.row.error_class = Some(*class);
                                p.row.last_error = Some(error.clone());
                                p.row.next_attempt_at = Some(*next_attempt_at);
                                p.updated_at = now;
                            }
                            Failure::Dead { class, error } => {
                                p.row.error_class = Some(*class);
                                p.row.last_error = Some(error.clone());
                                terminal(p, ProcStatus::Dead, now);
                            }
                        }
                    }
                }
            }
            s.procs = procs;
            s.events = events;
            s.refs = refs;
            s.next_event_id = next_event_id;
            Ok(())
        })
    }

    fn replay(&mut self, sel: &ReplaySelection, limit: usize, now: SystemTime) -> StoreResult<Vec<Replayed>> {
        self.0.with("postgres", |s| {
            let ids: Vec<i64> = match sel {
                ReplaySelection::Ids(ids) => ids.iter().copied().take(limit).collect(),
                ReplaySelection::Range(a, b) => s
                    .procs
                    .range(*a..=*b)
                    .filter(|(_, p)| matches!(p.row.state, ProcStatus::Failed | ProcStatus::Dead))
                    .map(|(id, _)| *id)
                    .take(limit)
                    .collect(),
                ReplaySelection::Class(c) => s
                    .procs
                    .values()
                    .filter(|p| {
                        matches!(p.row.state, ProcStatus::Failed | ProcStatus::Dead)
                            && p.row.error_class == Some(*c)
                    })
                    .map(|p| p.row.msg_id)
                    .take(limit)
                    .collect(),
            };
            Ok(ids
                .into_iter()
                .map(|id| match s.procs.get_mut(&id) {
                    None => Replayed { msg_id: id, was: None, verdict: Err("no such message".into()) },
                    Some(p) => {
                        let was = (p.row.state, p.row.error_class);
                        let verdict = replay::verdict(p.row.state, p.row.error_class);
                        if verdict.is_ok() {
                            p.row.state = ProcStatus::Pending;
                            p.row.attempts = 0;
                            p.row.next_attempt_at = None;
                            p.row.first_failed_at = None;
                            p.updated_at = now;
                            if p.backfill_at.is_none() {
                                // Not terminal any more: no mark is owed until it is (INV-8).
                                p.backfill_next_at = None;
                            }
                        }
                        Replayed { msg_id: id, was: Some(was), verdict }
                    }
                })
                .collect())
        })
    }

    fn due_backfills(&mut self, now: SystemTime, limit: usize) -> StoreResult<Vec<i64>> {
        self.0.with("postgres", |s| {
            let mut due: Vec<_> = s
                .procs
                .values()
                .filter(|p| {
                    p.row.state.is_terminal() && p.backfill_at.is_none() && p.backfill_abandoned_at.is_none()
                })
                .filter_map(|p| p.backfill_next_at.filter(|t| *t <= now).map(|t| (t, p.row.msg_id)))
                .collect();
            due.sort();
            Ok(due.into_iter().take(limit).map(|(_, id)| id).collect())
        })
    }

    fn backfill_settled(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.0.with("postgres", |s| {
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

    fn backfill_retry(&mut self, id: i64, error: &str, next_at: SystemTime) -> StoreResult<u32> {
        self.0.with("postgres", |s| {
            let p =
                s.procs.get_mut(&id).ok_or_else(|| StoreError::new("postgres", format!("no msg_id={id}")))?;
            // A retry is no lifecycle step: UPDATED_AT keeps the terminal time (overdue anchor).
            p.backfill_attempts += 1;
            p.backfill_error = Some(error.to_string());
            p.backfill_next_at = Some(next_at);
            Ok(p.backfill_attempts)
        })
    }

    fn backfill_abandon(&mut self, ids: &[i64], reason: &str, now: SystemTime) -> StoreResult<()> {
        self.0.with("postgres", |s| {
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
        self.0.with("postgres", |s| {
            Ok(s.procs
                .values()
                .filter(|p| {
                    p.row.state.is_terminal()
                        && p.backfill_at.is_none()
                        && p.backfill_abandoned_at.is_none()
                        && p.backfill_next_at.is_some()
                        && p.updated_at <= owed_before
                })
                .take(limit)
                .map(|p| p.row.msg_id)
                .collect())
        })
    }

    fn reconcile(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>> {
        self.0.with("postgres", |s| {
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

    fn backfill_attempts(&mut self, id: i64) -> StoreResult<u32> {
        self.0.with("postgres", |s| Ok(s.procs.get(&id).map(|p| p.backfill_attempts).unwrap_or(0)))
    }
}

impl Outbox for MemPg {
    fn pending(&mut self, target: Target, limit: usize) -> StoreResult<Vec<MsgEvent>> {
        self.0.with("postgres", |s| {
            Ok(s.events
                .values()
                .filter(|e| e.state == EventStatus::Pending && e.event.target == target)
                .take(limit)
                .map(|e| e.event.clone())
                .collect())
        })
    }

    fn mark_sent(&mut self, sent: &[(i64, i64)], now: SystemTime) -> StoreResult<()> {
        self.0.with("postgres", |s| {
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
        self.0.with("postgres", |s| {
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
        self.0.with("postgres", |s| {
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
        self.0.with("postgres", |s| {
            for id in ids {
                if let Some(e) = s.events.get_mut(id).filter(|e| e.state == EventStatus::Pending) {
                    e.event.last_attempt_at = Some(now);
                }
            }
            Ok(())
        })
    }

    fn replay_events(&mut self, sel: &ReplaySelection, limit: usize) -> StoreResult<Vec<ReplayedEvent>> {
        self.0.with("postgres", |s| {
            let ids: Vec<i64> = match sel {
                ReplaySelection::Ids(ids) => ids.iter().copied().take(limit).collect(),
                ReplaySelection::Range(a, b) => s
                    .events
                    .range(*a..=*b)
                    .filter(|(_, e)| e.state == EventStatus::Dead)
                    .map(|(id, _)| *id)
                    .take(limit)
                    .collect(),
                ReplaySelection::Class(c) => s
                    .events
                    .values()
                    .filter(|e| e.state == EventStatus::Dead && e.error_class == Some(*c))
                    .map(|e| e.event.event_id)
                    .take(limit)
                    .collect(),
            };
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

fn archivable(p: &MemProc, settled_before: SystemTime) -> bool {
    // Settled: the mark written, or abandoned and reconciled by a person (C-16).
    let settled =
        p.backfill_at.is_some() || (p.backfill_abandoned_at.is_some() && p.backfill_reconciled_at.is_some());
    p.row.state.is_terminal() && settled && p.updated_at < settled_before
}

impl Housekeeping for MemPg {
    fn delete_sent_events(&mut self, sent_before: SystemTime, limit: usize) -> StoreResult<usize> {
        self.0.with("postgres", |s| {
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

    fn archive(
        &mut self,
        settled_before: SystemTime,
        limit: usize,
        now: SystemTime,
    ) -> StoreResult<Archived> {
        self.0.with("postgres", |s| {
            let ids: Vec<i64> = s
                .procs
                .values()
                .filter(|p| archivable(p, settled_before))
                .take(limit)
                .map(|p| p.row.msg_id)
                .collect();
            let mut report = Archived::default();
            for id in ids {
                let p = s.procs.get_mut(&id).expect("listed above");
                let mut copy = p.clone();
                copy.archived_at = Some(now);
                s.hst.insert(id, copy);
                p.row = ProcRow {
                    msg_id: id,
                    state: ProcStatus::Archived,
                    attempts: 0,
                    next_attempt_at: None,
                    error_class: None,
                    last_error: None,
                    identity_key: p.row.identity_key.take(),
                    first_failed_at: None,
                    type_tag: None,
                };
                p.updated_at = now;
                p.received_at = None;
                p.backfill_at = None;
                p.backfill_next_at = None;
                p.backfill_attempts = 0;
                p.backfill_error = None;
                p.archived_at = Some(now);
                report.archived += 1;
            }
            Ok(report)
        })
    }
}

/// The outbound mailbox `COUTMSGS`, in memory.
#[derive(Debug, Clone, Default)]
pub struct MemOutbound(Shared<Vec<(i64, String, String, SystemTime)>>);

impl MemOutbound {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn fail_next(&self, n: u32) {
        self.0.lock().fail_next = n;
    }

    /// (routing id, text) of every row, in insert order.
    pub fn rows(&self) -> Vec<(String, String)> {
        self.0.lock().state.iter().map(|(_, r, x, _)| (r.clone(), x.clone())).collect()
    }
}

impl Outbound for MemOutbound {
    fn insert(&mut self, routing_id: &str, xml: &str, at: SystemTime) -> StoreResult<i64> {
        self.0.with("mailbox", |rows| {
            let id = rows.len() as i64 + 1;
            rows.push((id, routing_id.to_string(), xml.to_string(), at));
            Ok(id)
        })
    }

    fn find(&mut self, routing_id: &str, xml: &str, since: SystemTime) -> StoreResult<Option<i64>> {
        self.0.with("mailbox", |rows| {
            Ok(rows
                .iter()
                .find(|(_, r, x, at)| r == routing_id && x == xml && *at >= since)
                .map(|(id, ..)| *id))
        })
    }
}

// ---------------------------------------------------------------- shared mailbox

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemRow {
    pub raw: Option<String>,
    pub status: String,
    pub processed_at: Option<SystemTime>,
    /// Allocated but not committed: invisible to readers (PRE-2).
    pub uncommitted: bool,
}

#[derive(Debug, Default)]
pub struct MailboxState {
    pub rows: BTreeMap<i64, MemRow>,
    pub processed_status: String,
}

#[derive(Debug, Clone, Default)]
pub struct MemMailbox(Shared<MailboxState>);

impl MemMailbox {
    pub fn new() -> Self {
        let m = Self::default();
        m.0.lock().state.processed_status = "PROCESSED".into();
        m
    }

    pub fn insert(&self, id: i64, raw: Option<&str>) {
        let row = MemRow {
            raw: raw.map(str::to_string),
            status: "VALID".into(),
            processed_at: None,
            uncommitted: false,
        };
        self.0.lock().state.rows.insert(id, row);
    }

    /// A row whose ID is allocated but whose transaction has not committed (PRE-2).
    pub fn insert_uncommitted(&self, id: i64, raw: &str) {
        self.insert(id, Some(raw));
        self.0.lock().state.rows.get_mut(&id).expect("just inserted").uncommitted = true;
    }

    /// Commits a row inserted with [`MemMailbox::insert_uncommitted`].
    pub fn commit_row(&self, id: i64) {
        if let Some(r) = self.0.lock().state.rows.get_mut(&id) {
            r.uncommitted = false;
        }
    }

    pub fn remove(&self, id: i64) {
        self.0.lock().state.rows.remove(&id);
    }

    pub fn row(&self, id: i64) -> Option<MemRow> {
        self.0.lock().state.rows.get(&id).cloned()
    }

    pub fn fail_next(&self, n: u32) {
        self.0.lock().fail_next = n;
    }

    /// Marks a row as another system would.
    pub fn mark_externally(&self, id: i64, at: SystemTime) {
        if let Some(r) = self.0.lock().state.rows.get_mut(&id) {
            r.processed_at = Some(at);
            r.status = "DONE-ELSEWHERE".into();
        }
    }
}

impl Mailbox for MemMailbox {
    fn rows(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<MailboxRow>> {
        self.0.with("mailbox", |s| {
            if from > to {
                return Ok(Vec::new()); // as SQL's BETWEEN answers
            }
            Ok(s.rows
                .range(from..=to)
                .filter(|(_, r)| !r.uncommitted)
                .take(limit)
                .map(|(id, r)| MailboxRow {
                    id: *id,
                    received_at: None,
                    wanted: r.processed_at.is_none() && r.status == "VALID",
                })
                .collect())
        })
    }

    fn unmarked(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<InboundRow>> {
        let rows = self.rows(from, to, usize::MAX)?;
        Ok(rows.into_iter().filter(|r| r.wanted).take(limit).map(|r| r.inbound()).collect())
    }

    fn insert(&mut self, raw: &str, _at: SystemTime) -> StoreResult<i64> {
        self.0.with("mailbox", |s| {
            let id = s.rows.keys().next_back().copied().unwrap_or(0) + 1;
            s.rows.insert(
                id,
                MemRow {
                    raw: Some(raw.to_string()),
                    status: "VALID".into(),
                    processed_at: None,
                    uncommitted: false,
                },
            );
            Ok(id)
        })
    }

    fn raws(&mut self, ids: &[i64]) -> StoreResult<HashMap<i64, String>> {
        self.0.with("mailbox", |s| {
            Ok(ids.iter().filter_map(|id| s.rows.get(id)?.raw.clone().map(|r| (*id, r))).collect())
        })
    }

    fn mark(&mut self, ids: &[i64], at: SystemTime) -> StoreResult<Vec<Mark>> {
        self.0.with("mailbox", |s| {
            let status = s.processed_status.clone();
            Ok(ids
                .iter()
                .map(|id| match s.rows.get_mut(id) {
                    None => Mark::Missing,
                    Some(r) if r.processed_at.is_some() => Mark::AlreadyMarked,
                    Some(r) => {
                        r.processed_at = Some(at);
                        r.status = status.clone();
                        Mark::Written
                    }
                })
                .collect())
        })
    }
}

// ---------------------------------------------------------------- Redis flights

#[derive(Debug, Default)]
pub struct FlightState {
    pub flights: FlightView,
    pub applied: BTreeMap<i64, Decision>,
    /// FLID by SODT (`yyyyMMddHHmm`): the daily plan's index for snapshot windows.
    pub sodt: BTreeMap<String, i64>,
    /// The plan's generation and the message that last advanced it.
    pub generation: (i64, i64),
}

#[derive(Debug, Clone, Default)]
pub struct MemFlights(Shared<FlightState>);

impl MemFlights {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn fail_next(&self, n: u32) {
        self.0.lock().fail_next = n;
    }

    pub fn flight(&self, flid: &str) -> Option<crate::handlers::Flight> {
        self.0.lock().state.flights.get(flid).cloned()
    }

    /// (generation, message id that last advanced it).
    pub fn generation(&self) -> (i64, i64) {
        self.0.lock().state.generation
    }

    pub fn applied_ids(&self) -> Vec<i64> {
        self.0.lock().state.applied.keys().copied().collect()
    }
}

impl FlightStore for MemFlights {
    fn prepare(&mut self, msg_id: i64, need: &Need) -> StoreResult<Prepared> {
        self.0.with("redis", |s| {
            if let Some(d) = s.applied.get(&msg_id) {
                return Ok(Prepared::Applied(d.clone()));
            }
            let flights =
                need.flids.iter().filter_map(|f| s.flights.get(f).map(|v| (f.clone(), v.clone()))).collect();
            let window = match need.window {
                Some((a, b)) => {
                    let mut w: Vec<(i64, String)> = s
                        .sodt
                        .iter()
                        .filter(|(_, k)| **k >= a && **k <= b)
                        .map(|(f, k)| (*k, f.clone()))
                        .collect();
                    w.sort();
                    w.into_iter().map(|(_, f)| f).collect()
                }
                None => Vec::new(),
            };
            Ok(Prepared::Fresh(View { flights, window }))
        })
    }

    fn apply(&mut self, msg_id: i64, decision: &Decision) -> StoreResult<()> {
        self.0.with("redis", |s| {
            // The same rules as the Redis script: a snapshot older than (or equal to) the last
            // one applied changes nothing.
            if decision.snapshot && s.generation.1 >= msg_id {
                return Ok(());
            }
            for c in &decision.flights {
                if c.delete {
                    s.flights.remove(&c.flid);
                    s.sodt.remove(&c.flid);
                }
                if !c.set.is_empty() || !c.clear.is_empty() {
                    let f = s.flights.entry(c.flid.clone()).or_default();
                    for (k, v) in &c.set {
                        f.insert(k.clone(), v.clone());
                    }
                    for k in &c.clear {
                        f.remove(k);
                    }
                    if f.is_empty() {
                        s.flights.remove(&c.flid);
                    }
                }
                if let Some(k) = c.sodt {
                    s.sodt.insert(c.flid.clone(), k);
                }
            }
            if decision.snapshot {
                s.generation = (s.generation.0 + 1, msg_id);
            }
            s.applied.insert(msg_id, decision.clone());
            Ok(())
        })
    }

    fn forget(&mut self, msg_ids: &[i64]) -> StoreResult<()> {
        self.0.with("redis", |s| {
            for id in msg_ids {
                s.applied.remove(id);
            }
            Ok(())
        })
    }
}

// ---------------------------------------------------------------- Kafka

#[derive(Debug, Default)]
pub struct ProducerState {
    pub delivered: Vec<Record>,
}

/// A producer that delivers to a list; with failures due, a whole send fails (as a broker
/// outage does).
#[derive(Debug, Clone, Default)]
pub struct MemProducer(Shared<ProducerState>);

impl MemProducer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn fail_next(&self, n: u32) {
        self.0.lock().fail_next = n;
    }

    pub fn delivered(&self) -> Vec<Record> {
        self.0.lock().state.delivered.clone()
    }
}

impl Producer for MemProducer {
    fn send(&mut self, records: &[Record]) -> Vec<Result<(), StoreError>> {
        let res = self.0.with("kafka", |s| {
            s.delivered.extend(records.iter().cloned());
            Ok(())
        });
        match res {
            Ok(()) => records.iter().map(|_| Ok(())).collect(),
            Err(e) => records.iter().map(|_| Err(StoreError::new("kafka", &e.detail))).collect(),
        }
    }
}

#[cfg(test)]
mod conformance {
    crate::conformance_tests!((super::MemPg::new(), ()));
}
