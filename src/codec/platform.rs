//! Family B: the CAAC-style integration platform (FIMS/IIS, `format/FORMAT.md` §2), read into
//! the same messages as family A. META carries `DDTM` (and `RCVR`, `SORC`, `MGID`, `RMID`,
//! `APOT`); flights are `DFLT` records keyed by `FLID`:
//!
//! - `DFOE`: `DFIE` adds (or re-sends) a flight, `DFDE` deletes it, `DFDL` is the full table: a
//!   snapshot of its window with a `RECD` count — the daily plan's snapshot path;
//! - `DFME`: one of 29 event subtypes ([`EVENTS`]), a partial `DFLT` — a flight update;
//! - `BASE`: `<xx>IE/UE/DE/DL`, master data (gates, belts, counters, stands, …) → `REF_MASTER`;
//! - `REQE`/`RQDF` (a re-sync request addressed to the platform) and `BHSE` (baggage equipment
//!   status) are recognised and not for msgx.
//!
//! A `DFLT` is read with one table ([`DFLT_SCALARS`]): plain elements as text, platform times
//! (`yyyyMMddHHmmss`, sometimes with milliseconds) as ISO with seconds, dates as ISO dates;
//! the structured ones ([`DFLT_RECORDS`]: legs, gates, belts, stands, counters, terminals,
//! codeshares) as canonical JSON. An empty element clears its field, as in family A.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::flop::FlopRecord;
use super::reference::{RefData, RefOp, RefRecord};
use super::xml::Element;
use super::{codec_error, malformed, DecodeError, Unknown};

/// The 29 `DFME` event subtypes: (STYP, meaning, the DFLT elements it is known to carry).
/// Every known DFLT element a message carries is applied; the list documents the usual ones.
pub const EVENTS: &[(&str, &str, &[&str])] = &[
    ("DFUE", "generic flight update", &[]),
    ("AFID", "linked (turnaround) flight changed", &["AFID"]),
    ("AIRL", "route changed", &["AIRL"]),
    ("APRTINFO", "airport / leg information", &["AIRL"]),
    ("ARRE", "landed", &["STAT", "FRLT"]),
    ("DEPE", "took off", &["STAT", "FRTT"]),
    ("ONRE", "departed the previous station", &["STAT", "PAST"]),
    ("BORE", "boarding started", &["STAT", "BORT", "MBOR"]),
    ("LBDE", "last call", &["LBDT", "MLBD"]),
    ("POKE", "boarding closed", &["POKT", "MPOK"]),
    ("DLYE", "delayed", &["ABST", "ABRS", "IAST", "IARS"]),
    ("CANE", "cancelled", &["ABST", "ABRS", "IAST", "IARS"]),
    ("RTNE", "returned to origin", &["ABST", "ABRS"]),
    ("ALTE", "diverted", &["ABST", "ABRS"]),
    ("BAKE", "taxied back", &["ABST", "ABRS"]),
    ("FPTT", "planned time changed", &["AIRL", "FPTT", "FPLT"]),
    ("FETT", "estimated time changed", &["AIRL", "FETT", "FELT", "ELDT"]),
    ("FRTT", "actual time", &["AIRL", "FRTT", "FRLT"]),
    ("HBTT", "flight number changed", &["HBID", "HBIE", "NFLN", "NAWC"]),
    ("GTLS", "gates allocated", &["GTLS"]),
    ("BLLS", "baggage belts allocated", &["BLLS"]),
    ("STLS", "stands allocated", &["STLS"]),
    ("CKLS", "check-in counters allocated", &["CKLS"]),
    ("CKIE", "check-in event (opened)", &["CKLS"]),
    ("CKOE", "check-in event (closed)", &["CKLS"]),
    ("CFCE", "aircraft changed", &["CFTP", "CFNO"]),
    ("SFLG", "codeshares changed", &["SFLG"]),
    ("TRML", "terminal changed", &["TMCD"]),
    ("FATT", "flight attribute changed", &["FATT"]),
];

/// How a plain DFLT value is checked and normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    /// `yyyyMMddHHmmss` (or with milliseconds, or `yyyyMMddHHmm`) → ISO with seconds.
    Stamp,
    /// `yyyyMMdd` → ISO date.
    Date,
}

use Kind::{Date, Stamp, Text};

