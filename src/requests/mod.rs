//! Requests to the AODB (SPEC §4.11, G-REQ-TRACK, G-RESP-GUARD): what msgx can ask, the text it
//! writes to `COUTMSGS` in either dialect, a request's states, and what an inbound message
//! answers. Pure: the store adapters keep `REQ_TRACK`, the outbound stage delivers the text, the
//! pump's commit closes the request an answer answers.
//!
//! The formats where FORMAT.md is silent are msgx's choice, documented in docs/events.md:
//! a family-A window as `ddMMMyyHHmm` (the body's time format), `SEQN` = the request's number
//! on the wire (`seqn_of`), family B's `MGID` = `MSGX` and that number on 28 digits, its window as `STTM`/`ENTM`
//! (`yyyyMMddHHmmss`) and one flight as `FLID`.

use std::fmt;
use std::time::SystemTime;

use jiff::civil::DateTime;

use crate::clock::zone::MailboxZone;
use crate::codec::{Dialect, Message, MsgKind, SchdKind};
use crate::config::{RequestDialect, RequestPolicy};
use crate::handlers::sodt_text;

#[cfg(test)]
mod tests;

/// What an operator (or msgx itself) asks the AODB for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// The flights scheduled in `[from, to]` (local airport time): answered by a snapshot of
    /// the window (`SCHD-RESP`, or family B's `DFOE` with `RMID`).
    Flights { from: DateTime, to: DateTime },
    /// One reference list (`SLST`, `GLST`, …): answered by that type's `RESP`. Family A only.
    Reference(String),
    /// One flight by FLID. Family B only (`RQTP` = `FLID`).
    Flight(String),
}

/// Why an ask cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    #[error("--from {from} is after --to {to}")]
    Window { from: String, to: String },
    #[error("{0:?} is not a time (yyyy-MM-ddTHH:mm, local airport time)")]
    Time(String),
    #[error("{0:?} is not a reference type msgx knows (SLST, GLST, … as in docs/events.md)")]
    ReferenceType(String),
    #[error("the {dialect} dialect has no {what} request (msgx.requests.dialect)")]
    Dialect { dialect: &'static str, what: &'static str },
    #[error("an empty FLID")]
    Flid,
    /// A FLID no flight msgx keeps can have (#53): longer than a flight key, or holding a
    /// control character (COUTMSGS would hold XML that is not well-formed).
    #[error("FLID {shown} {why}")]
    FlidRefused { shown: String, why: String },
}

/// Parses an operator's `--from`/`--to`: `yyyy-MM-ddTHH:mm` (seconds allowed), local time.
pub fn parse_time(s: &str) -> Result<DateTime, AskError> {
    s.trim().parse::<DateTime>().map_err(|_| AskError::Time(s.to_string()))
}

impl Ask {
    pub fn flights(from: &str, to: &str) -> Result<Ask, AskError> {
        let (from, to) = (parse_time(from)?, parse_time(to)?);
        if from > to {
            return Err(AskError::Window { from: iso(from), to: iso(to) });
        }
        Ok(Ask::Flights { from, to })
    }

    pub fn reference(rtype: &str) -> Result<Ask, AskError> {
        let t = rtype.trim().to_ascii_uppercase();
        crate::codec::reference::key_of(&t).ok_or_else(|| AskError::ReferenceType(rtype.to_string()))?;
        Ok(Ask::Reference(t))
    }

    pub fn flight(flid: &str) -> Result<Ask, AskError> {
        let f = flid.trim();
        if f.is_empty() {
            return Err(AskError::Flid);
        }
        let max = crate::handlers::EVENT_KEY_MAX_CHARS;
        let refused =
            |why: String| AskError::FlidRefused { shown: crate::logline::Upstream(f).to_string(), why };
        if f.chars().count() > max {
            return Err(refused(format!(
                "has {} characters; a flight key has at most {max}",
                f.chars().count()
            )));
        }
        if let Some(c) = f.chars().find(|c| c.is_control() || !crate::codec::xml_char(*c)) {
            return Err(refused(format!("holds the control character U+{:04X}", c as u32)));
        }
        Ok(Ask::Flight(f.to_string()))
    }

