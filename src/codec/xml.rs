//! A small element tree over quick-xml. Mailbox messages are kilobytes, so a tree is simpler
//! and safer than hand-written event state machines per message kind; depth is bounded so
//! hostile input cannot exhaust the stack.
//!
//! The tree borrows from the text it was parsed from (#23): a name, an attribute value or a
//! text is a slice of the message unless it had to be changed (an entity, a character
//! reference, CDATA beside text, a CR line end). Its elements live in one vector in document
//! order and its attributes in another, linked by index, so a message costs two allocations
//! however many elements it has, and an [`Element`] is a copyable handle into the [`Doc`].

use std::borrow::Cow;

use quick_xml::events::{BytesRef, BytesStart, Event};
use quick_xml::Reader;

use super::limits::NameSet;
use super::{malformed, work, DecodeError, Limit, Limits};

/// Deeper nesting than any SIS message has (it uses four levels) is refused.
pub const MAX_DEPTH: usize = 32;

/// A longer element or attribute name than any SIS message has (its longest are a few dozen
/// bytes) is refused, PROTOCOL: what the tolerant reader notes and the pump remembers of a
/// name stays small whatever the input (#68: names of 1 MB each held 63 MB).
pub const MAX_NAME_BYTES: usize = 128;

/// `name` if it is no longer than [`MAX_NAME_BYTES`]; `what` says whose name it is.
fn short_name<'n>(name: Cow<'n, str>, what: impl std::fmt::Display) -> Result<Cow<'n, str>, DecodeError> {
    if name.len() <= MAX_NAME_BYTES {
        return Ok(name);
    }
    let start: String = name.chars().take(16).collect();
    // Not a name at all (markup swallowed by a broken tag: `<"G><META>…`): not XML (#67's CI
    // found it: the fuzzing's mutated messages are MALFORMED or CODEC_ERROR, never PROTOCOL).
    if name.bytes().any(|b| b.is_ascii() && !(b.is_ascii_alphanumeric() || b"._-:".contains(&b))) {
        return Err(super::malformed(format!(
            "not XML: {what} name of {} bytes (starting {start:?}) is not a name",
            name.len()
        )));
    }
    Err(super::protocol(format!(
        "{what} name of {} bytes (starting {start:?}) is longer than the {MAX_NAME_BYTES} bytes a name may have",
        name.len()
    )))
}

/// A parsed document: every element, the root first and each parent before its children.
#[derive(Debug, Clone)]
pub struct Doc<'a> {
    nodes: Vec<Node<'a>>,
    attrs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

/// No element has index 0 as a child or a sibling (0 is the root), so 0 means "none".
const NONE: u32 = 0;

#[derive(Debug, Clone)]
struct Node<'a> {
    name: Cow<'a, str>,
    /// Concatenated text directly inside this element, trimmed.
    text: Cow<'a, str>,
    /// This element's attributes: `Doc::attrs[attrs.0..attrs.1]`.
    attrs: (u32, u32),
    first_child: u32,
    next_sibling: u32,
}

impl<'a> Doc<'a> {
    pub fn root(&self) -> Element<'_, 'a> {
        Element { doc: self, at: 0 }
    }
}

/// One element of a [`Doc`]: a handle, as cheap to copy as a reference.
#[derive(Clone, Copy)]
pub struct Element<'d, 'a> {
    doc: &'d Doc<'a>,
    at: u32,
}

impl<'d, 'a> Element<'d, 'a> {
    fn node(self) -> &'d Node<'a> {
        &self.doc.nodes[self.at as usize]
    }

