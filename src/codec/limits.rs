//! The shape a message may have (#53): limits no airport's message comes near and a hostile or
//! broken one does — elements per message, attributes per element, distinct names the tolerant
//! reader skips. Each is a configuration key; a breach is DEAD(PROTOCOL) naming the key and
//! the limit, found as soon as the limit is passed, so refusing costs no more than reading.
//!
//! Beside them, [`work`]: a count of the decoder's steps, which the fuzz suite holds to a
//! bound per byte — linear cost as a count, not as a wall clock.

use std::collections::HashSet;

use super::{protocol, DecodeError};

/// The limits on a message's shape. [`Limits::DEFAULT`] is what the configuration's defaults
/// say (docs/reference.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Elements in one message (`msgx.codec.max-elements`).
    pub max_elements: u32,
    /// Attributes on one element (`msgx.codec.max-attributes`).
    pub max_attributes: u32,
    /// Distinct element and attribute names the tolerant reader skips in one message
    /// (`msgx.codec.max-unknown-names`).
    pub max_unknown_names: u32,
}

impl Limits {
    /// One element per four bytes of a message at `msgx.codec.max-message-bytes`' default
    /// (`<a/>` is four): no message that fits the default size breaks it, and the tree of the
    /// largest costs tens of megabytes, not hundreds. A SIS element carries at most a handful
    /// of attributes, a vendor adds a few new names in a release.
    pub const DEFAULT: Limits = Limits { max_elements: 262_144, max_attributes: 64, max_unknown_names: 64 };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Which limit a message broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Elements,
    Attributes,
    UnknownNames,
}

impl Limit {
    /// The configuration key that sets it.
    pub fn key(self) -> &'static str {
        match self {
            Limit::Elements => "msgx.codec.max-elements",
            Limit::Attributes => "msgx.codec.max-attributes",
            Limit::UnknownNames => "msgx.codec.max-unknown-names",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Limit::Elements => "elements",
            Limit::Attributes => "attributes",
            Limit::UnknownNames => "element or attribute names this codec does not know",
        }
    }

    /// The refusal: DEAD(PROTOCOL), naming where, the limit and its key.
    pub(super) fn breach(self, limit: u32, within: impl std::fmt::Display) -> DecodeError {
        protocol(format!(
            "{within} has more than {limit} {} ({} = {limit}); not decoded further",
            self.what(),
            self.key()
        ))
    }
}

/// What the tolerant reader skipped: element and attribute names a table does not know
/// (`FLOP/XYZ`, `STND@XYZ`), each once in the order met, at most `max` of them — one more is
/// a breach of [`Limit::UnknownNames`]. The strict reader refuses the first instead.
#[derive(Debug, Clone)]
pub struct Unknown {
    strict: bool,
    max: u32,
    names: Vec<String>,
    /// The same names, for a lookup that does not grow with their number (#53: a list
    /// searched per element made 100 000 names 18 s).
    seen: HashSet<String>,
}

impl Unknown {
    pub fn tolerant(max: u32) -> Unknown {
        Unknown { strict: false, max, names: Vec::new(), seen: HashSet::new() }
    }

    pub fn strict() -> Unknown {
        Unknown { strict: true, max: 0, names: Vec::new(), seen: HashSet::new() }
    }

    /// Notes an unknown name, or refuses the message: `refuse` when reading strictly, the
    /// limit's breach when it is one distinct name too many.
    pub fn note(&mut self, name: String, refuse: impl FnOnce() -> DecodeError) -> Result<(), DecodeError> {
        work::tick();
        if self.strict {
            return Err(refuse());
        }
        if self.seen.contains(&name) {
            return Ok(());
        }
        if self.names.len() >= self.max as usize {
            return Err(Limit::UnknownNames.breach(self.max, "the message"));
        }
        self.seen.insert(name.clone());
        self.names.push(name);
        Ok(())
    }

    pub fn into_names(self) -> Vec<String> {
        self.names
    }
}

/// The decoder's steps on this thread: one per XML event, attribute, child visited and
/// unknown name noted. Production code only adds; the fuzz suite reads it to hold each
/// shape's steps per byte to a bound (#53).
pub mod work {
    use std::cell::Cell;

    thread_local!(static STEPS: Cell<u64> = const { Cell::new(0) });

    #[inline]
    pub fn tick() {
        STEPS.with(|s| s.set(s.get().wrapping_add(1)));
    }

    /// The steps taken on this thread so far.
    pub fn steps() -> u64 {
        STEPS.with(Cell::get)
    }
}
