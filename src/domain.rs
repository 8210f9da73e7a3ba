//! The domain's nouns: message processing state (`PROC_STATE`), outbox events (`MSG_EVENT`),
//! delivery targets, mailbox rows.

use std::time::SystemTime;

use crate::error::ErrorClass;

/// `PROC_STATE.STATE` (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProcStatus {
    Pending,
    Failed,
    Succeeded,
    Skipped,
    Dead,
    /// A dedup shadow row left by the archive job (G-PROC-HST).
    Archived,
}

impl ProcStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcStatus::Pending => "PENDING",
            ProcStatus::Failed => "FAILED",
            ProcStatus::Succeeded => "SUCCEEDED",
            ProcStatus::Skipped => "SKIPPED",
            ProcStatus::Dead => "DEAD",
            ProcStatus::Archived => "ARCHIVED",
        }
    }

    pub fn parse(s: &str) -> Option<ProcStatus> {
        [
            ProcStatus::Pending,
            ProcStatus::Failed,
            ProcStatus::Succeeded,
            ProcStatus::Skipped,
            ProcStatus::Dead,
            ProcStatus::Archived,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }

    /// Terminal rows owe exactly one mailbox mark (INV-8).
    pub fn is_terminal(self) -> bool {
        matches!(self, ProcStatus::Succeeded | ProcStatus::Skipped | ProcStatus::Dead)
    }

    /// Rows that occupy the FIFO (INV-3): PENDING and FAILED only, never ARCHIVED.
    pub fn is_unfinished(self) -> bool {
        matches!(self, ProcStatus::Pending | ProcStatus::Failed)
    }
}

/// One `PROC_STATE` row as the pump sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcRow {
    pub msg_id: i64,
    pub state: ProcStatus,
    pub attempts: u32,
    pub next_attempt_at: Option<SystemTime>,
    pub error_class: Option<ErrorClass>,
    pub last_error: Option<String>,
    pub identity_key: Option<String>,
    /// When the message first failed (the head-deadline anchor); cleared by replay.
    pub first_failed_at: Option<SystemTime>,
    /// `FLOP-STND`, `SCHD-DNLD`, … once the META was read.
    pub type_tag: Option<String>,
    /// The mailbox's `DATE_RECEIVED` (the processing latency's start), if it had one.
    pub received_at: Option<SystemTime>,
}

impl ProcRow {
    /// A row as enqueued: PENDING, never tried.
    pub fn pending(msg_id: i64, received_at: Option<SystemTime>) -> ProcRow {
        ProcRow {
            msg_id,
            state: ProcStatus::Pending,
            attempts: 0,
            next_attempt_at: None,
            error_class: None,
            last_error: None,
            identity_key: None,
            first_failed_at: None,
            type_tag: None,
            received_at,
        }
    }
}

/// Why a message was SKIPPED, as `PROC_STATE.LAST_ERROR` keeps it (`kind:detail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// An ignore rule matched its META (G-IGNORE): `ignored:<rule>`. Final.
    Ignored(String),
    /// Another message holds its identity (INV-9): `duplicate-of:<msg_id>`. Final.
    DuplicateOf(i64),
    /// A kind msgx recognises and does not process today (a request to the platform, another
    /// platform's document): `not-for-msgx:<why>`. Replayable (`msgx replay --skipped`) once
    /// msgx learns the kind.
    NotForMsgx(String),
}

impl SkipReason {
    /// The stored form read back; `None` for a text no version of msgx writes.
    pub fn parse(s: &str) -> Option<SkipReason> {
        let (kind, detail) = s.split_once(':')?;
        match kind {
            "ignored" => Some(SkipReason::Ignored(detail.to_string())),
            "duplicate-of" => detail.parse().ok().map(SkipReason::DuplicateOf),
            "not-for-msgx" => Some(SkipReason::NotForMsgx(detail.to_string())),
            _ => None,
        }
    }

    pub fn is_replayable(&self) -> bool {
        matches!(self, SkipReason::NotForMsgx(_))
    }
}

/// The stored form (`PROC_STATE.LAST_ERROR` of a SKIPPED row), read back by [`SkipReason::parse`].
impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::Ignored(rule) => write!(f, "ignored:{rule}"),
            SkipReason::DuplicateOf(id) => write!(f, "duplicate-of:{id}"),
            SkipReason::NotForMsgx(why) => write!(f, "not-for-msgx:{why}"),
        }
    }
}

