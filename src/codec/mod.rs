//! Decoding of the mailbox's messages: AODB "SIS" (family A, `format/FORMAT.md` §1) and the
//! CAAC-style integration platform (family B, §2, [`platform`]) — one entry point that tells
//! the dialect from the META and reads both into the same [`Message`]s. Documents of other
//! platforms (family C, T-Systems IMF) are recognised and not for msgx. Decoding is pure: text
//! in, typed message or classified error out.
//!
//! The order matters (US-04): [`decode_meta`] runs first so that the ignore rules can end a
//! message before its body is read; only then [`decode_body`].

mod canonical;
pub mod flop;
pub mod ignore;
mod limits;
pub mod platform;
pub mod reference;
pub mod report;
mod rulebook;
pub mod schedule;
pub mod time;
pub(crate) mod xml;

pub use flop::FlopRecord;
pub use limits::{work, Limit, Limits, Unknown};
pub use platform::DfoeKind;
pub use reference::{RefData, RefOp};
pub use rulebook::{Rulebook, RulebookError};
pub use schedule::{Fltr, Schedule};
pub use xml::MAX_DEPTH;

use std::borrow::Cow;

use crate::error::ErrorClass;
use xml::{Doc, Element};

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
    pub dialect: Dialect,
    /// Family B's message id (`MGID`), part of its identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mgid: Option<String>,
    /// Family B's `RMID`: the `MGID` of the request this message answers (G-RESP-GUARD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rmid: Option<String>,
}

/// Which platform wrote a message (`format/FORMAT.md` §0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Dialect {
    /// Unisys AODB "SIS": `META{SNDR,SEQN,DTTM,TYPE,STYP}`.
    A,
    /// The CAAC-style integration platform: `META{…,DDTM,RCVR,SORC,MGID,RMID,APOT}`.
    B,
    /// T-Systems IMF (`IMFRoot/SysInfo`): not this installation's feed.
    C,
}

/// TYPEs only family B uses.
const PLATFORM_TYPES: &[&str] = &["DFOE", "DFME", "BASE", "REQE", "BHSE"];

/// The three kinds of daily/seasonal schedule message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchdKind {
    /// Download: a complete snapshot of its window.
    Dnld,
    /// Answer to a request: a complete snapshot of its window.
    Resp,
    /// Add or update the listed flights only.
    Adft,
}

impl SchdKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SchdKind::Dnld => "DNLD",
            SchdKind::Resp => "RESP",
            SchdKind::Adft => "ADFT",
        }
    }

    fn parse(styp: &str) -> Option<SchdKind> {
        Some(match styp {
            "DNLD" => SchdKind::Dnld,
            "RESP" => SchdKind::Resp,
            "ADFT" => SchdKind::Adft,
            _ => return None,
        })
    }
}

