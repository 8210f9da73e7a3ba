//! The ports: the small traits behind which every store lives, one per role. Each has a real
//! adapter under `store/` and an in-memory twin under `store/memory`; a stage only ever sees
//! the ports of its role, so the single-writer rules (I1, I5) are types, not conventions: the
//! poller holds an [`Intake`] and cannot record an outcome, backfill holds a [`MarkLedger`] and
//! cannot touch the FIFO, and only the pump holds a [`Fifo`] and a [`FlightStore`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::SystemTime;

use crate::domain::{
    InboundRow, MailboxRow, MsgEvent, NewEvent, ProcRow, ProcStatus, RedisRecord, SkipReason, Target,
};
use crate::error::{ErrorClass, StoreError};
use crate::handlers::{Decision, FlightState, RefChange};
use crate::requests::{Answer, NewRequest, Outgoing, Request};

pub type StoreResult<T> = Result<T, StoreError>;

/// How a message ends when it does not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// FAILED, attempts+1, retried at `next_attempt_at`. `failing_since` is the head-deadline
    /// anchor to record: the first failure, moved on by the time the row waited to be tried
    /// after its backoff ran out (an outage is not failing, SPEC §4.9).
    Retry { class: ErrorClass, error: String, next_attempt_at: SystemTime, failing_since: SystemTime },
    /// DEAD with this class (MALFORMED, PROTOCOL or EXHAUSTED).
    Dead { class: ErrorClass, error: String },
}

/// The recorded outcome of one message in a pump round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settle {
    pub msg_id: i64,
    /// The type tag, when the META could be read.
    /// Borrowed for the kinds whose tag is a constant (`MsgKind::type_tag`).
    pub type_tag: Option<std::borrow::Cow<'static, str>>,
    pub outcome: Outcome,
}

impl Settle {
    pub fn succeeded(msg_id: i64, identity: &str, events: Vec<NewEvent>) -> Settle {
        Settle {
            msg_id,
            type_tag: None,
            outcome: Outcome::Succeeded {
                identity: identity.to_string(),
                events,
                references: Vec::new(),
                record: None,
                answer: None,
                rules: None,
            },
        }
    }

    pub fn skipped(msg_id: i64, reason: SkipReason) -> Settle {
        Settle { msg_id, type_tag: None, outcome: Outcome::Skipped { reason } }
    }

    pub fn failed(msg_id: i64, failure: Failure) -> Settle {
        Settle { msg_id, type_tag: None, outcome: Outcome::Failed(failure) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// SUCCEEDED: binds `identity` (INV-9), inserts `events`, writes `references`
    /// (REF_MASTER), with the backfill intent, and what Redis acknowledged of its decision.
    Succeeded {
        identity: String,
        events: Vec<NewEvent>,
        references: Vec<RefChange>,
        record: Option<RedisRecord>,
        /// What it answers (G-RESP-GUARD): the commit closes the request.
        answer: Option<Answer>,
        /// The rules that decided it (`Decision::rules`, #52): `PROC_STATE.RULES_VERSION`.
        rules: Option<u32>,
    },
    /// SKIPPED for `reason` (stored as `ignored:<rule>`, `duplicate-of:<id>`,
    /// `not-for-msgx:<why>`), with the backfill intent.
    Skipped {
        reason: SkipReason,
    },
    Failed(Failure),
}

/// A SUCCEEDED outcome of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Succeeded<'a> {
    pub msg_id: i64,
    pub tag: Option<&'a str>,
    pub identity: &'a str,
    pub events: &'a [NewEvent],
    pub references: &'a [RefChange],
    pub record: Option<RedisRecord>,
    pub answer: Option<&'a Answer>,
    pub rules: Option<u32>,
}

/// A SKIPPED outcome of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped<'a> {
    pub msg_id: i64,
    pub tag: Option<&'a str>,
    pub reason: &'a SkipReason,
}

/// A FAILED outcome of a round (retried later).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retried<'a> {
    pub msg_id: i64,
    pub tag: Option<&'a str>,
    pub class: ErrorClass,
    pub error: &'a str,
    pub next_attempt_at: SystemTime,
    pub failing_since: SystemTime,
}

/// A DEAD outcome of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Died<'a> {
    pub msg_id: i64,
    pub tag: Option<&'a str>,
    pub class: ErrorClass,
    pub error: &'a str,
}

/// A round's outcomes grouped by kind, each group in MSG_ID order: what [`Fifo::commit`]
/// writes, one set-based statement per kind. Events keep the order of their messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundRecord<'a> {
    pub succeeded: Vec<Succeeded<'a>>,
    pub skipped: Vec<Skipped<'a>>,
    pub retried: Vec<Retried<'a>>,
    pub dead: Vec<Died<'a>>,
}