/// Every plain `DFLT` element (`format/caac_imf_dflt_fields.csv`), FLID and FFID aside.
pub const DFLT_SCALARS: &[(&str, Kind)] = &[
    ("AFID", Text),
    ("FIDE", Text),
    ("AWCD", Text),
    ("FLNO", Text),
    ("FEXD", Date),
    ("FIMD", Date),
    ("FLIO", Text),
    ("BAPT", Text),
    ("FLTK", Text),
    ("FATT", Text),
    ("MFID", Text),
    ("MFFI", Text),
    ("CONT", Text),
    ("PROX", Text),
    ("CFTP", Text),
    ("CFNO", Text),
    ("STAT", Text),
    ("MSTA", Text),
    ("ABST", Text),
    ("ABRS", Text),
    ("IAST", Text),
    ("IARS", Text),
    ("BORT", Stamp),
    ("MBOR", Stamp),
    ("TBRT", Stamp),
    ("MTBR", Stamp),
    ("LBDT", Stamp),
    ("MLBD", Stamp),
    ("POKT", Stamp),
    ("MPOK", Stamp),
    ("APOT", Text),
    ("VIP", Text),
    ("PAST", Stamp),
    ("ELDT", Stamp),
    ("FPTT", Stamp),
    ("FETT", Stamp),
    ("FRTT", Stamp),
    ("FPLT", Stamp),
    ("FELT", Stamp),
    ("FRLT", Stamp),
    ("RWAY", Text),
    ("EXNO", Text),
    ("HBID", Text),
    ("HBIE", Text),
    ("NFLN", Text),
    ("NAWC", Text),
];

/// Structured `DFLT` elements: (name, the repeated item inside it, if it is a list).
pub const DFLT_RECORDS: &[(&str, Option<&str>)] = &[
    ("AIRL", Some("ARPT")),
    ("GTLS", Some("GATE")),
    ("BLLS", Some("BELT")),
    ("STLS", Some("STND")),
    ("CHLS", Some("CHUT")),
    ("CKLS", None),
    ("TMCD", None),
    ("SFLG", Some("SFLGINFO")),
    ("LABELS", None),
];

/// Names inside structured elements that hold platform times.
const NESTED_STAMPS: &[&str] = &[
    "FPTT", "FETT", "FRTT", "FPLT", "FELT", "FRLT", "ESTR", "EEND", "RSTR", "REND", "FCES", "FCEE", "FCRS",
    "FCRE", "MCES", "MCEE", "MCRS", "MCRE",
];

/// Repeated items inside structured elements: always lists, even with one occurrence.
const ITEMS: &[&str] =
    &["ARPT", "GATE", "BELT", "STND", "CHUT", "COUNTER", "CNTR", "DELTCK", "SFLGINFO", "SFLT"];

/// `BASE` master data: (STYP prefix, record element, what it lists).
pub const BASE_TABLES: &[(&str, &str, &str)] = &[
    ("GT", "GATE", "gates"),
    ("BL", "BELT", "baggage belts"),
    ("CC", "CNTR", "check-in counters"),
    ("ST", "STND", "stands"),
    ("AR", "ABRN", "abnormal reasons"),
    ("AW", "AWAY", "airlines"),
    ("AP", "APOT", "airports"),
    ("CF", "CRFT", "aircraft types"),
];

/// `DFOE`'s three subtypes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DfoeKind {
    /// `DFIE`: a flight added or re-sent.
    Add,
    /// `DFDE`: a flight deleted.
    Delete,
    /// `DFDL`: the full table — a snapshot of its window.
    Sync,
}

