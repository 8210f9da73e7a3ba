//! FLOP, table-driven: one row per subtype (`format/unisys_sis_flop_subtypes.csv`) says which
//! elements the subtype carries and their shape; one decoder reads them all. Values are
//! normalised: times become ISO (`2021-01-23T05:35`), records and lists become canonical JSON
//! (sorted keys), so equal states compare equal whatever the feed's spelling.

use super::canonical::{self, Name, Object};
use super::time;
use super::xml::{same_name, Element};
use super::{codec_error, malformed, DecodeError, Unknown};

/// How a value is checked and normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    /// `ddMMMyyHHmm` or `ddMMMyy` → ISO.
    Time,
    Int,
    /// `hhmm` duration (DELY DURA).
    Hhmm,
}

/// The shape of one element of a subtype.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// A single value: `<STND>A12</STND>`.
    Scalar(Kind),
    /// A repeated element forming the complete current list, each item a record of child
    /// elements, attributes and maybe text: `<GTDT GTNO="1"><GATE>…</GATE>…</GTDT>…`.
    List {
        seq: Option<&'static str>,
        attrs: &'static [(&'static str, Kind)],
        children: &'static [(&'static str, Kind)],
        text: Option<&'static str>,
    },
    /// One structured element: `<PORT><POTM>…</POTM><POID>O</POID></PORT>`,
    /// `<FDIV DDES="SHA" DDIR="TO">weather</FDIV>`.
    Record {
        attrs: &'static [(&'static str, Kind)],
        children: &'static [(&'static str, Kind)],
        text: Option<&'static str>,
    },
}

/// One FLOP subtype: the elements it may carry.
#[derive(Debug, Clone, Copy)]
pub struct Subtype {
    pub styp: &'static str,
    /// `FLOP-` and the STYP: [`crate::codec::MsgKind::type_tag`].
    pub tag: &'static str,
    pub elements: &'static [(&'static str, Shape)],
}

use Kind::{Hhmm, Int, Text, Time};

const fn scalar(name: &'static str, k: Kind) -> (&'static str, Shape) {
    (name, Shape::Scalar(k))
}

const fn list(
    name: &'static str,
    seq: &'static str,
    children: &'static [(&'static str, Kind)],
) -> (&'static str, Shape) {
    (name, Shape::List { seq: Some(seq), attrs: &[], children, text: None })
}

/// A subtype's row: its STYP and its type tag (`FLOP-STND`), a constant so that naming a
/// message in a log line or an event costs no allocation (#23).
macro_rules! sub {
    ($styp:literal, $elements:expr $(,)?) => {
        Subtype { styp: $styp, tag: concat!("FLOP-", $styp), elements: $elements }
    };
}