impl<'a> RoundRecord<'a> {
    pub fn of(settles: &'a [Settle]) -> RoundRecord<'a> {
        RoundRecord::of_each(settles)
    }

    pub fn of_each(settles: impl IntoIterator<Item = &'a Settle>) -> RoundRecord<'a> {
        let mut r = RoundRecord::default();
        for s in settles {
            let tag = s.type_tag.as_deref();
            let msg_id = s.msg_id;
            match &s.outcome {
                Outcome::Succeeded { identity, events, references, record, answer, rules } => {
                    r.succeeded.push(Succeeded {
                        msg_id,
                        tag,
                        identity,
                        events,
                        references,
                        record: *record,
                        answer: answer.as_ref(),
                        rules: *rules,
                    })
                }
                Outcome::Skipped { reason } => r.skipped.push(Skipped { msg_id, tag, reason }),
                Outcome::Failed(Failure::Retry { class, error, next_attempt_at, failing_since }) => {
                    r.retried.push(Retried {
                        msg_id,
                        tag,
                        class: *class,
                        error,
                        next_attempt_at: *next_attempt_at,
                        failing_since: *failing_since,
                    })
                }
                Outcome::Failed(Failure::Dead { class, error }) => {
                    r.dead.push(Died { msg_id, tag, class: *class, error })
                }
            }
        }
        r
    }

    /// Every event of the round with its message, in message order.
    /// Every event of the round with its message and its ordinal among that message's events
    /// (the event's identity for consumers: `MSG_ID.ordinal`), in message order.
    pub fn events(&self) -> Vec<(i64, usize, &'a NewEvent)> {
        self.succeeded
            .iter()
            .flat_map(|s| s.events.iter().enumerate().map(move |(k, e)| (s.msg_id, k, e)))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.succeeded.len() + self.skipped.len() + self.retried.len() + self.dead.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which rows `msgx replay` is asked to bring back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaySelection {
    Ids(Vec<i64>),
    /// Inclusive MSG_ID range.
    Range(i64, i64),
    Class(ErrorClass),
}

/// Where `msgx resend` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResendFrom {
    /// This EVENT_ID and the ones after it.
    Event(i64),
    /// Events SENT at or after this time.
    Since(SystemTime),
}

/// What `msgx resend` found (or did): how many events, the first and last EVENT_ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resent {
    pub events: usize,
    pub first: Option<i64>,
    pub last: Option<i64>,
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

/// Own PostgreSQL, the poller's (and the compat path's) side: PENDING rows and the watermark.
/// Nothing else about a message can be written through it.
pub trait Intake {
    /// Inserts PENDING rows for `rows` (existing rows are left alone) and, when given,
    /// overwrites the watermark, in one transaction. Returns the ids that were new, ascending.
    fn enqueue(
        &mut self,
        rows: &[InboundRow],
        watermark: Option<i64>,
        now: SystemTime,
    ) -> StoreResult<Vec<i64>>;
    /// Those of `ids` that have a `PROC_STATE` row, ascending, with what the compensating
    /// rescan compares (PRE-3): one read for its three questions (#23).
    fn held(&mut self, ids: &[i64]) -> StoreResult<Vec<Held>>;
    fn watermark(&mut self) -> StoreResult<i64>;
}

/// What `PROC_STATE` holds of one mailbox ID, as the compensating rescan asks (PRE-3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub msg_id: i64,
    /// msgx processed it and marked it in the mailbox (`BACKFILL_AT` set): such a row found
    /// unmarked again means the mailbox reused the ID or lost the mark.
    pub marked: bool,
    /// The identity recorded when it SUCCEEDED (INV-9), compared with what the row holds now.
    pub identity: Option<String>,
}

/// Own PostgreSQL, the pump's side: the FIFO and its outcomes. Only the process thread holds
/// one (I1).
pub trait Fifo {
    /// The head and up to `limit - 1` unfinished rows behind it, in MSG_ID order (INV-3),
    /// leaving out `skip` (the round whose commit is still on its way).
    fn unfinished(&mut self, limit: usize, skip: &[i64]) -> StoreResult<Vec<ProcRow>>;
    /// The holders of several identities at once, ARCHIVED shadow rows included (INV-9).
    fn identity_holders(&mut self, keys: &[String]) -> StoreResult<HashMap<String, i64>>;
    /// Records a round's outcomes in one transaction. Each terminal state is written in the
    /// same statement as its backfill intent (INV-8). Every row must still be unfinished, else
    /// nothing is recorded and a rejected error is returned (INV-3 guard).
    fn commit(&mut self, round: &RoundRecord<'_>, now: SystemTime) -> StoreResult<()>;
    /// The requests these messages answered, read after their commit closed them
    /// (G-RESP-GUARD): a message of `msg_ids` no request names was unsolicited.
    fn answered(&mut self, msg_ids: &[i64]) -> StoreResult<Vec<Request>>;
}

/// Own PostgreSQL, `REQ_TRACK` (G-REQ-TRACK, SPEC §4.11): the requests msgx writes to the AODB.
/// A request is a row here and an outbox event to `COUTMSGS`, written in one transaction, and
/// needs no lease: whichever instance is active delivers it.
pub trait Requests {
    /// Registers a request REGISTERED with the outbox event carrying `text(seqn)` (its number on
    /// the wire, `requests::seqn_of` its id and `now`); `Err` with
    /// the open request of the same type and key when there is one (`uk_req_open`): nothing is
    /// written then.
    fn register(
        &mut self,
        new: &NewRequest,
        text: &dyn Fn(i64) -> Outgoing,
        now: SystemTime,
    ) -> StoreResult<Result<Request, Request>>;
    /// The newest `limit` requests (only the open ones with `open_only`), newest first.
    fn requests(&mut self, open_only: bool, limit: usize) -> StoreResult<Vec<Request>>;
    /// The windows a heal asked for whose flights await the AODB (degraded), oldest first, at
    /// most `limit`: a heal's requests no answer closed (nor noted, late) and no person
    /// dismissed, open or EXPIRED, of which no later request of the same window took the place
    /// (a heal's next try) or was answered (an operator's that the AODB answered).
    fn awaited(&mut self, limit: usize) -> StoreResult<Vec<Request>>;
    /// A heal's requests for window `key`, newest first, at most `limit` (#68: whether the
    /// window a person named was spent on an earlier heal).
    fn heal_requests(&mut self, key: &str, limit: usize) -> StoreResult<Vec<Request>>;
    /// A person's word that request `req_id`'s window awaits nothing more (`msgx requests
    /// --dismiss ID --note …`): recorded once, with its note (at most `requests::NOTE_MAX_CHARS`),
    /// and only on a heal's window that awaits the AODB ([`Requests::awaited`], #68); `None`
    /// when there is no such request; else the request, and whether this call dismissed it
    /// (false: a person had already, or it awaits nothing). An answer still closes it.
    fn dismiss_request(
        &mut self,
        req_id: i64,
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Option<(Request, bool)>>;
    /// The keeper's round: SENT → WAITING (its `expires_at` = SENT time + `timeout`), WAITING
    /// past `expires_at` → EXPIRED, and REGISTERED whose outbox event is DEAD → EXPIRED (it
    /// will never go out). Each transition one statement.
    fn keep_requests(&mut self, timeout: std::time::Duration, now: SystemTime) -> StoreResult<Kept>;
}

/// What the keeper changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    pub waiting: Vec<Request>,
    pub expired: Vec<Request>,
    /// REGISTERED requests whose outbox event went DEAD.
    pub undeliverable: Vec<Request>,
}

/// A mark owed, as backfill sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwedMark {
    pub msg_id: i64,
    /// Failed attempts so far (the next delay doubles from them).
    pub attempts: u32,
}

/// Own PostgreSQL, backfill's side: the marks owed by terminal rows (INV-8) and their fate.
pub trait MarkLedger {
    /// Ok while this handle's epoch still holds the lease in own PostgreSQL (a fenced handle;
    /// an unfenced one always): asked inside the mailbox's mark transaction, before it commits,
    /// so a holder whose lease PostgreSQL no longer knows (a failover to a replica that never
    /// saw it, and a newer epoch claimed there) writes no mark — its clock-based gate cannot
    /// know (#56, seed 13144).
    fn still_holds(&mut self) -> StoreResult<()>;
    /// Terminal rows whose mark is due, oldest intent first.
    fn due_backfills(&mut self, now: SystemTime, limit: usize) -> StoreResult<Vec<OwedMark>>;
    fn backfill_settled(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()>;
    /// Records a refused mark: attempts+1, the error, and when to try again.
    fn backfill_retry(&mut self, ids: &[i64], error: &str, next_at: &[SystemTime]) -> StoreResult<()>;
    fn backfill_abandon(&mut self, ids: &[i64], reason: &str, now: SystemTime) -> StoreResult<()>;
    /// Rows whose mark has been owed since before `owed_before` (their terminal time), was
    /// refused at least once, and is still not settled: overdue (`overdue-backfill`, C-16). A
    /// mark that was never refused (an unavailable mailbox, SPEC §4.9) is never overdue.
    fn backfill_overdue(&mut self, owed_before: SystemTime, limit: usize) -> StoreResult<Vec<i64>>;
}

/// Own PostgreSQL, what an operator's command may do (`msgx replay`, `msgx reconcile`).
pub trait Operator {
    /// One row, whatever its state.
    fn row(&mut self, msg_id: i64) -> StoreResult<Option<ProcRow>>;
    /// `msgx replay`: FAILED/DEAD rows of a replayable class back to PENDING (SPEC §4.7);
    /// at most `limit` rows are looked at.
    fn replay(&mut self, sel: &ReplaySelection, limit: usize, now: SystemTime) -> StoreResult<Vec<Replayed>>;
    /// `msgx replay --skipped`: SKIPPED rows of a kind msgx did not process (`not-for-msgx`)
    /// back to PENDING, so a kind msgx has learnt since is processed; at most `limit`.
    fn replay_skipped(
        &mut self,
        sel: &ReplaySelection,
        limit: usize,
        now: SystemTime,
    ) -> StoreResult<Vec<Replayed>>;
    /// Records that a person reconciled abandoned marks with the mailbox owner (C-16); the
    /// rows may then be archived. One verdict per id: `Err` says why not.
    fn reconcile(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>>;
    /// `msgx dismiss`: a person dealt with DEAD messages without replaying them; they leave the
    /// dead-letter queue (no longer counted by `status --check`) and may then be archived. The
    /// note is kept with the row. One verdict per id: `Err` says why not.
    fn dismiss(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>>;
    /// `msgx resend`: SENT events of `target` from `from` on back to PENDING, so that they are
    /// delivered again in EVENT_ID order with their own identities (a broker or a consumer that
    /// lost them; within event retention). With `apply` false nothing changes: what it would do.
    fn resend(&mut self, target: Target, from: ResendFrom, apply: bool) -> StoreResult<Resent>;
    /// `msgx replay --events`: DEAD events back to PENDING (attempts 0); at most `limit`.
    fn replay_events(&mut self, sel: &ReplaySelection, limit: usize) -> StoreResult<Vec<ReplayedEvent>>;
    /// `msgx park` (#67): events a Kafka topic holds at, refused by the broker, to DEAD with
    /// the person's note (`replay::parked_error`); the topic then moves on. One verdict per
    /// id (`replay::park_verdict`): `Err` says why not.
    fn park(&mut self, ids: &[i64], note: &str) -> StoreResult<Vec<(i64, Result<(), String>)>>;
    /// The flight keys of a seasonal plan held (SCHS), in order.
    fn season(&mut self, season: &str) -> StoreResult<Vec<String>>;
    /// `msgx reset-watermark` (PRE-3): the ingress watermark to `to`; `Ok` holds the old one.
    /// Refused while `PROC_STATE` holds a message above `to`: its ID, read again, would be
    /// taken as known and never processed.
    fn reset_watermark(&mut self, to: i64, now: SystemTime) -> StoreResult<Result<i64, String>>;
}

/// Why `reset-watermark` refuses: `count` messages above `to`, the highest `max`.
pub fn watermark_refusal(to: i64, count: i64, max: i64) -> String {
    format!(
        "{count} message(s) above {to} are in PROC_STATE (the highest MSG_ID {max}): their IDs, read again, would be taken as known and never processed; choose --to {max} or higher, or archive them first"
    )
}

/// Own PostgreSQL, delivery side: `MSG_EVENT`.
pub trait Outbox {
    /// PENDING events of `target` in EVENT_ID order, at most `limit`.
    fn pending(&mut self, target: Target, limit: usize) -> StoreResult<Vec<MsgEvent>>;
    /// SENT with SENT_AT and where each landed, in one conditional UPDATE, only where the row
    /// is still PENDING at the generation that was sent (a `KAFKA:schd` row reset meanwhile
    /// stays PENDING).
    fn mark_sent(&mut self, sent: &[Sent<'_>], now: SystemTime) -> StoreResult<()>;
    /// Attempts+1 and a new due time for each PENDING event.
    fn retry(&mut self, ids: &[i64], class: ErrorClass, error: &str, next_at: SystemTime) -> StoreResult<()>;
    /// DEAD (the dead-letter queue) for each PENDING event.
    fn dead(&mut self, ids: &[i64], class: ErrorClass, error: &str) -> StoreResult<()>;
    /// Stamps LAST_ATTEMPT_AT before an external side effect.
    fn started(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()>;
}

/// One event the outbox marks SENT: at the generation that was sent (`state_version`), and
/// where it landed (#40; `None` where nothing says, e.g. a test's mark).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent<'a> {
    pub event_id: i64,
    pub state_version: i64,
    pub landed: Option<Landed<'a>>,
}

impl Sent<'_> {
    /// SENT at `state_version`, with no receipt.
    pub fn unlanded(event_id: i64, state_version: i64) -> Sent<'static> {
        Sent { event_id, state_version, landed: None }
    }
}

/// Where a delivered event landed (#40, delivery receipts): its Kafka record's topic,
/// partition and offset (from the broker's acknowledgement), or the COUTMSGS row it became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landed<'a> {
    Kafka { topic: Cow<'a, str>, at: Position },
    Outbound { row: i64 },
}

/// As an operator reads it: `topic T partition P offset O`, or `coutmsgs_id N`.
impl std::fmt::Display for Landed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Landed::Kafka { topic, at } => {
                write!(f, "topic {topic} partition {} offset {}", at.partition, at.offset)
            }
            Landed::Outbound { row } => write!(f, "coutmsgs_id {row}"),
        }
    }
}

impl Landed<'_> {
    /// The receipt with nothing borrowed (a twin keeps it).
    pub fn into_owned(self) -> Landed<'static> {
        match self {
            Landed::Kafka { topic, at } => Landed::Kafka { topic: Cow::Owned(topic.into_owned()), at },
            Landed::Outbound { row } => Landed::Outbound { row },
        }
    }
}

