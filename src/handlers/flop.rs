//! FLOP: each record sets or clears the fields its subtype's table names (lists are replaced
//! whole, an empty element clears, FDEL deletes the flight). A field that already holds the
//! value changes nothing; a record that changes nothing writes no event.
//!
//! A FLOP for a FLID msgx does not hold creates the flight from what the message says (its
//! FFID carries airline, number, direction and SODT): an operator would rather see the update
//! than lose it, and a later daily plan completes the record. The event says `created`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::{event, Decision, Flight, FlightChange, FlightState, FlightView};
use crate::codec::{time, FlopRecord, Message};
use crate::domain::{NewEvent, Target};

/// SODT from an FFID `airline-flightNo-A|D-ddMMMyyHHmm-D|I`, as `yyyyMMddHHmm`.
/// The SODT key an FFID carries: family A's `MU-5101-A-05MAR261430-D` or family B's
/// `CZ-8227-20210413081500-D`.
pub fn sodt_from_ffid(ffid: &str) -> Option<i64> {
    let parts: Vec<&str> = ffid.split('-').collect();
    if let Some(t) = parts.get(3).and_then(|p| time::parse(p)) {
        return super::sodt_key(&t.iso());
    }
    let stamp = parts.get(2).filter(|p| p.len() >= 12 && p.bytes().all(|b| b.is_ascii_digit()))?;
    crate::codec::platform::stamp(&stamp[..12])?; // a real time, not twelve digits
    stamp[..12].parse().ok()
}

/// A field's change as an event names it. Keys in the order a `json!` map writes them
/// (sorted), so the text is the same as the tree's was.
#[derive(serde::Serialize)]
struct Diff<'a> {
    field: &'a str,
    new: Option<&'a str>,
    old: Option<&'a str>,
}

/// An UPSERT event's payload, borrowed from the record and the flight as the message found
/// it: written to text once, with no `serde_json::Value` tree in between. Keys sorted (above).
#[derive(serde::Serialize)]
struct Upsert<'a> {
    changes: &'a [Diff<'a>],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    created: bool,
    ffid: Option<&'a str>,
    flid: &'a str,
    msg_id: i64,
    #[serde(rename = "type")]
    tag: &'a str,
}

/// A DELETE event's payload: the fields the flight lost. Keys sorted (above).
#[derive(serde::Serialize)]
struct Deleted<'a> {
    deleted: bool,
    ffid: Option<&'a str>,
    flid: &'a str,
    msg_id: i64,
    old: &'a Flight,
    #[serde(rename = "type")]
    tag: &'a str,
}

pub fn decide(view: &FlightView, msg: &Message, recs: &[FlopRecord], msg_id: i64) -> Decision {
    // Each flight as this message leaves it: borrowed from the view until a change must be
    // played on it for a later record of the same message. Most messages name a flight once,
    // so most flights are never copied.
    let mut working: BTreeMap<&str, Cow<'_, FlightState>> = BTreeMap::new();
    let last = last_records(recs);
    let mut d = Decision::default();
    let tag = msg.kind.type_tag();
    for (i, rec) in recs.iter().enumerate() {
        let state = working
            .entry(rec.flid.as_str())
            .or_insert_with(|| view.get(&rec.flid).map_or_else(Cow::default, |s| Cow::Borrowed(&**s)));
        if rec.delete {
            delete(state.to_mut(), rec, &tag, msg_id, &mut d);
            continue;
        }
        let Some(change) = change_of(state, rec, &tag, msg_id, &mut d) else {
            continue;
        };
        if last.get(rec.flid.as_str()).is_some_and(|l| *l > i) {
            state.to_mut().apply(&change, msg_id);
        }
        d.flights.push(change);
    }
    d
}

