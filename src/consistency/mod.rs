//! The consistency sentinel (U25, #20): does each store still hold what it acknowledged?
//!
//! msgx loses nothing while a store is *away*; this module is for a store that comes back having
//! *forgotten* — an asynchronous replica promoted with a lost tail, a restore from a backup, a
//! Redis restarted from an older dump or emptied. Each store keeps evidence of the others:
//!
//! - own PostgreSQL is **behind** when the mailbox holds rows marked with msgx's processed status
//!   above the highest MSG_ID PostgreSQL knows, when Redis's journal holds decisions for messages
//!   PostgreSQL has no row for, or when Redis was written under a lease epoch PostgreSQL never
//!   handed out (only PostgreSQL hands them out);
//! - Redis is **behind** when it holds nothing of msgx's while PostgreSQL holds SUCCEEDED
//!   messages, when a SUCCEEDED message that changes flights has no journal entry although its
//!   entry cannot have been dropped yet (above `journal:pruned`), or when a sampled SUCCEEDED
//!   message's fields carry an older version in Redis.
//!
//! [`check`] reads the evidence through narrow ports and returns a [`Report`]; [`heal`] (module
//! `heal`) acts on it where it can be proven, else says what a person must decide. The daemon runs
//! both before its stages start and after a stage stopped on a store that forgot; `msgx verify`
//! runs the check by hand; the jobs thread runs the check on the newest messages every round.

mod heal;
pub mod stage;
#[cfg(test)]
mod tests;

pub use heal::{heal, rebuild_flights, HealError, Healed};

use std::time::SystemTime;

use log::error;

use crate::codec;
use crate::error::StoreError;
use crate::handlers::{self, View};
use crate::ports::{
    FlightAudit, FlightMarks, FlightStore, Intake, LeaseStore, MailboxAudit, MailboxTexts, Raw, RoundNeed,
    StateAudit, StoreResult,
};

/// Own PostgreSQL as the sentinel uses it.
pub trait PgSide: StateAudit + Intake + LeaseStore {}
impl<T: StateAudit + Intake + LeaseStore> PgSide for T {}
/// The shared mailbox as the sentinel uses it.
pub trait MailboxSide: MailboxAudit + MailboxTexts {}
impl<T: MailboxAudit + MailboxTexts> MailboxSide for T {}
/// Redis as the sentinel uses it.
pub trait FlightsSide: FlightAudit + FlightStore {}
impl<T: FlightAudit + FlightStore> FlightsSide for T {}

/// The three stores the sentinel compares.
pub struct Stores<'a> {
    pub pg: &'a mut dyn PgSide,
    pub mailbox: &'a mut dyn MailboxSide,
    pub flights: &'a mut dyn FlightsSide,
}

/// How many IDs a finding names (the count says the rest).
const NAMED: usize = 10;
/// How many rows, journal entries or messages one read of the check takes.
const PAGE: usize = 5_000;
/// The largest text the check reads back (as `msgx.codec.max-message-bytes` allows at most).
const TEXT_BUDGET: u64 = 64 << 20;

/// What a finding is evidence of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// Mailbox rows marked with msgx's processed status above the highest MSG_ID PostgreSQL knows.
    MarkedUnknown,
    /// Redis's journal holds decisions for messages PostgreSQL has no row for.
    JournalUnknown,
    /// Redis was written under a lease epoch above PostgreSQL's.
    EpochAhead,
    /// Redis holds nothing of msgx's while PostgreSQL holds SUCCEEDED messages.
    FlightsEmpty,
    /// SUCCEEDED messages that change flights have no journal entry (not dropped yet).
    JournalMissing,
    /// Sampled SUCCEEDED messages whose fields carry an older version in Redis.
    VersionsBehind,
    /// The daily plan's generation in Redis was advanced by an older snapshot than the newest
    /// one PostgreSQL holds SUCCEEDED.
    GenerationBehind,
}

/// Which store a finding says is behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Behind {
    Postgres,
    Redis,
}

impl Behind {
    pub fn as_str(self) -> &'static str {
        self.store().name()
    }

    pub fn store(self) -> crate::error::Store {
        match self {
            Behind::Postgres => crate::error::Store::Postgres,
            Behind::Redis => crate::error::Store::Redis,
        }
    }
}