/// Every FLOP subtype msgx decodes (48 with public processors, plus ESTT/ACTT).
pub const SUBTYPES: &[Subtype] = &[
    sub!("ABTM", &[list("ABTM", "ASNO", &[("ABDG", Text), ("ABOP", Text), ("AOTM", Time)])]),
    sub!("ACFT", &[scalar("ACFT", Text)]),
    sub!("APPT", &[scalar("APPT", Time)]),
    sub!("BOTM", &[scalar("BOTM", Time)]),
    sub!(
        "CHDT",
        &[list(
            "CHDT",
            "CHNO",
            &[
                ("CHUT", Text),
                ("CCLS", Text),
                ("PCBT", Time),
                ("PCET", Time),
                ("CBTM", Time),
                ("CETM", Time),
                ("CTYP", Text),
            ],
        )],
    ),
    sub!("CHOT", &[list("CHOT", "CSNO", &[("CHTM", Time), ("CHID", Text), ("CHST", Text)])]),
    sub!(
        "CKDT",
        &[list(
            "CKDT",
            "CKNO",
            &[
                ("CHKC", Text),
                ("CCLS", Text),
                ("PCOT", Time),
                ("PCCT", Time),
                ("COTM", Time),
                ("CCTM", Time),
                ("CTYP", Text),
            ],
        )],
    ),
    sub!(
        "CLDT",
        &[list(
            "CLDT",
            "CLNO",
            &[
                ("BELT", Text),
                ("BCLS", Text),
                ("PCOT", Time),
                ("PCCT", Time),
                ("FBAG", Time),
                ("LBAG", Time),
                ("BTYP", Text),
            ],
        )],
    ),
    sub!("CNCL", &[scalar("CNCL", Time)]),
    sub!("COBT", &[scalar("COBT", Time)]),
    sub!("CTOT", &[scalar("CTOT", Time)]),
    sub!(
        "DELY",
        &[(
            "DELY",
            Shape::List {
                seq: None,
                attrs: &[("CODE", Text), ("STRT", Time), ("DURA", Hhmm)],
                children: &[],
                text: Some("REASON"),
            },
        )],
    ),
    sub!("EGSR", &[scalar("EGSR", Time)]),
    sub!("EGST", &[scalar("EGST", Time)]),
    sub!("EOBT", &[scalar("EOBT", Time)]),
    sub!(
        "ERUT",
        &[list(
            "ERUT",
            "RTNO",
            &[("APCD", Text), ("SCAT", Time), ("SCDT", Time), ("SADC", Text), ("SDDC", Text)],
        )],
    ),
    sub!("EXSS", &[scalar("EXSC", Text), scalar("EXSR", Text)]),
    sub!("FDEL", &[]),
    sub!(
        "FDIV",
        &[(
            "FDIV",
            Shape::Record { attrs: &[("DDES", Text), ("DDIR", Text)], children: &[], text: Some("REASON") },
        )],
    ),
    sub!("FINT", &[scalar("FINT", Time)]),
    sub!(
        "FLAB",
        &[("FLAB", Shape::Record { attrs: &[("ARES", Text)], children: &[], text: Some("REASON") })]
    ),
    sub!("FLIN", &[scalar("FLIN", Text)]),
    sub!("FLTY", &[scalar("FLTY", Text)]),
    sub!(
        "FRET",
        &[("FRET", Shape::Record { attrs: &[("REID", Text)], children: &[], text: Some("REASON") })]
    ),
    sub!("FTSS", &[scalar("FTSS", Text)]),
    sub!(
        "GTDT",
        &[list(
            "GTDT",
            "GTNO",
            &[("GATE", Text), ("PGOT", Time), ("PGCT", Time), ("GOTM", Time), ("GCTM", Time), ("GTYP", Text)],
        )],
    ),
    sub!("HNAG", &[scalar("FHAG", Text), scalar("PHAG", Text), scalar("MHAG", Text)]),
    sub!("IEST", &[scalar("IEST", Time)]),
    sub!("LACL", &[scalar("LACL", Time)]),
    sub!("MAXP", &[scalar("MAXP", Int)]),
    sub!("NAAT", &[scalar("NAAT", Time)]),
    sub!("NEAT", &[scalar("NEAT", Time)]),
    sub!("PADT", &[scalar("PADT", Time)]),
    sub!("PEDT", &[scalar("PEDT", Time)]),
    // Door and tractor events repeat without a sequence attribute (open, then close): lists.
    sub!(
        "PORT",
        &[(
            "PORT",
            Shape::List { seq: None, attrs: &[], children: &[("POTM", Time), ("POID", Text)], text: None },
        )],
    ),
    sub!("PSDT", &[list("PSDT", "PSNO", &[("PSST", Text), ("STST", Time), ("STET", Time)])]),
    sub!("PSHT", &[list("PSHT", "PSHN", &[("PSTM", Time), ("PSID", Text), ("PUST", Text)])]),
    sub!("REMC", &[scalar("REMC", Text)]),
    sub!("RENO", &[scalar("RENO", Text)]),
    sub!("RUNW", &[scalar("RUNW", Text)]),
    sub!(
        "SRVT",
        &[(
            "SRVT",
            Shape::List {
                seq: None,
                attrs: &[],
                children: &[
                    ("SRTC", Text),
                    ("SRQT", Int),
                    ("SRST", Time),
                    ("SRET", Time),
                    ("SRPR", Text),
                    ("SANR", Text),
                    ("SARR", Text),
                ],
                text: None,
            },
        )],
    ),
    sub!("STND", &[scalar("STND", Text)]),
    sub!("TAOP", &[scalar("TAOP", Text), scalar("TAFL", Text), scalar("TAID", Text)]),
    sub!(
        "TIPT",
        &[(
            "TIPT",
            Shape::List { seq: None, attrs: &[], children: &[("TRTM", Time), ("TRST", Text)], text: None },
        )],
    ),
    sub!("TOBT", &[scalar("TOBT", Time)]),
    sub!("TRML", &[scalar("TRML", Text)]),
    sub!(
        "VIPF",
        &[(
            "VIPF",
            Shape::List {
                seq: None,
                attrs: &[],
                children: &[("VPCD", Text), ("VFES", Text), ("VIPT", Text)],
                text: None,
            },
        )],
    ),
    sub!("VIPP", &[scalar("VIPP", Int), scalar("VIPR", Text)]),
    sub!("ESTT", &[scalar("ESTT", Time)]),
    sub!("ACTT", &[scalar("ACTT", Time)]),
];

