//! What a message means for each flight. Handlers are pure: `decide(view, message) ->
//! Decision`. They read only the flights the message concerns and touch no store; the pump
//! applies the decision (Redis first, then one PostgreSQL transaction).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::codec::{Body, Message, MsgKind};
use crate::domain::{NewEvent, Target};

/// One flight's fields (`FIELD → value`), as held in Redis.
pub type Flight = BTreeMap<String, String>;

/// The flights a message concerns, by FLID. Absent flights are absent.
pub type FlightView = BTreeMap<String, Flight>;

/// A change to one flight's live state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlightChange {
    pub flid: String,
    pub set: Vec<(String, String)>,
    pub clear: Vec<String>,
    /// FDEL: the flight's whole state goes (applied before `set`, so a record that deletes and
    /// sets leaves only the new fields).
    #[serde(default)]
    pub delete: bool,
}

/// Everything a message causes. Its parts are applied by the pump, never by the handler.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Decision {
    pub flights: Vec<FlightChange>,
    /// Outbox events (notifications, schd pushes, outbound intents), in the order they go out.
    pub events: Vec<NewEvent>,
}

/// The message kind has no handler (yet): FAILED(UNSUPPORTED), retried, replayable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no handler for {0}")]
pub struct Unsupported(pub String);

/// The FLIDs whose state the handler of `msg` needs.
pub fn flids_of(msg: &Message) -> Vec<String> {
    let mut flids: Vec<String> = match &msg.body {
        Body::Flop { records } => records.iter().map(|r| r.flid.clone()).collect(),
        Body::Schedule(s) => s.flights.iter().filter_map(|f| f.flid.clone()).collect(),
        Body::Reference(_) | Body::Unread => Vec::new(),
    };
    flids.sort();
    flids.dedup();
    flids
}

/// Decides what `msg` means given the flights it concerns.
pub fn decide(view: &FlightView, msg: &Message, msg_id: i64) -> Result<Decision, Unsupported> {
    match (&msg.kind, &msg.body) {
        (MsgKind::Flop(_) | MsgKind::Fdel, Body::Flop { records }) => {
            Ok(flop::decide(view, msg, records, msg_id))
        }
        _ => Err(Unsupported(msg.kind.type_tag())),
    }
}

mod flop {
    use super::*;
    use crate::codec::FlopRecord;