    pub fn name(self) -> &'d str {
        &self.node().name
    }

    /// Concatenated text directly inside this element, trimmed.
    pub fn text(self) -> &'d str {
        &self.node().text
    }

    /// Attributes in document order, names and values.
    pub fn attrs(self) -> impl ExactSizeIterator<Item = (&'d str, &'d str)> {
        let (from, to) = self.node().attrs;
        self.doc.attrs[from as usize..to as usize].iter().map(|(k, v)| {
            work::tick();
            (k.as_ref(), v.as_ref())
        })
    }

    pub fn has_attrs(self) -> bool {
        let (from, to) = self.node().attrs;
        from != to
    }

    pub fn has_children(self) -> bool {
        self.node().first_child != NONE
    }

    /// Child elements in document order.
    pub fn children(self) -> Children<'d, 'a> {
        Children { doc: self.doc, next: self.node().first_child }
    }

    pub fn child(self, name: &str) -> Option<Element<'d, 'a>> {
        self.children().find(|c| same_name(c.name(), name))
    }

    /// This element and its later siblings, in document order.
    pub fn and_following(self) -> impl Iterator<Item = Element<'d, 'a>> {
        std::iter::once(self).chain(Children { doc: self.doc, next: self.node().next_sibling })
    }

    pub fn children_named<'n>(self, name: &'n str) -> impl Iterator<Item = Element<'d, 'a>> + 'n
    where
        'd: 'n,
    {
        self.children().filter(move |c| same_name(c.name(), name))
    }

    /// Text of a child, `None` when the child is absent or empty.
    pub fn child_text(self, name: &str) -> Option<&'d str> {
        self.child(name).and_then(Element::filled_text)
    }

    /// Its text, `None` when it is empty.
    pub fn filled_text(self) -> Option<&'d str> {
        Some(self.text()).filter(|t| !t.is_empty())
    }
}

impl std::fmt::Debug for Element<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Element")
            .field("name", &self.name())
            .field("attrs", &self.attrs().collect::<Vec<_>>())
            .field("text", &self.text())
            .field("children", &self.children().collect::<Vec<_>>())
            .finish()
    }
}

/// `s.trim()`, answered from its two end bytes when they are ASCII and not white space: then
/// nothing is trimmed (every other white space `char::is_whitespace` knows is beyond ASCII),
/// and most texts and values are such, where `str::trim` decoded and classed a `char` at
/// each end (#23).
#[inline]
pub fn trim(s: &str) -> &str {
    let solid = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii() && !b.is_ascii_whitespace() && *b != 0x0B);
    match solid(s.as_bytes().first()) && solid(s.as_bytes().last()) {
        true => s,
        false => s.trim(),
    }
}

/// Whether two element or attribute names are the same, ASCII case aside (SIS names are
/// case-insensitive). Byte by byte, equal bytes first: names almost always match in case, and
/// a name is compared with a table's names many times a message, where `eq_ignore_ascii_case`
/// folded every byte of both and was a twelfth of decoding a FLOP message (#23).
#[inline]
pub fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y || x.eq_ignore_ascii_case(y))
}

/// The children of an element, following the sibling links.
pub struct Children<'d, 'a> {
    doc: &'d Doc<'a>,
    next: u32,
}

impl<'d, 'a> Iterator for Children<'d, 'a> {
    type Item = Element<'d, 'a>;

    fn next(&mut self) -> Option<Element<'d, 'a>> {
        work::tick();
        (self.next != NONE).then(|| {
            let el = Element { doc: self.doc, at: self.next };
            self.next = el.node().next_sibling;
            el
        })
    }
}

/// `part` as a slice of `text` when it is one (quick-xml hands out slices of the input with
/// the lifetime of its event); otherwise (a value it had to change) owned.
fn rebase<'a>(text: &'a str, part: &str) -> Cow<'a, str> {
    slice_of(text, part.as_bytes()).map_or_else(|| Cow::Owned(part.to_string()), Cow::Borrowed)
}

/// The part of `text` that `raw` is, found by its address: `str::get` checks that both ends
/// fall on character boundaries, so the bytes need no second UTF-8 validation (#23).
fn slice_of<'a>(text: &'a str, raw: &[u8]) -> Option<&'a str> {
    let (base, at) = (text.as_ptr() as usize, raw.as_ptr() as usize);
    at.checked_sub(base)
        .and_then(|off| text.get(off..off.checked_add(raw.len())?))
        .filter(|s| s.as_ptr() == raw.as_ptr())
}

