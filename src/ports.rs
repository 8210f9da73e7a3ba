//! The ports: the small traits behind which every store lives. Each has a real adapter under
//! `store/` and an in-memory one under `store/memory`, and the stages only ever see these.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::domain::{InboundRow, MailboxRow, MsgEvent, NewEvent, ProcRow, ProcStatus, Target};
use crate::error::{ErrorClass, StoreError};
use crate::handlers::{Decision, Need, RefChange, View};

pub type StoreResult<T> = Result<T, StoreError>;

/// How a message ends when it does not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// FAILED, attempts+1, retried at `next_attempt_at`.
    Retry { class: ErrorClass, error: String, next_attempt_at: SystemTime },
    /// DEAD with this class (MALFORMED, PROTOCOL or EXHAUSTED).
    Dead { class: ErrorClass, error: String },
}

/// The recorded outcome of one message in a pump round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settle {
    pub msg_id: i64,
    /// The type tag, when the META could be read.
    pub type_tag: Option<String>,
    pub outcome: Outcome,
}

impl Settle {
    pub fn succeeded(msg_id: i64, identity: &str, events: Vec<NewEvent>) -> Settle {
        Settle {
            msg_id,
            type_tag: None,
            outcome: Outcome::Succeeded { identity: identity.to_string(), events, references: Vec::new() },
        }
    }

    pub fn skipped(msg_id: i64, reason: &str) -> Settle {
        Settle { msg_id, type_tag: None, outcome: Outcome::Skipped { reason: reason.to_string() } }
    }

    pub fn failed(msg_id: i64, failure: Failure) -> Settle {
        Settle { msg_id, type_tag: None, outcome: Outcome::Failed(failure) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// SUCCEEDED: binds `identity` (INV-9), inserts `events`, writes `references`
    /// (REF_MASTER), with the backfill intent.
    Succeeded {
        identity: String,
        events: Vec<NewEvent>,
        references: Vec<RefChange>,
    },
    /// SKIPPED with `reason` (`ignored:<rule>`, `duplicate-of:<id>`), with the backfill intent.
    Skipped {
        reason: String,
    },
    Failed(Failure),
}

/// Which rows `msgx replay` is asked to bring back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaySelection {
    Ids(Vec<i64>),
    /// Inclusive MSG_ID range.
    Range(i64, i64),
    Class(ErrorClass),
}

/// What replay did with one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    pub msg_id: i64,
    /// The row's state and class before replay (`None` when the row does not exist).
    pub was: Option<(ProcStatus, Option<ErrorClass>)>,
    /// `Ok` when the row is PENDING again, else why not.
    pub verdict: Result<(), String>,
}