    /// A FLOP sets or clears the named fields of each flight. Fields that already hold the
    /// value change nothing and produce no event. An unknown FLID creates the flight: an
    /// operator would rather see the update than lose it (revisited with the full handlers).
    pub fn decide(view: &FlightView, msg: &Message, recs: &[FlopRecord], msg_id: i64) -> Decision {
        let empty = Flight::new();
        let mut working: BTreeMap<&str, Flight> = BTreeMap::new();
        let mut d = Decision::default();
        for rec in recs {
            let flight = working
                .entry(rec.flid.as_str())
                .or_insert_with(|| view.get(&rec.flid).unwrap_or(&empty).clone());
            if rec.delete {
                // FDEL always says so downstream, known flight or not: a consumer may hold it.
                let old = std::mem::take(flight);
                d.flights.push(FlightChange {
                    flid: rec.flid.clone(),
                    set: vec![],
                    clear: vec![],
                    delete: true,
                });
                let payload = serde_json::json!({
                    "msg_id": msg_id,
                    "type": msg.kind.type_tag(),
                    "flid": rec.flid,
                    "ffid": rec.ffid,
                    "deleted": true,
                    "old": old,
                });
                d.events.push(NewEvent {
                    target: Target::KafkaMsg.as_str().to_string(),
                    partition_key: rec.flid.clone(),
                    event_type: "DELETE".to_string(),
                    state_version: msg_id,
                    payload_json: payload.to_string(),
                });
                continue;
            }
            let mut change =
                FlightChange { flid: rec.flid.clone(), set: vec![], clear: vec![], delete: false };
            let mut diffs = Vec::new();
            for (field, value) in &rec.fields {
                let old = flight.get(field).cloned();
                if old.as_ref() == value.as_ref() {
                    continue;
                }
                match value {
                    Some(v) => {
                        flight.insert(field.clone(), v.clone());
                        change.set.push((field.clone(), v.clone()));
                    }
                    None => {
                        flight.remove(field);
                        change.clear.push(field.clone());
                    }
                }
                diffs.push(serde_json::json!({ "field": field, "old": old, "new": value }));
            }
            if diffs.is_empty() {
                continue;
            }
            let payload = serde_json::json!({
                "msg_id": msg_id,
                "type": msg.kind.type_tag(),
                "flid": rec.flid,
                "ffid": rec.ffid,
                "changes": diffs,
            });
            d.flights.push(change);
            d.events.push(NewEvent {
                target: Target::KafkaMsg.as_str().to_string(),
                partition_key: rec.flid.clone(),
                event_type: "UPSERT".to_string(),
                state_version: msg_id,
                payload_json: payload.to_string(),
            });
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::decode;
    use crate::fixtures;

    fn view(flid: &str, fields: &[(&str, &str)]) -> FlightView {
        let f = fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        FlightView::from([(flid.to_string(), f)])
    }

    #[test]
    fn flop_sets_a_field_and_notifies_with_old_and_new() {
        let msg = decode(&fixtures::flop_stnd(1, "1001", "A12")).unwrap();
        let d = decide(&view("1001", &[("STND", "A10")]), &msg, 77).unwrap();
        assert_eq!(
            d.flights,
            vec![FlightChange {
                flid: "1001".into(),
                set: vec![("STND".into(), "A12".into())],
                clear: vec![],
                delete: false
            }]
        );
        assert_eq!(d.events.len(), 1);
        let e = &d.events[0];
        assert_eq!((e.target.as_str(), e.partition_key.as_str()), ("KAFKA:msg", "1001"));
        let p: serde_json::Value = serde_json::from_str(&e.payload_json).unwrap();
        assert_eq!(p["msg_id"], 77);
        assert_eq!(p["type"], "FLOP-STND");
        assert_eq!(p["changes"][0], serde_json::json!({"field": "STND", "old": "A10", "new": "A12"}));
    }

    #[test]
    fn flop_that_changes_nothing_produces_no_event() {
        let msg = decode(&fixtures::flop_stnd(1, "1001", "A12")).unwrap();
        let d = decide(&view("1001", &[("STND", "A12")]), &msg, 1).unwrap();
        assert_eq!(d, Decision::default());
    }

    #[test]
    fn empty_element_clears_and_clearing_nothing_is_no_change() {
        let msg = decode(&fixtures::flop(1, "CNCL", "7", &[("CNCL", None)])).unwrap();
        let d = decide(&view("7", &[("CNCL", "Y")]), &msg, 1).unwrap();
        assert_eq!(d.flights[0].clear, vec!["CNCL".to_string()]);
        let d = decide(&FlightView::new(), &msg, 1).unwrap();
        assert!(d.flights.is_empty() && d.events.is_empty());
    }

    #[test]
    fn unknown_flid_is_created() {
        let msg = decode(&fixtures::flop_stnd(1, "42", "B7")).unwrap();
        let d = decide(&FlightView::new(), &msg, 1).unwrap();
        assert_eq!(d.flights[0].set, vec![("STND".to_string(), "B7".to_string())]);
    }

    #[test]
    fn fdel_deletes_the_flight_and_says_so_with_its_last_state() {
        let msg = decode(&fixtures::flop(1, "FDEL", "9", &[("FDEL", None)])).unwrap();
        assert_eq!(msg.kind.type_tag(), "FLOP-FDEL");
        let d = decide(&view("9", &[("STND", "A1")]), &msg, 4).unwrap();
        assert!(d.flights[0].delete);
        let p: serde_json::Value = serde_json::from_str(&d.events[0].payload_json).unwrap();
        assert_eq!(p["deleted"], true);
        assert_eq!(p["old"]["STND"], "A1");
        assert_eq!(d.events[0].event_type, "DELETE");
    }

    #[test]
    fn unsupported_kind_has_no_handler() {
        let msg = decode(&fixtures::other(1, "ZZZZ", "Q", "")).unwrap();
        assert_eq!(decide(&FlightView::new(), &msg, 1), Err(Unsupported("ZZZZ-Q".into())));
    }

    #[test]
    fn flids_of_is_sorted_and_unique() {
        let raw =
            "<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>1</DTTM><TYPE>FLOP</TYPE><STYP>STND</STYP></META>\
                   <FLOP><FLID>2</FLID><STND>A</STND></FLOP><FLOP><FLID>1</FLID><STND>B</STND></FLOP>\
                   <FLOP><FLID>2</FLID><STND>C</STND></FLOP></MSG>";
        let msg = decode(raw).unwrap();
        assert_eq!(flids_of(&msg), vec!["1", "2"]);
        // Two records for one flight in one message: the second sees the first's result.
        let d = decide(&FlightView::new(), &msg, 1).unwrap();
        let stnds: Vec<_> = d.flights.iter().map(|c| (c.flid.as_str(), c.set[0].1.as_str())).collect();
        assert_eq!(stnds, [("2", "A"), ("1", "B"), ("2", "C")]);
    }
}