/// `raw` as a slice of `text` when it holds no `special` byte (the byte that would make
/// quick-xml change it), so it is the message's text as it stands.
fn plain<'a>(text: &'a str, raw: &[u8], special: u8) -> Option<&'a str> {
    (!raw.contains(&special)).then(|| slice_of(text, raw)).flatten()
}

/// [`rebase`] of a borrowed piece; an owned one stays owned.
fn keep<'a>(text: &'a str, piece: Cow<'_, str>) -> Cow<'a, str> {
    match piece {
        Cow::Borrowed(p) => rebase(text, p),
        Cow::Owned(p) => Cow::Owned(p),
    }
}

/// A name as UTF-8 (the input is a `str`, so a name always is), borrowed from `text`.
fn name_of<'a>(text: &'a str, raw: &[u8]) -> Cow<'a, str> {
    match slice_of(text, raw) {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(String::from_utf8_lossy(raw).into_owned()),
    }
}

/// The document being built: its vectors, and the open elements with the last child each
/// has so far (where the next child is linked). The open elements are a fixed array, as
/// deep as nesting may go.
struct Builder<'a, 'l> {
    text: &'a str,
    doc: Doc<'a>,
    open: [(u32, u32); MAX_DEPTH],
    depth: usize,
    limits: &'l Limits,
    /// The element's attribute names so far (reused from element to element) and, past a
    /// few, the same names hashed: the duplicate check is a set, not a comparison of each
    /// name with every earlier one (#53: quick-xml's own check was quadratic, 13 s for one
    /// element of 100 000 attributes).
    keys: Vec<Cow<'a, str>>,
    hashed: NameSet,
}

/// Up to this many attributes an element's names are compared pairwise; beyond, hashed.
const FEW_ATTRIBUTES: usize = 8;

/// A document that is not well-formed XML: MALFORMED, as every text that is not a message.
fn not_xml(detail: impl std::fmt::Display) -> DecodeError {
    malformed(format!("not XML: {detail}"))
}

