//! `SCHD` (daily plan: DNLD and RESP are complete snapshots of their window, ADFT adds or
//! updates) and `SCHS` (seasonal plan): a `RECS` count and `FLTR` flight records. A FLTR is
//! read generically: plain elements become text (known time fields normalised to ISO),
//! structured ones records, repeated ones lists.

use super::canonical::{json_str, list, Name, Object};
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
    pub fields: Fields,
}

/// A flight record's fields: one value per upper-cased element name, in name order. A plain
/// element's value is its text (a known time normalised to ISO); a structured or repeated
/// one's is canonical JSON — keys in name order, a repeated name a list in document order —
/// the text serde_json writes for a map of it. Every name and value is kept in one text,
/// back to back (#23: a map of JSON values cost an allocation per name and per value, a tree
/// of them per structured element, and was most of the time of decoding a plan).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fields {
    text: String,
    slots: Vec<Slot>,
}

/// Where a field's name and value end in [`Fields::text`]; its name starts where the field
/// before it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    name_end: usize,
    value_end: usize,
    json: bool,
}

/// One field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValue<'a> {
    /// A plain element's text.
    Text(&'a str),
    /// A structured or repeated element, as canonical JSON.
    Json(&'a str),
}

impl<'a> FieldValue<'a> {
    /// As the flight state holds it: the text, or the JSON text.
    pub fn flat(self) -> &'a str {
        match self {
            FieldValue::Text(t) | FieldValue::Json(t) => t,
        }
    }

    /// As a JSON value.
    pub fn write_json(self, out: &mut String) {
        match self {
            FieldValue::Text(t) => json_str(out, t),
            FieldValue::Json(j) => out.push_str(j),
        }
    }
}

impl Fields {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn at(&self, i: usize) -> (&str, FieldValue<'_>) {
        let start = i.checked_sub(1).map_or(0, |p| self.slots[p].value_end);
        let s = self.slots[i];
        let value = &self.text[s.name_end..s.value_end];
        (
            &self.text[start..s.name_end],
            if s.json { FieldValue::Json(value) } else { FieldValue::Text(value) },
        )
    }

    /// Names and values in name order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, FieldValue<'_>)> + '_ {
        (0..self.slots.len()).map(|i| self.at(i))
    }

    /// The value of an upper-case `name`, found by halves (the fields are in name order).
    pub fn get(&self, name: &str) -> Option<FieldValue<'_>> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (n, v) = self.at(mid);
            match n.cmp(name) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(v),
            }
        }
        None
    }

    /// The fields as one JSON object, with `extra` (a name no field has) in its place by
    /// name: the text serde_json writes for a map of them.
    pub fn write_object(&self, extra: Option<(&str, &str)>, out: &mut String) {
        out.reserve(self.text.len() + 6 * self.slots.len() + 2);
        let mut o = Object::open(out);
        let mut extra = extra;
        for (name, value) in self.iter() {
            if let Some((k, v)) = extra.filter(|(k, _)| *k < name) {
                o.text(k, v);
                extra = None;
            }
            value.write_json(o.key(name));
        }
        if let Some((k, v)) = extra {
            o.text(k, v);
        }
        o.close();
    }

    /// [`Fields::write_object`] without an extra name, as a new text.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.write_object(None, &mut out);
        out
    }

    /// Appends a field; `name` sorts after every field already here.
    fn push(
        &mut self,
        name: &str,
        json: bool,
        value: impl FnOnce(&mut String) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        debug_assert!(self.slots.is_empty() || self.at(self.len() - 1).0 < name, "fields in name order");
        self.text.push_str(name);
        let name_end = self.text.len();
        value(&mut self.text)?;
        self.slots.push(Slot { name_end, value_end: self.text.len(), json });
        Ok(())
    }
}

/// As a map of the values (records and lists as JSON, not as text holding JSON), for
/// `msgx decode`'s report.
impl serde::Serialize for Fields {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.len()))?;
        for (name, value) in self.iter() {
            match value {
                FieldValue::Text(t) => map.serialize_entry(name, t)?,
                FieldValue::Json(j) => {
                    let v: serde_json::Value = serde_json::from_str(j).map_err(serde::ser::Error::custom)?;
                    map.serialize_entry(name, &v)?
                }
            }
        }
        map.end()
    }
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

