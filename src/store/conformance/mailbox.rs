//! The shared-mailbox conformance suite: the same cases on the in-memory twin (unit tests) and
//! on MariaDB (`tests/mailbox_store.rs`): visibility and gaps (PRE-2), the status filter, marks
//! that only go from empty to set (INV-7), texts with their size limit and the round's budget.

use crate::error::Store;
use std::time::SystemTime;

use crate::ports::{
    MailboxEntries, MailboxMarks, MailboxScan, MailboxSubmit, MailboxTexts, Mark, Raw, StoreResult,
};

/// A mailbox for the suite, with the upstream's and the mailbox owner's hands.
pub trait MailboxTwin {
    type Store: MailboxScan + MailboxTexts + MailboxMarks + MailboxSubmit + MailboxEntries;
    fn store(&mut self) -> &mut Self::Store;
    /// A committed row as the upstream writes it (status `VALID`).
    fn put(&mut self, raw: &str) -> i64;
    /// A row whose transaction is still open (its ID allocated, invisible).
    fn put_open(&mut self, raw: &str) -> i64;
    /// Ends the open transaction: commit or roll back.
    fn end_open(&mut self, commit: bool);
    fn set_status(&mut self, id: i64, status: &str);
    /// Whether the row is marked, and its status.
    fn mark_of(&mut self, id: i64) -> (bool, String);
    /// Another system marks the row.
    fn mark_by_someone_else(&mut self, id: i64);
    /// The mailbox refuses every write of a mark on this row (a trigger of its owner's).
    fn refuse_marks_of(&mut self, id: i64);
}

impl MailboxTwin for crate::store::memory::MemMailbox {
    type Store = Self;

    fn store(&mut self) -> &mut Self {
        self
    }

    fn put(&mut self, raw: &str) -> i64 {
        let id = self.tamper(|s| s.allocate());
        crate::store::memory::MemMailbox::insert(self, id, Some(raw));
        id
    }

    fn put_open(&mut self, raw: &str) -> i64 {
        let id = self.tamper(|s| s.allocate());
        self.insert_uncommitted(id, raw);
        id
    }

    fn end_open(&mut self, commit: bool) {
        let open: Vec<i64> =
            self.inspect(|s| s.rows.iter().filter(|(_, r)| r.uncommitted).map(|(id, _)| *id).collect());
        for id in open {
            if commit {
                self.commit_row(id);
            } else {
                self.remove(id);
            }
        }
    }

    fn set_status(&mut self, id: i64, status: &str) {
        self.tamper(|s| s.rows.get_mut(&id).expect("row").status = status.to_string());
    }

    fn mark_of(&mut self, id: i64) -> (bool, String) {
        let r = self.row(id).expect("row");
        (r.processed_at.is_some(), r.status)
    }

    fn mark_by_someone_else(&mut self, id: i64) {
        self.mark_externally(id, super::t0());
    }

    fn refuse_marks_of(&mut self, id: i64) {
        self.tamper(|s| s.refuse_marks.insert(id));
    }
}

fn ids<T: MailboxTwin>(s: &mut T, from: i64, to: i64, limit: usize) -> Vec<(i64, bool)> {
    s.store().rows(from, to, limit).unwrap().iter().map(|r| (r.id, r.wanted)).collect()
}

fn at() -> SystemTime {
    super::t0()
}

/// A lease gate that is open.
fn ours() -> StoreResult<()> {
    Ok(())
}

pub fn rows_are_visible_in_id_order_and_bounded<T: MailboxTwin>(mut s: T) {
    let (a, b, c) = (s.put("<a/>"), s.put("<b/>"), s.put("<c/>"));
    assert!(a < b && b < c, "IDs grow");
    assert_eq!(ids(&mut s, 0, i64::MAX, 10), [(a, true), (b, true), (c, true)]);
    assert_eq!(ids(&mut s, 0, i64::MAX, 2), [(a, true), (b, true)], "bounded");
    assert_eq!(ids(&mut s, b, c, 10), [(b, true), (c, true)], "from and to included");
    assert!(ids(&mut s, c, b, 10).is_empty(), "nothing when from > to");
}

pub fn an_open_transaction_is_a_gap_until_it_commits<T: MailboxTwin>(mut s: T) {
    let a = s.put("<a/>");
    let x = s.put_open("<x/>");
    let c = s.put("<c/>");
    assert!(a < x && x < c, "the open row's ID is allocated between");
    assert_eq!(ids(&mut s, 0, i64::MAX, 10), [(a, true), (c, true)], "invisible while open");
    assert!(s.store().raws(&[x], 1 << 20, 1 << 20).unwrap().is_empty(), "its text too");
    s.end_open(true);
    assert_eq!(ids(&mut s, 0, i64::MAX, 10), [(a, true), (x, true), (c, true)]);
    let y = s.put_open("<y/>");
    s.end_open(false);
    assert!(ids(&mut s, 0, i64::MAX, 10).iter().all(|(id, _)| *id != y), "a rollback never shows");
    assert!(s.put("<d/>") > y, "and its ID is not reused");
}