/// The constant type tag of this release's subtype `styp` (`FLOP-STND`): a name, never a
/// decision — what a subtype reads is the [`super::Rulebook`]'s.
pub(super) fn tag(styp: &str) -> Option<&'static str> {
    SUBTYPES.iter().find(|s| same_name(s.styp, styp)).map(|s| s.tag)
}

/// One flight's part of a FLOP message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FlopRecord {
    pub flid: String,
    pub ffid: Option<String>,
    /// Changed fields in table order; `None` is an empty element, which clears the field.
    /// Records and lists are canonical JSON text.
    pub fields: Vec<(String, Option<String>)>,
    /// `FDEL`: the flight is deleted.
    pub delete: bool,
}

/// Normalises one value of `kind`; `field` names it in an error only, so it is formatted only
/// then.
pub fn value(
    kind: Kind,
    raw: &str,
    field: impl std::fmt::Display,
    flid: &str,
) -> Result<String, DecodeError> {
    checked(kind, raw, field, flid).map(|v| v.as_str().to_string())
}

/// A checked, normalised value, still borrowed from the message where its text is already
/// canonical: a record's values go straight into its JSON, so they need no copy (#23).
#[derive(Debug)]
enum Val<'a> {
    Text(&'a str),
    Time(time::Iso),
    Owned(String),
}

impl Val<'_> {
    fn as_str(&self) -> &str {
        match self {
            Val::Text(t) => t,
            Val::Time(t) => t.as_str(),
            Val::Owned(t) => t,
        }
    }
}

/// [`value`], borrowing.
fn checked<'a>(
    kind: Kind,
    raw: &'a str,
    field: impl std::fmt::Display,
    flid: &str,
) -> Result<Val<'a>, DecodeError> {
    let v = super::xml::trim(raw);
    let bad = |what: &str| codec_error(format!("{field} of FLID {flid}: {v:?} is not {what}"));
    match kind {
        Text => Ok(Val::Text(v)),
        Time => time::parse(v)
            .map(|t| Val::Time(t.iso_text()))
            .ok_or_else(|| bad("a time (ddMMMyyHHmm or ddMMMyy)")),
        Int => match v.parse::<i64>() {
            Ok(_) if canonical_int(v) => Ok(Val::Text(v)),
            Ok(n) => Ok(Val::Owned(n.to_string())),
            Err(_) => Err(bad("an integer")),
        },
        Hhmm => {
            let ok = v.len() == 4
                && v.bytes().all(|b| b.is_ascii_digit())
                && v[2..].parse::<u8>().is_ok_and(|m| m < 60);
            if ok {
                Ok(Val::Text(v))
            } else {
                Err(bad("a duration hhmm"))
            }
        }
    }
}