/// What one record of the message changes on its flight as `state` holds it, and the UPSERT
/// event that announces what differs; `None` when it touches no field it may write.
fn change_of(
    state: &FlightState,
    rec: &FlopRecord,
    tag: &str,
    msg_id: i64,
    d: &mut Decision,
) -> Option<FlightChange> {
    let created = !state.exists();
    let mut change = FlightChange { flid: rec.flid.clone(), ..Default::default() };
    let mut diffs = Vec::new();
    // Every record restates its flight's FFID, not only the one that creates it: then a
    // delete older than this message, processed after it (a late row), leaves the FFID
    // this message would have created the flight with in MSG_ID order (found by the
    // simulator once it sent deletes: `regression_a_late_delete_keeps_the_ffid_a_newer_update_restated`).
    if let Some(ffid) = rec.ffid.as_ref().filter(|_| state.writable("FFID", msg_id)) {
        change.set.push(("FFID".into(), ffid.clone()));
        if created {
            change.sodt = sodt_from_ffid(ffid);
        }
    }
    for (field, value) in &rec.fields {
        // A field a later message wrote (or a flight a later message deleted) stays as it
        // is: the message is older than what msgx holds.
        if !state.writable(field, msg_id) {
            continue;
        }
        // A value restated (or a field cleared that is empty) says nothing downstream, but
        // it is still this message's word on the field: its version moves, so an older
        // message processed later cannot bring another value back (found by the simulator:
        // `regression_a_restated_value_outranks_an_older_late_message`).
        let old = state.fields.get(field).map(String::as_str);
        match value {
            Some(v) => change.set.push((field.clone(), v.clone())),
            None => change.clear.push(field.clone()),
        }
        if old != value.as_deref() {
            diffs.push(Diff { field, new: value.as_deref(), old });
        }
    }
    if change.set.is_empty() && change.clear.is_empty() {
        return None;
    }
    let announced = created && change.set.iter().any(|(f, _)| f == "FFID");
    if !diffs.is_empty() || announced {
        let payload =
            Upsert { changes: &diffs, created, ffid: rec.ffid.as_deref(), flid: &rec.flid, msg_id, tag };
        d.events.push(event(Target::KafkaMsg, &rec.flid, "UPSERT", msg_id, payload));
    }
    Some(change)
}

/// Each FLID named by more than one record, with the index of its last record: the flights
/// whose state a later record of the message reads.
fn last_records(recs: &[FlopRecord]) -> BTreeMap<&str, usize> {
    let mut last = BTreeMap::new();
    if recs.len() > 1 {
        for (i, rec) in recs.iter().enumerate() {
            last.insert(rec.flid.as_str(), i);
        }
    }
    last
}

/// FDEL says so downstream, known flight or not: a consumer may hold it. Fields a later
/// message wrote survive it (then it is an update that clears the rest).
fn delete(state: &mut FlightState, rec: &FlopRecord, tag: &str, msg_id: i64, d: &mut Decision) {
    let before = state.fields.clone();
    let change = FlightChange { flid: rec.flid.clone(), delete: true, ..Default::default() };
    state.apply(&change, msg_id);
    let removed: Flight = before.into_iter().filter(|(k, _)| !state.fields.contains_key(k)).collect();
    d.flights.push(change);
    if state.exists() {
        if removed.is_empty() {
            return;
        }
        let diffs: Vec<Diff> =
            removed.iter().map(|(k, v)| Diff { field: k, new: None, old: Some(v) }).collect();
        let (ffid, flid) = (rec.ffid.as_deref(), rec.flid.as_str());
        let payload = Upsert { changes: &diffs, created: false, ffid, flid, msg_id, tag };
        d.events.push(event(Target::KafkaMsg, &rec.flid, "UPSERT", msg_id, payload));
    } else {
        let (ffid, flid) = (rec.ffid.as_deref(), rec.flid.as_str());
        let payload = Deleted { deleted: true, ffid, flid, msg_id, old: &removed, tag };
        d.events.push(event(Target::KafkaMsg, &rec.flid, "DELETE", msg_id, payload));
    }
}

