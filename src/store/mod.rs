//! Store adapters, one room each: own PostgreSQL, the shared MySQL mailbox, Redis flights,
//! the Kafka producer, and the in-memory twins of all of them.

#[doc(hidden)]
pub mod conformance;
pub mod flights;
pub mod kafka;
pub mod mailbox;
pub mod memory;
pub mod pg;

/// A token no other write of any process carries (`applied:token`, #20): a random nonce of this
/// process and a counter. A Redis whose token is not the one this process wrote last went back
/// to another history — an older dump, an emptied store, a replica that missed the tail — even
/// when its count of applies happens to be the same.
pub fn write_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static NONCE: OnceLock<u64> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nonce = *NONCE.get_or_init(|| std::collections::hash_map::RandomState::new().build_hasher().finish());
    format!("{nonce:016x}.{}", COUNT.fetch_add(1, Ordering::Relaxed))
}

/// The tokens a handle accepts as Redis's current one: the last it wrote, and one it wrote
/// whose answer was lost (it may or may not be there). Empty: none seen yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens(pub Vec<String>);

impl Tokens {
    pub fn of(token: Option<String>) -> Tokens {
        Tokens(token.into_iter().collect())
    }

    /// Whether `current` is a history this handle wrote (or nothing was seen yet).
    pub fn accepts(&self, current: Option<&str>) -> bool {
        self.0.is_empty() || current.is_some_and(|c| self.0.iter().any(|t| t == c))
    }

    /// After a write of `token`: `Ok` it is the current one; an unknown outcome keeps both —
    /// or, when nothing was seen before, still accepts any.
    pub fn after(&mut self, token: String, known: bool) {
        if known {
            self.0 = vec![token];
        } else if !self.0.is_empty() {
            self.0.truncate(1);
            self.0.push(token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Tokens;

    #[test]
    fn regression_a_lost_answer_before_anything_was_seen_still_accepts_any_token() {
        let mut t = Tokens::default();
        t.after("mine".into(), false);
        assert!(t.accepts(Some("theirs")), "the write may not have landed: what was there stands");
        t.after("mine".into(), true);
        t.after("next".into(), false);
        assert!(t.accepts(Some("mine")) && t.accepts(Some("next")) && !t.accepts(Some("theirs")));
    }
}