/// What a message is, as far as routing is concerned. [`MsgKind::type_tag`] is the one name
/// used for dispatch, log lines and counters alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MsgKind {
    /// An incremental flight update; the STYP names the changed element (a known subtype).
    Flop(&'static str),
    /// `FLOP-FDEL`: the flight is deleted.
    Fdel,
    /// Daily schedule.
    Schd(SchdKind),
    /// Seasonal schedule (DNLD or RESP).
    Schs(SchdKind),
    /// Reference (master) data of one of the 23 types.
    Reference { rtype: &'static str, op: RefOp },
    /// Family B: a flight event (one of the 29 `DFME` subtypes), a partial flight update.
    Dfme(&'static str),
    /// Family B: a flight added, deleted, or the full table (`DFOE`).
    Dfoe(DfoeKind),
    /// Family B: master data (`BASE`), the table's record element and the operation.
    Base { table: &'static str, op: RefOp },
    /// Recognised, and not for msgx (a request to the platform, equipment status, another
    /// platform's document): SKIPPED with `why`.
    NotForUs { msg_type: String, styp: String, why: &'static str },
    /// A TYPE/STYP msgx has no decoder for (yet). Not implemented is not illegal.
    Unsupported { msg_type: String, styp: String },
}

impl MsgKind {
    /// The kind of the message `meta` announces, as `rules` read it: a FLOP subtype they do not
    /// read is UNSUPPORTED (for a later release).
    pub fn of(meta: &Meta, rules: &Rulebook) -> MsgKind {
        let unsupported =
            || MsgKind::Unsupported { msg_type: meta.msg_type.clone(), styp: meta.styp.clone() };
        let not_for_us =
            |why| MsgKind::NotForUs { msg_type: meta.msg_type.clone(), styp: meta.styp.clone(), why };
        match meta.msg_type.as_str() {
            _ if meta.dialect == Dialect::C => {
                not_for_us("a T-Systems IMF document (family C), not this feed")
            }
            "DFME" => platform::EVENTS
                .iter()
                .find(|(s, _, _)| *s == meta.styp)
                .map(|(s, _, _)| MsgKind::Dfme(s))
                .unwrap_or_else(unsupported),
            "DFOE" => DfoeKind::parse(&meta.styp).map(MsgKind::Dfoe).unwrap_or_else(unsupported),
            "BASE" => platform::base_kind(&meta.styp)
                .map(|(table, op)| MsgKind::Base { table, op })
                .unwrap_or_else(unsupported),
            "REQE" => not_for_us("a re-sync request addressed to the platform"),
            "BHSE" => not_for_us("baggage-handling equipment status, not flight data"),
            "FLOP" if meta.styp == "FDEL" => MsgKind::Fdel,
            "FLOP" => rules.subtype(&meta.styp).map(|s| MsgKind::Flop(s.styp)).unwrap_or_else(unsupported),
            "SCHD" => SchdKind::parse(&meta.styp).map(MsgKind::Schd).unwrap_or_else(unsupported),
            "SCHS" => match SchdKind::parse(&meta.styp) {
                Some(k @ (SchdKind::Dnld | SchdKind::Resp)) => MsgKind::Schs(k),
                _ => unsupported(),
            },
            t => match (reference::TYPES.iter().find(|(rt, _, _)| *rt == t), RefOp::parse(&meta.styp)) {
                (Some((rtype, _, _)), Some(op)) => MsgKind::Reference { rtype, op },
                _ => unsupported(),
            },
        }
    }

    /// A constant for the kinds the feed sends most (FLOP, FDEL, SCHD, SCHS), written out for
    /// the rest: it names every message in a log line and every FLOP event (#23).
    /// A snapshot of a window of the daily plan (SPEC §4.12): SCHD DNLD and RESP, family B's
    /// DFOE-DFDL. Every flight of its window it does not carry is deleted, and the plan's
    /// generation advances. The one definition: the pump gives each a round of its own, the
    /// handlers read its window and advance the generation, the simulator's model decides it
    /// on its window.
    pub fn is_snapshot(&self) -> bool {
        matches!(self, MsgKind::Schd(SchdKind::Dnld | SchdKind::Resp) | MsgKind::Dfoe(DfoeKind::Sync))
    }

    pub fn type_tag(&self) -> Cow<'static, str> {
        Cow::Owned(match self {
            MsgKind::Flop(styp) => match flop::tag(styp) {
                Some(tag) => return Cow::Borrowed(tag),
                None => format!("FLOP-{styp}"),
            },
            MsgKind::Fdel => return Cow::Borrowed("FLOP-FDEL"),
            MsgKind::Schd(k) => {
                return Cow::Borrowed(match k {
                    SchdKind::Dnld => "SCHD-DNLD",
                    SchdKind::Resp => "SCHD-RESP",
                    SchdKind::Adft => "SCHD-ADFT",
                })
            }
            MsgKind::Schs(k) => {
                return Cow::Borrowed(match k {
                    SchdKind::Dnld => "SCHS-DNLD",
                    SchdKind::Resp => "SCHS-RESP",
                    SchdKind::Adft => "SCHS-ADFT",
                })
            }
            MsgKind::Reference { rtype, op } => format!("{rtype}-{}", op.as_str()),
            MsgKind::Dfme(styp) => format!("DFME-{styp}"),
            MsgKind::Dfoe(k) => format!("DFOE-{}", k.as_str()),
            MsgKind::Base { table, op } => {
                let prefix =
                    platform::BASE_TABLES.iter().find(|(_, e, _)| e == table).map_or("??", |(p, _, _)| p);
                let suffix = match op {
                    RefOp::Add => "IE",
                    RefOp::Upd => "UE",
                    RefOp::Del => "DE",
                    RefOp::Dnld | RefOp::Resp => "DL",
                };
                format!("BASE-{prefix}{suffix}")
            }
            MsgKind::NotForUs { msg_type, styp, .. } | MsgKind::Unsupported { msg_type, styp } => {
                format!("{msg_type}-{styp}")
            }
        })
    }

    /// Why a recognised message is not for msgx, if it is not.
    pub fn not_for_us(&self) -> Option<&'static str> {
        match self {
            MsgKind::NotForUs { why, .. } => Some(why),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "body", rename_all = "lowercase")]
pub enum Body {
    /// FLOP records, one per flight (FDEL included).
    Flop {
        records: Vec<FlopRecord>,
    },
    Schedule(Schedule),
    Reference(RefData),
    /// Family B's full table (`DFOE-DFDL`): the declared count and every flight.
    Sync {
        recd: Option<u32>,
        records: Vec<FlopRecord>,
    },
    /// The kind is unsupported: the body was not read.
    Unread,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub meta: Meta,
    pub kind: MsgKind,
    pub body: Body,
    /// Element and attribute names the tolerant reader skipped (`FLOP/XYZ`, `GTDT/XYZ`,
    /// `STND@XYZ`): reported, never applied. Always empty when reading strictly.
    pub unknown: Vec<String>,
}

/// Why a text did not decode; the class decides DEAD (MALFORMED) or FAILED (CODEC_ERROR).
/// Shown, its detail — which quotes upstream text — is quoted by the one quoting type, so no
/// place that prints one can let a message forge a log line (#68: the heal printed it bare).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{class}: {}", crate::logline::Quoted(.detail))]
pub struct DecodeError {
    pub class: ErrorClass,
    pub detail: String,
}

fn malformed(detail: impl Into<String>) -> DecodeError {
    DecodeError { class: ErrorClass::Malformed, detail: detail.into() }
}

/// A message that breaks the protocol's bounds (a size, a shape limit): DEAD at once.
pub(crate) fn protocol(detail: impl Into<String>) -> DecodeError {
    DecodeError { class: ErrorClass::Protocol, detail: detail.into() }
}

fn codec_error(detail: impl Into<String>) -> DecodeError {
    DecodeError { class: ErrorClass::CodecError, detail: detail.into() }
}

/// A parsed document whose META was read; the body is decoded on demand.
#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    pub meta: Meta,
    doc: Doc<'a>,
    /// The limits it was parsed under, which its body is read under too.
    limits: Limits,
}

/// Whether XML 1.0 allows `c` in a document (`Char` of the XML 1.0 grammar): no NUL, no other
/// C0 control but tab, newline and carriage return, no surrogates, no U+FFFE/U+FFFF.
pub fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// A mailbox body as text: UTF-8, and only characters XML 1.0 allows. Anything else is
/// MALFORMED, naming the byte offset, so an operator can find it in the row.
pub fn text_of(body: &[u8]) -> Result<&str, DecodeError> {
    let s = std::str::from_utf8(body).map_err(|e| {
        malformed(format!(
            "body is not UTF-8: invalid byte 0x{:02X} at byte offset {}",
            body[e.valid_up_to()],
            e.valid_up_to()
        ))
    })?;
    // In valid UTF-8 only a C0 control or U+FFFE/U+FFFF (lead byte 0xEF) can be forbidden, so
    // a body without either is checked byte by byte, not decoded char by char (#23).
    if s.bytes().all(|b| (b >= 0x20 && b != 0xEF) || matches!(b, b'\t' | b'\n' | b'\r')) {
        return Ok(s);
    }
    if let Some((i, c)) = s.char_indices().find(|(_, c)| !xml_char(*c)) {
        return Err(malformed(format!(
            "body holds U+{:04X}, a character XML 1.0 forbids, at byte offset {i}",
            c as u32
        )));
    }
    Ok(s)
}

/// Parses the document and its META at the default [`Limits`]. Not XML, no `MSG` root, no
/// META, or a META without its required fields → MALFORMED; a shape past a limit → PROTOCOL.
pub fn decode_meta(raw: &str) -> Result<Envelope<'_>, DecodeError> {
    decode_meta_with(raw, &Limits::DEFAULT)
}

/// [`decode_meta`] under the configured limits (`msgx.codec.max-*`).
pub fn decode_meta_with<'a>(raw: &'a str, limits: &Limits) -> Result<Envelope<'a>, DecodeError> {
    if raw.trim().is_empty() {
        return Err(malformed("raw text is empty"));
    }
    let doc = xml::parse(raw, limits)?;
    let meta = meta_of(doc.root())?;
    Ok(Envelope { meta, doc, limits: *limits })
}