impl<'a> Builder<'a, '_> {
    fn root_done(&self) -> bool {
        self.depth == 0 && !self.doc.nodes.is_empty()
    }

    /// An element opens (or is empty): refused after the root, deeper than [`MAX_DEPTH`] or
    /// past `max_elements`.
    fn start(&mut self, s: &BytesStart<'_>, empty: bool) -> Result<(), DecodeError> {
        if self.root_done() {
            return Err(not_xml(if empty {
                "more than one root element"
            } else {
                "content after the root element"
            }));
        }
        if !empty && self.depth >= MAX_DEPTH {
            return Err(not_xml(format_args!("elements nested deeper than {MAX_DEPTH}")));
        }
        if self.doc.nodes.len() >= self.limits.max_elements as usize {
            return Err(Limit::Elements.breach(self.limits.max_elements, "the message"));
        }
        let at = self.element(s)?;
        if !empty {
            self.open[self.depth] = (at, NONE);
            self.depth += 1;
        }
        Ok(())
    }

    /// Adds an element and links it to its parent; returns its index.
    fn element(&mut self, s: &BytesStart<'_>) -> Result<u32, DecodeError> {
        let name = short_name(name_of(self.text, s.local_name().as_ref()), "an element")?;
        let from = self.doc.attrs.len() as u32;
        self.attributes(s, &name)?;
        let at = self.doc.nodes.len() as u32;
        let attrs = (from, self.doc.attrs.len() as u32);
        self.doc.nodes.push(Node {
            name,
            text: Cow::Borrowed(""),
            attrs,
            first_child: NONE,
            next_sibling: NONE,
        });
        if let Some((parent, last)) = self.depth.checked_sub(1).map(|d| &mut self.open[d]) {
            match *last {
                NONE => self.doc.nodes[*parent as usize].first_child = at,
                prev => self.doc.nodes[prev as usize].next_sibling = at,
            }
            *last = at;
        }
        Ok(at)
    }

    /// An element's attributes: each name once, at most `max_attributes` of them.
    fn attributes(&mut self, s: &BytesStart<'_>, name: &str) -> Result<(), DecodeError> {
        // Most elements have none: nothing to set up for them.
        if s.attributes_raw().iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        self.keys.clear();
        self.hashed.clear();
        for a in s.attributes().with_checks(false) {
            work::tick();
            if self.keys.len() >= self.limits.max_attributes as usize {
                return Err(Limit::Attributes.breach(self.limits.max_attributes, format_args!("<{name}>")));
            }
            let a = a.map_err(|e| not_xml(format_args!("bad attribute in <{name}>: {e}")))?;
            let key =
                short_name(name_of(self.text, a.key.as_ref()), format_args!("an attribute of <{name}>"))?;
            if !self.first_time(key.clone()) {
                return Err(not_xml(format_args!("bad attribute in <{name}>: {key:?} appears twice")));
            }
            let local = name_of(self.text, a.key.local_name().as_ref());
            // A value without a reference is the message's own text: sliced, no second UTF-8
            // check and no scan for entities (#23).
            let value = match plain(self.text, &a.value, b'&') {
                Some(v) => Cow::Borrowed(v),
                None => {
                    let v = a
                        .unescape_value()
                        .map_err(|e| not_xml(format_args!("bad attribute value in <{name}>: {e}")))?;
                    keep(self.text, v)
                }
            };
            self.doc.attrs.push((local, value));
        }
        Ok(())
    }

    /// Whether this element had no attribute named `key` yet; notes it.
    fn first_time(&mut self, key: Cow<'a, str>) -> bool {
        if self.keys.len() < FEW_ATTRIBUTES {
            let new = !self.keys.contains(&key);
            self.keys.push(key);
            return new;
        }
        if self.keys.len() == FEW_ATTRIBUTES {
            for (at, k) in self.keys.iter().enumerate() {
                self.hashed.insert(self.hashed.hash(k), at);
            }
        }
        let (hash, known) = self.hashed.find(&key, &self.keys);
        self.hashed.insert(hash, self.keys.len());
        self.keys.push(key);
        !known
    }

    fn text(&mut self, s: Cow<'a, str>) -> Result<(), DecodeError> {
        let Some(&(at, _)) = self.depth.checked_sub(1).map(|d| &self.open[d]) else {
            // Only XML's own white space may stand outside the root (not U+2028, not NBSP).
            return match s.chars().all(|c| matches!(c, ' ' | '\t' | '\r' | '\n')) {
                true => Ok(()),
                false => Err(not_xml("text outside the root element")),
            };
        };
        let el = &mut self.doc.nodes[at as usize];
        match &mut el.text {
            // White space before an element's first text is trimmed anyway: the indentation
            // between children costs nothing.
            t if t.is_empty() && trim(&s).is_empty() => {}
            t if t.is_empty() => *t = s,
            t => t.to_mut().push_str(&s),
        }
        Ok(())
    }

    /// Closes the innermost open element: its text is complete, so it is trimmed now.
    fn close(&mut self) -> Result<(), DecodeError> {
        self.depth =
            self.depth.checked_sub(1).ok_or_else(|| not_xml("closing tag without an opening one"))?;
        let el = &mut self.doc.nodes[self.open[self.depth].0 as usize];
        match &mut el.text {
            Cow::Borrowed(t) => *t = trim(t),
            Cow::Owned(t) => {
                let trimmed = trim(t);
                if trimmed.len() != t.len() {
                    el.text = Cow::Owned(trimmed.to_string());
                }
            }
        }
        Ok(())
    }

    /// The document read so far, its open elements closed here (the root).
    fn cut(mut self) -> Result<Doc<'a>, DecodeError> {
        while self.depth > 0 {
            self.close()?;
        }
        Ok(self.doc)
    }

    /// The document, once the text has ended: every element closed, a root there.
    fn finish(self) -> Result<Doc<'a>, DecodeError> {
        if self.depth > 0 {
            let open = &self.doc.nodes[self.open[self.depth - 1].0 as usize].name;
            return Err(not_xml(format_args!("element <{open}> is not closed")));
        }
        match self.doc.nodes.is_empty() {
            true => Err(not_xml("no root element")),
            false => Ok(self.doc),
        }
    }
}