/// Where a broker put a record it acknowledged: its partition and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    pub partition: i32,
    pub offset: i64,
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

/// Which terminal rows may be archived (G-PROC-HST): settled before `settled_before`; a DEAD
/// one only once a person dismissed it (`msgx dismiss`) or once it has been DEAD since before
/// `dead_before` (`msgx.proc-state.dead-keep`): the dead-letter queue stays replayable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveCut {
    pub settled_before: SystemTime,
    pub dead_before: SystemTime,
}

/// What archiving one candidate did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchivedAs {
    /// A settled row (SUCCEEDED, SKIPPED, or DEAD dismissed by a person).
    Settled,
    /// A DEAD row nobody dealt with, archived because `dead-keep` ran out (logged as a WARN).
    DeadUndealt,
}

/// Own PostgreSQL, housekeeping (the jobs thread). Never takes the head's place: it touches
/// only terminal, settled rows and SENT events.
pub trait Housekeeping {
    /// Deletes SENT events whose SENT_AT is before `sent_before`, oldest EVENT_ID first, at most
    /// `limit` (G-EVENT-RETENTION). PENDING and DEAD events are never touched.
    fn delete_sent_events(&mut self, sent_before: SystemTime, limit: usize) -> StoreResult<usize>;
    /// Archive candidates in MSG_ID order, at most `limit`: terminal rows whose mark is settled
    /// (written, or abandoned and reconciled by a person, C-16) within `cut`.
    fn archive_candidates(&mut self, cut: &ArchiveCut, limit: usize) -> StoreResult<Vec<i64>>;
    /// Copies one candidate to PROC_STATE_HST and shadows it, in one transaction that re-checks
    /// it (G-PROC-HST); `None` when it no longer qualifies (e.g. a DEAD row replayed meanwhile):
    /// nothing is kept. A refusal by the store is an error, never a `None`.
    fn archive_one(
        &mut self,
        msg_id: i64,
        cut: &ArchiveCut,
        now: SystemTime,
    ) -> StoreResult<Option<ArchivedAs>>;
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

/// A mailbox row's text as the pump reads it: bytes, checked by the pump, never converted by
/// the driver (a body that is not UTF-8 is that row's failure, not a panic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Raw {
    Body(Vec<u8>),
    /// Longer than the limit asked for; the body was not fetched.
    TooLarge {
        bytes: u64,
    },
    /// Beyond the read's byte budget: not fetched this time (the round ends before it).
    Later,
    /// The mailbox refused to read this row alone while it read the others of the same read:
    /// the row is at fault, not the store (SPEC §4.9). Never returned by an adapter; the pump
    /// makes it when it looks for the culprit of a refused read.
    Refused(String),
}