/// Own PostgreSQL, message side: `PROC_STATE` and the ingress watermark. Only the process
/// thread changes message state; the poller only inserts PENDING rows.
pub trait ProcStore {
    /// Inserts PENDING rows for `rows` (existing rows are left alone) and, when given,
    /// overwrites the watermark, in one transaction. Returns the ids that were new, ascending.
    fn enqueue(
        &mut self,
        rows: &[InboundRow],
        watermark: Option<i64>,
        now: SystemTime,
    ) -> StoreResult<Vec<i64>>;
    /// Which of `ids` have a `PROC_STATE` row (for the compensating rescan).
    fn known(&mut self, ids: &[i64]) -> StoreResult<Vec<i64>>;
    fn watermark(&mut self) -> StoreResult<i64>;
    /// One row, whatever its state.
    fn row(&mut self, msg_id: i64) -> StoreResult<Option<ProcRow>>;
    /// The head and up to `limit - 1` unfinished rows behind it, in MSG_ID order (INV-3).
    fn unfinished(&mut self, limit: usize) -> StoreResult<Vec<ProcRow>>;
    /// The message holding `key`, ARCHIVED shadow rows included (INV-9).
    fn identity_holder(&mut self, key: &str) -> StoreResult<Option<i64>>;
    /// The holders of several identities at once (a pump round asks once).
    fn identity_holders(&mut self, keys: &[String]) -> StoreResult<HashMap<String, i64>> {
        let mut out = HashMap::new();
        for k in keys {
            if let Some(id) = self.identity_holder(k)? {
                out.insert(k.clone(), id);
            }
        }
        Ok(out)
    }
    /// Records a round's outcomes in order, in one transaction. Each terminal state is written
    /// in the same statement as its backfill intent (INV-8). Every row must still be
    /// unfinished, else nothing is recorded and an error is returned (INV-3 guard).
    fn commit(&mut self, settles: &[Settle], now: SystemTime) -> StoreResult<()>;
    /// `msgx replay`: FAILED/DEAD rows of a replayable class back to PENDING (SPEC §4.7);
    /// at most `limit` rows are looked at.
    fn replay(&mut self, sel: &ReplaySelection, limit: usize, now: SystemTime) -> StoreResult<Vec<Replayed>>;
    /// Terminal rows whose mark is due, oldest intent first.
    fn due_backfills(&mut self, now: SystemTime, limit: usize) -> StoreResult<Vec<i64>>;
    fn backfill_settled(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()>;
    fn backfill_retry(&mut self, id: i64, error: &str, next_at: SystemTime) -> StoreResult<u32>;
    fn backfill_abandon(&mut self, ids: &[i64], reason: &str, now: SystemTime) -> StoreResult<()>;
    /// Rows whose mark has been owed since before `owed_before` (their terminal time) and is
    /// still not settled: overdue (`overdue-backfill`, C-16).
    fn backfill_overdue(&mut self, owed_before: SystemTime, limit: usize) -> StoreResult<Vec<i64>>;
    /// Records that a person reconciled abandoned marks with the mailbox owner (C-16); the
    /// rows may then be archived. One verdict per id: `Err` says why not.
    fn reconcile(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>>;
    /// The backfill attempts so far of `id` (to compute its next delay).
    fn backfill_attempts(&mut self, id: i64) -> StoreResult<u32>;
}

/// Own PostgreSQL, delivery side: `MSG_EVENT`.
pub trait Outbox {
    /// PENDING events of `target` in EVENT_ID order, at most `limit`.
    fn pending(&mut self, target: Target, limit: usize) -> StoreResult<Vec<MsgEvent>>;
    /// SENT with SENT_AT, in one conditional UPDATE, only where the row is still PENDING at the
    /// generation that was sent (a `KAFKA:schd` row reset meanwhile stays PENDING).
    fn mark_sent(&mut self, sent: &[(i64, i64)], now: SystemTime) -> StoreResult<()>;
    /// Attempts+1 and a new due time for each PENDING event.
    fn retry(&mut self, ids: &[i64], class: ErrorClass, error: &str, next_at: SystemTime) -> StoreResult<()>;
    /// DEAD (the dead-letter queue) for each PENDING event.
    fn dead(&mut self, ids: &[i64], class: ErrorClass, error: &str) -> StoreResult<()>;
    /// Stamps LAST_ATTEMPT_AT before an external side effect.
    fn started(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()>;
    /// `msgx replay --events`: DEAD events back to PENDING (attempts 0); at most `limit`.
    fn replay_events(&mut self, sel: &ReplaySelection, limit: usize) -> StoreResult<Vec<ReplayedEvent>>;
}

/// What event replay did with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayedEvent {
    pub event_id: i64,
    /// Target and state before (`None` when there is no such event).
    pub was: Option<(String, String)>,
    pub verdict: Result<(), String>,
}

/// The shared outbound mailbox `COUTMSGS` (DML only, C-14).
pub trait Outbound {
    /// Inserts one outbound message; returns its row id.
    fn insert(&mut self, routing_id: &str, xml: &str, at: SystemTime) -> StoreResult<i64>;
    /// A row with this routing id and text inserted at or after `since`, if any: the trace of
    /// an earlier attempt whose SENT mark was lost.
    fn find(&mut self, routing_id: &str, xml: &str, since: SystemTime) -> StoreResult<Option<i64>>;
}

/// What one archive pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Archived {
    /// Rows copied to PROC_STATE_HST and shadowed.
    pub archived: usize,
    /// Candidates that no longer qualified when their transaction re-checked them (rolled back).
    pub skipped: usize,
}

/// Own PostgreSQL, housekeeping (the jobs thread). Never takes the head's place: it touches
/// only terminal, settled rows and SENT events.
pub trait Housekeeping {
    /// Deletes SENT events whose SENT_AT is before `sent_before`, oldest EVENT_ID first, at most
    /// `limit` (G-EVENT-RETENTION). PENDING and DEAD events are never touched.
    fn delete_sent_events(&mut self, sent_before: SystemTime, limit: usize) -> StoreResult<usize>;
    /// Archives terminal rows whose mark is settled (written, or abandoned and reconciled by a
    /// person, C-16) and whose UPDATED_AT is before `settled_before`,
    /// at most `limit`; each row in its own transaction that re-checks it (G-PROC-HST).
    fn archive(&mut self, settled_before: SystemTime, limit: usize, now: SystemTime)
        -> StoreResult<Archived>;
}

/// The outcome of marking one mailbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// msgx wrote the mark.
    Written,
    /// Someone had marked it already; nothing was overwritten (INV-7).
    AlreadyMarked,
    /// No such row (MISSING_ROW).
    Missing,
}