/// The META of a document's root, or why it has none msgx can read.
fn meta_of(root: Element) -> Result<Meta, DecodeError> {
    if root.name().eq_ignore_ascii_case("IMFRoot") {
        return Ok(imf_meta(root));
    }
    if !root.name().eq_ignore_ascii_case("MSG") {
        return Err(malformed(format!("root element is <{}>, not <MSG>", root.name())));
    }
    let meta_el = root.child("META").ok_or_else(|| malformed("no <META> header"))?;
    // META's children found in one walk, the first of each name as `Element::child` finds
    // it; each was a walk of its own, eleven a message (#23).
    const NAMES: [&str; 11] =
        ["TYPE", "SNDR", "SEQN", "DTTM", "DDTM", "STYP", "MGID", "RCVR", "SORC", "RMID", "APOT"];
    let mut found: [Option<Element>; NAMES.len()] = [None; NAMES.len()];
    for c in meta_el.children() {
        if let Some(at) = NAMES.iter().position(|n| xml::same_name(n, c.name())) {
            found[at].get_or_insert(c);
        }
    }
    let [ty, sndr, seqn, dttm, ddtm, styp, mgid, rcvr, sorc, rmid, apot] = found;
    let text = |e: Option<Element<'_, '_>>| e.and_then(Element::filled_text).map(str::to_string);
    let field = |e: Option<String>, name: &str| e.ok_or_else(|| malformed(format!("<META> has no <{name}>")));
    let msg_type = field(text(ty), "TYPE")?.to_ascii_uppercase();
    let platform = dttm.is_none()
        || [rcvr, sorc, mgid, rmid, apot].iter().any(Option::is_some)
        || PLATFORM_TYPES.contains(&msg_type.as_str());
    let meta = Meta {
        sndr: field(text(sndr), "SNDR")?,
        seqn: field(text(seqn), "SEQN")?,
        dttm: field(text(dttm).or_else(|| text(ddtm)), "DTTM")?,
        msg_type,
        styp: field(text(styp), "STYP")?.to_ascii_uppercase(),
        dialect: if platform { Dialect::B } else { Dialect::A },
        mgid: mgid.and_then(Element::filled_text).map(|s| s.trim().to_string()),
        rmid: rmid.and_then(Element::filled_text).map(|s| s.trim().to_string()).filter(|s| !s.is_empty()),
    };
    Ok(meta)
}