/// The shared MySQL mailbox, the poller's side: what is visible (someone else's: DML only,
/// C-14).
pub trait MailboxScan {
    /// Every visible row with `from <= ID <= to`, in ID order, flagged `wanted` when it is
    /// unmarked and in the status filter. Unfiltered, so that only IDs that are really not
    /// visible count as gaps.
    fn rows(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<MailboxRow>>;
    /// Unmarked rows in the status filter with `from <= ID <= to`, in ID order (rescan).
    fn unmarked(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<InboundRow>>;
    /// The highest ID in the table and the ID it will hand out next (its AUTO_INCREMENT), each
    /// `None` when there is none (an empty table; a table without AUTO_INCREMENT).
    fn ids_in_use(&mut self) -> StoreResult<(Option<i64>, Option<i64>)>;
}

/// The shared mailbox, the pump's side: message texts.
pub trait MailboxTexts {
    /// The raw texts of rows (`ids` in MSG_ID order); a row or text that is missing is absent.
    /// A body longer than `max_bytes` is not fetched. The bodies fetched fit in `budget` bytes
    /// together, in order — except the first, always fetched: the rows after are `Later`.
    fn raws(&mut self, ids: &[i64], max_bytes: u64, budget: u64) -> StoreResult<HashMap<i64, Raw>>;
}

/// The shared mailbox, backfill's side: the processed mark.
pub trait MailboxMarks {
    /// Writes the processed mark where it is still empty; one outcome per id, in order. The
    /// shared mailbox cannot check the lease, so `still_ours` (the lease gate) is asked inside
    /// the transaction, before the write and again before the commit: an `Err` rolls it back
    /// and is returned (PRE-5; #21 item 10).
    fn mark(
        &mut self,
        ids: &[i64],
        at: SystemTime,
        still_ours: &dyn Fn() -> StoreResult<()>,
    ) -> StoreResult<Vec<Mark>>;
}

/// The shared mailbox, the compat path's side.
pub trait MailboxSubmit {
    /// Inserts a message as the upstream does; returns its ID.
    fn insert(&mut self, raw: &str, at: SystemTime) -> StoreResult<i64>;
}

/// What the pump reads from Redis for a round, in one round trip.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Prepared {
    /// Decisions an earlier attempt already applied, by MSG_ID: reused, never decided or
    /// applied again (I2).
    pub applied: HashMap<i64, Decision>,
    /// The flights the round's messages name, with their field versions: shared with the
    /// store's own cache where it keeps one ([`crate::handlers::FlightView`]).
    pub flights: crate::handlers::FlightView,
    /// A snapshot's window: the FLIDs the daily plan holds in `[min SODT, max SODT]`.
    pub window: Vec<String>,
    /// With a window read, the MSG_ID of the snapshot that last advanced the plan's generation
    /// (`-1`: none yet): a snapshot journalled below it with nothing to emit was stale (#68).
    pub generation_msg: Option<i64>,
    /// Of the round's identities (INV-9), those under which Redis journals a decision, with the
    /// MSG_ID it journals it for (`journal:identity`): a decision that stands keeps its
    /// identity when own PostgreSQL forgot who held it (seed 3591).
    pub owners: HashMap<String, i64>,
}

/// A decision for Redis: its message, and the identity it binds (INV-9), journalled with it.
#[derive(Debug, Clone, Copy)]
pub struct Applying<'a> {
    pub msg_id: i64,
    pub identity: &'a str,
    pub decision: &'a Decision,
}