impl FindingKind {
    pub const ALL: [FindingKind; 7] = [
        FindingKind::MarkedUnknown,
        FindingKind::JournalUnknown,
        FindingKind::EpochAhead,
        FindingKind::FlightsEmpty,
        FindingKind::JournalMissing,
        FindingKind::VersionsBehind,
        FindingKind::GenerationBehind,
    ];

    pub fn behind(self) -> Behind {
        match self {
            FindingKind::MarkedUnknown | FindingKind::JournalUnknown | FindingKind::EpochAhead => {
                Behind::Postgres
            }
            _ => Behind::Redis,
        }
    }

    /// The name in `msgx verify --json` and the counter's label.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::MarkedUnknown => "marked-unknown",
            FindingKind::JournalUnknown => "journal-unknown",
            FindingKind::EpochAhead => "epoch-ahead",
            FindingKind::FlightsEmpty => "flights-empty",
            FindingKind::JournalMissing => "journal-missing",
            FindingKind::VersionsBehind => "versions-behind",
            FindingKind::GenerationBehind => "generation-behind",
        }
    }

    fn evidence(self) -> &'static str {
        match self {
            FindingKind::MarkedUnknown => {
                "mailbox row(s) marked processed by msgx that postgres has no row for"
            }
            FindingKind::JournalUnknown => {
                "decision(s) in the Redis journal for messages postgres has no row for"
            }
            FindingKind::EpochAhead => "lease epoch(s) seen in Redis that postgres never handed out",
            FindingKind::FlightsEmpty => {
                "Redis holds nothing of msgx's while postgres holds SUCCEEDED messages"
            }
            FindingKind::GenerationBehind => {
                "the daily plan's generation was advanced by an older snapshot than the newest SUCCEEDED one"
            }
            FindingKind::JournalMissing => {
                "SUCCEEDED message(s) that change flights without their Redis journal entry"
            }
            FindingKind::VersionsBehind => {
                "sampled SUCCEEDED message(s) whose fields carry an older version in Redis"
            }
        }
    }
}

/// One kind of evidence that a store forgot, with the first few IDs and how many there are.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub store: Behind,
    pub count: usize,
    /// The first [`NAMED`] MSG_IDs (for `epoch-ahead`: Redis's epoch, then PostgreSQL's).
    pub ids: Vec<i64>,
}

impl Finding {
    fn of(kind: FindingKind, ids: &[i64]) -> Option<Finding> {
        (!ids.is_empty()).then(|| Finding {
            kind,
            store: kind.behind(),
            count: ids.len(),
            ids: ids.iter().take(NAMED).copied().collect(),
        })
    }

    /// One piece of evidence made of two values (an epoch and another, a snapshot and the one
    /// that advanced the generation).
    fn pair(kind: FindingKind, a: i64, b: i64) -> Finding {
        Finding { kind, store: kind.behind(), count: 1, ids: vec![a, b] }
    }

    /// The ERROR line that reports it.
    pub fn line(&self) -> String {
        let at = |k: usize| self.ids.get(k).copied().unwrap_or(0);
        let what = match self.kind {
            FindingKind::EpochAhead => format!("(Redis epoch {}, postgres epoch {})", at(0), at(1)),
            FindingKind::GenerationBehind => {
                format!("(snapshot MSG_ID {} SUCCEEDED, the generation's is {})", at(0), at(1))
            }
            FindingKind::FlightsEmpty => format!("(the newest: MSG_ID {})", at(0)),
            _ => {
                let ids: Vec<String> = self.ids.iter().map(i64::to_string).collect();
                let more = if self.count > self.ids.len() { " …" } else { "" };
                return format!(
                    "consistency: {} behind: {} {} (MSG_IDs {}{more})",
                    self.store.as_str(),
                    self.count,
                    self.kind.evidence(),
                    ids.join(", ")
                );
            }
        };
        format!("consistency: {} behind: {} {what}", self.store.as_str(), self.kind.evidence())
    }
}