/// A family-C document's header, for the log and the SKIPPED reason.
fn imf_meta(root: Element) -> Meta {
    let info = root.child("SysInfo");
    let text = |n: &str| info.and_then(|i| i.child_text(n)).unwrap_or("-").to_string();
    Meta {
        sndr: text("Sender"),
        seqn: text("MessageSequenceID"),
        dttm: text("SendDateTime"),
        msg_type: "IMF".into(),
        styp: text("MessageType").to_ascii_uppercase(),
        dialect: Dialect::C,
        mgid: None,
        rmid: None,
    }
}

/// Decodes the body the META announces, with the tolerant reader (the default): element and
/// attribute names a known subtype's table does not know are skipped and listed in
/// [`Message::unknown`]; what a FLOP subtype reads is `rules`'.
pub fn decode_body(env: Envelope, rules: &Rulebook) -> Result<Message, DecodeError> {
    decode_body_with(env, false, rules)
}

/// [`decode_body`]; `strict` refuses unknown names instead (CODEC_ERROR, `msgx.codec.strict`).
pub fn decode_body_with(env: Envelope, strict: bool, rules: &Rulebook) -> Result<Message, DecodeError> {
    let mut kind = MsgKind::of(&env.meta, rules);
    if let MsgKind::Unsupported { msg_type, styp } = &kind {
        // A FLOP of an unknown subtype is for a later version of msgx (UNSUPPORTED, retried);
        // one without any <FLOP> record is another vendor's message under the same TYPE (an
        // A-CDM milestone, say), which no version of msgx will read.
        if msg_type == "FLOP" && env.doc.root().child("FLOP").is_none() {
            kind = MsgKind::NotForUs {
                msg_type: msg_type.clone(),
                styp: styp.clone(),
                why: "a FLOP without <FLOP> records: another vendor's message under the same TYPE",
            };
        }
    }
    let root = env.doc.root();
    let mut unknown =
        if strict { Unknown::strict() } else { Unknown::tolerant(env.limits.max_unknown_names) };
    let body = match &kind {
        MsgKind::Flop(styp) => Body::Flop { records: decode_flop(root, styp, &mut unknown, rules)? },
        MsgKind::Fdel => Body::Flop { records: decode_flop(root, "FDEL", &mut unknown, rules)? },
        MsgKind::Schd(_) => Body::Schedule(schedule::decode_schd(root)?),
        MsgKind::Schs(_) => Body::Schedule(schedule::decode_schs(root)?),
        MsgKind::Reference { rtype, op } => Body::Reference(reference::decode(root, rtype, *op)?),
        MsgKind::Dfme(_) | MsgKind::Dfoe(DfoeKind::Add) => {
            Body::Flop { records: platform::decode_flights(root, false, &mut unknown)? }
        }
        MsgKind::Dfoe(DfoeKind::Delete) => {
            Body::Flop { records: platform::decode_flights(root, true, &mut unknown)? }
        }
        MsgKind::Dfoe(DfoeKind::Sync) => Body::Sync {
            recd: platform::recd(root)?,
            records: platform::decode_flights(root, false, &mut unknown)?,
        },
        MsgKind::Base { table, op } => Body::Reference(platform::decode_base(root, table, *op)?),
        MsgKind::Unsupported { .. } | MsgKind::NotForUs { .. } => Body::Unread,
    };
    Ok(Message { meta: env.meta, kind, body, unknown: unknown.into_names() })
}

