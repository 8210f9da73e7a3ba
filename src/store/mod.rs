//! Store adapters, one room each: own PostgreSQL, the shared MySQL mailbox, Redis flights,
//! the Kafka producer, and the in-memory twins of all of them.

#[doc(hidden)]
pub mod conformance;
pub mod flights;
pub mod kafka;
pub mod mailbox;
pub mod memory;
pub mod pg;
pub mod tls;

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

/// How many writes with a lost answer a handle remembers since the token it last confirmed:
/// each one is an outage the stage waited out, and the next read of the token settles them.
const PENDING_MAX: usize = 32;

/// The tokens a handle accepts as Redis's current one (#20): the last one it confirmed — wrote
/// and was answered, or read back — and every one it wrote since whose answer was lost. Such a
/// write may land late, but only on the token it was worked out under (the script refuses it on
/// any other), so it stays acceptable until a read shows which history Redis holds (#37: two
/// lost answers in a row were taken for a Redis that forgot). Empty: none seen yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    confirmed: Option<String>,
    pending: Vec<String>,
}

impl Tokens {
    pub fn of(token: Option<String>) -> Tokens {
        Tokens { confirmed: token, pending: Vec::new() }
    }

    fn is_empty(&self) -> bool {
        self.confirmed.is_none() && self.pending.is_empty()
    }

    /// Whether `current` is a history this handle wrote (or nothing was seen yet); a handle that
    /// saw no history ([`crate::ports::NO_HISTORY`]) accepts a Redis that holds none.
    pub fn accepts(&self, current: Option<&str>) -> bool {
        let mine = |c: &str| self.confirmed.as_deref() == Some(c) || self.pending.iter().any(|t| t == c);
        self.is_empty() || current.map_or(self.confirmed.as_deref() == Some(crate::ports::NO_HISTORY), mine)
    }

    /// After a write of `token`: `known`, it is the current one; a lost answer keeps it as one
    /// that may be — or, when nothing was seen before, still accepts any.
    pub fn after(&mut self, token: String, known: bool) {
        if known {
            *self = Tokens::of(Some(token));
        } else if !self.is_empty() {
            if self.pending.len() == PENDING_MAX {
                self.pending.remove(0);
            }
            self.pending.push(token);
        }
    }

    /// A read found `current` in Redis: a write whose answer was lost that it names landed, and
    /// the others cannot any more (they were worked out under an older token). A token this
    /// handle did not write is left for the next apply to refuse (`MSGX_FORGOT`); with nothing
    /// seen yet, the first token read is where this handle starts.
    pub fn observe(&mut self, current: Option<&str>) {
        let Some(c) = current else { return };
        if self.is_empty() || self.pending.iter().any(|t| t == c) {
            *self = Tokens::of(Some(c.to_string()));
        }
    }

    /// The accepted tokens as the apply script takes them (comma-separated; empty: any).
    pub fn list(&self) -> String {
        self.confirmed.iter().chain(&self.pending).map(String::as_str).collect::<Vec<_>>().join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::Tokens;

    #[test]
    fn regression_two_lost_answers_in_a_row_are_both_this_handles_history() {
        let mut t = Tokens::of(Some("read".into()));
        t.after("first".into(), false);
        t.after("second".into(), false);
        for landed in ["read", "first", "second"] {
            assert!(t.accepts(Some(landed)), "{landed} may be what Redis holds");
        }
        assert!(!t.accepts(Some("theirs")));
        t.observe(Some("first"));
        assert!(t.accepts(Some("first")) && !t.accepts(Some("second")) && !t.accepts(Some("read")));
        assert_eq!(t.list(), "first");
    }

    #[test]
    fn an_observed_token_of_another_history_is_left_for_the_apply_to_refuse() {
        let mut t = Tokens::of(Some("mine".into()));
        t.observe(Some("theirs"));
        assert!(!t.accepts(Some("theirs")) && t.accepts(Some("mine")));
        let mut fresh = Tokens::default();
        fresh.observe(Some("there"));
        assert!(fresh.accepts(Some("there")) && !fresh.accepts(Some("other")));
    }

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