/// The `KAFKA:msg` event that tells a consumer holding `before` how to hold `after`: a flight
/// decided again under other rules (`msgx rules apply`, #65), told under message `msg_id` (its
/// last message the new decision changed) with that message's type tag. An UPSERT of each field
/// that differs (`created` when the flight was not held), or a DELETE when it is held no more;
/// `None` when no value differs (only versions moved: nothing a consumer holds). The FFID rides
/// in `ffid`, as every event of a record carries it, and so [`announced`] gives `after` back.
pub fn restated(
    flid: &str,
    before: &FlightState,
    after: &FlightState,
    msg_id: i64,
    tag: &str,
) -> Option<NewEvent> {
    let ffid = after.fields.get("FFID").map(String::as_str);
    if before.exists() && !after.exists() {
        let old = &before.fields;
        let ffid = old.get("FFID").map(String::as_str);
        let payload = Deleted { deleted: true, ffid, flid, msg_id, old, tag };
        return Some(event(Target::KafkaMsg, flid, "DELETE", msg_id, payload));
    }
    let names: std::collections::BTreeSet<&String> =
        before.fields.keys().chain(after.fields.keys()).collect();
    let diffs: Vec<Diff> = names
        .into_iter()
        .filter(|f| *f != "FFID" || ffid.is_none())
        .map(|f| Diff {
            field: f,
            old: before.fields.get(f).map(String::as_str),
            new: after.fields.get(f).map(String::as_str),
        })
        .filter(|d| d.old != d.new)
        .collect();
    let created = !before.exists() && after.exists();
    let ffid_moved = ffid.is_some() && before.fields.get("FFID").map(String::as_str) != ffid;
    if diffs.is_empty() && !created && !ffid_moved {
        return None;
    }
    let payload = Upsert { changes: &diffs, created, ffid, flid, msg_id, tag };
    Some(event(Target::KafkaMsg, flid, "UPSERT", msg_id, payload))
}

