//! What a message means for each flight. Handlers are pure: `decide(view, message) ->
//! Decision`. They read only the flights the message concerns (by FLID, or the daily plan's
//! window for a snapshot) and touch no store; the pump applies the decision (Redis first, then
//! one PostgreSQL transaction).

mod flop;
#[cfg(test)]
mod golden;
pub mod plan;
mod platform;
mod reference;
mod schedule;
pub mod state;

pub use flop::{announced, restated};
pub use state::{FlightState, TOMBSTONE_KEEP};

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::codec::{Body, DfoeKind, Message, MsgKind};
use crate::domain::{NewEvent, Target};

/// One flight's fields (`FIELD → value`), as held in Redis.
pub type Flight = BTreeMap<String, String>;

/// The flights a message concerns, by FLID, with their field versions. Absent flights are
/// absent (or present without fields, when a tombstone remains).
///
/// Shared with the flight store's cache of what it last read (`store::flights::net::Known`):
/// a round decides on the same states the store keeps, and a state is copied only when a
/// decision changes it and a later message of the round reads it (#23: every flight a round
/// named was copied for the round, then dropped with it).
pub type FlightView = BTreeMap<String, Arc<FlightState>>;

/// What a handler sees: the flights it asked for, and for a snapshot the FLIDs the daily plan
/// holds in the snapshot's window.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct View {
    pub flights: FlightView,
    pub window: Vec<String>,
}

/// What the pump must read before deciding.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Need {
    pub flids: Vec<String>,
    /// A snapshot's window `[min SODT, max SODT]` as `yyyyMMddHHmm` numbers.
    pub window: Option<(i64, i64)>,
}

impl Need {
    /// The message names flights or a plan window: its decision goes through Redis.
    pub fn names_flights(&self) -> bool {
        !self.flids.is_empty() || self.window.is_some()
    }
}

/// A change to one flight's live state.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FlightChange {
    pub flid: String,
    pub set: Vec<(String, String)>,
    pub clear: Vec<String>,
    /// The flight goes (FDEL, or absent from a snapshot's window): every field no later message
    /// wrote, and the delete is remembered (a tombstone) so no older message brings it back.
    /// Applied before `set` (see [`FlightState::apply`]).
    #[serde(default)]
    pub delete: bool,
    /// Its SODT as `yyyyMMddHHmm`, kept in the daily plan's index for snapshot windows.
    #[serde(default)]
    pub sodt: Option<i64>,
}

/// A change to `REF_MASTER` (reference data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefChange {
    /// The type's complete list is `keys` (DNLD/RESP): every other key of the type goes.
    Keep {
        rtype: String,
        keys: Vec<String>,
    },
    Upsert {
        rtype: String,
        rkey: String,
        payload_json: String,
    },
    Delete {
        rtype: String,
        rkey: String,
    },
    /// The seasonal plan `season` is replaced whole by `records` (flight key → record JSON).
    Season {
        season: String,
        airport: Option<String>,
        start: Option<String>,
        end: Option<String>,
        records: Vec<(String, String)>,
    },
}

/// Everything a message causes. Its parts are applied by the pump, never by the handler.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Decision {
    #[serde(default)]
    pub flights: Vec<FlightChange>,
    /// A daily-plan snapshot (SCHD DNLD/RESP): the plan's generation advances with a
    /// compare-and-set on the message id, so applying it twice changes nothing the second time.
    #[serde(default)]
    pub snapshot: bool,
    /// Outbox events (notifications, schd pushes, outbound intents), in the order they go out.
    #[serde(default)]
    pub events: Vec<NewEvent>,
    #[serde(default)]
    pub references: Vec<RefChange>,
    /// What the handler tolerated and an operator should hear about (the pump logs each as a
    /// WARN), e.g. a reference package whose `RECS` does not match its records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What the message answers, if it answers a request (G-RESP-GUARD): set by the pump, not
    /// by a handler; the commit closes the request it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<crate::domain::Answer>,
    /// The rules that made it (the version of the [`crate::codec::Rulebook`] of the instance that decided it, #52): set by
    /// the pump, journalled with the decision, so a decision a later attempt reuses — perhaps
    /// one of the next release — is recorded with the rules that made it. `None`: a journal
    /// entry of a release before #52.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<u32>,
}