/// What the check saw: the evidence it stood on and what it found.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// The highest MSG_ID own PostgreSQL knows and its lease epoch.
    pub pg_known_max: i64,
    pub pg_epoch: i64,
    #[serde(skip)]
    pub redis: FlightMarks,
    /// SUCCEEDED messages compared with Redis's journal, and sampled for versions.
    pub journal_checked: usize,
    pub sampled: usize,
    /// Redis has no `journal:pruned` yet (written by an older msgx, or new): the heal sets it.
    pub needs_pruned_mark: bool,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }

    pub fn behind(&self, store: Behind) -> bool {
        self.findings.iter().any(|f| f.store == store)
    }

    pub fn finding(&self, kind: FindingKind) -> Option<&Finding> {
        self.findings.iter().find(|f| f.kind == kind)
    }

    /// Every finding as an ERROR line.
    pub fn log(&self) {
        self.findings.iter().for_each(|f| error!("{}", f.line()));
    }
}

/// How much the check reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Depth {
    /// Everything the evidence covers (start-up, after a store forgot, `msgx verify`).
    Full { sample: f64 },
    /// The newest `n` SUCCEEDED messages only (the jobs thread, every round).
    Recent(usize),
}

/// Compares the stores (read only) and says which one forgot what.
///
/// The stores are read in the order that makes a race with a running pipeline impossible to
/// mistake for forgetting: a store is read *after* the one it writes after — PostgreSQL hands out
/// an epoch and enqueues a row before Redis sees them, Redis applies before PostgreSQL records
/// SUCCEEDED, PostgreSQL records it before the mailbox is marked — so evidence read from the later
/// store is always confirmed against a fresh read of the earlier one (`unknown`), and a journal
/// entry dropped meanwhile is told by a fresh `journal:pruned` (#20, found by the suite).
pub fn check(st: &mut Stores<'_>, depth: Depth) -> StoreResult<Report> {
    let redis = st.flights.audit()?;
    let mut r = Report {
        pg_known_max: st.pg.known_max()?,
        pg_epoch: st.pg.holder()?.epoch,
        redis,
        ..Default::default()
    };
    if r.redis.epoch > r.pg_epoch {
        r.findings.push(Finding::pair(FindingKind::EpochAhead, r.redis.epoch, r.pg_epoch));
    }
    let marked = marked_unknown(st, r.pg_known_max)?;
    r.findings.extend(Finding::of(FindingKind::MarkedUnknown, &marked));
    let journal = journal_unknown(st, r.pg_known_max, depth, &r.redis)?;
    r.findings.extend(Finding::of(FindingKind::JournalUnknown, &journal));
    redis_side(st, depth, &mut r)?;
    Ok(r)
}

/// Those of `ids` PostgreSQL has no row for, read now, in pages.
fn unknown_now(st: &mut Stores<'_>, ids: &[i64]) -> StoreResult<Vec<i64>> {
    let mut out = Vec::new();
    for chunk in ids.chunks(PAGE) {
        out.extend(st.pg.unknown(chunk)?);
    }
    Ok(out)
}

/// How far below the highest MSG_ID PostgreSQL knows a forgotten late row (PRE-2) is looked for.
const LATE_ROWS: i64 = 1_000;
/// A mark this much older than PostgreSQL's newest write still counts as made after it (the
/// clocks of the hosts msgx ran on).
const MARK_SLACK: std::time::Duration = std::time::Duration::from_secs(60);

/// Late rows (PRE-2) PostgreSQL forgot: below the highest MSG_ID it knows, marked with msgx's
/// status since the moment it stands at, and without a row. With Redis's journal gone too,
/// this is the only evidence of them.
pub(crate) fn late_forgotten(st: &mut Stores<'_>, known_max: i64) -> StoreResult<Vec<i64>> {
    let Some(since) = st.pg.newest_write()?.and_then(|t| t.checked_sub(MARK_SLACK)) else {
        return Ok(Vec::new());
    };
    let rows = st.mailbox.ours((known_max - LATE_ROWS).max(1), known_max, LATE_ROWS as usize, true)?;
    let ids: Vec<i64> =
        rows.iter().filter(|r| r.marked_at.is_some_and(|t| t >= since)).map(|r| r.row.id).collect();
    unknown_now(st, &ids)
}

/// Mailbox rows marked with msgx's status that PostgreSQL forgot: above the highest MSG_ID it
/// knows, and late rows below it.
fn marked_unknown(st: &mut Stores<'_>, known_max: i64) -> StoreResult<Vec<i64>> {
    let mut out = late_forgotten(st, known_max)?;
    let mut above = Vec::new();
    let mut from = known_max + 1;
    loop {
        let rows = st.mailbox.ours(from, i64::MAX, PAGE, true)?;
        above.extend(rows.iter().filter(|r| r.marked).map(|r| r.row.id));
        match rows.last() {
            Some(last) if rows.len() == PAGE => from = last.row.id + 1,
            _ => break,
        }
    }
    // Marked after `known_max` was read: PostgreSQL recorded them before; it says so now.
    out.extend(unknown_now(st, &above)?);
    out.sort_unstable();
    Ok(out)
}