    /// `REQ_TRACK.REQ_TYPE`: the message type written (`RQFD`, `RQRD`, `RQDF`).
    pub fn req_type(&self, dialect: RequestDialect) -> &'static str {
        match (self, dialect) {
            (Ask::Flights { .. }, RequestDialect::Sis) => "RQFD",
            (Ask::Reference(_), _) => "RQRD",
            (Ask::Flights { .. } | Ask::Flight(_), _) => "RQDF",
        }
    }

    /// `REQ_TRACK.REQ_KEY`: at most one open request per type and key (the V001 index).
    pub fn req_key(&self) -> String {
        match self {
            Ask::Flights { from, to } => format!("{}/{}", iso(*from), iso(*to)),
            Ask::Reference(t) => t.clone(),
            Ask::Flight(f) => format!("FLID:{f}"),
        }
    }

    /// The flight window a request's key (`FROM/TO`) names, asked again as it was (#55).
    pub fn window(req_key: &str) -> Option<Ask> {
        let (from, to) = req_key.split_once('/')?;
        Ask::flights(from, to).ok()
    }

    /// Refuses what the configured dialect cannot ask.
    pub fn check(&self, dialect: RequestDialect) -> Result<(), AskError> {
        match (self, dialect) {
            (Ask::Reference(_), RequestDialect::Platform) => {
                Err(AskError::Dialect { dialect: "platform", what: "reference-list" })
            }
            (Ask::Flight(_), RequestDialect::Sis) => {
                Err(AskError::Dialect { dialect: "sis", what: "one-flight" })
            }
            _ => Ok(()),
        }
    }
}

/// How msgx asks the AODB by itself (a heal, a first start, a heal's next try): the requests'
/// policy and the mailbox's zone (a window's day, the text's `DTTM`).
#[derive(Debug, Clone)]
pub struct Asking {
    pub policy: RequestPolicy,
    pub zone: MailboxZone,
}

impl Asking {
    pub fn of(cfg: &crate::config::Config) -> Asking {
        Asking { policy: cfg.requests.clone(), zone: cfg.outbound.zone.clone() }
    }

    /// The text of `ask` as number `seqn`, written at `now`.
    pub fn text(&self, ask: &Ask, seqn: i64, now: SystemTime) -> Outgoing {
        text(&self.policy, &self.zone, ask, seqn, now)
    }
}

/// When a heal's EXPIRED request is asked again (#55): `msgx.requests.heal-backoff` after it
/// expired, doubled for each try before it; `None` for a request that is not a heal's expired
/// one, or that was the last try (`msgx.requests.heal-tries`): its window waits for a person.
pub fn next_try_at(r: &Request, policy: &RequestPolicy) -> Option<SystemTime> {
    let heal = Origin::parse(&r.origin) == Some(Origin::Heal);
    if !heal || r.state != ReqState::Expired || r.tries >= policy.heal_tries {
        return None;
    }
    let doubled = 1u32 << u32::from(r.tries.saturating_sub(1)).min(16);
    Some(r.updated_at + policy.heal_backoff.saturating_mul(doubled))
}

/// Whether a flight window's request key (`FROM/TO`) holds a plan index key (`yyyyMMddHHmm`).
pub fn window_holds(req_key: &str, sodt_key: i64) -> bool {
    let t = sodt_text(sodt_key);
    holds(req_key, &t, &t)
}

/// A time as a window's key and an answer's span write it (`2026-03-05T09:00`), read as a time:
/// none when it is not one (#55: compared as times, never as text).
fn key_time(t: &str) -> Option<DateTime> {
    DateTime::strptime("%Y-%m-%dT%H:%M", t).ok()
}

/// Whether a flight window's request key (`FROM/TO`) holds the times `from..=to`. The one
/// place a window is compared: the answer guard of both stores comes here (`closes`).
fn holds(req_key: &str, from: &str, to: &str) -> bool {
    let Some((lo, hi)) = req_key.split_once('/') else { return false };
    match (key_time(lo), key_time(hi), key_time(from), key_time(to)) {
        (Some(lo), Some(hi), Some(from), Some(to)) => lo <= from && from <= to && to <= hi,
        _ => false,
    }
}

fn iso(t: DateTime) -> String {
    t.strftime("%Y-%m-%dT%H:%M").to_string()
}

/// The text of a request as it goes to `COUTMSGS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub routing_id: String,
    pub xml: String,
    /// Family B's `MGID`, which its answer carries as `RMID`.
    pub mgid: Option<String>,
}

/// Family B's `MGID` of a request, from its number on the wire (`seqn_of`): its answer carries
/// it back as `RMID`.
pub fn mgid_of(seqn: i64) -> String {
    format!("MSGX{seqn:028}")
}