impl DfoeKind {
    pub fn parse(styp: &str) -> Option<DfoeKind> {
        Some(match styp {
            "DFIE" => DfoeKind::Add,
            "DFDE" => DfoeKind::Delete,
            "DFDL" => DfoeKind::Sync,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DfoeKind::Add => "DFIE",
            DfoeKind::Delete => "DFDE",
            DfoeKind::Sync => "DFDL",
        }
    }
}

/// A `BASE` STYP: the table its prefix names and the operation its suffix names.
pub fn base_kind(styp: &str) -> Option<(&'static str, RefOp)> {
    let (prefix, op) = (styp.get(..2)?, styp.get(2..)?);
    let element = BASE_TABLES.iter().find(|(p, _, _)| *p == prefix).map(|(_, e, _)| *e)?;
    let op = match op {
        "IE" => RefOp::Add,
        "UE" => RefOp::Upd,
        "DE" => RefOp::Del,
        "DL" => RefOp::Dnld,
        _ => return None,
    };
    Some((element, op))
}

/// A platform time as ISO with seconds (`2021-04-13T08:15:00`, `….768` with milliseconds).
pub fn stamp(raw: &str) -> Option<String> {
    let d = raw.trim();
    if !matches!(d.len(), 8 | 12 | 14 | 17) || !d.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |a: usize, b: usize| d[a..b].parse::<u32>().ok();
    let (month, day) = (n(4, 6)?, n(6, 8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let date = format!("{}-{}-{}", &d[0..4], &d[4..6], &d[6..8]);
    let hm = |len: usize| -> Option<String> {
        let (h, m) = (n(8, 10)?, n(10, 12)?);
        let s = if len >= 14 { n(12, 14)? } else { 0 };
        (h < 24 && m < 60 && s < 60).then(|| format!("{date}T{}:{}:{s:02}", &d[8..10], &d[10..12]))
    };
    match d.len() {
        8 => Some(date),
        12 | 14 => hm(d.len()),
        17 => hm(14).map(|t| format!("{t}.{}", &d[14..17])),
        _ => None,
    }
}

fn value(kind: Kind, raw: &str, field: impl std::fmt::Display, flid: &str) -> Result<String, DecodeError> {
    let v = raw.trim();
    match kind {
        Text => Ok(v.to_string()),
        Stamp | Date => stamp(v).filter(|s| (kind == Date) == (s.len() == 10)).ok_or_else(|| {
            let what = if kind == Date { "a date yyyyMMdd" } else { "a time yyyyMMddHHmmss" };
            codec_error(format!("{field} of FLID {flid}: {v:?} is not {what}"))
        }),
    }
}

/// A structured element as canonical JSON: children by name (items always as lists), times
/// normalised, empty values left out.
fn structured(el: Element, flid: &str) -> Result<Value, DecodeError> {
    let mut groups: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for c in el.children() {
        let name = c.name().to_ascii_uppercase();
        let v = if !c.has_children() {
            if c.text().is_empty() {
                continue;
            }
            let t = if NESTED_STAMPS.contains(&name.as_str()) {
                value(Stamp, c.text(), format_args!("{}/{name}", el.name()), flid)?
            } else {
                c.text().to_string()
            };
            Value::String(t)
        } else {
            match structured(c, flid)? {
                Value::Object(o) if o.is_empty() => continue,
                v => v,
            }
        };
        groups.entry(name).or_default().push(v);
    }
    let mut obj = Map::new();
    for (name, mut vs) in groups {
        let v =
            if vs.len() == 1 && !ITEMS.contains(&name.as_str()) { vs.remove(0) } else { Value::Array(vs) };
        obj.insert(name, v);
    }
    if !el.text().is_empty() && !el.has_children() {
        obj.insert("TEXT".into(), Value::String(el.text().to_string()));
    }
    Ok(Value::Object(obj))
}

/// Reads one `DFLT`: the changed fields in document order (`None`: cleared).
pub fn decode_dflt(el: Element, delete: bool, unknown: &mut Unknown) -> Result<FlopRecord, DecodeError> {
    let flid = el.child_text("FLID").ok_or_else(|| malformed("<DFLT> has no <FLID>"))?.trim().to_string();
    let ffid = el.child_text("FFID").map(|s| s.trim().to_string());
    if delete {
        return Ok(FlopRecord { flid, ffid, fields: Vec::new(), delete: true });
    }
    let mut fields: Vec<(String, Option<String>)> = Vec::new();
    for c in el.children() {
        let name = c.name().to_ascii_uppercase();
        if name == "FLID" || name == "FFID" {
            continue;
        }
        if fields.iter().any(|(n, _)| *n == name) {
            return Err(codec_error(format!("<{name}> appears more than once in DFLT {flid}")));
        }
        let v = if let Some((_, kind)) = DFLT_SCALARS.iter().find(|(n, _)| *n == name) {
            if c.has_children() {
                return Err(codec_error(format!("<{name}> of FLID {flid} should be a plain value")));
            }
            (!c.text().is_empty()).then(|| value(*kind, c.text(), &name, &flid)).transpose()?
        } else if DFLT_RECORDS.iter().any(|(n, _)| *n == name) {
            match structured(c, &flid)? {
                Value::Object(o) if o.is_empty() => None,
                v => Some(serde_json::to_string(&v).expect("JSON values serialise")),
            }
        } else {
            // The tolerant reader skips what the table does not know, and says so.
            unknown.note(&format!("DFLT/{name}"), || {
                codec_error(format!("DFLT {flid} carries <{name}>, which this codec does not know"))
            })?;
            continue;
        };
        fields.push((name, v));
    }
    Ok(FlopRecord { flid, ffid, fields, delete: false })
}

/// Every `DFLT` of the message.
pub fn decode_flights(
    root: Element,
    delete: bool,
    unknown: &mut Unknown,
) -> Result<Vec<FlopRecord>, DecodeError> {
    let records = root
        .children_named("DFLT")
        .map(|d| decode_dflt(d, delete, unknown))
        .collect::<Result<Vec<_>, _>>()?;
    if records.is_empty() {
        return Err(malformed("the message has no <DFLT> record"));
    }
    Ok(records)
}

/// The `RECD` count of a `DFDL`.
pub fn recd(root: Element) -> Result<Option<u32>, DecodeError> {
    root.child_text("RECD")
        .map(|r| r.trim().parse::<u32>().map_err(|_| malformed(format!("<RECD> {r:?} is not a count"))))
        .transpose()
}

fn record_fields(el: Element) -> BTreeMap<String, Value> {
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    for c in el.children() {
        let v = if !c.has_children() {
            Value::String(c.text().to_string())
        } else {
            Value::Object(record_fields(c).into_iter().collect())
        };
        out.insert(c.name().to_ascii_uppercase(), v);
    }
    out
}

/// A `BASE` message's records. The STYP names the table; when the body carries another known
/// table's records instead (seen in vendor test data), those are read, and `note` says so.
pub fn decode_base(root: Element, element: &str, op: RefOp) -> Result<RefData, DecodeError> {
    let present = |e: &str| root.children_named(e).next().is_some();
    let (actual, note) = if present(element) {
        (element.to_string(), None)
    } else if let Some((_, other, _)) = BASE_TABLES.iter().find(|(_, e, _)| present(e)) {
        (
            other.to_string(),
            Some(format!(
                "the STYP names {element} records, the message carries {other} records: read as {other}"
            )),
        )
    } else {
        // Nothing to apply; the handler refuses it only where that would empty a list.
        return Ok(RefData {
            rtype: element.to_string(),
            op,
            recs: None,
            records: Vec::new(),
            note: Some(format!("the message carries no <{element}> record")),
        });
    };
    let mut records = Vec::new();
    for el in root.children_named(&actual) {
        let key = ["CODE", "ID"]
            .iter()
            .find_map(|k| el.child_text(k))
            .ok_or_else(|| malformed(format!("a {actual} record has neither <CODE> nor <ID>")))?;
        records.push(RefRecord { key: key.trim().to_string(), fields: record_fields(el) });
    }
    Ok(RefData { rtype: actual, op, recs: None, records, note })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_times_become_iso_with_seconds() {
        assert_eq!(stamp("20210413081500").as_deref(), Some("2021-04-13T08:15:00"));
        assert_eq!(stamp("20250303154024768").as_deref(), Some("2025-03-03T15:40:24.768"));
        assert_eq!(stamp("202104130815").as_deref(), Some("2021-04-13T08:15:00"));
        assert_eq!(stamp("20210413").as_deref(), Some("2021-04-13"));
        for bad in ["2010010223000", "20211313081500", "20210413246000", "2021-04-13", "", "abc"] {
            assert_eq!(stamp(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn every_base_styp_names_a_table_and_an_operation() {
        assert_eq!(base_kind("GTIE"), Some(("GATE", RefOp::Add)));
        assert_eq!(base_kind("BLDL"), Some(("BELT", RefOp::Dnld)));
        assert_eq!(base_kind("CFUE"), Some(("CRFT", RefOp::Upd)));
        assert_eq!(base_kind("APDE"), Some(("APOT", RefOp::Del)));
        assert_eq!(base_kind("XXIE"), None);
        assert_eq!(base_kind("GTZZ"), None);
    }

    #[test]
    fn there_are_29_event_subtypes() {
        assert_eq!(EVENTS.len(), 29);
        let mut names: Vec<&str> = EVENTS.iter().map(|(s, _, _)| *s).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 29, "no STYP twice");
    }
}