/// Journal entries PostgreSQL has no row for, confirmed by a read after the journal's. The
/// newest-messages check looks at the highest MSG_ID applied only.
fn journal_unknown(
    st: &mut Stores<'_>,
    known_max: i64,
    depth: Depth,
    marks: &FlightMarks,
) -> StoreResult<Vec<i64>> {
    let ids = match depth {
        Depth::Recent(_) if marks.applied_max > known_max => vec![marks.applied_max],
        Depth::Recent(_) => return Ok(Vec::new()),
        Depth::Full { .. } => st.flights.journal_ids()?,
    };
    unknown_now(st, &ids)
}

/// The Redis-behind evidence: an empty store, missing journal entries, older versions.
fn redis_side(st: &mut Stores<'_>, depth: Depth, r: &mut Report) -> StoreResult<()> {
    let empty = r.redis.epoch == 0 && r.redis.seq == 0 && r.redis.pruned.is_none();
    if empty {
        // Evidence, not absence: a SUCCEEDED message whose text names flights.
        let recent = st.pg.succeeded_last(50)?;
        let named =
            texts(st, &recent)?.into_iter().rev().find(|(_, t)| names_flights(t.as_deref()) == Some(true));
        match named {
            Some((m, _)) => r.findings.extend(Finding::of(FindingKind::FlightsEmpty, &[m])),
            None => r.needs_pruned_mark = true,
        }
        return Ok(());
    }
    let Some(pruned) = r.redis.pruned else {
        // Written by an msgx that dropped its journal at once: no evidence to compare yet.
        r.needs_pruned_mark = true;
        return Ok(());
    };
    let succeeded = match depth {
        Depth::Full { .. } => all_succeeded_above(st, pruned)?,
        Depth::Recent(n) => st.pg.succeeded_last(n)?.into_iter().filter(|m| *m > pruned).collect(),
    };
    r.journal_checked = succeeded.len();
    let mut unjournalled = Vec::new();
    for chunk in succeeded.chunks(PAGE) {
        let has = st.flights.journal_has(chunk)?;
        unjournalled.extend(chunk.iter().zip(has).filter(|(_, h)| !h).map(|(m, _)| *m));
    }
    // An entry dropped after its keep window while the check ran is not missing.
    let pruned_now = st.flights.audit()?.pruned.unwrap_or(pruned);
    unjournalled.retain(|m| *m > pruned_now);
    let missing = changing_flights(st, &unjournalled)?;
    r.findings.extend(Finding::of(FindingKind::JournalMissing, &missing));
    // The full check only: the newest snapshot is not indexed, and between full checks a Redis
    // that went back is caught by the token at its next apply.
    let tags = snapshot_tags();
    let newest = match depth {
        Depth::Full { .. } => st.pg.newest_succeeded_of(&tags)?,
        Depth::Recent(_) => None,
    };
    if let Some(snapshot) = newest {
        let (_, advanced_by) = st.flights.generation_of()?;
        if advanced_by < snapshot {
            r.findings.push(Finding::pair(FindingKind::GenerationBehind, snapshot, advanced_by));
        }
    }
    if let Depth::Full { sample } = depth {
        let behind = sample_versions(st, sample, r)?;
        r.findings.extend(Finding::of(FindingKind::VersionsBehind, &behind));
    }
    Ok(())
}

/// The type tags of the messages that are complete snapshots of the daily plan's window (their
/// decisions advance the generation): SCHD DNLD and RESP, DFOE DFDL.
fn snapshot_tags() -> Vec<String> {
    use crate::codec::{DfoeKind, MsgKind, SchdKind};
    [MsgKind::Schd(SchdKind::Dnld), MsgKind::Schd(SchdKind::Resp), MsgKind::Dfoe(DfoeKind::Sync)]
        .iter()
        .map(|k| k.type_tag().into_owned())
        .collect()
}