/// What a message's `KAFKA:msg` events announced, as the flight changes that give a consumer's
/// flights (#52): each changed field set or cleared, the FFID the record carried, a delete. The
/// inverse of [`decide`]'s events, up to the values a record restated (they moved a version and
/// announced nothing). A heal lays these on for a message decided under other rules than this
/// release's, instead of deciding its text again. `Err`: a payload that is not one of ours.
pub fn announced<'a>(
    events: impl IntoIterator<Item = &'a crate::domain::NewEvent>,
) -> Result<Vec<FlightChange>, String> {
    #[derive(serde::Deserialize)]
    struct Change {
        field: String,
        new: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Announced {
        #[serde(default)]
        changes: Vec<Change>,
        #[serde(default)]
        created: bool,
        #[serde(default)]
        deleted: bool,
        ffid: Option<String>,
        #[serde(rename = "type")]
        tag: String,
    }
    let mut out = Vec::new();
    for e in events.into_iter().filter(|e| e.target == Target::KafkaMsg) {
        let a: Announced = serde_json::from_str(&e.payload_json)
            .map_err(|err| format!("event of {} is no FLOP event msgx wrote: {err}", e.partition_key))?;
        let mut change = FlightChange {
            flid: e.partition_key.clone(),
            delete: a.deleted || a.tag == "FLOP-FDEL",
            ..Default::default()
        };
        if let Some(ffid) = a.ffid.filter(|_| !change.delete) {
            change.sodt = a.created.then(|| sodt_from_ffid(&ffid)).flatten();
            change.set.push(("FFID".into(), ffid));
        }
        for c in a.changes {
            match c.new {
                Some(v) => change.set.push((c.field, v)),
                None => change.clear.push(c.field),
            }
        }
        out.push(change);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::{decide, Reject, View};
    use super::*;
    use crate::codec::decode;
    use crate::domain::NewEvent;
    use crate::fixtures;

    fn view(flid: &str, fields: &[(&str, &str)]) -> View {
        let f = fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        View { flights: FlightView::from([(flid.to_string(), FlightState::of(f).into())]), window: vec![] }
    }

    #[test]
    fn flop_sets_a_field_and_notifies_with_old_and_new() {
        let msg = decode(&fixtures::flop_stnd(1, "1001", "A12")).unwrap();
        let d = decide(&view("1001", &[("STND", "A10")]), &msg, 77).unwrap();
        let ffid = ("FFID".to_string(), "MX-1001-D-01JAN260900-D".to_string());
        assert_eq!(
            d.flights,
            vec![FlightChange {
                flid: "1001".into(),
                set: vec![ffid, ("STND".into(), "A12".into())],
                ..Default::default()
            }]
        );
        let p: serde_json::Value = serde_json::from_str(&d.events[0].payload_json).unwrap();
        assert_eq!(p["changes"][0], serde_json::json!({"field": "STND", "old": "A10", "new": "A12"}));
        assert_eq!(p.get("created"), None);
    }

    #[test]
    fn flop_that_changes_nothing_produces_no_event() {
        let msg = decode(&fixtures::flop_stnd(1, "1001", "A12")).unwrap();
        let d = decide(&view("1001", &[("STND", "A12")]), &msg, 1).unwrap();
        assert!(d.events.is_empty());
        assert_eq!(
            d.flights[0].set,
            vec![("FFID".into(), "MX-1001-D-01JAN260900-D".into()), ("STND".to_string(), "A12".to_string())],
            "the version still moves"
        );
    }

    /// Found by the simulator once its upstream sent deletes (#37): FDEL 8 committed late,
    /// processed after updates 12 and 14 of the same flight. In MSG_ID order 12 re-created the
    /// flight with its FFID; processed first, it only set ACFT, and the late delete took the
    /// FFID message 4 had written — Redis held a flight without its identity.
    #[test]
    fn regression_a_late_delete_keeps_the_ffid_a_newer_update_restated() {
        let (create, delete, update) = (
            fixtures::flop_stnd(4, "F2", "A1"),
            fixtures::flop(8, "FDEL", "F2", &[]),
            fixtures::flop(12, "ACFT", "F2", &[("ACFT", Some("B7"))]),
        );
        let mut in_order = FlightView::new();
        for (raw, m) in [(&create, 4), (&delete, 8), (&update, 12)] {
            apply(&mut in_order, raw, m);
        }
        let mut late = FlightView::new();
        for (raw, m) in [(&create, 4), (&update, 12), (&delete, 8)] {
            apply(&mut late, raw, m);
        }
        assert_eq!(late["F2"].fields, in_order["F2"].fields, "the same flight whatever the order");
        assert_eq!(late["F2"].fields.get("FFID").map(String::as_str), Some("MX-F2-D-01JAN260900-D"));
    }

    /// Applies `raw` as message `m` to `state` (the pump's overlay does the same).
    fn apply(state: &mut FlightView, raw: &str, m: i64) -> Decision {
        let view = View { flights: state.clone(), window: vec![] };
        let d = decide(&view, &decode(raw).unwrap(), m).unwrap();
        for c in &d.flights {
            std::sync::Arc::make_mut(state.entry(c.flid.clone()).or_default()).apply(c, m);
        }
        d
    }

    /// #52: a consumer that applied every event holds what the decisions gave Redis — the
    /// events announce every field a message changed, so laying them on (what a heal does for a
    /// message of other rules) gives the same fields as deciding the text again. Every FLOP
    /// subtype, a restatement, a clear, a delete with a later field surviving, a re-creation.
    #[test]
    fn the_announced_changes_give_the_fields_the_decisions_gave() {
        let mut msgs: Vec<String> = fixtures::EVERY_SUBTYPE
            .iter()
            .enumerate()
            .map(|(i, (styp, body, _))| fixtures::flop_body(styp, &format!("F{}", i % 3), body))
            .collect();
        msgs.extend([
            fixtures::flop_stnd(1, "F1", "A1"),
            fixtures::flop_stnd(2, "F1", "A1"),
            fixtures::flop(3, "ACFT", "F1", &[("ACFT", None)]),
            fixtures::flop(4, "FDEL", "F2", &[]),
            fixtures::flop_stnd(5, "F2", "B2"),
            fixtures::flop(6, "FDEL", "F9", &[]),
        ]);
        let (mut decided, mut announced) = (FlightView::new(), FlightView::new());
        let mut events = 0;
        for (i, raw) in msgs.iter().enumerate() {
            let m = 10 + i as i64;
            let d = apply(&mut decided, raw, m);
            events += d.events.len();
            for c in super::announced(&d.events).unwrap() {
                std::sync::Arc::make_mut(announced.entry(c.flid.clone()).or_default()).apply(&c, m);
            }
            let fields = |v: &FlightView| -> Vec<(String, Flight)> {
                v.iter().map(|(k, s)| (k.clone(), s.fields.clone())).filter(|(_, f)| !f.is_empty()).collect()
            };
            assert_eq!(fields(&announced), fields(&decided), "after message {m}: {raw}");
        }
        assert!(events > msgs.len() / 2, "the messages announced something ({events} events)");
        let odd = NewEvent { payload_json: "{}".into(), ..fixtures_event() };
        assert!(super::announced([&odd]).unwrap_err().contains("no FLOP event"));
    }

    fn fixtures_event() -> NewEvent {
        NewEvent {
            target: Target::KafkaMsg,
            partition_key: "F1".into(),
            event_type: "UPSERT".into(),
            state_version: 1,
            payload_json: String::new(),
        }
    }

    #[test]
    fn regression_a_restated_value_outranks_an_older_late_message() {
        // Found by the simulator (seed 302): message 24 cleared a field that was already
        // empty, which wrote no version; message 16, committed late and processed after it,
        // then set the field — a state no MSG_ID order gives.
        let mut state = FlightView::new();
        apply(&mut state, &fixtures::flop(1, "STND", "F2", &[("STND", Some("A2"))]), 10);
        apply(&mut state, &fixtures::flop(3, "ACFT", "F2", &[("ACFT", None)]), 24);
        let late = apply(&mut state, &fixtures::flop(2, "ACFT", "F2", &[("ACFT", Some("B7"))]), 16);
        assert!(late.events.is_empty(), "the older message changes nothing");
        assert_eq!(state["F2"].fields.get("ACFT"), None, "as in MSG_ID order: 16 set it, 24 cleared it");
        // The same with a value restated rather than a field cleared.
        apply(&mut state, &fixtures::flop(4, "STND", "F2", &[("STND", Some("A2"))]), 30);
        apply(&mut state, &fixtures::flop(5, "STND", "F2", &[("STND", Some("Z9"))]), 25);
        assert_eq!(state["F2"].fields["STND"], "A2");
    }

    #[test]
    fn an_unknown_flid_is_created_from_its_ffid() {
        let msg = decode(&fixtures::flop_stnd(1, "42", "B7")).unwrap();
        let d = decide(&View::default(), &msg, 1).unwrap();
        let c = &d.flights[0];
        assert_eq!(
            c.set,
            vec![("FFID".into(), "MX-42-D-01JAN260900-D".into()), ("STND".into(), "B7".into())]
        );
        assert_eq!(c.sodt, Some(202601010900), "indexed by the SODT in its FFID");
        let p: serde_json::Value = serde_json::from_str(&d.events[0].payload_json).unwrap();
        assert_eq!(p["created"], true);
    }

    #[test]
    fn empty_element_clears_and_clearing_nothing_is_no_change() {
        let msg = decode(&fixtures::flop(1, "CNCL", "7", &[("CNCL", None)])).unwrap();
        let d = decide(&view("7", &[("CNCL", "2026-01-01T08:00")]), &msg, 1).unwrap();
        assert_eq!(d.flights[0].clear, vec!["CNCL".to_string()]);
        assert!(decide(&view("7", &[("STND", "1")]), &msg, 1).unwrap().events.is_empty());
    }

    #[test]
    fn two_records_for_one_flight_see_each_other() {
        let raw = fixtures::other(
            1,
            "FLOP",
            "STND",
            "<FLOP><FLID>2</FLID><STND>A</STND></FLOP><FLOP><FLID>2</FLID><STND>A</STND></FLOP>",
        );
        let d = decide(&view("2", &[("STND", "Z")]), &decode(&raw).unwrap(), 1).unwrap();
        assert_eq!(d.events.len(), 1, "the second record changes nothing");
    }

    #[test]
    fn a_record_between_two_of_another_flight_keeps_both_flights_apart() {
        let raw = fixtures::other(
            1,
            "FLOP",
            "STND",
            "<FLOP><FLID>2</FLID><STND>A</STND></FLOP><FLOP><FLID>3</FLID><STND>A</STND></FLOP>\
             <FLOP><FLID>2</FLID><STND>B</STND></FLOP>",
        );
        let d = decide(&view("2", &[("STND", "Z")]), &decode(&raw).unwrap(), 1).unwrap();
        let olds: Vec<(String, serde_json::Value)> = d
            .events
            .iter()
            .map(|e| {
                let p: serde_json::Value = serde_json::from_str(&e.payload_json).unwrap();
                (e.partition_key.clone(), p["changes"][0]["old"].clone())
            })
            .collect();
        let want =
            [("2", serde_json::json!("Z")), ("3", serde_json::Value::Null), ("2", serde_json::json!("A"))];
        assert_eq!(olds, want.map(|(k, v)| (k.to_string(), v)));
    }

    #[test]
    fn an_upsert_payload_is_the_text_a_json_tree_of_it_writes() {
        // The payload is written from a borrowed struct; consumers and the Redis journal saw
        // the text a `json!` tree wrote before, byte for byte.
        let msg = decode(&fixtures::flop(1, "HNAG", "5", &[("FHAG", Some("A\"1")), ("PHAG", None)])).unwrap();
        let d = decide(&view("5", &[("PHAG", "G1"), ("FHAG", "A0")]), &msg, 9).unwrap();
        let tree = serde_json::json!({
            "msg_id": 9, "type": "FLOP-HNAG", "flid": "5", "ffid": "MX-5-D-01JAN260900-D",
            "changes": [
                { "field": "FHAG", "old": "A0", "new": "A\"1" },
                { "field": "PHAG", "old": "G1", "new": null },
            ],
        });
        let mut want: Vec<String> = vec![tree.to_string()];
        let created = decide(&View::default(), &msg, 9).unwrap();
        let mut tree = serde_json::json!({
            "msg_id": 9, "type": "FLOP-HNAG", "flid": "5", "ffid": "MX-5-D-01JAN260900-D",
            "changes": [{ "field": "FHAG", "old": null, "new": "A\"1" }],
        });
        tree["created"] = serde_json::json!(true);
        want.push(tree.to_string());
        let got: Vec<&str> =
            d.events.iter().chain(&created.events).map(|e| e.payload_json.as_str()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn fdel_deletes_the_flight_and_says_so_with_its_last_state() {
        let msg = decode(&fixtures::flop(1, "FDEL", "9", &[("FDEL", None)])).unwrap();
        let d = decide(&view("9", &[("STND", "A1")]), &msg, 4).unwrap();
        assert!(d.flights[0].delete);
        let p: serde_json::Value = serde_json::from_str(&d.events[0].payload_json).unwrap();
        assert_eq!(
            (p["deleted"].clone(), p["old"]["STND"].clone()),
            (serde_json::json!(true), serde_json::json!("A1"))
        );
        assert_eq!(d.events[0].event_type, "DELETE");
    }

    #[test]
    fn unsupported_kind_has_no_handler() {
        let msg = decode(&fixtures::other(1, "ZZZZ", "Q", "")).unwrap();
        assert_eq!(decide(&View::default(), &msg, 1), Err(Reject::Unsupported("ZZZZ-Q".into())));
    }

    #[test]
    fn ffid_sodt() {
        assert_eq!(sodt_from_ffid("CA-CA101-A-12DEC031345-D"), Some(200312121345));
        assert_eq!(sodt_from_ffid("garbage"), None);
    }
}