/// The shared MySQL mailbox (someone else's: DML only, C-14).
pub trait Mailbox {
    /// Every visible row with `from <= ID <= to`, in ID order, flagged `wanted` when it is
    /// unmarked and in the status filter. Unfiltered, so that only IDs that are really not
    /// visible count as gaps.
    fn rows(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<MailboxRow>>;
    /// Unmarked rows in the status filter with `from <= ID <= to`, in ID order (rescan).
    fn unmarked(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<InboundRow>>;
    /// Inserts a message as the upstream does (compat HTTP path); returns its ID.
    fn insert(&mut self, raw: &str, at: SystemTime) -> StoreResult<i64>;
    /// The raw texts of rows, in one read; a row or text that is missing is absent.
    fn raws(&mut self, ids: &[i64]) -> StoreResult<HashMap<i64, String>>;
    /// Writes the processed mark where it is still empty; one outcome per id, in order.
    fn mark(&mut self, ids: &[i64], at: SystemTime) -> StoreResult<Vec<Mark>>;
}

/// Live flight state (Redis, phase A authority). Only the process thread writes it (I5).
pub trait FlightStore {
    /// In one read: the decision already applied for `msg_id` if an earlier attempt got that
    /// far, else what the handler needs (the flights it names, a snapshot's window).
    fn prepare(&mut self, msg_id: i64, need: &Need) -> StoreResult<Prepared>;
    /// Applies the decision's flight changes (and, for a snapshot, the generation's
    /// compare-and-set) and records the decision as applied for `msg_id`, atomically.
    fn apply(&mut self, msg_id: i64, decision: &Decision) -> StoreResult<()>;
    /// Drops the applied records of messages whose outcome PostgreSQL now holds.
    fn forget(&mut self, msg_ids: &[i64]) -> StoreResult<()>;
}

/// What the pump needs from Redis before deciding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// An earlier attempt applied this decision: reuse it, do not decide again (I2).
    Applied(Decision),
    Fresh(View),
}

/// One Kafka record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub topic: String,
    pub key: String,
    pub payload: String,
    pub headers: Vec<(String, String)>,
}

/// The Kafka producer (D3: idempotent, acks=all, one request in flight).
pub trait Producer {
    /// Sends `records` in order and waits for each one's acknowledgement. The result has one
    /// entry per record; only a prefix of `Ok`s may be counted as delivered in order.
    fn send(&mut self, records: &[Record]) -> Vec<Result<(), StoreError>>;
}