pub fn wanted_follows_the_mark_and_the_status_filter<T: MailboxTwin>(mut s: T) {
    let (a, b, c) = (s.put("<a/>"), s.put("<b/>"), s.put("<c/>"));
    s.set_status(b, "HOLD");
    s.store().mark(&[c], at(), &ours).unwrap();
    assert_eq!(ids(&mut s, 0, i64::MAX, 10), [(a, true), (b, false), (c, false)], "still listed: not gaps");
    let unmarked: Vec<i64> = s.store().unmarked(0, i64::MAX, 10).unwrap().iter().map(|r| r.id).collect();
    assert_eq!(unmarked, [a]);
}

pub fn marks_only_go_from_empty_to_set<T: MailboxTwin>(mut s: T) {
    let (a, b, c) = (s.put("<a/>"), s.put("<b/>"), s.put("<c/>"));
    let missing = c + 1000;
    assert_eq!(
        s.store().mark(&[a, b, missing], at(), &ours).unwrap(),
        [Mark::Written, Mark::Written, Mark::Missing]
    );
    assert_eq!(s.mark_of(a), (true, "PROCESSED".to_string()));
    assert_eq!(s.store().mark(&[a], at(), &ours).unwrap(), [Mark::AlreadyMarked], "INV-7");
    s.mark_by_someone_else(c);
    let theirs = s.mark_of(c);
    assert_eq!(s.store().mark(&[c], at(), &ours).unwrap(), [Mark::AlreadyMarked]);
    assert_eq!(s.mark_of(c), theirs, "someone else's mark is left as it is");
}

/// A lease gate that closes from its `closes_at`-th check on, counting the checks in `asked`.
fn closing_at(asked: &std::cell::Cell<usize>, closes_at: usize) -> StoreResult<()> {
    asked.set(asked.get() + 1);
    if asked.get() >= closes_at {
        Err(crate::error::StoreError::fenced(Store::Lease, "taken over"))
    } else {
        Ok(())
    }
}

/// #21 items 4 and 10: a statement the mailbox refuses for one of its rows writes none of them;
/// a lease gate that closes inside the transaction — before the write or before the commit —
/// rolls it back and its error comes back.
pub fn a_refused_mark_or_a_gate_closed_inside_the_transaction_writes_nothing<T: MailboxTwin>(mut s: T) {
    let (a, b) = (s.put("<a/>"), s.put("<b/>"));
    s.refuse_marks_of(b);
    let e = s.store().mark(&[a, b], at(), &ours).unwrap_err();
    assert!(e.is_rejected(), "{e}");
    assert!(!s.mark_of(a).0, "the statement is all or nothing");
    assert_eq!(s.store().mark(&[a], at(), &ours).unwrap(), [Mark::Written], "alone it is marked");
    let c = s.put("<c/>");
    for closes_at in [1usize, 2] {
        let asked = std::cell::Cell::new(0);
        let gate = || closing_at(&asked, closes_at);
        let e = s.store().mark(&[c], at(), &gate).unwrap_err();
        assert!(e.is_fenced(), "{e}");
        assert!(!s.mark_of(c).0, "closed at check {closes_at}: rolled back");
    }
    // With a row someone else marked among them (the adapter then locks and reads the rows
    // before it writes): whichever of the gate's checks closes, nothing is written.
    let (theirs, counted) = (s.put("<t/>"), s.put("<u/>"));
    s.mark_by_someone_else(theirs);
    let asks = std::cell::Cell::new(0);
    let counting = || closing_at(&asks, usize::MAX);
    assert_eq!(
        s.store().mark(&[theirs, counted], at(), &counting).unwrap(),
        [Mark::AlreadyMarked, Mark::Written]
    );
    assert!(asks.get() >= 2, "the gate is asked before the write and before the commit");
    let d = s.put("<d/>");
    for closes_at in 1..=asks.get() {
        let asked = std::cell::Cell::new(0);
        let gate = || closing_at(&asked, closes_at);
        let e = s.store().mark(&[theirs, d], at(), &gate).unwrap_err();
        assert!(e.is_fenced(), "{e}");
        assert!(!s.mark_of(d).0, "closed at check {closes_at} of {}: rolled back", asks.get());
    }
    assert_eq!(s.store().mark(&[theirs, d], at(), &ours).unwrap(), [Mark::AlreadyMarked, Mark::Written]);
}

