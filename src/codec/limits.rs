//! The shape a message may have (#53): limits no airport's message comes near and a hostile or
//! broken one does — elements per message, attributes per element, distinct names the tolerant
//! reader skips. Each is a configuration key; a breach is DEAD(PROTOCOL) naming the key and
//! the limit, found as soon as the limit is passed, so refusing costs no more than reading.
//!
//! Beside them, [`work`]: a count of the decoder's steps, which the fuzz suite holds to a
//! bound per byte — linear cost as a count, not as a wall clock.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

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

impl Limits {
    /// The limits the configuration sets (`msgx.codec.max-*`).
    pub fn of(p: &crate::config::Pipeline) -> Limits {
        Limits {
            max_elements: p.max_elements,
            max_attributes: p.max_attributes,
            max_unknown_names: p.max_unknown_names,
        }
    }
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
    set: NameSet,
}

impl Unknown {
    pub fn tolerant(max: u32) -> Unknown {
        Unknown { strict: false, max, names: Vec::new(), set: NameSet::default() }
    }

    pub fn strict() -> Unknown {
        Unknown { strict: true, max: 0, names: Vec::new(), set: NameSet::default() }
    }

    /// Notes an unknown name, or refuses the message: `refuse` when reading strictly, the
    /// limit's breach when it is one distinct name too many.
    pub fn note(&mut self, name: &str, refuse: impl FnOnce() -> DecodeError) -> Result<(), DecodeError> {
        work::tick();
        if self.strict {
            return Err(refuse());
        }
        let (hash, known) = self.set.find(name, &self.names);
        if known {
            return Ok(());
        }
        if self.names.len() >= self.max as usize {
            return Err(Limit::UnknownNames.breach(self.max, "the message"));
        }
        self.set.insert(hash, self.names.len());
        self.names.push(name.to_string());
        Ok(())
    }

    pub fn into_names(self) -> Vec<String> {
        self.names
    }
}

/// Which names of a list are there, by a 64-bit hash of each: SipHash under a random key
/// (std's `RandomState`), so an input cannot choose names that collide, and eight bytes an
/// entry, one hash a lookup (#53: a set of the names themselves was a third of decoding
/// 16 MiB of new names). A collision that happens anyway is settled by comparing names.
#[derive(Debug, Clone, Default)]
pub(super) struct NameSet {
    key: RandomState,
    first: HashMap<u64, usize, BuildHasherDefault<Prehashed>>,
}

impl NameSet {
    /// Empties it for the next element. A large table is dropped, not cleared: clearing
    /// costs its whole capacity, and one huge element followed by many small ones would pay
    /// that capacity for each of them.
    pub(super) fn clear(&mut self) {
        match self.first.capacity() > 1024 {
            true => self.first = HashMap::default(),
            false => self.first.clear(),
        }
    }

    pub(super) fn hash(&self, name: &str) -> u64 {
        self.key.hash_one(name)
    }

    /// `name`'s hash, and whether `names` (the list this set indexes) holds it.
    pub(super) fn find(&self, name: &str, names: &[impl AsRef<str>]) -> (u64, bool) {
        let hash = self.hash(name);
        let known = match self.first.get(&hash) {
            None => false,
            Some(&at) if names[at].as_ref() == name => true,
            Some(_) => names.iter().any(|n| n.as_ref() == name),
        };
        (hash, known)
    }

    /// Notes that `names[at]` has `hash` (the first name with a hash keeps it).
    pub(super) fn insert(&mut self, hash: u64, at: usize) {
        self.first.entry(hash).or_insert(at);
    }
}

/// The hasher of a map whose keys are hashes already.
#[derive(Debug, Default)]
pub(super) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
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