/// [`decode_meta`] then [`decode_body`], for callers that apply no ignore rules in between.
/// The META of `raw` alone, under `limits`: nothing after `</META>` is read (#68: the PRE-3
/// reuse check compares identities and must not fail on a body it does not need).
pub fn decode_head(raw: &str, limits: &Limits) -> Result<Meta, DecodeError> {
    if raw.trim().is_empty() {
        return Err(malformed("raw text is empty"));
    }
    meta_of(xml::parse_head(raw, limits)?.root())
}

/// Under the default limits and this release's rules: for tests, benches and fixtures. An
/// instance and a command decode under the rulebook they carry ([`decode_with`]).
pub fn decode(raw: &str) -> Result<Message, DecodeError> {
    decode_body(decode_meta(raw)?, &Rulebook::this_release())
}

/// [`decode`] under `limits` and `rules` (the tolerant reader).
pub fn decode_with(raw: &str, limits: &Limits, rules: &Rulebook) -> Result<Message, DecodeError> {
    decode_body(decode_meta_with(raw, limits)?, rules)
}

fn decode_flop(
    root: Element,
    styp: &str,
    unknown: &mut Unknown,
    rules: &Rulebook,
) -> Result<Vec<FlopRecord>, DecodeError> {
    let st = rules.subtype(styp).expect("called for subtypes the rules read only");
    let records = root
        .children_named("FLOP")
        .map(|f| flop::decode_record(f, st, unknown))
        .collect::<Result<Vec<_>, _>>()?;
    if records.is_empty() {
        return Err(malformed(format!("FLOP-{styp} message has no <FLOP> record")));
    }
    Ok(records)
}