/// What Redis acknowledged of a SUCCEEDED message's decision, recorded with the outcome
/// (`PROC_STATE.REDIS_RECORD`, #37): the evidence the consistency check stands on. A message
/// whose decision changed no flight (reference data, an update a newer message superseded, one
/// for a flight a newer message deleted, a record of unknown elements only) never reaches Redis
/// and records nothing (`None`): its missing journal entry proves nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RedisRecord {
    /// A journal entry; whether its changes were applied is not known (a decision an earlier
    /// attempt applied and this one reused).
    Journal,
    /// A journal entry and every change of the decision, at version MSG_ID.
    Applied,
    /// As `Applied`, and the plan's generation advanced to this snapshot.
    Generation,
    /// A journal entry of a snapshot not newer than the plan's generation: none of its changes
    /// applied (a lower MSG_ID taken after a higher snapshot, its mailbox row committed late). A
    /// heal, which replays in MSG_ID order, lays none of it on (seeds 13255, 14834). Written as
    /// `journal` in `REDIS_RECORD` (what a release before V020 reads) with `SNAPSHOT_STALE`.
    Stale,
}

impl RedisRecord {
    pub const ALL: [RedisRecord; 4] =
        [RedisRecord::Journal, RedisRecord::Applied, RedisRecord::Generation, RedisRecord::Stale];

    pub fn as_str(self) -> &'static str {
        match self {
            RedisRecord::Journal => "journal",
            RedisRecord::Applied => "applied",
            RedisRecord::Generation => "generation",
            RedisRecord::Stale => "stale",
        }
    }

    pub fn parse(s: &str) -> Option<RedisRecord> {
        RedisRecord::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// `PROC_STATE.REDIS_RECORD`'s value and `SNAPSHOT_STALE`'s (V020): a stale snapshot is a
    /// `journal` entry to a release that does not know the column.
    pub fn columns(self) -> (&'static str, Option<bool>) {
        match self {
            RedisRecord::Stale => (RedisRecord::Journal.as_str(), Some(true)),
            r => (r.as_str(), None),
        }
    }

    /// The record the two columns hold (`None`: a value no msgx writes).
    pub fn from_columns(record: &str, stale: Option<bool>) -> Option<RedisRecord> {
        match (RedisRecord::parse(record)?, stale) {
            (RedisRecord::Journal, Some(true)) => Some(RedisRecord::Stale),
            (RedisRecord::Stale, _) => None,
            (r, _) => Some(r),
        }
    }

    /// Whether Redis holds the decision's fields at version MSG_ID (the version sample's proof).
    pub fn wrote_fields(self) -> bool {
        matches!(self, RedisRecord::Applied | RedisRecord::Generation)
    }
}

/// A mailbox row the poller found (nothing is parsed at ingress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboundRow {
    pub id: i64,
    pub received_at: Option<SystemTime>,
}

/// A mailbox row as the poller reads it: every row counts for gap tracking, `wanted` ones
/// (unmarked, in the status filter) are enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailboxRow {
    pub id: i64,
    pub received_at: Option<SystemTime>,
    pub wanted: bool,
}

impl MailboxRow {
    pub fn inbound(&self) -> InboundRow {
        InboundRow { id: self.id, received_at: self.received_at }
    }
}

/// Where an outbox event goes (`MSG_EVENT.TARGET`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    KafkaMsg,
    KafkaSchd,
    Coutmsgs,
}

impl Target {
    pub fn as_str(self) -> &'static str {
        match self {
            Target::KafkaMsg => "KAFKA:msg",
            Target::KafkaSchd => "KAFKA:schd",
            Target::Coutmsgs => "COUTMSGS",
        }
    }

    pub fn parse(s: &str) -> Option<Target> {
        [Target::KafkaMsg, Target::KafkaSchd, Target::Coutmsgs].into_iter().find(|t| t.as_str() == s)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// As `MSG_EVENT.TARGET` and the journal write it: `KAFKA:msg`, `KAFKA:schd`, `COUTMSGS`.
impl serde::Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Target {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Target, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Target::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown event target {s:?}")))
    }
}

/// `MSG_EVENT.STATE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStatus {
    Pending,
    Sent,
    Dead,
}