/// A request's number (`REQ_TRACK.SEQN`, the number in its `MGID`) for the request `req_id`
/// registered at `now`: the tenths of a second since 1970 and the last digit of its id. No
/// rollback hands it out again (§4.10, #55): a PostgreSQL that went back in time issues a
/// `req_id` again, but later, so with another number. Two requests would share one only when
/// registered in the same tenth of a second with ids a multiple of ten apart (more than a
/// hundred a second): the store then takes the first free number of the tenths after it
/// ([`free_seqn`]), and `uk_req_seqn` refuses a number two writers took at once rather than
/// send it twice. Only such a burst, lost by a rollback that took less time than the burst
/// borrowed ahead, could see a number again.
pub fn seqn_of(req_id: i64, now: SystemTime) -> i64 {
    let tenths = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() / 100);
    i64::try_from(tenths).unwrap_or(i64::MAX / 10) * 10 + req_id.rem_euclid(10)
}

/// The first of `wanted`'s numbers for later tenths of a second (the same last digit,
/// [`SEQN_BUMPS`] of them) that `taken` does not hold: a burst of more than a hundred requests
/// a second borrows the next tenths' numbers. `None`: all taken, the registration is refused.
pub fn free_seqn(wanted: i64, taken: impl Fn(i64) -> bool) -> Option<i64> {
    (0..SEQN_BUMPS).map(|k| wanted + 10 * k).find(|s| !taken(*s))
}

/// How many later tenths of a second a registration may borrow a number from.
pub const SEQN_BUMPS: i64 = 100;

/// Why a registration found no free number from `wanted` on ([`free_seqn`] gave none).
pub fn no_free_seqn(wanted: i64) -> String {
    format!("no free request number near {wanted}: more than ten requests a tenth of a second for {SEQN_BUMPS} of them")
}

/// How many numbers the `SEQN` on the wire has: six digits, as every sample's, and what a
/// subsystem sequence kept as `MEDIUMINT` holds (#68: sixteen digits were refused).
pub const WIRE_SEQNS: i64 = 1_000_000;

/// The `SEQN` a request with number `seqn` carries on the wire: its last six digits — the
/// tenth of a second within a cycle of 10 000 s (2 h 46 min 40 s) and the id's last digit.
/// Within a cycle no two requests carry one (the unique number above), nor after a rollback;
/// after it, a number comes again, long after a request's answer is due
/// (`msgx.requests.timeout`, 10 min; a heal's next try is a request of its own). An answer is
/// matched by its window, its reference type or its `RMID` (the `MGID`, which carries the
/// whole number), never by the `SEQN`.
pub fn wire_seqn(seqn: i64) -> i64 {
    seqn.rem_euclid(WIRE_SEQNS)
}

/// The request's text in the configured dialect. `now` is written as `DTTM`/`DDTM` in the
/// mailbox's zone, as msgx writes every mailbox time.
pub fn text(policy: &RequestPolicy, zone: &MailboxZone, ask: &Ask, seqn: i64, now: SystemTime) -> Outgoing {
    let stamp = zone.civil(now).strftime("%Y%m%d%H%M%S").to_string();
    let e = |s: &str| quick_xml::escape::escape(s).into_owned();
    let sndr = e(&policy.sender);
    match policy.dialect {
        RequestDialect::Sis => {
            let (styp, body, routing) = match ask {
                Ask::Flights { from, to } => (
                    "NONE".to_string(),
                    format!(
                        "<RQFD><STDB>{}</STDB><STDE>{}</STDE></RQFD>",
                        e(&window_time(policy, *from)),
                        e(&window_time(policy, *to))
                    ),
                    "VIEWRQFD",
                ),
                Ask::Reference(t) => (e(t), format!("<RQRD><RTYP>{}</RTYP></RQRD>", e(t)), "VIEWRQRD"),
                Ask::Flight(_) => unreachable!("refused by Ask::check"),
            };
            let ty = ask.req_type(policy.dialect);
            let wire = wire_seqn(seqn);
            let xml = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><MSG><META><SNDR>{sndr}</SNDR><SEQN>{wire}</SEQN>\
                 <DTTM>{stamp}</DTTM><TYPE>{ty}</TYPE><STYP>{styp}</STYP></META>{body}</MSG>"
            );
            Outgoing { routing_id: routing.into(), xml, mgid: None }
        }
        RequestDialect::Platform => {
            let mgid = mgid_of(seqn);
            let apot = e(&policy.airport);
            let what = match ask {
                Ask::Flights { from, to } => format!(
                    "<RQTP>DFTM</RQTP><STTM>{}</STTM><ENTM>{}</ENTM>",
                    from.strftime("%Y%m%d%H%M%S"),
                    to.strftime("%Y%m%d%H%M%S")
                ),
                Ask::Flight(f) => format!("<RQTP>FLID</RQTP><FLID>{}</FLID>", e(f)),
                Ask::Reference(_) => unreachable!("refused by Ask::check"),
            };
            let xml = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><MSG><META><SNDR>{sndr}</SNDR><RCVR>{rcvr}</RCVR>\
                 <SEQN>{wire}</SEQN><DDTM>{stamp}</DDTM><TYPE>REQE</TYPE><STYP>RQDF</STYP><SORC>{sndr}</SORC>\
                 <MGID>{mgid}</MGID><RMID></RMID><APOT>{apot}</APOT></META><RQDF><BAPT>{apot}</BAPT>{what}</RQDF></MSG>",
                rcvr = e(&policy.receiver),
                wire = wire_seqn(seqn),
            );
            Outgoing { routing_id: "VIEWRQDF".into(), xml, mgid: Some(mgid) }
        }
    }
}