/// Why a message has no decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// No handler for the kind (yet): FAILED(UNSUPPORTED), retried, replayable.
    #[error("no handler for {0}")]
    Unsupported(String),
    /// The package breaks the protocol: DEAD(PROTOCOL), nothing of it applied.
    #[error("{0}")]
    Protocol(String),
}

/// `yyyy-MM-ddTHH:mm` or `yyyy-MM-dd` → `yyyyMMddHHmm`.
pub fn sodt_key(iso: &str) -> Option<i64> {
    let digits: String = iso.chars().filter(|c| c.is_ascii_digit()).collect();
    match digits.len() {
        12 => digits.parse().ok(),
        8 => format!("{digits}0000").parse().ok(),
        _ => None,
    }
}

/// `yyyyMMddHHmm` → `yyyy-MM-ddTHH:mm`: [`sodt_key`] undone (a request window's key, a day).
pub fn sodt_text(k: i64) -> String {
    let (d, hm) = (k / 10_000, k % 10_000);
    format!("{:04}-{:02}-{:02}T{:02}:{:02}", d / 10_000, d / 100 % 100, d % 100, hm / 100, hm % 100)
}

/// The flights `msg` names, in record order, repeats included: [`need_of`] without a copy.
pub fn flids_of(msg: &Message) -> impl Iterator<Item = &str> {
    let records = match &msg.body {
        Body::Flop { records } | Body::Sync { records, .. } => records.as_slice(),
        _ => &[],
    };
    records.iter().map(|r| r.flid.as_str())
}

/// What the handler of `msg` needs to read.
pub fn need_of(msg: &Message) -> Need {
    let mut flids: Vec<String> = flids_of(msg).map(str::to_string).collect();
    flids.sort();
    flids.dedup();
    Need { flids, window: window_of(msg) }
}

/// The plan window a snapshot of `msg` (`MsgKind::is_snapshot`) covers — [min SODT, max SODT]
/// of its records — if it is one: [`Need::window`].
pub fn window_of(msg: &Message) -> Option<(i64, i64)> {
    if !msg.kind.is_snapshot() {
        return None;
    }
    match &msg.body {
        Body::Schedule(s) => {
            let keys: Vec<i64> =
                s.flights.iter().filter_map(|f| f.sodt.as_deref().and_then(sodt_key)).collect();
            keys.iter().min().zip(keys.iter().max()).map(|(a, b)| (*a, *b))
        }
        Body::Sync { records, .. } => platform::window(records),
        _ => None,
    }
}

/// Decides what `msg` means given the flights it concerns.
pub fn decide(view: &View, msg: &Message, msg_id: i64) -> Result<Decision, Reject> {
    match (&msg.kind, &msg.body) {
        (MsgKind::Flop(_) | MsgKind::Fdel | MsgKind::Dfme(_) | MsgKind::Dfoe(_), Body::Flop { records }) => {
            Ok(flop::decide(&view.flights, msg, records, msg_id))
        }
        (MsgKind::Dfoe(DfoeKind::Sync), Body::Sync { recd, records }) => {
            platform::decide_sync(view, *recd, records, msg, msg_id)
        }
        (MsgKind::Base { op, .. }, Body::Reference(r)) => reference::decide(&r.rtype, *op, r),
        (MsgKind::Schd(_), Body::Schedule(s)) => schedule::decide(view, s, msg, msg_id),
        (MsgKind::Schs(_), Body::Schedule(s)) => schedule::decide_season(s),
        (MsgKind::Reference { rtype, op }, Body::Reference(r)) => reference::decide(rtype, *op, r),
        _ => Err(Reject::Unsupported(msg.kind.type_tag().into_owned())),
    }
}