impl<'a> Applying<'a> {
    /// A decision that binds no identity (a tool's, a test's): nothing goes under `""`.
    pub fn unnamed(msg_id: i64, decision: &'a Decision) -> Applying<'a> {
        Applying { msg_id, identity: "", decision }
    }

    /// Decisions that bind no identity, in their order.
    pub fn unnamed_all(pairs: &[(i64, &'a Decision)]) -> Vec<Applying<'a>> {
        pairs.iter().map(|(m, d)| Applying::unnamed(*m, d)).collect()
    }

    /// The `(MSG_ID, decision)` pairs a round plays, in its order.
    pub fn pairs(batch: &[Applying<'a>]) -> Vec<(i64, &'a Decision)> {
        batch.iter().map(|a| (a.msg_id, a.decision)).collect()
    }
}

/// What the pump must read for a round.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoundNeed {
    pub msg_ids: Vec<i64>,
    pub flids: Vec<String>,
    /// A snapshot's window `[min SODT, max SODT]` as `yyyyMMddHHmm` numbers (a snapshot is
    /// always a round of its own).
    pub window: Option<(i64, i64)>,
    /// The identities of the messages the round decides: whose decision Redis journals under
    /// each (`Prepared::owners`).
    pub identities: Vec<String>,
    /// Every message the round takes, recorded in Redis as being settled by msgx before
    /// PostgreSQL records any outcome of them (`journal:done`, no time yet): proof, should own
    /// PostgreSQL forget them, that it held their rows (#37) — a mark the backfill writes right
    /// after the commit is then never the only evidence.
    pub taken: Vec<i64>,
}

/// Redis's fence (#20, #38, #56): the epoch that holds the flights. A new lease holder claims
/// them before it compares the stores or applies anything; from then on every apply and restore
/// of an older epoch is refused (fenced), so the flights have one writer.
pub trait FlightsFence {
    /// Moves the fence to `epoch` (again: nothing changes); fenced, and nothing moved, when a
    /// newer epoch holds the flights.
    fn claim(&mut self, epoch: i64) -> StoreResult<()>;
    /// The epoch that holds the flights (0: never claimed).
    fn epoch_held(&mut self) -> StoreResult<i64>;
}

/// Live flight state (Redis, phase A authority). Only the process thread writes it (I5).
pub trait FlightStore {
    /// In one read: the applied journal of the round's messages, the flights they name and a
    /// snapshot's window. Also tells it, in the same round trip, of the messages whose
    /// outcome PostgreSQL now holds (`forget`, at `now`): their journal entries go once they
    /// are older than `redis.journal-keep`.
    fn prepare(&mut self, need: &RoundNeed, forget: &[i64], now: SystemTime) -> StoreResult<Prepared>;
    /// Applies the decisions in order and journals each under its MSG_ID, and its MSG_ID under
    /// its identity, atomically (one script). Returns, per decision, whether it was applied: a snapshot not newer than the
    /// plan's generation is not, and changes nothing. A store holding fewer applies than this
    /// handle made before is refused as `forgot` (restored, emptied, failed over: #20).
    fn apply(&mut self, decisions: &[Applying<'_>]) -> StoreResult<Vec<bool>>;
    /// As `prepare`'s `forget`, alone (when the pump is idle and has some to tell).
    fn forget(&mut self, msg_ids: &[i64], now: SystemTime) -> StoreResult<()>;
}

/// The token that names a Redis holding no history — no write yet, or everything of msgx's gone
/// (#65, the fleet's seed 18129): what a consistency pass that read such a Redis hands to the
/// pump's handle, so that a Redis written or restored between the pass and the first apply is
/// refused as one that forgot, not taken as it is. No write carries it (`store::write_token`).
pub const NO_HISTORY: &str = "-";

/// A SUCCEEDED message as the consistency check reads it: what Redis acknowledged of its
/// decision and when it was recorded (`UPDATED_AT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SucceededRow {
    pub msg_id: i64,
    pub record: Option<RedisRecord>,
    pub at: SystemTime,
    /// The rules that decided it (the version of the rulebook of the instance that applied it,
    /// #52, #65); `None`: not known.
    pub rules: Option<u32>,
}

/// Own PostgreSQL, what the consistency check reads (#20): never written through.
pub trait StateAudit {
    /// The highest MSG_ID `PROC_STATE` holds a row for (archived ones keep a shadow); 0: none.
    fn known_max(&mut self) -> StoreResult<i64>;
    /// Those of `ids` (ascending) `PROC_STATE` has no row for, ascending.
    fn unknown(&mut self, ids: &[i64]) -> StoreResult<Vec<i64>>;
    /// SUCCEEDED messages above `after` (archived ones too), ascending, at most `limit`.
    fn succeeded_above(&mut self, after: i64, limit: usize) -> StoreResult<Vec<SucceededRow>>;
    /// The newest `limit` SUCCEEDED messages still in `PROC_STATE`, ascending.
    fn succeeded_last(&mut self, limit: usize) -> StoreResult<Vec<SucceededRow>>;
    /// The newest SUCCEEDED message (archived ones too) whose decision Redis acknowledged
    /// (`REDIS_RECORD` set).
    fn newest_recorded(&mut self) -> StoreResult<Option<i64>>;
    /// The newest SUCCEEDED snapshot above `after` (archived ones too) whose decision Redis
    /// acknowledged advancing the plan's generation to (`REDIS_RECORD = generation`).
    fn generation_above(&mut self, after: i64) -> StoreResult<Option<i64>>;
    /// When own PostgreSQL last enqueued one of its newest 1 000 messages (`ENQUEUED_AT`): the
    /// moment a restored database stands at. An operator's command on an old row (a replay, a
    /// dismissal, a park) changes it but enqueues nothing, so it does not move this moment
    /// (#65, the fleet's seed 10482: a replay after a forget hid a late row's mark).
    fn newest_enqueue(&mut self) -> StoreResult<Option<SystemTime>>;
    /// The outbox events of `ids` as their messages made them, in their order (a `KAFKA:schd`
    /// row, upserted per flight, belongs to the newest message only).
    fn events_of(&mut self, ids: &[i64]) -> StoreResult<Vec<(i64, NewEvent)>>;
    /// The highest MSG_ID whose events the outbox may have dropped (retention, V018): above it
    /// every event a message wrote is held, so a message without any announced nothing (#52).
    fn events_pruned(&mut self) -> StoreResult<i64>;
}

/// One heal of a store that forgot which changed something (`CONSISTENCY_HEAL`, #37).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealRecord {
    pub at: SystemTime,
    pub epoch: i64,
    /// The store healed (`postgres`, `redis`).
    pub store: crate::error::Store,
    pub summary: String,
}

/// Own PostgreSQL, the heals' log: the heal budget is counted there, shared by every instance
/// (`msgx.consistency-check.max-heals-per-hour`), and `msgx status` shows it.
pub trait HealLog {
    /// Heals recorded at or after `since`, oldest first.
    fn heals_since(&mut self, since: SystemTime) -> StoreResult<Vec<HealRecord>>;
    fn record_heal(&mut self, heal: &HealRecord) -> StoreResult<()>;
}

/// Where a `msgx rules apply` job stands (`RULES_APPLY.STATE`, #65).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RulesJobState {
    /// Asked; no instance of its rules has run it yet.
    Open,
    /// Its difference is staged and being written: Redis, then the outbox.
    Applying,
    Done,
    /// A person must read its note.
    Failed,
}

impl RulesJobState {
    pub const ALL: [RulesJobState; 4] =
        [RulesJobState::Open, RulesJobState::Applying, RulesJobState::Done, RulesJobState::Failed];

    /// The column's value.
    pub fn name(self) -> &'static str {
        match self {
            RulesJobState::Open => "OPEN",
            RulesJobState::Applying => "APPLYING",
            RulesJobState::Done => "DONE",
            RulesJobState::Failed => "FAILED",
        }
    }

    pub fn parse(s: &str) -> Option<RulesJobState> {
        RulesJobState::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Not finished: an instance of its rules runs it (OPEN), or finishes it (APPLYING).
    pub fn is_open(self) -> bool {
        matches!(self, RulesJobState::Open | RulesJobState::Applying)
    }
}

/// One `msgx rules apply` job (`RULES_APPLY`, #65): the SUCCEEDED messages from `since` on,
/// decided again under the rules of version `rules` by an instance that carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesJob {
    pub job_id: i64,
    pub since: i64,
    pub rules: u32,
    pub state: RulesJobState,
    pub requested_at: SystemTime,
    pub done_at: Option<SystemTime>,
    /// APPLYING: what is being written (`consistency::rules`, its own format).
    pub staged: Option<String>,
    /// DONE: what it did; FAILED: why.
    pub note: Option<String>,
}

/// What a finished job writes to own PostgreSQL in one transaction: its events (each with the
/// message it is told under and its ordinal there), the messages now decided under its rules
/// (their `RULES_VERSION`), and its note.
#[derive(Debug, Clone, Copy)]
pub struct RulesDone<'a> {
    pub events: &'a [(i64, i32, NewEvent)],
    pub redecided: &'a [i64],
    pub note: &'a str,
}

/// Own PostgreSQL, the `msgx rules apply` jobs (#65): asked by an operator's command beside the
/// daemon (unfenced), run by the active instance of their rules between two holdings (fenced).
pub trait RulesJobs {
    /// Registers a job OPEN.
    fn ask_rules_apply(&mut self, since: i64, rules: u32, now: SystemTime) -> StoreResult<RulesJob>;
    /// The newest jobs first, at most `limit`.
    fn rules_jobs(&mut self, limit: usize) -> StoreResult<Vec<RulesJob>>;
    /// The oldest job of `rules` not finished (OPEN or APPLYING).
    fn open_rules_job(&mut self, rules: u32) -> StoreResult<Option<RulesJob>>;
    /// The job's difference staged: APPLYING.
    fn stage_rules_apply(&mut self, job_id: i64, staged: &str, now: SystemTime) -> StoreResult<()>;
    /// DONE, in one transaction with its events in the outbox and the messages' rules version.
    fn finish_rules_apply(
        &mut self,
        job: &RulesJob,
        done: &RulesDone<'_>,
        now: SystemTime,
    ) -> StoreResult<()>;
    /// FAILED, with why.
    fn fail_rules_apply(&mut self, job_id: i64, why: &str, now: SystemTime) -> StoreResult<()>;
}

/// A mailbox row msgx has or had to process: unmarked and in the status filter, or marked
/// with msgx's processed status (`marked`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OursRow {
    pub row: InboundRow,
    pub marked: bool,
    /// When it was marked (the processed column), if it was.
    pub marked_at: Option<SystemTime>,
}

