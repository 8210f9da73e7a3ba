//! A small element tree over quick-xml. Mailbox messages are kilobytes, so a tree is simpler
//! and safer than hand-written event state machines per message kind; depth is bounded so
//! hostile input cannot exhaust the stack.
//!
//! The tree borrows from the text it was parsed from (#23): a name, an attribute value or a
//! text is a slice of the message unless it had to be changed (an entity, a character
//! reference, CDATA beside text, a CR line end), so a message costs one allocation per
//! element's list of children, not one per name and text.

use std::borrow::Cow;

use quick_xml::events::Event;
use quick_xml::Reader;

/// Deeper nesting than any SIS message has (it uses four levels) is refused.
pub const MAX_DEPTH: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Element<'a> {
    pub name: Cow<'a, str>,
    pub attrs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub children: Vec<Element<'a>>,
    /// Concatenated text directly inside this element, trimmed.
    pub text: Cow<'a, str>,
}

impl<'a> Element<'a> {
    pub fn child(&self, name: &str) -> Option<&Element<'a>> {
        self.children.iter().find(|c| c.name.eq_ignore_ascii_case(name))
    }

    pub fn children_named<'b>(&'b self, name: &'b str) -> impl Iterator<Item = &'b Element<'a>> {
        self.children.iter().filter(move |c| c.name.eq_ignore_ascii_case(name))
    }

    /// Text of a child, `None` when the child is absent or empty.
    pub fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.as_ref()).filter(|t| !t.is_empty())
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

/// Parses a whole document and returns its root element, or a reason it is not well-formed.
pub fn parse(text: &str) -> Result<Element<'_>, String> {
    let mut reader = Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<Element<'_>> = Vec::new();
    // Closed elements waiting for their parent to close, and where each open element's
    // children begin there: a parent's children are then moved into a vector of their exact
    // size, one allocation, where pushing them one by one grew it two or three times (#23).
    let mut closed: Vec<Element<'_>> = Vec::new();
    let mut starts: Vec<usize> = Vec::new();
    let mut root: Option<Element<'_>> = None;
    loop {
        let ev = reader
            .read_event()
            .map_err(|e| format!("not well-formed XML at byte {}: {e}", reader.error_position()))?;
        match ev {
            Event::Start(s) => {
                if root.is_some() {
                    return Err("content after the root element".into());
                }
                if stack.len() >= MAX_DEPTH {
                    return Err(format!("elements nested deeper than {MAX_DEPTH}"));
                }
                stack.push(open(text, &s)?);
                starts.push(closed.len());
            }
            Event::Empty(s) => {
                let el = open(text, &s)?;
                close(el, stack.is_empty(), &mut closed, &mut root)?;
            }
            Event::End(_) => {
                let mut el = stack.pop().ok_or("closing tag without an opening one")?;
                let start = starts.pop().expect("one start per open element");
                el.children = closed.drain(start..).collect();
                close(el, stack.is_empty(), &mut closed, &mut root)?;
            }
            Event::Text(t) => {
                // XML 1.0 line ends: 1.1's would turn U+2028 and U+0085 into line feeds.
                let s = t.xml10_content().map_err(|e| format!("bad text: {e}"))?;
                push_text(&mut stack, keep(text, s))?;
            }
            Event::CData(c) => {
                let s = c.decode().map_err(|e| format!("bad CDATA: {e}"))?;
                push_text(&mut stack, keep(text, s))?;
            }
            Event::GeneralRef(r) => {
                let resolved = if r.is_char_ref() {
                    r.resolve_char_ref()
                        .map_err(|e| format!("bad character reference: {e}"))?
                        .map(String::from)
                } else {
                    let name = r.decode().map_err(|e| format!("bad entity: {e}"))?;
                    quick_xml::escape::resolve_predefined_entity(&name).map(String::from)
                };
                let s = resolved.ok_or("unknown entity reference")?;
                if let Some(c) = s.chars().find(|c| !super::xml_char(*c)) {
                    return Err(format!(
                        "character reference to U+{:04X}, which XML 1.0 forbids, at byte {}",
                        c as u32,
                        reader.buffer_position()
                    ));
                }
                push_text(&mut stack, Cow::Owned(s))?;
            }
            Event::Eof => break,
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_) => {}
        }
    }
    if !stack.is_empty() {
        return Err(format!("element <{}> is not closed", stack[stack.len() - 1].name));
    }
    debug_assert!(closed.is_empty(), "every closed element has its parent");
    root.ok_or_else(|| "no root element".to_string())
}