/// Whether an integer's text is what `i64::to_string` writes for it: no sign but a minus,
/// no leading zero, no `-0`.
fn canonical_int(v: &str) -> bool {
    let digits = v.strip_prefix('-').unwrap_or(v);
    let plain = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    plain && (!digits.starts_with('0') || v == "0")
}

type Fields = &'static [(&'static str, Kind)];

/// A record of attributes (plus the list's sequence attribute, an integer), children and
/// text; empty parts are left out.
fn record<'d>(
    el: Element<'d, '_>,
    attrs: Fields,
    seq: Option<&'static str>,
    children: Fields,
    text: Option<&'static str>,
    flid: &str,
    unknown: &mut Unknown,
) -> Result<Rec<'d>, DecodeError> {
    let mut rec = Rec::with_capacity(
        attrs.len() + usize::from(seq.is_some()) + children.len() + usize::from(text.is_some()),
    );
    for (name, v) in el.attrs() {
        let spec = attrs.iter().copied().chain(seq.map(|s| (s, Int))).find(|(a, _)| same_name(a, name));
        let Some((a, kind)) = spec else {
            unknown.note(&format!("{}@{name}", el.name()), || {
                codec_error(format!(
                    "<{}> of FLID {flid} has an attribute {name} this codec does not know",
                    el.name()
                ))
            })?;
            continue;
        };
        if !super::xml::trim(v).is_empty() {
            rec.insert(a, checked(kind, v, format_args!("{}@{a}", el.name()), flid)?);
        }
    }
    for c in el.children() {
        let Some((n, kind)) = children.iter().find(|(n, _)| same_name(n, c.name())) else {
            unknown.note(&format!("{}/{}", el.name(), c.name()), || {
                codec_error(format!(
                    "<{}> of FLID {flid} has an element <{}> this codec does not know",
                    el.name(),
                    c.name()
                ))
            })?;
            continue;
        };
        if c.has_children() {
            return Err(codec_error(format!(
                "<{}/{}> of FLID {flid} is nested deeper than this codec reads",
                el.name(),
                c.name()
            )));
        }
        if !c.text().is_empty() {
            rec.insert(n, checked(*kind, c.text(), format_args!("{}/{n}", el.name()), flid)?);
        }
    }
    if let Some(t) = text {
        if !el.text().is_empty() {
            rec.insert(t, Val::Text(el.text()));
        }
    }
    Ok(rec)
}

/// A record's values by name in name order, as a `BTreeMap` holds them (so its JSON is the
/// same text) but in one vector: a record has a handful of values, and keys are the table's
/// own names, never copied, and values are borrowed where they can be (#23).
#[derive(Default)]
struct Rec<'a>(Vec<(Name<'static>, Val<'a>)>);

impl<'a> Rec<'a> {
    /// Room for `n` values: a record's table says how many it can hold.
    fn with_capacity(n: usize) -> Self {
        Rec(Vec::with_capacity(n))
    }