/// An event whose payload is `payload` as JSON, written once: a handler passes a `json!` tree
/// or, on its hot path, a borrowed struct that writes the same text (`flop::Upsert`).
fn event(
    target: Target,
    key: &str,
    event_type: &str,
    version: i64,
    payload: impl serde::Serialize,
) -> NewEvent {
    // Strings, numbers and maps with string keys: serialising them cannot fail.
    let payload_json = serde_json::to_string(&payload).expect("an event payload is plain JSON");
    event_json(target, key, event_type, version, payload_json)
}

/// [`event`], its payload's JSON already written (a daily plan's records, from their decoded
/// text).
fn event_json(target: Target, key: &str, event_type: &str, version: i64, payload_json: String) -> NewEvent {
    NewEvent {
        target,
        partition_key: key.to_string(),
        event_type: event_type.to_string(),
        state_version: version,
        payload_json,
    }
}

/// The longest keys own PostgreSQL keeps (V001, V010): an event's flight key
/// (`MSG_EVENT.PARTITION_KEY`), a reference key (`REF_MASTER.RKEY`), a season's name and a
/// seasonal record's key (`SEASON_PLAN`). Clipping one would merge two flights' outbox rows or
/// two reference entries, so a decision with a longer one is refused instead.
pub const EVENT_KEY_MAX_CHARS: usize = 32;
pub const REF_KEY_MAX_CHARS: usize = 64;
pub const SEASON_MAX_CHARS: usize = 64;
pub const SEASON_KEY_MAX_CHARS: usize = 200;

/// Why `d` cannot be kept as it is — a key longer than its column — or `None`. The message is
/// then PROTOCOL, nothing of it applied (the same rule as an event over `max-event-bytes`).
pub fn keys_too_long(d: &Decision) -> Option<String> {
    let long = |what: &str, key: &str, max: usize| {
        let n = key.chars().count();
        (n > max).then(|| {
            format!(
                "{what} of {n} characters ({}…) is longer than msgx keeps ({max}); nothing applied",
                key.chars().take(16).collect::<String>()
            )
        })
    };
    // Every flight the decision writes, not only those an event names: a record that only
    // clears a field announces nothing and still writes its flight's Redis key (#53).
    let flights = d.flights.iter().find_map(|f| long("flight key", &f.flid, EVENT_KEY_MAX_CHARS));
    let events = d.events.iter().find_map(|e| long("flight key", &e.partition_key, EVENT_KEY_MAX_CHARS));
    let refs = d.references.iter().find_map(|r| match r {
        RefChange::Keep { keys, .. } => keys.iter().find_map(|k| long("reference key", k, REF_KEY_MAX_CHARS)),
        RefChange::Upsert { rkey, .. } | RefChange::Delete { rkey, .. } => {
            long("reference key", rkey, REF_KEY_MAX_CHARS)
        }
        RefChange::Season { season, records, .. } => {
            long("season name", season, SEASON_MAX_CHARS).or_else(|| {
                records.iter().find_map(|(k, _)| long("seasonal record key", k, SEASON_KEY_MAX_CHARS))
            })
        }
    });
    flights.or(events).or(refs)
}