impl EventStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Pending => "PENDING",
            EventStatus::Sent => "SENT",
            EventStatus::Dead => "DEAD",
        }
    }

    pub fn parse(s: &str) -> Option<EventStatus> {
        [EventStatus::Pending, EventStatus::Sent, EventStatus::Dead].into_iter().find(|e| e.as_str() == s)
    }
}

/// An outbox event the pump writes in the same transaction as SUCCEEDED.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NewEvent {
    pub target: Target,
    /// The flight id: Kafka key and per-flight order.
    pub partition_key: String,
    pub event_type: String,
    pub state_version: i64,
    pub payload_json: String,
}

/// An outbox row as the dispatcher sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgEvent {
    pub event_id: i64,
    pub msg_id: Option<i64>,
    pub target: Target,
    pub partition_key: String,
    /// The generation; `KAFKA:schd` rows are reset in place by a newer one.
    pub state_version: i64,
    pub payload_json: String,
    pub attempts: u32,
    pub next_attempt_at: Option<SystemTime>,
    /// When delivery was last started (COUTMSGS stamps it before inserting).
    pub last_attempt_at: Option<SystemTime>,
    /// When the outbox row was written: its message's SUCCEEDED (the delivery latency's start).
    pub created_at: Option<SystemTime>,
    /// Its ordinal among its message's events (`None` for rows written before V013).
    pub ordinal: Option<i32>,
}

impl MsgEvent {
    /// The identity a consumer deduplicates on (header `event_key`): `MSG_ID.ordinal.digest` —
    /// the message, the event's place among its events, and the first 8 hex digits of the
    /// SHA-256 of its payload. The same logical event sent again carries the same key; two
    /// different events never share one — not even when a message had to be decided again after
    /// every store that held its decision forgot it (SPEC §4.10, #20) — whatever sequence a
    /// PostgreSQL rolled back hands out again. Rows from before V013: `e<EVENT_ID>`.
    pub fn key(&self) -> String {
        match (self.msg_id, self.ordinal) {
            (Some(m), Some(o)) => format!("{m}.{o}.{}", payload_digest(&self.payload_json)),
            _ => format!("e{}", self.event_id),
        }
    }
}

/// The first 8 hex digits of the SHA-256 of `payload`: the part of `event_key` that tells two
/// different decisions of one message apart.
pub fn payload_digest(payload: &str) -> String {
    use sha2::{Digest, Sha256};
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Digits written straight into the key's text: a `format!` per byte was half of the
    // digest's cost at dispatch (#23).
    let mut out = String::with_capacity(8);
    for b in &Sha256::digest(payload.as_bytes())[..4] {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 15)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    /// The key's digest is SHA-256's first four bytes in lowercase hex: consumers deduplicate on
    /// it, so its text must not change with how it is written (#23).
    #[test]
    fn a_payload_digest_is_the_first_eight_hex_digits_of_its_sha256() {
        assert_eq!(super::payload_digest("{}"), "44136fa3");
        assert_eq!(super::payload_digest(""), "e3b0c442");
    }
}

/// An outbound message as its outbox event to target COUTMSGS carries it (a request to the
/// AODB, #41): the row's routing id and text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutboundIntent {
    pub routing_id: String,
    pub xml: String,
}

/// What an inbound message answers, if it is an answer (G-RESP-GUARD): a word of the domain,
/// here so that a decision (`handlers::Decision::answer`) carries it without the handlers
/// naming `requests`, the room above them (#65: no circle between rooms).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Answer {
    /// `SCHD-RESP`, with its earliest and latest scheduled time as a window's key writes them
    /// (`2026-03-05T09:00`; none when no record has one): it answers the `RQFD` requests whose
    /// window holds them — SIS answers name no request, so the times are all that tells (#55);
    /// without times it answers none.
    Window(Option<(String, String)>),
    /// A reference `RESP` of this type: the open `RQRD` request for it.
    Reference(String),
    /// A family-B message carrying `RMID`: the request whose `MGID` it names.
    Rmid(String),
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Window(Some((a, b))) => write!(f, "flights {a}..{b} (RQFD)"),
            Answer::Window(None) => f.write_str("a flight window (RQFD)"),
            Answer::Reference(t) => write!(f, "reference list {t} (RQRD)"),
            Answer::Rmid(m) => write!(f, "RMID {m}"),
        }
    }
}
