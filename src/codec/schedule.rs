//! `SCHD` (daily plan: DNLD and RESP are complete snapshots of their window, ADFT adds or
//! updates) and `SCHS` (seasonal plan): a `RECS` count and `FLTR` flight records. A FLTR is
//! read generically: plain elements become text (known time fields normalised to ISO),
//! structured ones records, repeated ones lists.

use serde_json::map::Entry;
use serde_json::{Map, Value};

use super::time;
use super::xml::{same_name, trim, Element};
use super::{codec_error, malformed, DecodeError};

/// One complete flight record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Fltr {
    /// The AODB flight id; required in SCHD, absent from seasonal (SCHS) records.
    pub flid: Option<String>,
    /// SODT as ISO (`2021-01-23T05:35`); required in SCHD, optional in SCHS.
    pub sodt: Option<String>,
    /// Every element but FLID, by name.
    pub fields: Map<String, Value>,
}

/// The season of an `SCHS` message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Season {
    pub name: Option<String>,
    pub airport: Option<String>,
    pub start: Option<String>,
    pub end: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Schedule {
    /// The declared record count (`RECS`), checked against `flights` by the handler.
    pub recs: Option<u32>,
    pub flights: Vec<Fltr>,
    pub season: Option<Season>,
}

/// FLTR elements holding a time or a date: every one four letters, so only a four-letter
/// name is looked up.
const TIME_FIELDS: &[&str] = &[
    "SODT", "ESTT", "ACTT", "STDT", "EDDT", "SCHT", "SCAT", "SCDT", "STST", "STET", "PGOT", "PGCT", "GOTM",
    "GCTM",
];
const _: () = {
    let mut i = 0;
    while i < TIME_FIELDS.len() {
        assert!(TIME_FIELDS[i].len() == 4, "text_value looks up four-letter names only");
        i += 1;
    }
};

fn text_value(name: &str, text: &str, flid: &str) -> Result<Value, DecodeError> {
    if !text.is_empty() && name.len() == 4 && TIME_FIELDS.iter().any(|t| same_name(t, name)) {
        if let Some(t) = time::parse(text) {
            return Ok(Value::String(t.iso()));
        }
        // Seasonal records give times of day as HHMM.
        let hhmm = text.len() == 4
            && text.bytes().all(|b| b.is_ascii_digit())
            && text[..2].parse::<u8>().is_ok_and(|h| h < 24)
            && text[2..].parse::<u8>().is_ok_and(|m| m < 60);
        if !hhmm {
            return Err(codec_error(format!(
                "{name} of FLTR {flid}: {text:?} is not a time (ddMMMyyHHmm, ddMMMyy or HHMM)"
            )));
        }
    }
    Ok(Value::String(text.to_string()))
}

/// A structured element as a JSON object: attributes, children (recursively) and text.
fn element_value(el: Element, flid: &str) -> Result<Value, DecodeError> {
    if !el.has_children() && !el.has_attrs() {
        return text_value(el.name(), el.text(), flid);
    }
    // A child of an attribute's name wins over the attribute (a later attribute over an
    // earlier one), and the text over both.
    let mut obj = Map::new();
    group_into(&mut obj, el.children(), flid)?;
    for (k, v) in el.attrs().filter(|(k, _)| !el.children().any(|c| same_name(c.name(), k))) {
        obj.insert(k.to_ascii_uppercase(), Value::String(trim(v).to_string()));
    }
    if !el.text().is_empty() {
        obj.insert("TEXT".into(), Value::String(el.text().to_string()));
    }
    Ok(Value::Object(obj))
}

/// Children by upper-cased name into `map`; a repeated name becomes a list, in document
/// order. Straight into the map: an element's value is never a list itself, so a list there
/// is one this made (#23: the children were gathered in a map of lists first, then copied).
fn group_into<'d, 'x: 'd>(
    map: &mut Map<String, Value>,
    children: impl IntoIterator<Item = Element<'d, 'x>>,
    flid: &str,
) -> Result<(), DecodeError> {
    for c in children {
        let v = element_value(c, flid)?;
        match map.entry(c.name().to_ascii_uppercase()) {
            Entry::Vacant(e) => drop(e.insert(v)),
            Entry::Occupied(mut e) => match e.get_mut() {
                Value::Array(list) => list.push(v),
                first => *first = Value::Array(vec![first.take(), v]),
            },
        }
    }
    Ok(())
}

fn fltr(el: Element, daily: bool) -> Result<Fltr, DecodeError> {
    let flid = el.child_text("FLID").map(str::to_string);
    let flid = match flid {
        Some(f) => f,
        None if daily => return Err(malformed("<FLTR> has no <FLID>")),
        None => format!("{}/{}", el.child_text("FLNO").unwrap_or("?"), el.child_text("MVIN").unwrap_or("?")),
    };
    let mut fields = Map::new();
    group_into(&mut fields, el.children().filter(|c| !same_name(c.name(), "FLID")), &flid)?;
    let sodt = match fields.get("SODT") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::String(_)) | None if daily => {
            return Err(malformed(format!("<FLTR> for FLID {flid} has no <SODT>")));
        }
        Some(Value::Array(_)) => {
            return Err(malformed(format!("<FLTR> for FLID {flid} has more than one <SODT>")))
        }
        _ => None,
    };
    // A repeated sub-record with a single occurrence is still a list, so consumers see one shape.
    for name in ["ROUT", "ERUT", "PSDT", "GTDT", "CKDT", "CLDT", "CHDT", "CHOT", "ABTM", "DELY", "PSHT"] {
        if let Some(v) = fields.get_mut(name).filter(|v| v.is_object()) {
            *v = Value::Array(vec![v.take()]);
        }
    }
    Ok(Fltr { flid: el.child_text("FLID").map(str::to_string), sodt, fields })
}

fn recs(container: Element) -> Result<Option<u32>, DecodeError> {
    container
        .child_text("RECS")
        .map(|r| r.trim().parse::<u32>().map_err(|_| malformed(format!("<RECS> {r:?} is not a count"))))
        .transpose()
}

/// `<SCHD><RECS/><FLTR/>*</SCHD>`.
pub fn decode_schd(root: Element) -> Result<Schedule, DecodeError> {
    let schd = root.child("SCHD").ok_or_else(|| malformed("SCHD message has no <SCHD> body"))?;
    let flights = schd.children_named("FLTR").map(|f| fltr(f, true)).collect::<Result<Vec<_>, _>>()?;
    Ok(Schedule { recs: recs(schd)?, flights, season: None })
}

/// `<SCHS><SNAM/><APCD/><SDAT/><EDAT/><RECS/><FLTR/>*</SCHS>`.
pub fn decode_schs(root: Element) -> Result<Schedule, DecodeError> {
    let schs = root.child("SCHS").ok_or_else(|| malformed("SCHS message has no <SCHS> body"))?;
    let flights = schs.children_named("FLTR").map(|f| fltr(f, false)).collect::<Result<Vec<_>, _>>()?;
    let season = Season {
        name: schs.child_text("SNAM").map(str::to_string),
        airport: schs.child_text("APCD").map(str::to_string),
        start: schs.child_text("SDAT").map(str::to_string),
        end: schs.child_text("EDAT").map(str::to_string),
    };
    Ok(Schedule { recs: recs(schs)?, flights, season: Some(season) })
}
