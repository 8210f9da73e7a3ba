//! SCHD: the daily plan. DNLD and RESP are complete snapshots of their window [min SODT, max
//! SODT]: every flight of the package is upserted, every flight the plan holds in that window
//! but the package lacks is deleted, and the plan's generation advances (compare-and-set on the
//! message id, in the same Redis script). ADFT only adds or updates.
//!
//! The whole package is validated first; a violation is PROTOCOL and nothing is applied:
//! a declared `RECS` that is not the number of records, or a FLID that appears twice (with two
//! operating days it is an operating-day conflict). Fields a record does not carry are kept
//! (Q13: deletion semantics of absent optional fields are not settled).

use std::collections::BTreeMap;

use super::{event, event_json, sodt_key, Decision, FlightChange, RefChange, Reject, View};
use crate::codec::schedule::FieldValue;
use crate::codec::{Message, Schedule};
use crate::domain::Target;

/// Checks the whole package before anything of it is applied.
pub fn validate(s: &Schedule) -> Result<(), Reject> {
    if let Some(n) = s.recs {
        if n as usize != s.flights.len() {
            return Err(Reject::Protocol(format!(
                "RECS declares {n} records, the package carries {}",
                s.flights.len()
            )));
        }
    }
    let mut days: BTreeMap<&str, &str> = BTreeMap::new();
    for f in &s.flights {
        let flid = f.flid.as_deref().unwrap_or("");
        let day = f.sodt.as_deref().map(|t| &t[..t.len().min(10)]).unwrap_or("");
        if let Some(other) = days.insert(flid, day) {
            return Err(Reject::Protocol(if other != day {
                format!("operating-day conflict: FLID {flid} appears for {other} and {day}")
            } else {
                format!("FLID {flid} appears twice in the package")
            }));
        }
    }
    Ok(())
}

/// The key of a seasonal record: its FLID, or flight number, direction and first day.
fn season_key(f: &crate::codec::Fltr) -> String {
    if let Some(flid) = &f.flid {
        return flid.clone();
    }
    let part = |n: &str| f.fields.get(n).map_or("-", FieldValue::flat);
    format!("{}/{}/{}", part("FLNO"), part("MVIN"), part("STDT"))
}

/// A season's first or last day as ISO, or as given when it is not a SIS date.
fn iso_day(raw: &str) -> String {
    crate::codec::time::parse(raw).map(|t| t.iso()).unwrap_or_else(|| raw.to_string())
}

/// SCHS DNLD/RESP: the season's plan, replaced whole in own PostgreSQL; nothing for Redis
/// (the live daily plan comes from SCHD) and no event. A declared `RECS` that is not the
/// number of records, or a flight twice, is PROTOCOL: the season would be replaced by a part.
pub fn decide_season(s: &Schedule) -> Result<Decision, Reject> {
    if let Some(n) = s.recs.filter(|n| *n as usize != s.flights.len()) {
        return Err(Reject::Protocol(format!(
            "RECS declares {n} records, the season carries {}: the season would be replaced by a part",
            s.flights.len()
        )));
    }
    let season = s.season.clone().unwrap_or(crate::codec::schedule::Season {
        name: None,
        airport: None,
        start: None,
        end: None,
    });
    let mut records: BTreeMap<String, String> = BTreeMap::new();
    for f in &s.flights {
        let key = season_key(f);
        let json = f.fields.to_json();
        if records.insert(key.clone(), json).is_some() {
            return Err(Reject::Protocol(format!("seasonal record {key} appears twice")));
        }
    }
    let change = RefChange::Season {
        season: season.name.unwrap_or_else(|| "-".into()),
        airport: season.airport,
        start: season.start.map(|d| iso_day(&d)),
        end: season.end.map(|d| iso_day(&d)),
        records: records.into_iter().collect(),
    };
    Ok(Decision { references: vec![change], ..Default::default() })
}

pub fn decide(view: &View, s: &Schedule, msg: &Message, msg_id: i64) -> Result<Decision, Reject> {
    validate(s)?;
    let tag = msg.kind.type_tag();
    let mut d = Decision { snapshot: msg.kind.is_snapshot(), ..Default::default() };
    let mut carried = Vec::with_capacity(s.flights.len());
    for f in &s.flights {
        let flid = f.flid.clone().unwrap_or_default();
        let set: Vec<(String, String)> =
            f.fields.iter().map(|(k, v)| (k.to_string(), v.flat().to_string())).collect();
        d.flights.push(FlightChange {
            flid: flid.clone(),
            set,
            sodt: f.sodt.as_deref().and_then(sodt_key),
            ..Default::default()
        });
        // The record with its FLID, written from the decoded text once (#23: the record's map
        // was copied whole into a new one, then serialised).
        let mut payload = String::new();
        f.fields.write_object(Some(("FLID", &flid)), &mut payload);
        d.events.push(event_json(Target::KafkaSchd, &flid, "UPSERT", msg_id, payload));
        carried.push(flid);
    }
    if d.snapshot {
        delete_absent(&mut d, view, carried, &tag, msg_id);
    }
    Ok(d)
}

