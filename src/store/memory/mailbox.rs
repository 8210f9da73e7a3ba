//! The shared mailbox (`CMINMSGS`) and the outbound mailbox (`COUTMSGS`), in memory.

use crate::error::Store;
use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use super::{fault_controls, Shared};
use crate::domain::{InboundRow, MailboxRow};
use crate::planted::{self, Bug};
use crate::ports::{
    within_budget, MailboxMarks, MailboxScan, MailboxSubmit, MailboxTexts, Mark, Outbound, Raw, StoreResult,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemRow {
    /// The body as stored: bytes, as a `LONGBLOB` column would hold them.
    pub raw: Option<Vec<u8>>,
    pub status: String,
    pub received_at: Option<SystemTime>,
    pub processed_at: Option<SystemTime>,
    /// Allocated but not committed: invisible to readers (PRE-2).
    pub uncommitted: bool,
}

#[derive(Debug, Default)]
pub struct MailboxState {
    pub rows: BTreeMap<i64, MemRow>,
    pub processed_status: String,
    /// `mailbox.inbound.exclusive-marks`: only msgx marks rows with `processed_status`.
    pub exclusive_marks: bool,
    /// The next AUTO_INCREMENT value to hand out (0: one past the highest row).
    pub next_id: i64,
    /// Rows a text read refuses (as a view whose expression fails for one row does): a read
    /// that includes one of them is rejected whole.
    pub unreadable: std::collections::BTreeSet<i64>,
    /// Rows whose mark the mailbox refuses (a trigger): a statement that includes one is
    /// rejected whole.
    pub refuse_marks: std::collections::BTreeSet<i64>,
}

impl MailboxState {
    /// Allocates the next ID as AUTO_INCREMENT does (never reused).
    pub fn allocate(&mut self) -> i64 {
        let id = self.next_id.max(self.rows.keys().next_back().copied().unwrap_or(0) + 1);
        self.next_id = id + 1;
        id
    }
}

#[derive(Debug, Clone, Default)]
pub struct MemMailbox(pub(crate) Shared<MailboxState>);

fault_controls!(MemMailbox);

impl MemMailbox {
    pub fn new() -> Self {
        let m = Self::default();
        m.0.lock().state.processed_status = "PROCESSED".into();
        m
    }

    pub fn insert(&self, id: i64, raw: Option<&str>) {
        self.insert_bytes(id, raw.map(|r| r.as_bytes().to_vec()));
    }

    /// A row whose body is whatever bytes the column holds.
    pub fn insert_bytes(&self, id: i64, raw: Option<Vec<u8>>) {
        let row =
            MemRow { raw, status: "VALID".into(), received_at: None, processed_at: None, uncommitted: false };
        let mut c = self.0.lock();
        c.state.rows.insert(id, row);
        c.state.next_id = c.state.next_id.max(id + 1);
    }

    /// A row whose ID is allocated but whose transaction has not committed (PRE-2).
    pub fn insert_uncommitted(&self, id: i64, raw: &str) {
        self.insert(id, Some(raw));
        self.0.lock().state.rows.get_mut(&id).expect("just inserted").uncommitted = true;
    }

    /// Commits a row inserted with [`MemMailbox::insert_uncommitted`].
    pub fn commit_row(&self, id: i64) {
        if let Some(r) = self.0.lock().state.rows.get_mut(&id) {
            r.uncommitted = false;
        }
    }

    pub fn remove(&self, id: i64) {
        self.0.lock().state.rows.remove(&id);
    }

    pub fn row(&self, id: i64) -> Option<MemRow> {
        self.0.lock().state.rows.get(&id).cloned()
    }

    /// A copy of the state, for assertions.
    pub fn inspect<R>(&self, f: impl FnOnce(&MailboxState) -> R) -> R {
        f(&self.0.lock().state)
    }

    /// Changes the state as the upstream writer or the mailbox owner would.
    pub fn tamper<R>(&self, f: impl FnOnce(&mut MailboxState) -> R) -> R {
        f(&mut self.0.lock().state)
    }

    /// Marks a row with msgx's own processed status, as another system that uses the same value
    /// would (the legacy system, a shadow deployment, an operator: #37).
    pub fn mark_as_processed(&self, id: i64, at: SystemTime) {
        let mut m = self.0.lock();
        let status = m.state.processed_status.clone();
        if let Some(r) = m.state.rows.get_mut(&id) {
            r.processed_at = Some(at);
            r.status = status;
        }
    }

    /// Marks a row as another system would.
    pub fn mark_externally(&self, id: i64, at: SystemTime) {
        if let Some(r) = self.0.lock().state.rows.get_mut(&id) {
            r.processed_at = Some(at);
            r.status = "DONE-ELSEWHERE".into();
        }
    }
}

fn visible(s: &MailboxState, from: i64, to: i64) -> impl Iterator<Item = (&i64, &MemRow)> {
    // As SQL's `BETWEEN` answers: nothing when from > to.
    s.rows.range(from.min(to)..=to).filter(move |(id, r)| **id >= from && !r.uncommitted)
}

impl MailboxScan for MemMailbox {
    fn rows(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<MailboxRow>> {
        self.0.read(Store::Mailbox, |s| {
            Ok(visible(s, from, to)
                .take(limit)
                .map(|(id, r)| MailboxRow {
                    id: *id,
                    received_at: r.received_at,
                    wanted: r.processed_at.is_none() && r.status == "VALID",
                })
                .collect())
        })
    }

    fn ids_in_use(&mut self) -> StoreResult<(Option<i64>, Option<i64>)> {
        self.0.read(Store::Mailbox, |s| {
            let highest = s.rows.keys().next_back().copied();
            Ok((highest, Some(s.next_id.max(highest.map_or(1, |h| h + 1)))))
        })
    }

    fn unmarked(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<InboundRow>> {
        self.0.read(Store::Mailbox, |s| {
            Ok(visible(s, from, to)
                .filter(|(_, r)| r.processed_at.is_none() && r.status == "VALID")
                .take(limit)
                .map(|(id, r)| InboundRow { id: *id, received_at: r.received_at })
                .collect())
        })
    }
}

impl crate::ports::MailboxAudit for MemMailbox {
    fn ours(
        &mut self,
        from: i64,
        to: i64,
        limit: usize,
        marked_only: bool,
    ) -> StoreResult<Vec<crate::ports::OursRow>> {
        self.0.read(Store::Mailbox, |s| {
            Ok(visible(s, from, to)
                .filter_map(|(id, r)| {
                    let row = InboundRow { id: *id, received_at: r.received_at };
                    match r.processed_at {
                        None if r.status == "VALID" && !marked_only => {
                            Some(crate::ports::OursRow { row, marked: false, marked_at: None })
                        }
                        Some(t) if r.status == s.processed_status => {
                            Some(crate::ports::OursRow { row, marked: true, marked_at: Some(t) })
                        }
                        _ => None,
                    }
                })
                .take(limit)
                .collect())
        })
    }

    fn exclusive_marks(&self) -> bool {
        self.0.lock().state.exclusive_marks
    }
}

/// What MySQL answers a read of a row in [`MailboxState::unreadable`]: the whole statement refused.
fn unreadable(id: i64) -> crate::error::StoreError {
    crate::error::StoreError::rejected(Store::Mailbox, format!("ERROR 1644 (45000): cannot read row {id}"))
}

impl crate::ports::MailboxEntries for MemMailbox {
    fn entry(&mut self, id: i64, max_bytes: u64) -> StoreResult<Option<crate::ports::MailboxEntry>> {
        self.0.read(Store::Mailbox, |s| {
            // A row not yet committed is no row to another session, as in MySQL.
            let Some(r) = s.rows.get(&id).filter(|r| !r.uncommitted) else { return Ok(None) };
            if s.unreadable.contains(&id) {
                return Err(unreadable(id));
            }
            let text = r.raw.as_ref().filter(|b| b.len() as u64 <= max_bytes);
            Ok(Some(crate::ports::MailboxEntry {
                received_at: r.received_at,
                status: Some(r.status.clone()),
                processed_at: r.processed_at,
                text: text.map(|b| String::from_utf8_lossy(b).into_owned()),
            }))
        })
    }
}

impl MailboxTexts for MemMailbox {
    fn raws(&mut self, ids: &[i64], max_bytes: u64, budget: u64) -> StoreResult<HashMap<i64, Raw>> {
        self.0.read(Store::Mailbox, |s| {
            if let Some(bad) = ids.iter().find(|id| s.unreadable.contains(id)) {
                return Err(unreadable(*bad));
            }
            let sizes: Vec<(i64, Option<u64>)> = ids
                .iter()
                .map(|id| {
                    let body = s.rows.get(id).filter(|r| !r.uncommitted).and_then(|r| r.raw.as_ref());
                    (*id, body.map(|b| b.len() as u64))
                })
                .collect();
            let fetch = within_budget(&sizes, max_bytes, budget);
            Ok(sizes
                .iter()
                .enumerate()
                .filter_map(|(k, (id, size))| {
                    let raw = match size {
                        _ if k >= fetch => Raw::Later,
                        None => return None,
                        Some(n) if *n > max_bytes => Raw::TooLarge { bytes: *n },
                        Some(_) => Raw::Body(s.rows[id].raw.clone().expect("sized above")),
                    };
                    Some((*id, raw))
                })
                .collect())
        })
    }
}

impl MailboxMarks for MemMailbox {
    fn mark(
        &mut self,
        ids: &[i64],
        at: SystemTime,
        still_ours: &dyn Fn() -> StoreResult<()>,
    ) -> StoreResult<Vec<Mark>> {
        self.0.write(Store::Mailbox, |s| {
            // Asked before the write and before the commit, as the real transaction does; the
            // twin's write is all or nothing, so both come before it.
            still_ours()?;
            if let Some(bad) = ids.iter().find(|id| s.refuse_marks.contains(id)) {
                return Err(crate::error::StoreError::rejected(
                    Store::Mailbox,
                    format!("ERROR 1644 (45000): marks of row {bad} are refused"),
                ));
            }
            still_ours()?;
            let status = s.processed_status.clone();
            Ok(ids
                .iter()
                .map(|id| match s.rows.get_mut(id).filter(|r| !r.uncommitted) {
                    None => Mark::Missing,
                    Some(r) if r.processed_at.is_some() && !planted::on(Bug::MarkOverwritten) => {
                        Mark::AlreadyMarked
                    }
                    Some(r) => {
                        r.processed_at = Some(at);
                        r.status = status.clone();
                        Mark::Written
                    }
                })
                .collect())
        })
    }
}

impl MailboxSubmit for MemMailbox {
    fn insert(&mut self, raw: &str, at: SystemTime) -> StoreResult<i64> {
        self.0.write(Store::Mailbox, |s| {
            let id = s.allocate();
            let row = MemRow {
                raw: Some(raw.as_bytes().to_vec()),
                status: "VALID".into(),
                received_at: Some(at),
                processed_at: None,
                uncommitted: false,
            };
            s.rows.insert(id, row);
            Ok(id)
        })
    }
}

/// The outbound mailbox `COUTMSGS`, in memory.
#[derive(Debug, Clone, Default)]
pub struct MemOutbound(pub(crate) Shared<Vec<(i64, String, String, SystemTime)>>);

fault_controls!(MemOutbound);

impl MemOutbound {
    pub fn new() -> Self {
        Self::default()
    }

    /// (routing id, text) of every row, in insert order.
    pub fn rows(&self) -> Vec<(String, String)> {
        self.0.lock().state.iter().map(|(_, r, x, _)| (r.clone(), x.clone())).collect()
    }
}

impl Outbound for MemOutbound {
    fn insert(&mut self, routing_id: &str, xml: &str, at: SystemTime) -> StoreResult<i64> {
        self.0.write(Store::Mailbox, |rows| {
            let id = rows.len() as i64 + 1;
            rows.push((id, routing_id.to_string(), xml.to_string(), at));
            Ok(id)
        })
    }

    fn find(&mut self, routing_id: &str, xml: &str, since: SystemTime) -> StoreResult<Option<i64>> {
        self.0.read(Store::Mailbox, |rows| {
            Ok(rows
                .iter()
                .find(|(_, r, x, at)| r == routing_id && x == xml && *at >= since)
                .map(|(id, ..)| *id))
        })
    }
}

#[cfg(test)]
mod conformance {
    crate::mailbox_conformance_tests!((super::MemMailbox::new(), ()));
}