    /// Sets `key`; a later value of the same name replaces the earlier, as in a map.
    fn insert(&mut self, key: &'static str, value: Val<'a>) {
        let key = Name::new(key);
        match self.0.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(at) => self.0[at].1 = value,
            Err(at) => self.0.insert(at, (key, value)),
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        let key = Name::new(key);
        self.0.binary_search_by(|(k, _)| k.cmp(&key)).ok().map(|at| self.0[at].1.as_str())
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The record as a JSON object, keys in name order (the test below holds it to serde_json's
    /// text for a map of it).
    fn write_json(&self, out: &mut String) {
        let mut o = Object::open(out);
        for (k, v) in &self.0 {
            o.text(k.as_str(), v.as_str());
        }
        o.close();
    }
}

fn record_json(rec: &Rec) -> String {
    let mut out = String::with_capacity(16 * rec.0.len() + 2);
    rec.write_json(&mut out);
    out
}

fn list_json<'r, 'a: 'r>(items: impl Iterator<Item = &'r Rec<'a>> + Clone) -> String {
    let mut out = String::with_capacity(items.clone().map(|r| 16 * r.0.len() + 3).sum::<usize>() + 2);
    let written = canonical::list(items, &mut out, |rec: &Rec, out| {
        rec.write_json(out);
        Ok::<_, std::convert::Infallible>(())
    });
    written.unwrap_or_else(|never| match never {});
    out
}

/// The most elements a subtype carries (HNAG, TAOP): [`decode_record`] counts them on the stack.
pub(super) const MAX_ELEMENTS: usize = 3;
const _: () = {
    let mut i = 0;
    while i < SUBTYPES.len() {
        assert!(SUBTYPES[i].elements.len() <= MAX_ELEMENTS, "a subtype with more elements than MAX_ELEMENTS");
        i += 1;
    }
};

/// A record's children found in one walk: FLID, FFID, each element's first place and count,
/// and whether any child is none of these (#23: the record was walked once per element).
struct Walk<'d, 'a> {
    flid: Option<Element<'d, 'a>>,
    ffid: Option<Element<'d, 'a>>,
    seen: [(Option<Element<'d, 'a>>, usize); MAX_ELEMENTS],
    stray: bool,
}

impl<'d, 'a> Walk<'d, 'a> {
    fn of(flop: Element<'d, 'a>, st: &Subtype) -> Self {
        let mut w = Walk { flid: None, ffid: None, seen: [(None, 0); MAX_ELEMENTS], stray: false };
        for c in flop.children() {
            if same_name(c.name(), "FLID") {
                w.flid.get_or_insert(c);
            } else if same_name(c.name(), "FFID") {
                w.ffid.get_or_insert(c);
            } else if let Some(at) = st.elements.iter().position(|(n, _)| same_name(n, c.name())) {
                w.seen[at].0.get_or_insert(c);
                w.seen[at].1 += 1;
            } else {
                w.stray = true;
            }
        }
        w
    }
}

/// Decodes one `<FLOP>` record of subtype `st`; `unknown` collects the names the table does
/// not know (tolerant) or refuses them (strict).
pub fn decode_record(flop: Element, st: &Subtype, unknown: &mut Unknown) -> Result<FlopRecord, DecodeError> {
    let walk = Walk::of(flop, st);
    let flid = walk
        .flid
        .and_then(Element::filled_text)
        .ok_or_else(|| malformed("<FLOP> has no <FLID>"))?
        .to_string();
    let ffid = walk.ffid.and_then(Element::filled_text).map(str::to_string);
    if st.styp == "FDEL" {
        return Ok(FlopRecord { flid, ffid, fields: Vec::new(), delete: true });
    }
    if walk.stray {
        strays(flop, st, &flid, unknown)?;
    }
    let mut fields = Vec::new();
    for ((name, shape), (first, times)) in st.elements.iter().zip(walk.seen) {
        let Some(first) = first else {
            continue;
        };
        // A list repeats its element; a value or a record appears once.
        if !matches!(shape, Shape::List { .. }) && times > 1 {
            return Err(codec_error(format!("<{name}> appears {times} times for FLID {flid}")));
        }
        fields.push((name.to_string(), element_value(name, shape, first, &flid, unknown)?));
    }
    Ok(FlopRecord { flid, ffid, fields, delete: false })
}

/// `name` upper-cased, borrowed when it already is.
fn upper(name: &str) -> std::borrow::Cow<'_, str> {
    match name.bytes().any(|b| b.is_ascii_lowercase()) {
        true => std::borrow::Cow::Owned(name.to_ascii_uppercase()),
        false => std::borrow::Cow::Borrowed(name),
    }
}

/// Notes (or refuses) the children of a record that are not elements of its subtype.
fn strays(flop: Element, st: &Subtype, flid: &str, unknown: &mut Unknown) -> Result<(), DecodeError> {
    let body = flop.children().filter(|c| !same_name(c.name(), "FLID") && !same_name(c.name(), "FFID"));
    for stray in body.filter(|c| !st.elements.iter().any(|(n, _)| same_name(n, c.name()))) {
        unknown.note(&upper(stray.name()), || {
            codec_error(format!(
                "FLOP-{} for FLID {flid} carries <{}>, which is not an element of that subtype",
                st.styp,
                stray.name()
            ))
        })?;
    }
    Ok(())
}