/// FLTR elements holding a time or a date: every one four letters.
const TIME_FIELDS: &[&str] = &[
    "SODT", "ESTT", "ACTT", "STDT", "EDDT", "SCHT", "SCAT", "SCDT", "STST", "STET", "PGOT", "PGCT", "GOTM",
    "GCTM",
];

/// [`TIME_FIELDS`] as the numbers [`four_letters`] makes of them.
const TIME_KEYS: [u32; TIME_FIELDS.len()] = {
    let mut keys = [0; TIME_FIELDS.len()];
    let mut i = 0;
    while i < TIME_FIELDS.len() {
        let b = TIME_FIELDS[i].as_bytes();
        assert!(b.len() == 4, "a time field's name is four letters");
        keys[i] = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        i += 1;
    }
    keys
};

/// A four-byte name as one number, ASCII letters upper-cased: clearing bit 5 of each byte
/// puts a lower-case letter on its upper case and no other byte on a letter, so a name is a
/// time field, case aside, when its number is one of [`TIME_KEYS`]. Every plain element of a
/// record is looked up, fourteen names each (#23: a case-blind comparison per name was a
/// tenth of decoding a plan).
fn four_letters(name: &str) -> Option<u32> {
    let b: [u8; 4] = name.as_bytes().try_into().ok()?;
    Some(u32::from_be_bytes(b) & 0xDFDF_DFDF)
}

/// FLTR elements that are lists of sub-records: a single one is still a list, so consumers
/// see one shape.
const LISTS: &[&str] =
    &["ROUT", "ERUT", "PSDT", "GTDT", "CKDT", "CLDT", "CHDT", "CHOT", "ABTM", "DELY", "PSHT"];

/// A plain element's value: its text, or the ISO form of a known time.
enum Plain<'a> {
    Text(&'a str),
    Time(time::Iso),
}

impl Plain<'_> {
    fn as_str(&self) -> &str {
        match self {
            Plain::Text(t) => t,
            Plain::Time(t) => t.as_str(),
        }
    }
}