/// `msgx decode --decide`: what msgx would do with `msg` against `view` (an empty one, or
/// the flights read from Redis), as JSON — the flight changes and events of the decision, or
/// why there is none and the state the message would end in. The pump's checks that need
/// its stores (duplicates, INV-9) are not made here.
pub fn preview(view: &View, msg: &Message, max_event_bytes: usize) -> serde_json::Value {
    use serde_json::json;
    match decide(view, msg, 0) {
        Err(Reject::Unsupported(what)) => {
            json!({ "outcome": "FAILED", "class": "UNSUPPORTED", "error": format!("no handler for {what}") })
        }
        Err(Reject::Protocol(why)) => json!({ "outcome": "DEAD", "class": "PROTOCOL", "error": why }),
        Ok(d) => match d.events.iter().find(|e| e.payload_json.len() > max_event_bytes) {
            Some(e) => json!({
                "outcome": "DEAD", "class": "PROTOCOL",
                "error": format!("event of {} bytes for {} exceeds msgx.codec.max-event-bytes ({max_event_bytes}); nothing applied",
                    e.payload_json.len(), e.partition_key),
            }),
            None if keys_too_long(&d).is_some() => {
                json!({ "outcome": "DEAD", "class": "PROTOCOL", "error": keys_too_long(&d) })
            }
            None => {
                let mut v = serde_json::to_value(&d).expect("a decision serialises");
                // The payload as JSON, not as a string holding JSON: a person reads it.
                for e in v["events"].as_array_mut().into_iter().flatten() {
                    if let Some(p) = e.as_object_mut().and_then(|o| o.remove("payload_json")) {
                        e["payload"] = p.as_str().and_then(|t| serde_json::from_str(t).ok()).unwrap_or(p);
                    }
                }
                v["outcome"] = json!("SUCCEEDED");
                v
            }
        },
    }
}

#[cfg(test)]
mod preview_tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn preview_names_the_outcome_and_refuses_an_event_over_the_limit() {
        let msg = crate::codec::decode(&fixtures::flop_body("STND", "77", "<STND>212</STND>")).unwrap();
        let ok = preview(&View::default(), &msg, 1 << 20);
        assert_eq!(ok["outcome"], "SUCCEEDED");
        assert_eq!(ok["events"][0]["payload"]["flid"], "77", "{ok}");
        let big = preview(&View::default(), &msg, 10);
        assert_eq!((big["outcome"].as_str(), big["class"].as_str()), (Some("DEAD"), Some("PROTOCOL")));
        assert!(big["error"].as_str().unwrap().contains("exceeds msgx.codec.max-event-bytes (10)"), "{big}");
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn regression_a_clear_only_record_with_a_long_flight_key_is_refused() {
        // An empty element clears a field: the change announces nothing (the flight holds no
        // such field), so no event key was checked and Redis got a key of any length (#53).
        let flid = "9".repeat(40);
        let text =
            crate::fixtures::other(1, "FLOP", "STND", &format!("<FLOP><FLID>{flid}</FLID><STND/></FLOP>"));
        let msg = crate::codec::decode(&text).unwrap();
        let d = decide(&View::default(), &msg, 1).unwrap();
        assert!(d.events.is_empty(), "a clear of a field nobody set announces nothing");
        let why = keys_too_long(&d).expect("refused");
        assert!(why.starts_with("flight key of 40 characters"), "{why}");
    }

    #[test]
    fn a_key_longer_than_its_column_refuses_the_decision_naming_it() {
        let msg =
            crate::codec::decode(&crate::fixtures::flop_body("STND", &"7".repeat(33), "<STND>212</STND>"))
                .unwrap();
        let d = decide(&View::default(), &msg, 1).unwrap();
        let why = keys_too_long(&d).expect("refused");
        assert!(
            why.starts_with("flight key of 33 characters (7777777777777777…) is longer than msgx keeps (32)"),
            "{why}"
        );
        let ok =
            crate::codec::decode(&crate::fixtures::flop_body("STND", &"7".repeat(32), "<STND>212</STND>"))
                .unwrap();
        assert_eq!(keys_too_long(&decide(&View::default(), &ok, 1).unwrap()), None);
        let refs = Decision {
            references: vec![RefChange::Delete { rtype: "GATE".into(), rkey: "G".repeat(65) }],
            ..Decision::default()
        };
        assert!(keys_too_long(&refs).unwrap().starts_with("reference key of 65 characters"));
    }
}