/// The shared mailbox, what the consistency check reads (#20).
pub trait MailboxAudit {
    /// Rows with `from <= ID <= to` msgx has or had to process (only the marked ones with
    /// `marked_only`), in ID order, at most `limit`.
    fn ours(&mut self, from: i64, to: i64, limit: usize, marked_only: bool) -> StoreResult<Vec<OursRow>>;
    /// Whether only msgx marks rows with its processed status (`mailbox.inbound.exclusive-marks`):
    /// then a mark is msgx's own, and evidence of what it settled (#37).
    fn exclusive_marks(&self) -> bool;
}

/// Redis's own marks, as the consistency check reads them (#20).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlightMarks {
    /// The newest lease epoch that wrote there (0: none: an empty store).
    pub epoch: i64,
    /// The highest MSG_ID whose journal entry was dropped; `None`: never set (an empty store,
    /// or one msgx wrote before the journal was kept).
    pub pruned: Option<i64>,
    /// Applies so far and the highest MSG_ID applied.
    pub seq: i64,
    pub applied_max: i64,
    /// The highest MSG_ID whose outcome PostgreSQL said it holds (`applied:settled`, #37).
    pub settled_max: i64,
    /// The token of the last write (`applied:token`): which history Redis holds.
    pub token: Option<String>,
}