/// A character or entity reference, resolved; `at` places it in an error.
fn reference(r: &BytesRef<'_>, at: u64) -> Result<String, DecodeError> {
    let resolved = if r.is_char_ref() {
        r.resolve_char_ref()
            .map_err(|e| not_xml(format_args!("bad character reference: {e}")))?
            .map(String::from)
    } else {
        let name = r.decode().map_err(|e| not_xml(format_args!("bad entity: {e}")))?;
        quick_xml::escape::resolve_predefined_entity(&name).map(String::from)
    };
    let s = resolved.ok_or_else(|| not_xml("unknown entity reference"))?;
    if let Some(c) = s.chars().find(|c| !super::xml_char(*c)) {
        return Err(not_xml(format_args!(
            "character reference to U+{:04X}, which XML 1.0 forbids, at byte {at}",
            c as u32
        )));
    }
    Ok(s)
}

/// Parses a whole document under the [`Limits`] of its shape, or says why it is not
/// well-formed (MALFORMED) or breaks a limit (PROTOCOL). Every step is linear in the text:
/// no name is compared with every earlier one (#53).
pub fn parse<'a>(text: &'a str, limits: &Limits) -> Result<Doc<'a>, DecodeError> {
    parse_until(text, limits, false)
}

/// The document up to the end of its root's `<META>`, the elements still open closed there:
/// the header alone, for a check that needs nothing else (PRE-3's reuse check). The body after
/// it is not read, so neither its shape nor its limits can make the header unreadable (#68).
pub fn parse_head<'a>(text: &'a str, limits: &Limits) -> Result<Doc<'a>, DecodeError> {
    parse_until(text, limits, true)
}