/// A window's time as an RQFD writes it (`msgx.requests.window-format`, checked at start-up;
/// the default writes `ddMMMyyHHmm`).
fn window_time(policy: &RequestPolicy, t: DateTime) -> String {
    jiff::fmt::strtime::format(&policy.window_format, t)
        .expect("msgx.requests.window-format was checked when the configuration was read")
        .to_ascii_uppercase()
}

/// A request's state in `REQ_TRACK` (G-REQ-TRACK).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReqState {
    /// In the outbox, not yet in `COUTMSGS`.
    Registered,
    /// Inserted into `COUTMSGS` (its row id recorded).
    Sent,
    /// Its timeout runs (`expires_at`).
    Waiting,
    /// Answered (the answering MSG_ID recorded).
    Done,
    /// No answer within `msgx.requests.timeout`.
    Expired,
}

impl ReqState {
    pub const ALL: [ReqState; 5] =
        [ReqState::Registered, ReqState::Sent, ReqState::Waiting, ReqState::Done, ReqState::Expired];

    pub fn as_str(self) -> &'static str {
        match self {
            ReqState::Registered => "REGISTERED",
            ReqState::Sent => "SENT",
            ReqState::Waiting => "WAITING",
            ReqState::Done => "DONE",
            ReqState::Expired => "EXPIRED",
        }
    }

    /// A state as the database stores it; `None` for one msgx does not know (the adapter's
    /// error names it).
    pub fn parse(s: &str) -> Option<ReqState> {
        ReqState::ALL.into_iter().find(|r| r.as_str() == s)
    }

    pub fn is_open(self) -> bool {
        matches!(self, ReqState::Registered | ReqState::Sent | ReqState::Waiting)
    }
}

impl fmt::Display for ReqState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who asked. Only a heal's open request is a window whose flights await the answer (degraded);
/// a release that does not know an origin reads it as not a heal's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// `msgx request …`.
    Operator,
    /// A heal that could not rebuild flights from the mailbox texts (#41).
    Heal,
    /// The first start: Redis never written and nothing msgx holds to fill it, today's flights
    /// asked for (`msgx.requests.on-empty`, #55). Nothing was lost, so nothing is degraded.
    FirstStart,
}

impl Origin {
    pub const ALL: [Origin; 3] = [Origin::Operator, Origin::Heal, Origin::FirstStart];

    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Operator => "operator",
            Origin::Heal => "heal",
            Origin::FirstStart => "first-start",
        }
    }

    /// An origin as the database stores it; `None` for one this release does not know (a newer
    /// release's, read as not a heal's).
    pub fn parse(s: &str) -> Option<Origin> {
        Origin::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// One `REQ_TRACK` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub req_id: i64,
    pub req_type: String,
    pub req_key: String,
    pub state: ReqState,
    pub origin: String,
    /// The outbox event that carries it.
    pub event_id: Option<i64>,
    pub coutmsgs_id: Option<i64>,
    pub mgid: Option<String>,
    /// The message that answered it (an EXPIRED request answered late keeps its state).
    pub answer_msg_id: Option<i64>,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
    pub expires_at: Option<SystemTime>,
    /// Its number (`seqn_of`; its `req_id` when an older release registered it); on the wire its
    /// last six digits ([`wire_seqn`]).
    pub seqn: i64,
    /// Which try it is: a heal's request that expired is asked again (`msgx.requests.heal-tries`).
    pub tries: u16,
    /// When a person dismissed it, and why (`msgx requests --dismiss`): its window awaits no
    /// answer any more.
    pub dismissed: Option<(SystemTime, String)>,
}