/// One element's value in its subtype's shape, `None` when it clears the field.
fn element_value(
    name: &str,
    shape: &Shape,
    first: Element,
    flid: &str,
    unknown: &mut Unknown,
) -> Result<Option<String>, DecodeError> {
    Ok(match shape {
        Shape::Scalar(kind) => {
            if first.has_children() {
                return Err(codec_error(format!("<{name}> of FLID {flid} should be a plain value")));
            }
            for (a, _) in first.attrs() {
                unknown.note(&format!("{name}@{a}"), || {
                    codec_error(format!("<{name}> of FLID {flid} should be a plain value, not carry {a}"))
                })?;
            }
            (!first.text().is_empty()).then(|| value(*kind, first.text(), name, flid)).transpose()?
        }
        Shape::Record { attrs, children, text } => {
            let rec = record(first, attrs, None, children, *text, flid, unknown)?;
            (!rec.is_empty()).then(|| record_json(&rec))
        }
        Shape::List { seq, attrs, children, text } => {
            // A list is the complete current list; one empty element clears it. Items go in
            // sequence order, each item's number read once, not at every comparison (#23);
            // without a sequence attribute, in document order.
            let mut items = Vec::new();
            for el in first.and_following().filter(|c| same_name(c.name(), name)) {
                let rec = record(el, attrs, *seq, children, *text, flid, unknown)?;
                if !rec.is_empty() {
                    let at = seq.and_then(|s| rec.get(s)?.parse::<i64>().ok()).unwrap_or(i64::MAX);
                    items.push((at, rec));
                }
            }
            items.sort_by_key(|(at, _)| *at);
            (!items.is_empty()).then(|| list_json(items.iter().map(|(_, r)| r)))
        }
    })
}

#[cfg(test)]
mod rec_tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn an_integer_is_kept_as_written_only_when_that_is_how_it_prints() {
        for raw in ["0", "7", "-12", "186", " 42 ", "007", "+5", "-0", "-007", "9223372036854775807"] {
            let want = raw.trim().parse::<i64>().unwrap().to_string();
            assert_eq!(checked(Int, raw, "GTDT@GTNO", "1").unwrap().as_str(), want, "{raw:?}");
        }
        for bad in ["", "-", "1.5", "x1", "9223372036854775808"] {
            assert!(checked(Int, bad, "GTDT@GTNO", "1").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_record_writes_the_json_a_map_of_it_writes() {
        // Names sharing their first eight bytes, and names that begin others, hold the
        // order of the names' prefixes to the order of the names.
        let keys =
            ["GATE", "GTNO", "PGOT", "A", "ZZ", "G", "GATE", "GATEWAYS2", "GATEWAYS1", "GATEWAY", "GAT"];
        let values = [
            "G21",
            "q\"uo\\te",
            "tab\tnl\n\u{1}",
            "",
            "中文",
            "x\u{7f}/\u{2028}",
            "last wins",
            "2",
            "1",
            "w",
            "t",
        ];
        for shift in 0..keys.len() {
            let (mut rec, mut map) = (Rec::default(), BTreeMap::new());
            for i in 0..keys.len() {
                let (k, v) = (keys[(i + shift) % keys.len()], values[i]);
                rec.insert(k, Val::Text(v));
                map.insert(k, v.to_string());
            }
            let json = serde_json::to_string(&map).unwrap();
            assert_eq!(record_json(&rec), json);
            assert_eq!(rec.get("GATE"), map.get("GATE").map(String::as_str));
            assert_eq!(rec.get("NONE"), None);
            assert_eq!(list_json([Rec::default(), rec].iter()), format!("[{{}},{json}]"));
        }
    }
}