pub fn texts_keep_their_limit_and_the_round_budget<T: MailboxTwin>(mut s: T) {
    let small = "<m>".to_string() + &"x".repeat(100) + "</m>";
    let big = "<m>".to_string() + &"y".repeat(5000) + "</m>";
    let (a, b, c) = (s.put(&small), s.put(&big), s.put(&small));
    let missing = c + 1000;
    let got = s.store().raws(&[a, b, c, missing], 1000, 1 << 20).unwrap();
    assert_eq!(got[&a], Raw::Body(small.clone().into_bytes()));
    assert_eq!(got[&b], Raw::TooLarge { bytes: big.len() as u64 }, "over the limit: not fetched");
    assert_eq!(got[&c], Raw::Body(small.clone().into_bytes()));
    assert!(!got.contains_key(&missing), "a missing row is absent");
    let got = s.store().raws(&[a, b, c], 10_000, 150).unwrap();
    assert_eq!((&got[&b], &got[&c]), (&Raw::Later, &Raw::Later), "past the budget: later");
    assert!(matches!(got[&a], Raw::Body(_)));
    let got = s.store().raws(&[b, c], 10_000, 10).unwrap();
    assert!(matches!(got[&b], Raw::Body(_)), "the first text is always read");
    // A text larger than its share of the budget (2 000 of 6 000 bytes for three) is read when
    // the round's texts fit together, in any order of small and large.
    let got = s.store().raws(&[a, b, c], 10_000, 6000).unwrap();
    assert_eq!(got[&b], Raw::Body(big.clone().into_bytes()));
    assert_eq!(
        (&got[&a], &got[&c]),
        (&Raw::Body(small.clone().into_bytes()), &Raw::Body(small.into_bytes()))
    );
    let got = s.store().raws(&[b, a, c, missing], 5000, 6000).unwrap();
    assert_eq!(got[&b], Raw::TooLarge { bytes: big.len() as u64 }, "over the limit, whatever the budget");
    assert!(matches!((&got[&a], &got[&c]), (Raw::Body(_), Raw::Body(_))) && !got.contains_key(&missing));
}

pub fn a_submitted_message_is_an_upstream_row<T: MailboxTwin>(mut s: T) {
    let before = s.put("<a/>");
    let id = s.store().insert("<MSG>compat</MSG>", at()).unwrap();
    assert!(id > before);
    assert_eq!(ids(&mut s, id, id, 10), [(id, true)], "visible, unmarked, in the status filter");
    assert_eq!(
        s.store().raws(&[id], 1 << 20, 1 << 20).unwrap()[&id],
        Raw::Body(b"<MSG>compat</MSG>".to_vec())
    );
}

/// `msgx trace`'s mailbox half: a row's status, mark and text (only when small enough); no row
/// for an ID never committed.
pub fn an_entry_shows_the_row_its_mark_and_its_text_within_the_limit<T: MailboxTwin>(mut s: T) {
    let (a, b) = (s.put("<a>tiny</a>"), s.put(&("<b>".to_string() + &"z".repeat(2000) + "</b>")));
    let open = s.put_open("<x/>");
    let e = s.store().entry(a, 100).unwrap().expect("a committed row");
    assert_eq!(
        (e.status.as_deref(), e.processed_at, e.text.as_deref()),
        (Some("VALID"), None, Some("<a>tiny</a>"))
    );
    let e = s.store().entry(b, 100).unwrap().expect("a committed row");
    assert_eq!(e.text, None, "over the limit: the row without its text");
    assert_eq!(s.store().entry(open, 100).unwrap(), None, "an open transaction's row is no row yet");
    assert_eq!(s.store().entry(b + 1000, 100).unwrap(), None);
    s.store().mark(&[a], at(), &ours).unwrap();
    let e = s.store().entry(a, 100).unwrap().expect("a committed row");
    assert_eq!((e.status.as_deref(), e.processed_at), (Some("PROCESSED"), Some(at())), "the mark as written");
    s.end_open(false);
}

/// Expands to one `#[test]` per case; `$make` builds a fresh, empty mailbox and a guard.
#[macro_export]
macro_rules! mailbox_conformance_tests {
    ($make:expr) => {
        $crate::mailbox_conformance_tests!(@cases $make;
            rows_are_visible_in_id_order_and_bounded,
            an_open_transaction_is_a_gap_until_it_commits,
            wanted_follows_the_mark_and_the_status_filter,
            marks_only_go_from_empty_to_set,
            a_refused_mark_or_a_gate_closed_inside_the_transaction_writes_nothing,
            texts_keep_their_limit_and_the_round_budget,
            a_submitted_message_is_an_upstream_row,
            an_entry_shows_the_row_its_mark_and_its_text_within_the_limit,
        );
    };
    (@cases $make:expr; $($case:ident,)*) => {
        $(
            #[test]
            fn $case() {
                let (store, _guard) = $make;
                $crate::store::conformance::mailbox::$case(store);
            }
        )*
    };
}