/// The business identity of a message (INV-9): `SNDR|TYPE|STYP|SEQN`, plus family B's MGID,
/// plus `|yyyyMMdd` of the DTTM when `include_day_boundary` is on (Q11). The only place the
/// key is built. Each part has its `\` and `|` escaped (`\\`, `\|`), so two different
/// tuples never give one key (#53: a SEQN `77|X` of family A and SEQN 77 with MGID `X` of
/// family B were one identity, and the second was SKIPPED as a duplicate). A key whose parts
/// hold neither character — every key an airport's feed makes — is what it was before.
pub fn identity(meta: &Meta, include_day_boundary: bool) -> String {
    bounded_identity(identity_joined(meta, include_day_boundary, escaped))
}

/// The key as releases before #53 joined it, parts as they stand: only ever compared with a
/// key such a release recorded ([`same_identity`]), never used to tell messages apart.
fn unescaped(part: &str, key: &mut String) {
    key.push_str(part)
}

fn identity_joined(meta: &Meta, include_day_boundary: bool, push: fn(&str, &mut String)) -> String {
    let mut key = String::with_capacity(meta.sndr.len() + meta.seqn.len() + 24);
    // Family B numbers messages per sender and names each with a unique MGID: a resend keeps
    // both, another message with a reused SEQN does not.
    let mgid = meta.mgid.as_deref().filter(|m| !m.is_empty());
    let day = include_day_boundary.then(|| meta.dttm.get(..8).unwrap_or(&meta.dttm));
    let parts = [&meta.sndr, &meta.msg_type, &meta.styp, &meta.seqn].map(String::as_str);
    for (i, part) in parts.into_iter().chain(mgid).chain(day).enumerate() {
        if i > 0 {
            key.push('|');
        }
        push(part, &mut key);
    }
    key
}

fn escaped(part: &str, key: &mut String) {
    for c in part.chars() {
        if matches!(c, '\\' | '|') {
            key.push('\\');
        }
        key.push(c);
    }
}

/// Whether `recorded`, an identity PROC_STATE holds, is this message's under either setting of
/// `include-day-boundary`: as this release builds it, as a release before #53 built it (the
/// parts unescaped), or clipped to the column as releases before the bound clipped it.
pub fn same_identity(meta: &Meta, recorded: &str) -> bool {
    let clipped = recorded.chars().count() >= IDENTITY_MAX_CHARS;
    let push: [fn(&str, &mut String); 2] = [escaped, unescaped];
    [false, true]
        .into_iter()
        .flat_map(|day| push.map(|p| identity_joined(meta, day, p)))
        .any(|whole| (clipped && whole.starts_with(recorded)) || bounded_identity(whole) == recorded)
}

/// PROC_STATE.IDENTITY_KEY holds 200 characters. META fields have no length limit, so a longer
/// key keeps its first 120 characters and a SHA-256 of the whole: two different messages never
/// share a key, the same message always gets the same one (INV-9), and the key fits.
pub const IDENTITY_MAX_CHARS: usize = 200;

fn bounded_identity(key: String) -> String {
    use sha2::{Digest, Sha256};
    if key.chars().count() <= IDENTITY_MAX_CHARS {
        return key;
    }
    let head: String = key.chars().take(120).collect();
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{head}#sha256:{hex}")
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