/// A rebuild of flights (the Redis heal, `msgx rebuild-flights`): each flight written whole —
/// fields, versions, tombstone, plan index — with the plan's generation and the journal
/// entries of the messages it was rebuilt from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Restore {
    /// FLID, its state, its SODT key in the plan index (`None`: not in it).
    pub flights: Vec<(String, FlightState, Option<i64>)>,
    pub generation: Option<(i64, i64)>,
    /// The rebuilt decisions' journal entries (events and references), marked done.
    pub journal: Vec<(i64, Decision)>,
}

/// Live flight state, what the consistency check and the rebuild need (#20): never the pump's.
pub trait FlightAudit {
    fn audit(&mut self) -> StoreResult<FlightMarks>;
    /// Whether each of `ids` has a journal entry.
    fn journal_has(&mut self, ids: &[i64]) -> StoreResult<Vec<bool>>;
    /// Every MSG_ID with a journal entry, ascending.
    fn journal_ids(&mut self) -> StoreResult<Vec<i64>>;
    /// Every MSG_ID Redis was told PostgreSQL holds the outcome of (`journal:done`), ascending.
    fn settled_ids(&mut self) -> StoreResult<Vec<i64>>;
    /// Whether Redis holds a record of each of `ids`: a journal entry or an outcome told.
    fn recorded(&mut self, ids: &[i64]) -> StoreResult<Vec<bool>>;
    /// Sets `journal:pruned` (a store msgx wrote before the journal was kept: everything up to
    /// `id` counts as dropped).
    fn set_pruned(&mut self, id: i64) -> StoreResult<()>;
    /// Writes `r` (each flight replaced whole); its journal entries are done at `now`.
    fn restore(&mut self, r: &Restore, now: SystemTime) -> StoreResult<()>;
    /// The daily plan's generation and the message that last advanced it.
    fn generation_of(&mut self) -> StoreResult<(i64, i64)>;
    /// Every flight msgx holds (tombstones too), with its key in the plan index.
    fn all_flights(&mut self) -> StoreResult<Vec<(String, FlightState, Option<i64>)>>;
    /// The flights of `flids` Redis holds anything of (tombstones too), with their keys in the
    /// plan index.
    fn flights_of(&mut self, flids: &[String]) -> StoreResult<Vec<(String, FlightState, Option<i64>)>>;
}

/// One Kafka record: borrowed from the outbox rows it is made of while it is sent (#23: each
/// event's topic, key, payload and header names were copied into an owned record for every
/// send, and dropped after it), owned where one is kept (a twin's delivered list, what a
/// consumer read back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub topic: Cow<'a, str>,
    pub key: Cow<'a, str>,
    pub payload: Cow<'a, str>,
    pub headers: Vec<(Cow<'a, str>, String)>,
}

impl Record<'_> {
    /// The record with nothing borrowed.
    pub fn into_owned(self) -> Record<'static> {
        let own = |c: Cow<'_, str>| Cow::Owned(c.into_owned());
        Record {
            topic: own(self.topic),
            key: own(self.key),
            payload: own(self.payload),
            headers: self.headers.into_iter().map(|(k, v)| (own(k), v)).collect(),
        }
    }
}

/// The Kafka producer (D3: idempotent, acks=all, one request in flight).
pub trait Producer {
    /// Sends `records` in order and waits for each one's acknowledgement. The result has one
    /// entry per record — where the broker put it, or why not; only a prefix of `Ok`s may be
    /// counted as delivered in order.
    fn send(&mut self, records: &[Record<'_>]) -> Vec<Result<Position, StoreError>>;
}

/// The one who asks for the lease: this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    /// Unique per process start (host, pid and start time).
    pub id: String,
    pub host: String,
    pub pid: u32,
}

/// Who holds the lease, as the lease row says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeaseHolder {
    pub holder: Option<String>,
    pub host: Option<String>,
    pub pid: Option<i32>,
    pub epoch: i64,
    pub since: Option<SystemTime>,
    pub renewed_at: Option<SystemTime>,
    pub expires_at: Option<SystemTime>,
    /// The lease is expired or released by the database's clock: anyone may take it.
    pub free: bool,
    /// What the holder reported with its last renewal (stalled stages), as JSON.
    pub status: String,
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This process holds the lease now, under a new epoch; `previous` held it before.
    Acquired { epoch: i64, previous: Option<LeaseHolder> },
    /// Someone else holds it.
    HeldBy(LeaseHolder),
}

/// The single-instance lease (PRE-5) in own PostgreSQL: expiry by the database's clock, an
/// epoch that fences every write of a stale holder.
pub trait LeaseStore {
    /// Takes the lease if it is free (expired or released), incrementing the epoch.
    fn claim(&mut self, me: &Claimant, duration: std::time::Duration) -> StoreResult<Claim> {
        self.claim_above(me, duration, 0)
    }
    /// As `claim`, the new epoch above `floor` too: `max(epoch here, floor) + 1`, where `floor`
    /// is the highest epoch another store saw — epochs stay monotonic across stores even when
    /// PostgreSQL went back in time (#20).
    fn claim_above(&mut self, me: &Claimant, duration: std::time::Duration, floor: i64)
        -> StoreResult<Claim>;
    /// Extends the lease and reports `status`; false when the epoch is no longer this
    /// process's (a newer holder exists: this instance is stale).
    fn renew(
        &mut self,
        me: &Claimant,
        epoch: i64,
        duration: std::time::Duration,
        status: &str,
    ) -> StoreResult<bool>;
    /// Gives the lease up at once (SIGTERM), so a standby takes over without waiting.
    fn release(&mut self, me: &Claimant, epoch: i64) -> StoreResult<()>;
    /// The lease row.
    fn holder(&mut self) -> StoreResult<LeaseHolder>;
}

/// How many of `sizes` (in order; `None`: no text) a read fetches within `budget` bytes: the
/// first always, then each body that still fits. A body over `max_bytes` costs nothing (it is
/// not fetched).
pub fn within_budget(sizes: &[(i64, Option<u64>)], max_bytes: u64, budget: u64) -> usize {
    let mut used = 0u64;
    for (k, (_, size)) in sizes.iter().enumerate() {
        let cost = size.filter(|n| *n <= max_bytes).unwrap_or(0);
        if k > 0 && used + cost > budget {
            return k;
        }
        used += cost;
    }
    sizes.len()
}

