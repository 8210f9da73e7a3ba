//! Reference (master) data: 23 TYPEs (`format/unisys_sis_reference_types.csv`), STYP DNLD |
//! RESP (the type's complete list) | ADD | UPD | DEL; `<RECS>n</RECS>` then n records named
//! like the TYPE directly under MSG. Each type has one key field.

use std::collections::BTreeMap;

use serde_json::Value;

use super::xml::Element;
use super::{malformed, DecodeError};

/// (TYPE, key field, what it lists).
pub const TYPES: &[(&str, &str, &str)] = &[
    ("SLST", "SCOD", "stands"),
    ("GLST", "GCOD", "gates"),
    ("BLST", "BCOD", "baggage reclaim belts"),
    ("CLST", "CCOD", "check-in counters"),
    ("TLST", "TCOD", "terminals"),
    ("ABDG", "ABCD", "airbridges"),
    ("CHLT", "CCOD", "chutes"),
    ("PLST", "PCOD", "piers"),
    ("AIRC", "ITAT", "aircraft types"),
    ("REGN", "RNUM", "aircraft registrations"),
    ("AIRL", "ITOP", "airlines"),
    ("ARPT", "ITCD", "airports"),
    ("CITY", "ITCD", "cities"),
    ("COUL", "COUC", "countries"),
    ("REGL", "REGC", "regions"),
    ("ABNR", "ANRC", "abnormal reasons"),
    ("DLYL", "DCOD", "delay codes"),
    ("HLTR", "HLTC", "handling transactions"),
    ("ORGN", "OGID", "organisations"),
    ("STTS", "STTC", "flight status codes"),
    ("FLTL", "FTYP", "flight types"),
    ("VIPL", "VPCD", "VIP persons"),
    ("VIPS", "VSCD", "VIP services"),
];

/// What a reference message does to its type's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum RefOp {
    /// The complete list (replaces the type's list).
    Dnld,
    /// The complete list, as the answer to a request.
    Resp,
    Add,
    Upd,
    Del,
}

impl RefOp {
    pub fn parse(styp: &str) -> Option<RefOp> {
        Some(match styp.to_ascii_uppercase().as_str() {
            "DNLD" => RefOp::Dnld,
            "RESP" => RefOp::Resp,
            "ADD" => RefOp::Add,
            "UPD" => RefOp::Upd,
            "DEL" => RefOp::Del,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RefOp::Dnld => "DNLD",
            RefOp::Resp => "RESP",
            RefOp::Add => "ADD",
            RefOp::Upd => "UPD",
            RefOp::Del => "DEL",
        }
    }
}

pub fn key_of(rtype: &str) -> Option<&'static str> {
    TYPES.iter().find(|(t, _, _)| t.eq_ignore_ascii_case(rtype)).map(|(_, k, _)| *k)
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RefRecord {
    pub key: String,
    /// Every element by name (empty ones included: an empty value is a value here).
    pub fields: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RefData {
    pub rtype: String,
    pub op: RefOp,
    pub recs: Option<u32>,
    pub records: Vec<RefRecord>,
    /// Something the reader tolerated, reported with the decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn value(el: Element) -> Value {
    if !el.has_children() {
        return Value::String(el.text().to_string());
    }
    Value::Object(fields(el).into_iter().collect())
}

/// `el`'s children by upper-cased name; a repeated one (AIRL's SUBC sub-companies) becomes a
/// list.
fn fields(el: Element) -> BTreeMap<String, Value> {
    let mut seen: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for c in el.children() {
        seen.entry(c.name().to_ascii_uppercase()).or_default().push(value(c));
    }
    seen.into_iter()
        .map(|(k, mut vs)| if vs.len() == 1 { (k, vs.remove(0)) } else { (k, Value::Array(vs)) })
        .collect()
}

pub fn decode(root: Element, rtype: &str, op: RefOp) -> Result<RefData, DecodeError> {
    let key = key_of(rtype).expect("called for known types only");
    let recs = root
        .child_text("RECS")
        .map(|r| r.trim().parse::<u32>().map_err(|_| malformed(format!("<RECS> {r:?} is not a count"))))
        .transpose()?;
    let mut records = Vec::new();
    for el in root.children_named(rtype) {
        let k = el.child_text(key).ok_or_else(|| malformed(format!("a {rtype} record has no <{key}>")))?;
        records.push(RefRecord { key: k.trim().to_string(), fields: fields(el) });
    }
    Ok(RefData { rtype: rtype.to_ascii_uppercase(), op, recs, records, note: None })
}