fn all_succeeded_above(st: &mut Stores<'_>, after: i64) -> StoreResult<Vec<i64>> {
    let mut out: Vec<i64> = Vec::new();
    loop {
        let page = st.pg.succeeded_above(out.last().copied().unwrap_or(after), PAGE)?;
        let done = page.len() < PAGE;
        out.extend(page);
        if done {
            return Ok(out);
        }
    }
}

/// The texts of `ids` (ascending), read in pages; a missing text is absent.
pub(crate) fn texts(st: &mut Stores<'_>, ids: &[i64]) -> StoreResult<Vec<(i64, Option<String>)>> {
    let mut out = Vec::with_capacity(ids.len());
    let mut rest = ids;
    while !rest.is_empty() {
        let take = rest.len().min(500);
        let mut raws = st.mailbox.raws(&rest[..take], TEXT_BUDGET, TEXT_BUDGET)?;
        let mut read = 0;
        for m in &rest[..take] {
            match raws.remove(m) {
                Some(Raw::Later) => break,
                Some(Raw::Body(b)) => out.push((*m, codec::text_of(&b).ok().map(str::to_string))),
                _ => out.push((*m, None)),
            }
            read += 1;
        }
        rest = &rest[read.max(1)..];
    }
    Ok(out)
}

/// Those of `ids` whose message names flights or a plan window: Redis must have journalled
/// them (a decision that changes no flight is never applied there). A text that is gone
/// counts: nothing says it did not.
fn changing_flights(st: &mut Stores<'_>, ids: &[i64]) -> StoreResult<Vec<i64>> {
    let mut out = Vec::new();
    for (m, text) in texts(st, ids)? {
        if names_flights(text.as_deref()) != Some(false) {
            out.push(m);
        }
    }
    Ok(out)
}

/// Whether a message text names flights or a plan window; `None`: no text, or not decodable.
fn names_flights(text: Option<&str>) -> Option<bool> {
    let msg = codec::decode(text?).ok()?;
    Some(handlers::need_of(&msg).names_flights())
}

/// Every `1/ratio`-th SUCCEEDED message still in PROC_STATE, decided again on the flights Redis
/// holds now: a field it would set or clear whose version in Redis is older than the message
/// (and no later delete) is a write Redis lost. Deciding on today's flights cannot make a
/// message look newer than it is, so a clean store never shows a finding here.
fn sample_versions(st: &mut Stores<'_>, ratio: f64, r: &mut Report) -> StoreResult<Vec<i64>> {
    if ratio <= 0.0 {
        return Ok(Vec::new());
    }
    let stride = ((1.0 / ratio).round() as usize).max(1);
    let recent = st.pg.succeeded_last(200_000)?;
    let picked: Vec<i64> = recent.iter().rev().step_by(stride).copied().collect();
    r.sampled = picked.len();
    let mut behind = Vec::new();
    for (m, text) in texts(st, &picked)? {
        let Some(msg) = text.and_then(|t| codec::decode(&t).ok()) else { continue };
        let need = handlers::need_of(&msg);
        let read = RoundNeed { msg_ids: Vec::new(), flids: need.flids, window: need.window };
        let p = st.flights.prepare(&read, &[], SystemTime::UNIX_EPOCH)?;
        let view = View { flights: p.flights, window: p.window };
        let Ok(d) = handlers::decide(&view, &msg, m) else { continue };
        // A snapshot names its window, not its flights: read those it writes that were not read.
        let mut held = view.flights;
        let flids: Vec<String> =
            d.flights.iter().map(|c| c.flid.clone()).filter(|f| !held.contains_key(f)).collect();
        let written = RoundNeed { msg_ids: Vec::new(), flids, window: None };
        held.extend(st.flights.prepare(&written, &[], SystemTime::UNIX_EPOCH)?.flights);
        let lost = d.flights.iter().any(|c| {
            let f = held.get(&c.flid);
            let deleted = f.map_or(0, |f| f.deleted);
            let version = |name: &String| f.and_then(|f| f.versions.get(name)).copied().unwrap_or(0);
            deleted < m && c.set.iter().map(|(k, _)| k).chain(&c.clear).any(|k| version(k) < m)
        });
        if lost {
            behind.push(m);
        }
    }
    behind.sort_unstable();
    Ok(behind)
}

/// A check that could not finish: the store that did not answer.
pub fn unreachable(e: &StoreError) -> String {
    format!("consistency check not done: {e}")
}