/// What the operations endpoint reads from own PostgreSQL (`/metrics`), every few seconds at
/// most. Ages are by the database's clock, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gauges {
    /// Unfinished rows per state (PENDING, FAILED).
    pub queue: Vec<(String, i64)>,
    /// DEAD messages nobody dismissed, per error class.
    pub dead: Vec<(String, i64)>,
    /// DEAD(UNSUPPORTED) messages nobody dismissed, per kind (SPEC §3a): the kinds the next
    /// release must learn. The most frequent [`UNSUPPORTED_KINDS`] kinds, each name cut to
    /// [`KIND_NAME_BYTES`], so upstream cannot grow the metric.
    pub unsupported: Vec<(String, i64)>,
    /// Per target: PENDING events and the age of the oldest; DEAD events.
    pub outbox: Vec<(String, i64, f64)>,
    pub dead_events: Vec<(String, i64)>,
    /// The oldest unfinished message: since msgx enqueued it (the head), and since the mailbox
    /// received it (the lag).
    pub head_age: f64,
    pub lag: f64,
    pub marks_owed: i64,
    pub marks_abandoned: i64,
    /// Open requests to the AODB (REGISTERED, SENT, WAITING) per origin (`operator`, `heal`, `first-start`):
    /// a heal's are windows whose flights await the answer (#41).
    pub requests_open: Vec<(String, i64)>,
    /// Windows a heal asked for whose flights await the AODB (`Requests::awaited`, #55): open,
    /// or unanswered after the last try and not dismissed.
    pub awaited: i64,
}

/// How many kinds `msgx_unsupported_messages` names, and how much of each kind's name.
pub const UNSUPPORTED_KINDS: i64 = 20;
pub const KIND_NAME_BYTES: i32 = 32;

impl Gauges {
    /// Windows a heal asked for whose flights await the AODB's answer (degraded).
    pub fn awaiting_answers(&self) -> i64 {
        self.awaited
    }
}

/// Own PostgreSQL as the operations endpoint reads it: its gauges (`/metrics`), on the
/// gauges' own thread.
pub trait GaugeSource {
    fn gauges(&mut self) -> StoreResult<Gauges>;
}

// The operator's documents (#40): what `lineage`, the console and `msgx dead` read.

/// One DEAD message, as `msgx dead` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub msg_id: i64,
    /// FLOP-STND, SCHD-DNLD, …; `None` when the META could not be read.
    pub type_tag: Option<String>,
    pub class: Option<ErrorClass>,
    pub error: Option<String>,
    pub attempts: i32,
    /// The row's last change: when it became DEAD, or when a person dismissed it.
    pub since: SystemTime,
    /// When a person dismissed it, and the note they left (`msgx dismiss`).
    pub dismissed: Option<(SystemTime, String)>,
}

/// Which DEAD messages to list.
#[derive(Debug, Clone, Default)]
pub struct DeadFilter {
    pub class: Option<ErrorClass>,
    /// Only rows whose last change is at or after this time.
    pub since: Option<SystemTime>,
    pub limit: i64,
}

/// A message's PROC_STATE row (or its archived copy), as `msgx trace` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRow {
    pub state: String,
    /// Found in PROC_STATE_HST: archived at this time.
    pub archived_at: Option<SystemTime>,
    pub attempts: i32,
    pub class: Option<ErrorClass>,
    pub error: Option<String>,
    pub type_tag: Option<String>,
    pub identity: Option<String>,
    pub enqueued_at: SystemTime,
    pub updated_at: SystemTime,
    /// What Redis acknowledged of its decision (V014).
    pub redis_record: Option<String>,
    /// The mailbox mark as msgx settled it: when, or why it was abandoned.
    pub marked_at: Option<SystemTime>,
    pub mark_abandoned: Option<String>,
    pub dismissed_at: Option<SystemTime>,
}

/// One outbox event of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    pub event_id: i64,
    pub msg_id: Option<i64>,
    /// The identity a consumer deduplicates on (`MsgEvent::key`).
    pub event_key: String,
    pub target: String,
    pub state: String,
    pub attempts: i32,
    pub created_at: SystemTime,
    pub sent_at: Option<SystemTime>,
    pub error: Option<String>,
    pub payload_json: String,
    /// Where it landed (V015; `None` before it was sent, or when sent before V015).
    pub landed: Option<Landed<'static>>,
}

/// When a message got its outcome, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub type_tag: Option<String>,
    pub at: SystemTime,
}

/// One mailbox row as an operator follows it (`msgx trace`, #40).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailboxEntry {
    pub received_at: Option<SystemTime>,
    pub status: Option<String>,
    /// The processed mark (msgx's or anyone's).
    pub processed_at: Option<SystemTime>,
    /// The message text, if the body is not larger than asked for.
    pub text: Option<String>,
}

/// What an operator's documents read of own PostgreSQL (#40, #56): read only, never on a
/// stage's path.
pub trait LineageReads {
    /// The DEAD messages still in PROC_STATE (dismissed ones too, marked), oldest MSG_ID first.
    fn dead_letters(&mut self, f: &DeadFilter) -> StoreResult<Vec<DeadLetter>>;
    /// `msg_id`'s row — from PROC_STATE, else the archive — and its outbox events in EVENT_ID
    /// order (SENT ones until `event-retention` prunes them).
    fn trace(&mut self, msg_id: i64) -> StoreResult<(Option<TraceRow>, Vec<TraceEvent>)>;
    /// The `KAFKA:msg` events of flight `flid`, newest first, at most `limit`: the messages
    /// that changed it.
    fn flight_events(&mut self, flid: &str, limit: i64) -> StoreResult<Vec<TraceEvent>>;
    /// What each of `ids` is and when it got its outcome (PROC_STATE, or the archive's copy).
    fn decided(&mut self, ids: &[i64]) -> StoreResult<std::collections::BTreeMap<i64, Decided>>;
}

/// Own PostgreSQL as the console reads it: the documents and the requests awaited.
pub trait OwnReads: LineageReads + Requests + Send {}
impl<T: LineageReads + Requests + Send> OwnReads for T {}

/// The mailbox as an operator follows a row of it.
pub trait MailboxEntries {
    /// The row `id`, its text fetched when at most `max_bytes` long; `None`: no such row.
    fn entry(&mut self, id: i64, max_bytes: u64) -> StoreResult<Option<MailboxEntry>>;
}