fn parse_until<'a>(text: &'a str, limits: &Limits, head: bool) -> Result<Doc<'a>, DecodeError> {
    if u32::try_from(text.len()).is_err() {
        return Err(not_xml(format_args!("a document of {} bytes is larger than 4 GiB", text.len())));
    }
    let mut reader = Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    // About one element per 20 bytes in SIS messages: one allocation for most of them.
    let cap = (text.len() / 16 + 4).min(limits.max_elements as usize);
    let doc = Doc { nodes: Vec::with_capacity(cap), attrs: Vec::with_capacity(text.len() / 64 + 2) };
    let mut b = Builder {
        text,
        doc,
        open: [(NONE, NONE); MAX_DEPTH],
        depth: 0,
        limits,
        keys: Vec::new(),
        hashed: NameSet::default(),
    };
    loop {
        work::tick();
        let ev = reader.read_event().map_err(|e| {
            not_xml(format_args!("not well-formed XML at byte {}: {e}", reader.error_position()))
        })?;
        match ev {
            Event::Start(s) => b.start(&s, false)?,
            Event::Empty(s) => b.start(&s, true)?,
            Event::End(_) => {
                b.close()?;
                if head && b.depth == 1 && same_name(&b.doc.nodes[b.open[1].0 as usize].name, "META") {
                    return b.cut();
                }
            }
            Event::Text(t) => {
                // XML 1.0 line ends: 1.1's would turn U+2028 and U+0085 into line feeds. Text
                // without a CR needs none of it: sliced (references are events of their own).
                match plain(text, &t, b'\r') {
                    Some(s) => b.text(Cow::Borrowed(s))?,
                    None => {
                        let s = t.xml10_content().map_err(|e| not_xml(format_args!("bad text: {e}")))?;
                        b.text(keep(text, s))?
                    }
                }
            }
            Event::CData(c) => {
                let s = c.decode().map_err(|e| not_xml(format_args!("bad CDATA: {e}")))?;
                b.text(keep(text, s))?;
            }
            Event::GeneralRef(r) => b.text(Cow::Owned(reference(&r, reader.buffer_position())?))?,
            Event::Eof => break,
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_) => {}
        }
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parser at the default limits, its refusal as text.
    fn parse(text: &str) -> Result<Doc<'_>, String> {
        super::parse(text, &Limits::DEFAULT).map_err(|e| e.detail)
    }

    /// Whether `part` is a slice of `text` (borrowed) rather than a copy.
    fn within(text: &str, part: &str) -> bool {
        let range = text.as_bytes().as_ptr_range();
        range.contains(&part.as_ptr()) || part.is_empty()
    }

    #[test]
    fn trim_is_str_trim() {
        for s in [
            "",
            " ",
            "a",
            " a",
            "a ",
            "\u{b}a",
            "a\u{b}",
            "\u{85}a",
            "a\u{a0}",
            "a\u{2028}",
            "\u{3000}中文",
            "x y",
            "\u{7f}",
            "\u{1c}a",
        ] {
            assert_eq!(trim(s), s.trim(), "{s:?}");
        }
    }

    #[test]
    fn parses_nested_elements_attributes_and_entities() {
        let doc = parse(
            "<?xml version=\"1.0\"?><MSG a=\"x&amp;y\"><B>1 &lt; 2 &#65;</B><C/><![CDATA[<raw>]]></MSG>",
        )
        .unwrap();
        let root = doc.root();
        assert_eq!(root.name(), "MSG");
        assert_eq!(root.attrs().collect::<Vec<_>>(), vec![("a", "x&y")]);
        assert_eq!(root.child_text("b"), Some("1 < 2 A"));
        assert_eq!(root.child("C").map(Element::text), Some(""));
        assert_eq!(root.child_text("C"), None);
        assert_eq!(root.text(), "<raw>");
        assert_eq!(root.children().map(Element::name).collect::<Vec<_>>(), ["B", "C"]);
    }

    #[test]
    fn children_and_attributes_belong_to_their_own_element() {
        let doc =
            parse("<R><A x=\"1\"><B y=\"2\" z=\"3\"/><C>c</C></A><D w=\"4\">d<E/>e</D><F/></R>").unwrap();
        let root = doc.root();
        fn names(el: Element) -> Vec<String> {
            el.children().map(|c| c.name().to_string()).collect()
        }
        assert_eq!(names(root), ["A", "D", "F"]);
        let (a, d) = (root.child("A").unwrap(), root.child("D").unwrap());
        assert_eq!(names(a), ["B", "C"]);
        assert_eq!(names(d), ["E"]);
        assert!(!root.child("F").unwrap().has_children() && !root.child("F").unwrap().has_attrs());
        assert_eq!(a.attrs().collect::<Vec<_>>(), [("x", "1")]);
        assert_eq!(a.child("B").unwrap().attrs().collect::<Vec<_>>(), [("y", "2"), ("z", "3")]);
        assert_eq!(d.attrs().collect::<Vec<_>>(), [("w", "4")]);
        assert_eq!(d.text(), "de", "text on both sides of a child is the element's");
        assert_eq!(a.child_text("C"), Some("c"));
        assert!(!root.has_attrs());
    }

    #[test]
    fn names_and_plain_text_are_slices_of_the_message() {
        let text = "<MSG><FLID a=\"1\">88231</FLID>\n  <GATE>G&amp;1</GATE></MSG>";
        let doc = parse(text).unwrap();
        let root = doc.root();
        let flid = root.child("FLID").unwrap();
        let (key, value) = flid.attrs().next().unwrap();
        for borrowed in [root.name(), flid.name(), flid.text(), key, value] {
            assert!(within(text, borrowed), "{borrowed:?} was copied");
        }
        let gate = root.child("GATE").unwrap();
        assert!(!within(text, gate.text()), "an entity changes the text: owned");
        assert_eq!(gate.text(), "G&1");
    }

    #[test]
    fn a_cr_line_end_in_text_is_a_line_feed_and_only_that_text_is_copied() {
        let text = "<MSG a=\"x\ry\"><R>one\r\ntwo\rthree</R><P>plain\nline</P></MSG>";
        let doc = parse(text).unwrap();
        let root = doc.root();
        assert_eq!(root.child_text("R"), Some("one\ntwo\nthree"));
        assert!(!within(text, root.child_text("R").unwrap()));
        assert_eq!(root.child_text("P"), Some("plain\nline"));
        assert!(within(text, root.child_text("P").unwrap()));
        assert_eq!(root.attrs().next(), Some(("a", "x\ry")), "attribute values are as quick-xml gives them");
    }

    #[test]
    fn rejects_what_is_not_well_formed() {
        for bad in [
            "",
            "plain text",
            "<A>",
            "<A></B>",
            "<A/><B/>",
            "<A/><B></B>",
            "<A>&bogus;</A>",
            "<A x=\"1\" x=\"2\"/>",
            "</A>",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = "<A>".repeat(MAX_DEPTH + 1) + &"</A>".repeat(MAX_DEPTH + 1);
        assert!(parse(&deep).unwrap_err().contains("nested deeper"));
        let ok = "<A>".repeat(MAX_DEPTH) + &"</A>".repeat(MAX_DEPTH);
        assert!(parse(&ok).is_ok());
    }

    /// #68: a name of 1 MB was noted, remembered and held for the life of the process.
    #[test]
    fn regression_names_longer_than_an_airport_meets_are_refused_as_protocol() {
        let (long, ok) = ("N".repeat(MAX_NAME_BYTES + 1), "N".repeat(MAX_NAME_BYTES));
        for text in [format!("<MSG><{long}/></MSG>"), format!("<MSG><A {long}=\"1\"/></MSG>")] {
            let e = super::parse(&text, &Limits::DEFAULT).map(|_| ()).unwrap_err();
            assert_eq!(e.class, crate::error::ErrorClass::Protocol, "{e:?}");
            assert!(
                e.detail.contains(
                    "name of 129 bytes (starting \"NNNNNNNNNNNNNNNN\") is longer than the 128 bytes"
                ),
                "{}",
                e.detail
            );
        }
        assert!(parse(&format!("<MSG><{ok} {ok}=\"1\"/></MSG>")).is_ok());
        // A tag broken so that the markup after it reads as its name is not XML, whatever
        // its length: MALFORMED, as the fuzzing expects of a mutated message.
        let broken = "<\"G><META><SNDR>AODB</SNDR><SEQN>9</SEQN><DTTM20260305140000</DTTM><TYPE>SCHD</TYPE>\
                      <STYP>DNLD</STYP></META><SCHD><RECS>1</RECS><FLTR><FLID>5</FLID><SODT>05MAR260905</SODT>\
                      <ROUT RTNO=1\"><APCD>CTU</APCD></ROUT></FLTR></SCHD></MSG>";
        let e = super::parse(broken, &Limits::DEFAULT).map(|_| ()).unwrap_err();
        assert_eq!(e.class, crate::error::ErrorClass::Malformed, "{e:?}");
        assert!(e.detail.starts_with("not XML: an element name of "), "{}", e.detail);
        let huge = "N".repeat(1 << 20);
        assert!(parse(&format!("<MSG><{huge}/></MSG>")).unwrap_err().contains("name of 1048576 bytes"));
    }
}
#[cfg(test)]
mod outside {
    #[test]
    fn text_outside_the_root_that_is_not_xml_white_space_is_refused() {
        assert!(
            super::parse("<?xml version=\"1.0\"?>\n\u{2028}<MSG/>", &super::Limits::DEFAULT).is_err(),
            "U+2028 before the root"
        );
        assert!(super::parse("<MSG/>\u{a0}", &super::Limits::DEFAULT).is_err(), "NBSP after the root");
        assert!(super::parse("<?xml version=\"1.0\"?>\n \t\r\n<MSG/>\n", &super::Limits::DEFAULT).is_ok());
    }
}