fn open<'a>(text: &'a str, s: &quick_xml::events::BytesStart<'_>) -> Result<Element<'a>, String> {
    let name = name_of(text, s.local_name().as_ref());
    let mut attrs = Vec::new();
    for a in s.attributes() {
        let a = a.map_err(|e| format!("bad attribute in <{name}>: {e}"))?;
        let key = name_of(text, a.key.local_name().as_ref());
        let value = a.unescape_value().map_err(|e| format!("bad attribute value in <{name}>: {e}"))?;
        attrs.push((key, keep(text, value)));
    }
    Ok(Element { name, attrs, children: Vec::new(), text: Cow::Borrowed("") })
}

/// A closed element (its text complete, so trimmed now) goes to its parent's children, or is
/// the root when no element is open.
fn close<'a>(
    mut el: Element<'a>,
    outermost: bool,
    closed: &mut Vec<Element<'a>>,
    root: &mut Option<Element<'a>>,
) -> Result<(), String> {
    trim(&mut el);
    match outermost {
        false => closed.push(el),
        true if root.is_none() => *root = Some(el),
        true => return Err("more than one root element".into()),
    }
    Ok(())
}

fn push_text<'a>(stack: &mut [Element<'a>], s: Cow<'a, str>) -> Result<(), String> {
    match stack.last_mut() {
        // White space before an element's first text is trimmed anyway: the indentation
        // between children costs nothing.
        Some(el) if el.text.is_empty() && s.trim().is_empty() => {}
        Some(el) if el.text.is_empty() => el.text = s,
        Some(el) => el.text.to_mut().push_str(&s),
        // Only XML's own white space may stand outside the root (not U+2028, not NBSP).
        None if s.chars().all(|c| matches!(c, ' ' | '\t' | '\r' | '\n')) => {}
        None => return Err("text outside the root element".into()),
    }
    Ok(())
}

fn trim(el: &mut Element<'_>) {
    match &mut el.text {
        Cow::Borrowed(t) => *t = t.trim(),
        Cow::Owned(t) => {
            let trimmed = t.trim();
            if trimmed.len() != t.len() {
                el.text = Cow::Owned(trimmed.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_elements_attributes_and_entities() {
        let root = parse(
            "<?xml version=\"1.0\"?><MSG a=\"x&amp;y\"><B>1 &lt; 2 &#65;</B><C/><![CDATA[<raw>]]></MSG>",
        )
        .unwrap();
        assert_eq!(root.name, "MSG");
        assert_eq!(root.attrs, vec![("a".into(), "x&y".into())]);
        assert_eq!(root.child_text("b"), Some("1 < 2 A"));
        assert_eq!(root.child("C").map(|c| c.text.as_ref()), Some(""));
        assert_eq!(root.child_text("C"), None);
        assert_eq!(root.text, "<raw>");
    }

    #[test]
    fn names_and_plain_text_are_slices_of_the_message() {
        let text = "<MSG><FLID a=\"1\">88231</FLID>\n  <GATE>G&amp;1</GATE></MSG>";
        let root = parse(text).unwrap();
        let flid = root.child("FLID").unwrap();
        for borrowed in [&root.name, &flid.name, &flid.text, &flid.attrs[0].0, &flid.attrs[0].1, &root.text] {
            assert!(matches!(borrowed, Cow::Borrowed(_)), "{borrowed:?} was copied");
        }
        let gate = root.child("GATE").unwrap();
        assert!(matches!(gate.text, Cow::Owned(_)), "an entity changes the text: owned");
        assert_eq!(gate.text, "G&1");
    }

    #[test]
    fn rejects_what_is_not_well_formed() {
        for bad in
            ["", "plain text", "<A>", "<A></B>", "<A/><B/>", "<A>&bogus;</A>", "<A x=\"1\" x=\"2\"/>", "</A>"]
        {
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
}
#[cfg(test)]
mod outside {
    #[test]
    fn text_outside_the_root_that_is_not_xml_white_space_is_refused() {
        assert!(super::parse("<?xml version=\"1.0\"?>\n\u{2028}<MSG/>").is_err(), "U+2028 before the root");
        assert!(super::parse("<MSG/>\u{a0}").is_err(), "NBSP after the root");
        assert!(super::parse("<?xml version=\"1.0\"?>\n \t\r\n<MSG/>\n").is_ok());
    }
}
