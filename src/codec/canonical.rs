//! Canonical JSON, the one writer of decoded values: records and lists as the text serde_json
//! writes for a map of them (keys in byte order, its escapes), without building the map (#23).
//! [`Object`] and [`list`] write every record and list a decoder makes — FLOP's records
//! ([`super::flop`]), the daily plan's flight records and their structured elements
//! ([`super::schedule`]); the handlers lay those texts into their event payloads, which serde
//! writes (`handlers::event`). An event's identity digests its payload (`event_key`), so this
//! text must never change: the golden files and the tests below hold it to serde_json's.

use std::borrow::Cow;

/// A name with its place in name order: its first eight bytes as one big-endian integer,
/// zero-padded. A smaller prefix is always an earlier name (bytes compare in order, and a
/// shorter name pads with zeros; XML names hold no NUL), so only names whose prefixes tie are
/// compared as text; comparing the names themselves called `memcmp` for every step of a
/// record's inserts (#23).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Name<'n> {
    prefix: u64,
    text: Cow<'n, str>,
}

impl<'n> Name<'n> {
    #[inline]
    pub fn new(text: &'n str) -> Self {
        Name { prefix: prefix(text), text: Cow::Borrowed(text) }
    }

    /// `text` upper-cased (SIS names are case-insensitive, and a record's keys are upper
    /// case), borrowed when it already is.
    pub fn upper(text: &'n str) -> Self {
        match text.bytes().any(|b| b.is_ascii_lowercase()) {
            false => Name::new(text),
            true => {
                let up = text.to_ascii_uppercase();
                Name { prefix: prefix(&up), text: Cow::Owned(up) }
            }
        }
    }

    #[inline]
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

#[inline]
fn prefix(text: &str) -> u64 {
    text.bytes().take(8).enumerate().fold(0, |p, (i, b)| p | u64::from(b) << (56 - 8 * i))
}

/// A JSON string: as it stands when nothing in it needs an escape (the common case, codes and
/// times), else as serde_json escapes it. Inlined: a record writes one per key and value,
/// and the decoders that call it live in other modules.
#[inline]
pub fn json_str(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s).expect("a string serialises"));
    }
}

/// A JSON object written in place. Its keys come in name order (the caller's: a record keeps
/// its names sorted), each once.
pub struct Object<'o> {
    out: &'o mut String,
    first: bool,
}

impl<'o> Object<'o> {
    pub fn open(out: &'o mut String) -> Object<'o> {
        out.push('{');
        Object { out, first: true }
    }

    /// Writes `name` and returns where its value goes.
    pub fn key(&mut self, name: &str) -> &mut String {
        if !std::mem::take(&mut self.first) {
            self.out.push(',');
        }
        json_str(self.out, name);
        self.out.push(':');
        self.out
    }

    /// `name` with a string value.
    pub fn text(&mut self, name: &str, value: &str) {
        json_str(self.key(name), value);
    }

    pub fn close(self) {
        self.out.push('}');
    }
}

/// A JSON list of `items`, each written by `write`.
pub fn list<T, E>(
    items: impl IntoIterator<Item = T>,
    out: &mut String,
    mut write: impl FnMut(T, &mut String) -> Result<(), E>,
) -> Result<(), E> {
    out.push('[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write(item, out)?;
    }
    out.push(']');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_as_their_text_does() {
        let names = ["GATE", "GTNO", "A", "ZZ", "G", "GATEWAYS2", "GATEWAYS1", "GATEWAY", "GAT", "中文", "Ä"];
        let mut by_name: Vec<Name> = names.iter().map(|n| Name::new(n)).collect();
        by_name.sort();
        let mut by_text = names.to_vec();
        by_text.sort();
        assert_eq!(by_name.iter().map(Name::as_str).collect::<Vec<_>>(), by_text);
    }

    #[test]
    fn an_upper_cased_name_is_borrowed_when_it_already_was_upper_case() {
        let text = String::from("GTDT");
        assert!(matches!(Name::upper(&text).text, Cow::Borrowed(_)));
        assert_eq!(Name::upper("gtDt"), Name::new("GTDT"));
        assert_eq!(Name::upper("gtDt").as_str(), "GTDT");
    }

    #[test]
    fn an_object_and_a_list_are_written_as_serde_json_writes_them() {
        let mut out = String::new();
        let mut o = Object::open(&mut out);
        o.text("A", "x\"y");
        let written = list(["1", "2"], o.key("B"), |v, out| {
            json_str(out, v);
            Ok::<_, ()>(())
        });
        written.unwrap();
        Object::open(o.key("C")).close();
        o.close();
        let tree = serde_json::json!({ "A": "x\"y", "B": ["1", "2"], "C": {} });
        assert_eq!(out, serde_json::to_string(&tree).unwrap());
    }

    #[test]
    fn a_string_is_written_as_serde_json_writes_it() {
        for s in ["", "G21", "q\"uo\\te", "tab\tnl\n\u{1}", "中文", "x\u{7f}/\u{2028}"] {
            let mut out = String::new();
            json_str(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }
}