fn plain<'a>(name: &str, text: &'a str, flid: &str) -> Result<Plain<'a>, DecodeError> {
    if !text.is_empty() && four_letters(name).is_some_and(|k| TIME_KEYS.contains(&k)) {
        if let Some(t) = time::parse(text) {
            return Ok(Plain::Time(t.iso_text()));
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
    Ok(Plain::Text(text))
}

/// Whether an element is read as a record rather than as plain text.
fn structured(el: Element) -> bool {
    el.has_children() || el.has_attrs()
}

/// An element's value as JSON: a string, or a record.
fn write_value(el: Element, flid: &str, out: &mut String) -> Result<(), DecodeError> {
    match structured(el) {
        false => json_str(out, plain(el.name(), el.text(), flid)?.as_str()),
        true => write_record(el, flid, out)?,
    }
    Ok(())
}

/// What a record's key stands for.
enum Part<'d, 'x> {
    Child(Element<'d, 'x>),
    Attr(&'d str),
    Text(&'d str),
}

/// A structured element as a JSON object, keys in name order: its children (recursively; a
/// repeated name a list in document order), the attributes no child has the name of (a later
/// attribute over an earlier one of the same name), and its text as `TEXT`, over a child or
/// an attribute of that name.
fn write_record(el: Element, flid: &str, out: &mut String) -> Result<(), DecodeError> {
    // One child and nothing else, as a nested remark is at each level: no parts to order.
    let mut children = el.children();
    if let (Some(only), None, false, true) =
        (children.next(), children.next(), el.has_attrs(), el.text().is_empty())
    {
        let mut o = Object::open(out);
        write_value(only, flid, o.key(Name::upper(only.name()).as_str()))?;
        o.close();
        return Ok(());
    }
    let mut parts: Vec<(Name, Part)> =
        el.children().map(|c| (Name::upper(c.name()), Part::Child(c))).collect();
    // Stable: a repeated child name keeps document order. Sorted first so that an attribute
    // is looked up among the children, not compared with each (#53).
    parts.sort_by(|a, b| a.0.cmp(&b.0));
    let children = parts.len();
    for (k, v) in el.attrs() {
        let key = Name::upper(k);
        if parts[..children].binary_search_by(|(n, _)| n.cmp(&key)).is_ok() {
            continue;
        }
        match parts[children..].iter_mut().find(|(n, _)| *n == key) {
            Some(earlier) => earlier.1 = Part::Attr(v),
            None => parts.push((key, Part::Attr(v))),
        }
    }
    if !el.text().is_empty() {
        // A child the text replaces is still read: a bad value in it is refused as anywhere.
        for (_, p) in parts.iter().filter(|(n, _)| n.as_str() == "TEXT") {
            if let Part::Child(c) = p {
                write_value(*c, flid, &mut String::new())?;
            }
        }
        parts.retain(|(n, _)| n.as_str() != "TEXT");
        parts.push((Name::new("TEXT"), Part::Text(el.text())));
    }
    // Stable: a repeated child name keeps document order.
    parts.sort_by(|a, b| a.0.cmp(&b.0));
    let part = |p: &Part, out: &mut String| {
        match p {
            Part::Child(c) => write_value(*c, flid, out)?,
            Part::Attr(v) => json_str(out, trim(v)),
            Part::Text(t) => json_str(out, t),
        }
        Ok::<_, DecodeError>(())
    };
    let mut o = Object::open(out);
    for group in parts.chunk_by(|a, b| a.0 == b.0) {
        let out = o.key(group[0].0.as_str());
        match group {
            [(_, p)] => part(p, out)?,
            // Only children repeat a name: attributes and the text are one each.
            many => list(many, out, |(_, p), out| part(p, out))?,
        }
    }
    o.close();
    Ok(())
}

/// What reading a package's records reuses from one record to the next: the children in
/// name order, and the last record's text length (records of a package are alike).
#[derive(Default)]
struct Scratch<'d, 'x> {
    order: Vec<(Name<'d>, Element<'d, 'x>)>,
    text_len: usize,
}

/// A record's fields: its children but FLID grouped by upper-cased name, in name order.
fn fields<'d, 'x>(
    el: Element<'d, 'x>,
    flid: &str,
    scratch: &mut Scratch<'d, 'x>,
) -> Result<Fields, DecodeError> {
    let order = &mut scratch.order;
    order.clear();
    order.extend(el.children().filter(|c| !same_name(c.name(), "FLID")).map(|c| (Name::upper(c.name()), c)));
    // Stable: a repeated name keeps document order.
    order.sort_by(|a, b| a.0.cmp(&b.0));
    let mut fields =
        Fields { text: String::with_capacity(scratch.text_len), slots: Vec::with_capacity(order.len()) };
    for group in order.chunk_by(|a, b| a.0 == b.0) {
        let (name, first) = (group[0].0.as_str(), group[0].1);
        match group {
            [_] if !structured(first) => fields.push(name, false, |out| {
                out.push_str(plain(first.name(), first.text(), flid)?.as_str());
                Ok(())
            })?,
            [_] if !LISTS.contains(&name) => fields.push(name, true, |out| write_record(first, flid, out))?,
            // Repeated, or a list's single record.
            _ => {
                fields.push(name, true, |out| list(group, out, |(_, el), out| write_value(*el, flid, out)))?
            }
        }
    }
    scratch.text_len = fields.text.len();
    Ok(fields)
}

fn fltr<'d, 'x>(
    el: Element<'d, 'x>,
    daily: bool,
    scratch: &mut Scratch<'d, 'x>,
) -> Result<Fltr, DecodeError> {
    let flid = el.child_text("FLID").map(str::to_string);
    let key = match &flid {
        Some(f) => f.clone(),
        None if daily => return Err(malformed("<FLTR> has no <FLID>")),
        None => format!("{}/{}", el.child_text("FLNO").unwrap_or("?"), el.child_text("MVIN").unwrap_or("?")),
    };
    let fields = fields(el, &key, scratch)?;
    let sodt = match fields.get("SODT") {
        Some(FieldValue::Text(s)) if !s.is_empty() => Some(s.to_string()),
        Some(FieldValue::Text(_)) | None if daily => {
            return Err(malformed(format!("<FLTR> for FLID {key} has no <SODT>")));
        }
        Some(FieldValue::Json(j)) if j.starts_with('[') => {
            return Err(malformed(format!("<FLTR> for FLID {key} has more than one <SODT>")))
        }
        _ => None,
    };
    Ok(Fltr { flid, sodt, fields })
}

/// A package's `FLTR` records.
fn records(container: Element, daily: bool) -> Result<Vec<Fltr>, DecodeError> {
    let mut scratch = Scratch::default();
    container.children_named("FLTR").map(|f| fltr(f, daily, &mut scratch)).collect()
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
    let flights = records(schd, true)?;
    Ok(Schedule { recs: recs(schd)?, flights, season: None })
}

/// `<SCHS><SNAM/><APCD/><SDAT/><EDAT/><RECS/><FLTR/>*</SCHS>`.
pub fn decode_schs(root: Element) -> Result<Schedule, DecodeError> {
    let schs = root.child("SCHS").ok_or_else(|| malformed("SCHS message has no <SCHS> body"))?;
    let flights = records(schs, false)?;
    let season = Season {
        name: schs.child_text("SNAM").map(str::to_string),
        airport: schs.child_text("APCD").map(str::to_string),
        start: schs.child_text("SDAT").map(str::to_string),
        end: schs.child_text("EDAT").map(str::to_string),
    };
    Ok(Schedule { recs: recs(schs)?, flights, season: Some(season) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::map::Entry;
    use serde_json::{Map, Value};

    /// The record as a tree of JSON values, the way FLTRs were read before #23: the oracle
    /// the written text is held to.
    mod oracle {
        use super::*;

        fn text_value(name: &str, text: &str, flid: &str) -> Result<Value, DecodeError> {
            plain(name, text, flid).map(|p| Value::String(p.as_str().to_string()))
        }

        fn element_value(el: Element, flid: &str) -> Result<Value, DecodeError> {
            if !el.has_children() && !el.has_attrs() {
                return text_value(el.name(), el.text(), flid);
            }
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

        pub fn fields(el: Element, flid: &str) -> Result<Map<String, Value>, DecodeError> {
            let mut fields = Map::new();
            group_into(&mut fields, el.children().filter(|c| !same_name(c.name(), "FLID")), flid)?;
            for name in LISTS {
                if let Some(v) = fields.get_mut(*name).filter(|v| v.is_object()) {
                    *v = Value::Array(vec![v.take()]);
                }
            }
            Ok(fields)
        }
    }

    /// An element of a generated record: names that meet in upper case, attributes that meet
    /// children, `TEXT`, times, and text that needs escapes.
    fn element(depth: u32) -> impl Strategy<Value = String> {
        let name = prop::sample::select(vec![
            "REMK", "remk", "SODT", "ROUT", "rout", "ERUT", "TEXT", "text", "XTRA", "STND", "SCAT", "APCD",
            "A", "APCDX",
        ]);
        let text = prop::sample::select(vec![
            "",
            "x",
            "212",
            "05MAR261130",
            "0905",
            "a &amp; b",
            "q\"uo\\te",
            "中文",
            "tab\tnl",
            "&#x7f;",
        ]);
        let attrs = prop::collection::vec(
            (prop::sample::select(vec!["RTNO", "rtno", "APCD", "TEXT", "SCAT"]), text.clone()),
            0..3,
        );
        let leaf = (name.clone(), attrs.clone(), text.clone()).prop_map(|(n, a, t)| xml(n, &a, t, &[]));
        leaf.prop_recursive(depth, 24, 4, move |inner| {
            (name.clone(), attrs.clone(), text.clone(), prop::collection::vec(inner, 0..4))
                .prop_map(|(n, a, t, c)| xml(n, &a, t, &c))
        })
    }

    fn xml(name: &str, attrs: &[(&str, &str)], text: &str, children: &[String]) -> String {
        // One attribute per exact name: XML refuses a repeated one.
        let mut seen = Vec::new();
        let a: String = attrs
            .iter()
            .filter(|(k, _)| {
                !seen.contains(k) && {
                    seen.push(*k);
                    true
                }
            })
            .map(|(k, v)| format!(" {k}=\"{}\"", v.replace('"', "&quot;")))
            .collect();
        format!("<{name}{a}>{text}{}</{name}>", children.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// The fields, their flat values and the object written are what the map of JSON
        /// values held and serde_json wrote for it; an error is the same class.
        #[test]
        fn a_record_is_read_as_the_map_of_json_values_read_it(children in prop::collection::vec(element(2), 0..8)) {
            let text = format!("<FLTR><FLID>7</FLID>{}</FLTR>", children.concat());
            let doc = super::super::xml::parse(&text, &super::super::Limits::DEFAULT).unwrap();
            let el = doc.root();
            let ours = fields(el, "7", &mut Scratch::default());
            match (oracle::fields(el, "7"), ours) {
                (Ok(map), Ok(ours)) => {
                    prop_assert_eq!(ours.to_json(), serde_json::to_string(&map).unwrap());
                    let mut with_flid = map.clone();
                    with_flid.insert("FLID".into(), Value::String("7".into()));
                    let mut written = String::new();
                    ours.write_object(Some(("FLID", "7")), &mut written);
                    prop_assert_eq!(written, serde_json::to_string(&with_flid).unwrap());
                    let flat: Vec<(String, String)> = map.iter().map(|(k, v)| (k.clone(), match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })).collect();
                    let ours_flat: Vec<(String, String)> = ours.iter().map(|(k, v)| (k.to_string(), v.flat().to_string())).collect();
                    prop_assert_eq!(ours_flat, flat);
                    for (k, v) in &map {
                        prop_assert_eq!(ours.get(k).map(|v| v.flat().to_string()), Some(match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        }));
                    }
                    prop_assert_eq!(ours.get("ZZZZ"), None);
                    prop_assert_eq!(serde_json::to_value(&ours).unwrap(), Value::Object(map));
                }
                (Err(a), Err(b)) => prop_assert_eq!(a.class, b.class),
                (a, b) => prop_assert!(false, "{:?} against {:?}", a.map(|_| ()), b.map(|_| ())),
            }
        }
    }

    #[test]
    fn a_time_field_is_found_whatever_its_case_and_nothing_else_is() {
        for t in TIME_FIELDS {
            for name in
                [t.to_string(), t.to_ascii_lowercase(), format!("{}{}", &t[..2], t[2..].to_ascii_lowercase())]
            {
                assert!(four_letters(&name).is_some_and(|k| TIME_KEYS.contains(&k)), "{name}");
            }
        }
        // Near misses and other lengths; then every first byte before "ODT".
        for name in ["SOD", "SODTX", "S0DT", "SOD\u{14}", "\u{13}ODT", "Sodt\u{0}", "ÖDT"] {
            assert!(!four_letters(name).is_some_and(|k| TIME_KEYS.contains(&k)), "{name:?}");
        }
        for b0 in 0..=255u8 {
            let name = [b0, b'O', b'D', b'T'];
            let Ok(name) = std::str::from_utf8(&name) else { continue };
            let is_time = four_letters(name).is_some_and(|k| TIME_KEYS.contains(&k));
            assert_eq!(is_time, same_name(name, "SODT"), "{name:?}");
        }
    }

    /// Found by the property above while it was written: the text of a record replaced its
    /// child `TEXT` before the child was read, so a bad time in it went unrefused.
    #[test]
    fn regression_a_child_the_text_replaces_is_still_checked() {
        let doc = super::super::xml::parse(
            "<FLTR><REMK>x<TEXT><SODT>x</SODT></TEXT></REMK></FLTR>",
            &super::super::Limits::DEFAULT,
        )
        .unwrap();
        let err = fields(doc.root(), "7", &mut Scratch::default()).unwrap_err();
        assert_eq!(err.class, crate::error::ErrorClass::CodecError);
        assert!(err.detail.contains("SODT of FLTR 7: \"x\" is not a time"), "{err}");
        let doc = super::super::xml::parse(
            "<FLTR><REMK>x<TEXT><SODT>05MAR261130</SODT></TEXT></REMK></FLTR>",
            &super::super::Limits::DEFAULT,
        )
        .unwrap();
        let ok = fields(doc.root(), "7", &mut Scratch::default()).unwrap();
        assert_eq!(ok.get("REMK"), Some(FieldValue::Json(r#"{"TEXT":"x"}"#)));
    }

    #[test]
    fn an_extra_name_goes_in_its_place_first_last_or_between() {
        let doc = super::super::xml::parse("<FLTR><B>1</B><D>2</D></FLTR>", &super::super::Limits::DEFAULT)
            .unwrap();
        let f = fields(doc.root(), "7", &mut Scratch::default()).unwrap();
        for (extra, want) in [
            ("A", r#"{"A":"x","B":"1","D":"2"}"#),
            ("C", r#"{"B":"1","C":"x","D":"2"}"#),
            ("E", r#"{"B":"1","D":"2","E":"x"}"#),
        ] {
            let mut out = String::new();
            f.write_object(Some((extra, "x")), &mut out);
            assert_eq!(out, want);
        }
        let mut out = String::new();
        Fields::default().write_object(Some(("FLID", "7")), &mut out);
        assert_eq!(out, r#"{"FLID":"7"}"#);
    }
}