impl Request {
    /// The `SEQN` it carries on the wire.
    pub fn wire_seqn(&self) -> i64 {
        wire_seqn(self.seqn)
    }
}

/// The longest note a person leaves on a dismissed request (`REQ_TRACK.DISMISSED_NOTE`).
pub const NOTE_MAX_CHARS: usize = 500;

/// What a request needs to be registered: its ask and the text that goes out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRequest {
    pub req_type: &'static str,
    pub req_key: String,
    pub origin: Origin,
    /// Which try: 1, or one more than the heal's request it asks again.
    pub tries: u16,
}

impl NewRequest {
    /// A first try.
    pub fn first(req_type: &'static str, req_key: String, origin: Origin) -> NewRequest {
        NewRequest { req_type, req_key, origin, tries: 1 }
    }
}

pub use crate::domain::Answer;

/// What `msg` answers: `SCHD-RESP`, a reference `RESP`, or a family-B message with an `RMID`.
pub fn answer_of(msg: &Message) -> Option<Answer> {
    if msg.meta.dialect == Dialect::B {
        return msg.meta.rmid.clone().filter(|r| !r.is_empty()).map(Answer::Rmid);
    }
    match msg.kind {
        MsgKind::Schd(SchdKind::Resp) => {
            let span = crate::handlers::window_of(msg).map(|(a, b)| (sodt_text(a), sodt_text(b)));
            Some(Answer::Window(span))
        }
        MsgKind::Reference { rtype, op: crate::codec::reference::RefOp::Resp } => {
            Some(Answer::Reference(rtype.to_string()))
        }
        _ => None,
    }
}

/// What the commit made of an answer, read back after it (logged, and counted when nobody
/// asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It closed this open request (DONE).
    Closed(Request),
    /// It answered this request after it EXPIRED: processed, and noted on the request.
    Late(Request),
    /// No request explains it: processed as any other message, counted.
    Unsolicited,
}

impl Answer {
    /// Whether `r`'s window holds this answer's scheduled times (a window answer only).
    pub fn within(&self, r: &Request) -> bool {
        matches!(self, Answer::Window(Some((a, b))) if holds(&r.req_key, a, b))
    }

    /// Whether this answer answers `r`: a window answer an `RQFD` whose window holds its times,
    /// a reference answer the `RQRD` of its type, a platform answer the request of its MGID.
    pub fn answers(&self, r: &Request) -> bool {
        match self {
            Answer::Window(_) => r.req_type == "RQFD" && self.within(r),
            Answer::Reference(t) => r.req_type == "RQRD" && r.req_key == *t,
            Answer::Rmid(m) => r.mgid.as_deref() == Some(m.as_str()),
        }
    }
}

/// The request `answer` closes among `requests` (G-RESP-GUARD, #55): only one it answers
/// ([`Answer::answers`]) and that was sent — the oldest such open one (SENT, WAITING); else the
/// newest such EXPIRED one no message answered yet (a late answer, noted on it); else none (the
/// answer is unsolicited). A request still REGISTERED, or one that expired without ever reaching
/// `COUTMSGS`, was asked of nobody and is answered by nothing. Both stores decide with this
/// function (the PostgreSQL adapter on the candidates it locks).
pub fn closes<'a>(answer: &Answer, requests: impl IntoIterator<Item = &'a Request>) -> Option<&'a Request> {
    let candidates: Vec<&Request> = requests
        .into_iter()
        .filter(|r| r.answer_msg_id.is_none() && r.coutmsgs_id.is_some() && answer.answers(r))
        .collect();
    let open = candidates
        .iter()
        .filter(|r| matches!(r.state, ReqState::Sent | ReqState::Waiting))
        .min_by_key(|r| r.req_id);
    let late = candidates.iter().filter(|r| r.state == ReqState::Expired).max_by_key(|r| r.req_id);
    open.or(late).copied()
}

/// What the commit made of each answer of `answers` (MSG_ID, answer), given the requests the
/// messages answered as read back after it.
pub fn verdicts(answers: &[(i64, &Answer)], answered: &[Request]) -> Vec<(i64, Verdict)> {
    answers
        .iter()
        .map(|(m, _)| {
            let v = match answered.iter().find(|r| r.answer_msg_id == Some(*m)) {
                Some(r) if r.state == ReqState::Done => Verdict::Closed(r.clone()),
                Some(r) => Verdict::Late(r.clone()),
                None => Verdict::Unsolicited,
            };
            (*m, v)
        })
        .collect()
}