/// A `KAFKA:schd` DELETE's payload for a flight a snapshot no longer carries. Keys in name order,
/// as every payload's.
#[derive(serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
struct Absent<'a> {
    deleted: bool,
    flid: &'a str,
    reason: &'a str,
}

/// A snapshot's deletions: every flight of its window that it does not carry goes, with a
/// `KAFKA:schd` DELETE (SCHD DNLD/RESP and the family-B full table alike).
pub(super) fn delete_absent(d: &mut Decision, view: &View, mut carried: Vec<String>, tag: &str, msg_id: i64) {
    carried.sort();
    for gone in view.window.iter().filter(|f| carried.binary_search(f).is_err()) {
        d.flights.push(FlightChange { flid: gone.clone(), delete: true, ..Default::default() });
        let reason = format!("absent from {tag} msg_id={msg_id}");
        let payload = Absent { deleted: true, flid: gone, reason: &reason };
        d.events.push(event(Target::KafkaSchd, gone, "DELETE", msg_id, payload));
    }
}

#[cfg(test)]
mod tests {
    use super::super::decide as decide_any;
    use super::*;
    use crate::codec::decode;
    use crate::fixtures;

    fn fltr(flid: &str, sodt: &str) -> String {
        format!(
            "<FLTR><FLID>{flid}</FLID><FLNO>MU{flid}</FLNO><SODT>{sodt}</SODT><STND>2{flid}</STND></FLTR>"
        )
    }

    fn msg(styp: &str, recs: Option<usize>, flights: &[(&str, &str)]) -> Message {
        let recs = recs.map(|n| format!("<RECS>{n}</RECS>")).unwrap_or_default();
        let body: String = flights.iter().map(|(f, s)| fltr(f, s)).collect();
        decode(&fixtures::other(7, "SCHD", styp, &format!("<SCHD>{recs}{body}</SCHD>"))).unwrap()
    }

    #[test]
    fn dnld_upserts_the_package_and_deletes_the_windows_absent_flights() {
        let m = msg("DNLD", Some(2), &[("1", "05MAR260900"), ("2", "05MAR261800")]);
        let view = View { window: vec!["1".into(), "3".into()], ..Default::default() };
        let d = decide_any(&view, &m, 40).unwrap();
        assert!(d.snapshot);
        let ops: Vec<(String, bool, Option<i64>)> =
            d.flights.iter().map(|c| (c.flid.clone(), c.delete, c.sodt)).collect();
        assert_eq!(
            ops,
            vec![
                ("1".into(), false, Some(202603050900)),
                ("2".into(), false, Some(202603051800)),
                ("3".into(), true, None)
            ]
        );
        let targets: Vec<(&str, &str)> =
            d.events.iter().map(|e| (e.target.as_str(), e.event_type.as_str())).collect();
        assert_eq!(targets, [("KAFKA:schd", "UPSERT"), ("KAFKA:schd", "UPSERT"), ("KAFKA:schd", "DELETE")]);
        let p: serde_json::Value = serde_json::from_str(&d.events[0].payload_json).unwrap();
        assert_eq!(p["FLID"], "1");
        assert_eq!(p["SODT"], "2026-03-05T09:00");
    }

    #[test]
    fn adft_only_adds_or_updates() {
        let m = msg("ADFT", None, &[("1", "05MAR260900")]);
        let view = View { window: vec!["1".into(), "3".into()], ..Default::default() };
        let d = decide_any(&view, &m, 40).unwrap();
        assert!(!d.snapshot);
        assert_eq!(d.flights.len(), 1);
    }

    #[test]
    fn protocol_violations_apply_nothing() {
        let cases = [
            (msg("DNLD", Some(3), &[("1", "05MAR260900")]), "RECS declares 3 records, the package carries 1"),
            (
                msg("RESP", None, &[("1", "05MAR260900"), ("1", "06MAR260900")]),
                "operating-day conflict: FLID 1 appears for 2026-03-05 and 2026-03-06",
            ),
            (msg("ADFT", None, &[("1", "05MAR260900"), ("1", "05MAR261000")]), "FLID 1 appears twice"),
        ];
        for (m, words) in cases {
            match decide_any(&View::default(), &m, 1) {
                Err(Reject::Protocol(e)) => assert!(e.contains(words), "{e}"),
                other => panic!("{words}: {other:?}"),
            }
        }
    }
}
