//! Family B's full table, `DFOE-DFDL`: a snapshot of its window [min SODT, max SODT], through
//! the daily plan's snapshot path — every flight it carries is upserted, every flight the plan
//! holds in that window and the table lacks is deleted, the plan's generation advances (the
//! same compare-and-set in the same Redis script), and the changes go out on `KAFKA:schd`.
//!
//! The whole table is checked first (PROTOCOL, nothing applied): `RECD` must be the number of
//! `DFLT` records — a table that lacks records would delete the flights they hold — and a FLID
//! may appear once. The flights' partial updates (`DFIE`, `DFME`) are FLOP updates
//! ([`super::flop`]).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{event, flop::sodt_from_ffid, Decision, FlightChange, Reject, View};
use crate::codec::{FlopRecord, Message};
use crate::domain::Target;

pub fn validate(recd: Option<u32>, records: &[FlopRecord]) -> Result<(), Reject> {
    match recd {
        Some(n) if n as usize != records.len() => {
            return Err(Reject::Protocol(format!(
            "RECD declares {n} flights, the table carries {}: a partial table would delete the missing ones",
            records.len()
        )))
        }
        None => return Err(Reject::Protocol("a full table (DFDL) without <RECD>".into())),
        _ => {}
    }
    let mut seen = BTreeSet::new();
    for r in records {
        if !seen.insert(r.flid.as_str()) {
            return Err(Reject::Protocol(format!("FLID {} appears twice in the table", r.flid)));
        }
    }
    Ok(())
}

/// The window a table covers: the SODTs of its flights, from their FFIDs.
pub fn window(records: &[FlopRecord]) -> Option<(i64, i64)> {
    let keys: Vec<i64> = records.iter().filter_map(|r| r.ffid.as_deref().and_then(sodt_from_ffid)).collect();
    keys.iter().min().zip(keys.iter().max()).map(|(a, b)| (*a, *b))
}

pub fn decide_sync(
    view: &View,
    recd: Option<u32>,
    records: &[FlopRecord],
    msg: &Message,
    msg_id: i64,
) -> Result<Decision, Reject> {
    validate(recd, records)?;
    let tag = msg.kind.type_tag();
    let mut d = Decision { snapshot: msg.kind.is_snapshot(), ..Default::default() };
    let mut carried = Vec::with_capacity(records.len());
    for r in records {
        let mut change = FlightChange { flid: r.flid.clone(), ..Default::default() };
        let mut payload = Map::new();
        payload.insert("FLID".into(), Value::String(r.flid.clone()));
        if let Some(ffid) = &r.ffid {
            change.set.push(("FFID".into(), ffid.clone()));
            change.sodt = sodt_from_ffid(ffid);
            payload.insert("FFID".into(), Value::String(ffid.clone()));
        }
        for (field, value) in &r.fields {
            match value {
                Some(v) => {
                    change.set.push((field.clone(), v.clone()));
                    let json = serde_json::from_str(v).ok().filter(|j: &Value| j.is_object() || j.is_array());
                    payload.insert(field.clone(), json.unwrap_or_else(|| Value::String(v.clone())));
                }
                None => change.clear.push(field.clone()),
            }
        }
        d.flights.push(change);
        d.events.push(event(Target::KafkaSchd, &r.flid, "UPSERT", msg_id, Value::Object(payload)));
        carried.push(r.flid.clone());
    }
    super::schedule::delete_absent(&mut d, view, carried, &tag, msg_id);
    Ok(d)
}
