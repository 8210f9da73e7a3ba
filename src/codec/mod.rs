//! Decoding of AODB "SIS" messages (family A, `format/FORMAT.md`): the `MSG/META` envelope,
//! then the body by TYPE. Decoding is pure: text in, typed message or classified error out.
//!
//! The order matters (US-04): [`decode_meta`] runs first so that the ignore rules can end a
//! message before its body is read; only then [`decode_body`].

pub mod ignore;
mod xml;

use crate::error::ErrorClass;
use xml::Element;

/// The header every message carries (`MSG/META`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Meta {
    pub sndr: String,
    pub seqn: String,
    /// `DTTM` (or `DDTM` in feeds of family B), `yyyyMMddHHmmss`.
    pub dttm: String,
    /// Upper-cased TYPE (`FLOP`, `SCHD`, …).
    #[serde(rename = "type")]
    pub msg_type: String,
    /// Upper-cased STYP.
    pub styp: String,
}

/// What a message is, as far as routing is concerned. [`MsgKind::type_tag`] is the one name
/// used for dispatch, log lines and counters alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MsgKind {
    /// An incremental flight update; the STYP names the changed element.
    Flop(String),
    /// A type msgx has no decoder for (yet). Not implemented is not illegal.
    Unsupported { msg_type: String, styp: String },
}

impl MsgKind {
    pub fn of(meta: &Meta) -> MsgKind {
        match meta.msg_type.as_str() {
            "FLOP" => MsgKind::Flop(meta.styp.clone()),
            _ => MsgKind::Unsupported { msg_type: meta.msg_type.clone(), styp: meta.styp.clone() },
        }
    }

    pub fn type_tag(&self) -> String {
        match self {
            MsgKind::Flop(styp) => format!("FLOP-{styp}"),
            MsgKind::Unsupported { msg_type, styp } => format!("{msg_type}-{styp}"),
        }
    }
}

/// One flight's part of a FLOP message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FlopRecord {
    pub flid: String,
    pub ffid: Option<String>,
    /// Changed elements in document order; `None` is an empty element, which clears the field.
    pub fields: Vec<(String, Option<String>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Flop(Vec<FlopRecord>),
    /// The kind is unsupported: the body was not read.
    Unread,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub meta: Meta,
    pub kind: MsgKind,
    pub body: Body,
}

/// Why a text did not decode; the class decides DEAD (MALFORMED) or FAILED (CODEC_ERROR).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{class}: {detail}")]
pub struct DecodeError {
    pub class: ErrorClass,
    pub detail: String,
}

fn malformed(detail: impl Into<String>) -> DecodeError {
    DecodeError { class: ErrorClass::Malformed, detail: detail.into() }
}

fn codec_error(detail: impl Into<String>) -> DecodeError {
    DecodeError { class: ErrorClass::CodecError, detail: detail.into() }
}

/// A parsed document whose META was read; the body is decoded on demand.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub meta: Meta,
    root: Element,
}

/// Parses the document and its META. Not XML, no `MSG` root, no META, or a META without its
/// required fields → MALFORMED.
pub fn decode_meta(raw: &str) -> Result<Envelope, DecodeError> {
    if raw.trim().is_empty() {
        return Err(malformed("raw text is empty"));
    }
    let root = xml::parse(raw).map_err(|e| malformed(format!("not XML: {e}")))?;
    if !root.name.eq_ignore_ascii_case("MSG") {
        return Err(malformed(format!("root element is <{}>, not <MSG>", root.name)));
    }
    let meta_el = root.child("META").ok_or_else(|| malformed("no <META> header"))?;
    let field = |names: &[&str]| -> Result<String, DecodeError> {
        names
            .iter()
            .find_map(|n| meta_el.child_text(n))
            .map(str::to_string)
            .ok_or_else(|| malformed(format!("<META> has no <{}>", names[0])))
    };
    let meta = Meta {
        sndr: field(&["SNDR"])?,
        seqn: field(&["SEQN"])?,
        dttm: field(&["DTTM", "DDTM"])?,
        msg_type: field(&["TYPE"])?.to_ascii_uppercase(),
        styp: field(&["STYP"])?.to_ascii_uppercase(),
    };
    Ok(Envelope { meta, root })
}

/// Decodes the body the META announces.
pub fn decode_body(env: Envelope) -> Result<Message, DecodeError> {
    let kind = MsgKind::of(&env.meta);
    let body = match &kind {
        MsgKind::Flop(_) => Body::Flop(decode_flop(&env.root)?),
        MsgKind::Unsupported { .. } => Body::Unread,
    };
    Ok(Message { meta: env.meta, kind, body })
}

/// [`decode_meta`] then [`decode_body`], for callers that apply no ignore rules in between.
pub fn decode(raw: &str) -> Result<Message, DecodeError> {
    decode_body(decode_meta(raw)?)
}

fn decode_flop(root: &Element) -> Result<Vec<FlopRecord>, DecodeError> {
    let mut records = Vec::new();
    for flop in root.children_named("FLOP") {
        let flid = flop.child_text("FLID").ok_or_else(|| malformed("<FLOP> has no <FLID>"))?;
        let mut fields = Vec::new();
        for el in &flop.children {
            let name = el.name.to_ascii_uppercase();
            if name == "FLID" || name == "FFID" {
                continue;
            }
            if !el.children.is_empty() || !el.attrs.is_empty() {
                // Lists and coded elements need their subtype's table (issue #3); until the
                // codec knows them they are retryable, never illegal.
                return Err(codec_error(format!(
                    "<{name}> in FLOP {flid} has nested elements or attributes this codec cannot read yet"
                )));
            }
            let value = (!el.text.is_empty()).then(|| el.text.clone());
            fields.push((name, value));
        }
        records.push(FlopRecord {
            flid: flid.to_string(),
            ffid: flop.child_text("FFID").map(str::to_string),
            fields,
        });
    }
    if records.is_empty() {
        return Err(malformed("FLOP message has no <FLOP> record"));
    }
    Ok(records)
}

/// The business identity of a message (INV-9): `SNDR|TYPE|STYP|SEQN`, plus `|yyyyMMdd` of the
/// DTTM when `include_day_boundary` is on (Q11). The only place the key is built.
pub fn identity(meta: &Meta, include_day_boundary: bool) -> String {
    let mut key = format!("{}|{}|{}|{}", meta.sndr, meta.msg_type, meta.styp, meta.seqn);
    if include_day_boundary {
        key.push('|');
        key.push_str(meta.dttm.get(..8).unwrap_or(&meta.dttm));
    }
    key
}

#[cfg(test)]
mod tests;
