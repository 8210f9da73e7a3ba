//! The consistency sentinel (U25, #20): does each store still hold what it acknowledged?
//!
//! msgx loses nothing while a store is *away*; this module is for a store that comes back having
//! *forgotten* — an asynchronous replica promoted with a lost tail, a restore from a backup, a
//! Redis restarted from an older dump or emptied. Each store keeps evidence of the others, and a
//! finding is only ever *proof*: something msgx wrote that only a store that forgot can have
//! lost (#37; docs/architecture.md, "A finding is proof"):
//!
//! - own PostgreSQL is **behind** when Redis was written under a lease epoch PostgreSQL never
//!   handed out (only PostgreSQL hands them out), or when Redis holds a journal entry, or was
//!   told an outcome was committed, for a message PostgreSQL has no row for (its PENDING row
//!   came before either);
//! - Redis is **behind** when it holds nothing of msgx's while PostgreSQL holds a SUCCEEDED
//!   message whose decision Redis acknowledged, when such a message's journal entry is gone
//!   although it cannot have been dropped (above `journal:pruned`), when a sampled message's
//!   fields Redis acknowledged writing carry an older version, or when the plan's generation is
//!   below a snapshot Redis acknowledged advancing it to.
//!
//! What only *suggests* a store forgot — mailbox rows marked processed that neither PostgreSQL
//! nor Redis knows msgx settled (someone else marked them, or both stores went back together)
//! — is a [`Suspicion`]: a WARN and a counter, never a stop.
//!
//! [`check`] reads the evidence through narrow ports and returns a [`Report`]; [`heal`] (module
//! `heal`) acts on it where it can be proven, else says what a person must decide. The daemon runs
//! both before its stages start and after a stage stopped on a store that forgot; `msgx verify`
//! runs the check by hand; the sentinel stage runs the check on the newest messages.

mod ask;
mod budget;
mod heal;
pub mod rules;
pub mod stage;
#[cfg(test)]
mod tests;

pub use ask::Asking;
pub use budget::{HealBudget, HOUR};
pub use heal::{heal, heal_asking, rebuild_flights, HealError, Healed};

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use log::{error, warn};

use crate::codec;
use crate::error::StoreError;
use crate::handlers::{self, View, TOMBSTONE_KEEP};
use crate::ports::{
    FlightAudit, FlightMarks, FlightStore, HealLog, Intake, LeaseStore, MailboxAudit, MailboxTexts, Raw,
    Requests, RoundNeed, RulesJobs, StateAudit, StoreResult, SucceededRow, NO_HISTORY,
};

/// Own PostgreSQL as the sentinel uses it.
pub trait PgSide: StateAudit + Intake + LeaseStore + HealLog + Requests + RulesJobs {}
impl<T: StateAudit + Intake + LeaseStore + HealLog + Requests + RulesJobs> PgSide for T {}
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
    /// Beaten at each page read or written: a long check or heal that moves is not stuck (#54).
    pub beat: crate::stage::Beat,
    /// The shape limits the pump decoded under (`msgx.codec.max-*`, #53): a text is decoded
    /// again under the same, so a message the pump took is never left out of a check or heal.
    pub limits: codec::Limits,
    /// The rules of the instance (or command) that compares (#65): a message is decided again
    /// only under the rules that decided it.
    pub rules: std::sync::Arc<codec::Rulebook>,
}

/// How many IDs a finding names (the count says the rest).
const NAMED: usize = 10;
/// How many rows, journal entries or messages one read of the check takes.
const PAGE: usize = 5_000;
/// The largest text the check reads back (as `msgx.codec.max-message-bytes` allows at most).
const TEXT_BUDGET: u64 = 64 << 20;
/// A message is sampled for versions only this long after its outcome at most: a flight a later
/// message deleted keeps its versions (the tombstone) for `TOMBSTONE_KEEP`, and a sample of an
/// older message could find them expired — no proof of anything (#37).
const SAMPLE_WITHIN: Duration = TOMBSTONE_KEEP.saturating_sub(Duration::from_secs(3600));

/// What a finding is evidence of (each one a proof: docs/architecture.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// Redis journalled, or was told PostgreSQL committed, messages PostgreSQL has no row for.
    JournalUnknown,
    /// Mailbox rows marked with msgx's processed status, which only msgx writes
    /// (`mailbox.inbound.exclusive-marks`), that PostgreSQL has no row for.
    MarkedUnknown,
    /// Redis was written under a lease epoch above PostgreSQL's.
    EpochAhead,
    /// Redis holds nothing of msgx's while PostgreSQL holds messages Redis acknowledged.
    FlightsEmpty,
    /// SUCCEEDED messages whose journal entry Redis acknowledged have none (not dropped yet).
    JournalMissing,
    /// Sampled SUCCEEDED messages whose fields Redis acknowledged carry an older version.
    VersionsBehind,
    /// The daily plan's generation in Redis is below a snapshot Redis acknowledged advancing it
    /// to.
    GenerationBehind,
}

/// What a suspicion suggests: a WARN and a counter, never a stop (#37).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SuspicionKind {
    /// Mailbox rows marked with msgx's processed status that PostgreSQL has no row for and that
    /// Redis holds no record of msgx settling.
    MarkedUnrecorded,
}

impl SuspicionKind {
    pub const ALL: [SuspicionKind; 1] = [SuspicionKind::MarkedUnrecorded];

    /// The name in `msgx verify --json` and the counter's label.
    pub fn as_str(self) -> &'static str {
        match self {
            SuspicionKind::MarkedUnrecorded => "marked-unrecorded",
        }
    }
}

/// Something the evidence suggests and does not prove, with its IDs (one page of rows at most).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Suspicion {
    pub kind: SuspicionKind,
    /// How many (at least this many when `more`).
    pub count: usize,
    pub more: bool,
    pub ids: Vec<i64>,
}

impl Suspicion {
    /// The same suspicion for the IDs above `seen` only (`None`: nothing new).
    pub fn above(&self, seen: i64) -> Option<Suspicion> {
        let ids: Vec<i64> = self.ids.iter().copied().filter(|m| *m > seen).collect();
        (!ids.is_empty()).then(|| Suspicion { count: ids.len(), ids, ..self.clone() })
    }

    /// The WARN line that reports it (the first [`NAMED`] IDs).
    pub fn line(&self) -> String {
        let ids: Vec<String> = self.ids.iter().take(NAMED).map(i64::to_string).collect();
        let more = self.more || self.ids.len() > NAMED;
        let at_least = if self.more { "at least " } else { "" };
        let more = if more { " …" } else { "" };
        match self.kind {
            SuspicionKind::MarkedUnrecorded => format!(
                "consistency: suspicion: {at_least}{} mailbox row(s) marked processed that neither postgres nor Redis knows msgx settled (MSG_IDs {}{more}): marked by someone else, or processed by msgx before own PostgreSQL and Redis both went back; msgx leaves them alone (docs/operations.md, \"A suspicion\")",
                self.count,
                ids.join(", ")
            ),
        }
    }
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
        FindingKind::JournalUnknown,
        FindingKind::MarkedUnknown,
        FindingKind::EpochAhead,
        FindingKind::FlightsEmpty,
        FindingKind::JournalMissing,
        FindingKind::VersionsBehind,
        FindingKind::GenerationBehind,
    ];

    pub fn behind(self) -> Behind {
        match self {
            FindingKind::JournalUnknown | FindingKind::MarkedUnknown | FindingKind::EpochAhead => {
                Behind::Postgres
            }
            _ => Behind::Redis,
        }
    }

    /// The name in `msgx verify --json` and the counter's label.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::JournalUnknown => "journal-unknown",
            FindingKind::MarkedUnknown => "marked-unknown",
            FindingKind::EpochAhead => "epoch-ahead",
            FindingKind::FlightsEmpty => "flights-empty",
            FindingKind::JournalMissing => "journal-missing",
            FindingKind::VersionsBehind => "versions-behind",
            FindingKind::GenerationBehind => "generation-behind",
        }
    }

    fn evidence(self) -> &'static str {
        match self {
            FindingKind::JournalUnknown => {
                "message(s) Redis journalled, or was told postgres committed, that postgres has no row for"
            }
            FindingKind::MarkedUnknown => {
                "mailbox row(s) marked processed, which only msgx does here (mailbox.inbound.exclusive-marks), that postgres has no row for"
            }
            FindingKind::EpochAhead => "lease epoch(s) seen in Redis that postgres never handed out",
            FindingKind::FlightsEmpty => {
                "Redis holds nothing of msgx's while postgres holds SUCCEEDED messages Redis acknowledged"
            }
            FindingKind::GenerationBehind => {
                "the daily plan's generation is below a snapshot Redis acknowledged advancing it to"
            }
            FindingKind::JournalMissing => {
                "SUCCEEDED message(s) whose journal entry Redis acknowledged, without it"
            }
            FindingKind::VersionsBehind => {
                "sampled SUCCEEDED message(s) whose fields Redis acknowledged writing carry an older version"
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

/// What the check saw: the evidence it stood on, what it found, and what it only suspects.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
    pub suspicions: Vec<Suspicion>,
    /// The highest MSG_ID own PostgreSQL knows and its lease epoch.
    pub pg_known_max: i64,
    pub pg_epoch: i64,
    #[serde(skip)]
    pub redis: FlightMarks,
    /// SUCCEEDED messages whose journal entries were compared with Redis's journal, and those
    /// sampled for versions.
    pub journal_checked: usize,
    pub sampled: usize,
    /// Messages the sample would have taken that were decided under other rules than this
    /// release's (an earlier release's, or not known): never re-decided, never a finding (#52).
    pub other_rules: usize,
    /// Redis has no `journal:pruned` (new, written by an older msgx, or expired after a quiet
    /// week): no journal evidence yet; the heal sets it.
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

    pub fn suspicion(&self, kind: SuspicionKind) -> Option<&Suspicion> {
        self.suspicions.iter().find(|f| f.kind == kind)
    }

    /// Every finding as an ERROR line.
    pub fn log(&self) {
        self.findings.iter().for_each(|f| error!("{}", f.line()));
    }

    /// Every suspicion as a WARN line.
    pub fn warn(&self) {
        self.suspicions.iter().for_each(|s| warn!("{}", s.line()));
    }
}

/// How much the check reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Depth {
    /// Everything the evidence covers (start-up, after a store forgot, `msgx verify`).
    Full { sample: f64 },
    /// The newest `n` SUCCEEDED messages only (the sentinel stage, every round).
    Recent(usize),
}

/// Compares the stores (read only) and says which one forgot what, at `now`.
///
/// The stores are read in the order that makes a race with a running pipeline impossible to
/// mistake for forgetting: a store is read *after* the one it writes after — PostgreSQL hands out
/// an epoch and enqueues a row before Redis sees them, Redis applies before PostgreSQL records
/// SUCCEEDED, PostgreSQL records it before Redis is told and the mailbox is marked — so evidence
/// read from the later store is always confirmed against a fresh read of the earlier one, and
/// evidence read from the earlier one against a fresh read of the later (#20, #37).
pub fn check(st: &mut Stores<'_>, depth: Depth, now: SystemTime) -> StoreResult<Report> {
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
    let mut unknown = recorded_unknown(st, depth, &r.redis)?;
    let marked = marked_unknown(st, r.pg_known_max, depth)?;
    // A marked row Redis recorded msgx taking is proof, as any record is.
    unknown.extend(marked.recorded);
    unknown.sort_unstable();
    unknown.dedup();
    r.findings.extend(Finding::of(FindingKind::JournalUnknown, &unknown));
    if !marked.unrecorded.is_empty() {
        let (ids, more) = (marked.unrecorded, marked.more);
        // A mark is msgx's own only where no one else marks rows (#37).
        if st.mailbox.exclusive_marks() {
            r.findings.extend(Finding::of(FindingKind::MarkedUnknown, &ids));
        } else {
            r.suspicions.push(Suspicion {
                kind: SuspicionKind::MarkedUnrecorded,
                count: ids.len(),
                more,
                ids,
            });
        }
    }
    redis_side(st, depth, now, &mut r)?;
    Ok(r)
}

/// Those of `ids` PostgreSQL has no row for, read now, in pages.
fn unknown_now(st: &mut Stores<'_>, ids: &[i64]) -> StoreResult<Vec<i64>> {
    let mut out = Vec::new();
    for chunk in ids.chunks(PAGE) {
        st.beat.beat();
        out.extend(st.pg.unknown(chunk)?);
    }
    Ok(out)
}

/// Every MSG_ID Redis holds a record of (a journal entry, or PostgreSQL's outcome told), the
/// cheap check's the highest two only: what PostgreSQL must have a row for.
fn recorded_ids(st: &mut Stores<'_>, depth: Depth, marks: &FlightMarks) -> StoreResult<Vec<i64>> {
    let ids: BTreeSet<i64> = match depth {
        Depth::Recent(_) => [marks.applied_max, marks.settled_max].into_iter().filter(|m| *m > 0).collect(),
        Depth::Full { .. } => {
            let mut ids: BTreeSet<i64> = st.flights.journal_ids()?.into_iter().collect();
            ids.extend(st.flights.settled_ids()?);
            ids.extend([marks.applied_max, marks.settled_max].into_iter().filter(|m| *m > 0));
            ids
        }
    };
    Ok(ids.into_iter().collect())
}

/// What Redis holds a record of that PostgreSQL has no row for, confirmed by a read after
/// Redis's (its PENDING row came before the record, so only a PostgreSQL that went back lacks
/// it).
fn recorded_unknown(st: &mut Stores<'_>, depth: Depth, marks: &FlightMarks) -> StoreResult<Vec<i64>> {
    let ids = recorded_ids(st, depth, marks)?;
    unknown_now(st, &ids)
}

/// How far below the highest MSG_ID PostgreSQL knows a forgotten late row (PRE-2) is looked for.
const LATE_ROWS: i64 = 1_000;
/// A mark this much older than PostgreSQL's newest write still counts as made after it (the
/// clocks of the hosts msgx ran on).
const MARK_SLACK: Duration = Duration::from_secs(60);

/// Late rows (PRE-2) below the highest MSG_ID PostgreSQL knows, marked with msgx's status since
/// the moment it stands at.
pub(crate) fn late_marked(st: &mut Stores<'_>, known_max: i64) -> StoreResult<Vec<i64>> {
    let Some(since) = st.pg.newest_enqueue()?.and_then(|t| t.checked_sub(MARK_SLACK)) else {
        return Ok(Vec::new());
    };
    let late = st.mailbox.ours((known_max - LATE_ROWS).max(1), known_max, LATE_ROWS as usize, true)?;
    Ok(late.iter().filter(|r| r.marked_at.is_some_and(|t| t >= since)).map(|r| r.row.id).collect())
}

/// Mailbox rows marked with msgx's status that PostgreSQL has no row for.
struct Marked {
    /// Those Redis holds a record of msgx taking: proof.
    recorded: Vec<i64>,
    /// Those it holds none of: proof only where no one else marks rows.
    unrecorded: Vec<i64>,
    /// Whether there may be more (one page of rows is read).
    more: bool,
}

/// Mailbox rows marked with msgx's status that PostgreSQL has no row for — above the highest
/// MSG_ID it knows (one page at most), and late rows below it — split by whether Redis holds a
/// record of msgx taking them.
fn marked_unknown(st: &mut Stores<'_>, known_max: i64, depth: Depth) -> StoreResult<Marked> {
    let mut marked = late_marked(st, known_max)?;
    let above = st.mailbox.ours(known_max + 1, i64::MAX, PAGE, true)?;
    let more = above.len() == PAGE;
    marked.extend(above.iter().filter(|r| r.marked).map(|r| r.row.id));
    let mut out = Marked { recorded: Vec::new(), unrecorded: Vec::new(), more };
    if marked.is_empty() {
        return Ok(out);
    }
    // Read after the mailbox: a mark comes after PostgreSQL's outcome and Redis's record.
    let unknown = unknown_now(st, &marked)?;
    let recorded = match depth {
        Depth::Full { .. } => {
            let mut all: BTreeSet<i64> = st.flights.journal_ids()?.into_iter().collect();
            all.extend(st.flights.settled_ids()?);
            unknown.iter().map(|m| all.contains(m)).collect()
        }
        Depth::Recent(_) => st.flights.recorded(&unknown)?,
    };
    for (m, r) in unknown.into_iter().zip(recorded) {
        if r {
            out.recorded.push(m)
        } else {
            out.unrecorded.push(m)
        }
    }
    Ok(out)
}

/// The Redis-behind evidence: an empty store, missing journal entries, a generation behind,
/// older versions.
fn redis_side(st: &mut Stores<'_>, depth: Depth, now: SystemTime, r: &mut Report) -> StoreResult<()> {
    if is_empty(&r.redis) {
        return empty_store(st, r);
    }
    let Some(pruned) = r.redis.pruned else {
        // No journal evidence: the heal (or the next apply) starts it.
        r.needs_pruned_mark = true;
        return Ok(());
    };
    let rows = match depth {
        Depth::Full { .. } => all_succeeded_above(st, pruned)?,
        Depth::Recent(n) => st.pg.succeeded_last(n)?.into_iter().filter(|m| m.msg_id > pruned).collect(),
    };
    // Only a message whose entry Redis acknowledged is owed one.
    let journalled: Vec<i64> = rows.iter().filter(|m| m.record.is_some()).map(|m| m.msg_id).collect();
    r.journal_checked = journalled.len();
    let mut missing = Vec::new();
    for chunk in journalled.chunks(PAGE) {
        st.beat.beat();
        let has = st.flights.journal_has(chunk)?;
        missing.extend(chunk.iter().zip(has).filter(|(_, h)| !h).map(|(m, _)| *m));
    }
    // An entry dropped after its keep window while the check ran is not missing.
    let pruned_now = st.flights.audit()?.pruned.unwrap_or(pruned);
    missing.retain(|m| *m > pruned_now);
    r.findings.extend(Finding::of(FindingKind::JournalMissing, &missing));
    if let Depth::Full { sample } = depth {
        generation_behind(st, r)?;
        let behind = sample_versions(st, sample, now, r)?;
        r.findings.extend(Finding::of(FindingKind::VersionsBehind, &behind));
    }
    Ok(())
}

/// Redis holds no write of flights msgx made (`applied:seq`, which every apply and restore
/// counts and nothing else resets). A lease epoch, the journal's marks and the outcomes told
/// are no such write: a new holder claims the flights before the stores are compared, and a
/// pump tells Redis what it takes and settles before it finds Redis forgot.
fn is_empty(m: &FlightMarks) -> bool {
    m.seq == 0
}

/// An empty Redis is behind when PostgreSQL holds a SUCCEEDED message whose decision Redis
/// acknowledged — archived ones too: a Redis emptied after a quiet day, every message archived,
/// is found as well (found by the simulator, seed 973 of 3000) — confirmed by a read of Redis
/// after PostgreSQL's (a first apply may have just landed).
fn empty_store(st: &mut Stores<'_>, r: &mut Report) -> StoreResult<()> {
    match st.pg.newest_recorded()? {
        Some(m) if is_empty(&st.flights.audit()?) => {
            r.findings.extend(Finding::of(FindingKind::FlightsEmpty, &[m]))
        }
        Some(_) => {}
        None => r.needs_pruned_mark = true,
    }
    Ok(())
}

/// The plan's generation below a snapshot Redis acknowledged advancing it to — confirmed by a
/// read of Redis after PostgreSQL's (the snapshot may have been applied and recorded meanwhile).
fn generation_behind(st: &mut Stores<'_>, r: &mut Report) -> StoreResult<()> {
    let (_, advanced_by) = st.flights.generation_of()?;
    let Some(snapshot) = st.pg.generation_above(advanced_by)? else { return Ok(()) };
    let (_, now_by) = st.flights.generation_of()?;
    if now_by < snapshot {
        r.findings.push(Finding::pair(FindingKind::GenerationBehind, snapshot, now_by));
    }
    Ok(())
}

fn all_succeeded_above(st: &mut Stores<'_>, after: i64) -> StoreResult<Vec<SucceededRow>> {
    let mut out: Vec<SucceededRow> = Vec::new();
    loop {
        st.beat.beat();
        let page = st.pg.succeeded_above(out.last().map_or(after, |m| m.msg_id), PAGE)?;
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
        st.beat.beat();
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

/// Every `1/ratio`-th SUCCEEDED message still in PROC_STATE whose fields Redis acknowledged
/// writing within [`SAMPLE_WITHIN`], decided again on the flights Redis holds now: a field it
/// sets or clears whose version in Redis is older than the message (and no later delete) is a
/// write Redis lost. Redis wrote those fields at version MSG_ID; only a newer message, or a
/// delete whose tombstone outlives the window, replaces them — and deciding on today's flights
/// cannot make a message look newer than it is, so a clean store never shows a finding here.
/// A message that changed nothing (no record), a snapshot not newer than the plan, and one
/// whose decision was reused from the journal are not sampled: Redis never acknowledged their
/// fields (#37).
fn sample_versions(
    st: &mut Stores<'_>,
    ratio: f64,
    now: SystemTime,
    r: &mut Report,
) -> StoreResult<Vec<i64>> {
    if ratio <= 0.0 {
        return Ok(Vec::new());
    }
    let stride = ((1.0 / ratio).round() as usize).max(1);
    let since = now.checked_sub(SAMPLE_WITHIN).unwrap_or(SystemTime::UNIX_EPOCH);
    let recent = st.pg.succeeded_last(200_000)?;
    let written = recent.iter().rev().filter(|m| m.record.is_some_and(|x| x.wrote_fields()) && m.at >= since);
    // Only under the rules that decided it (#52): today's rules may decide an earlier release's
    // message otherwise (a mapping added since), which proves nothing about a store.
    let (ours, other): (Vec<&SucceededRow>, Vec<&SucceededRow>) =
        written.partition(|m| st.rules.decided(m.rules));
    r.other_rules = other.len();
    let picked: Vec<i64> = ours.into_iter().step_by(stride).map(|m| m.msg_id).collect();
    let mut picked = picked;
    picked.sort_unstable();
    r.sampled = picked.len();
    let mut behind = Vec::new();
    for (m, text) in texts(st, &picked)? {
        let Some(msg) = text.and_then(|t| codec::decode_with(&t, &st.limits, &st.rules).ok()) else {
            continue;
        };
        let need = handlers::need_of(&msg);
        let read =
            RoundNeed { msg_ids: Vec::new(), flids: need.flids, window: need.window, ..Default::default() };
        let p = st.flights.prepare(&read, &[], SystemTime::UNIX_EPOCH)?;
        let view = View { flights: p.flights, window: p.window };
        let Ok(d) = handlers::decide(&view, &msg, m) else { continue };
        // A snapshot names its window, not its flights: read those it writes that were not read.
        let mut held = view.flights;
        let flids: Vec<String> =
            d.flights.iter().map(|c| c.flid.clone()).filter(|f| !held.contains_key(f)).collect();
        let written = RoundNeed { flids, ..Default::default() };
        held.extend(st.flights.prepare(&written, &[], SystemTime::UNIX_EPOCH)?.flights);
        // Behind where Redis holds another value than the message left, at an older version. A
        // value it holds already (restated, or a clear of a field already empty) proves nothing:
        // a heal that laid the message on as its events announced it — another release's heal
        // (#52) — moved no version for what no event said. Nor does the FFID: an event carries
        // it beside its changes, and a record whose only news is its FFID announces nothing, so
        // such a heal cannot bring it back (#65, the fleet's seed 14311: a false alarm).
        let lost = d.flights.iter().any(|c| {
            let f = held.get(&c.flid);
            let deleted = f.map_or(0, |f| f.deleted);
            let version = |name: &String| f.and_then(|f| f.versions.get(name)).copied().unwrap_or(0);
            let value = |name: &String| f.and_then(|f| f.fields.get(name));
            let set = c.set.iter().any(|(k, v)| k != "FFID" && version(k) < m && value(k) != Some(v));
            let cleared = c.clear.iter().any(|k| version(k) < m && value(k).is_some());
            deleted < m && (set || cleared)
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

/// What a consistency pass before the stages run needs to know besides the stores.
#[derive(Debug, Clone)]
pub struct PassPolicy {
    /// The lease epoch the pass runs under (its heal is recorded with it).
    pub epoch: i64,
    pub sample: f64,
    pub budget: HealBudget,
    /// How a heal asks the AODB for what the mailbox no longer holds (#41); `None`: it stops
    /// for a person instead.
    pub asking: Option<Asking>,
}

/// How a consistency pass ended.
#[derive(Debug)]
pub enum Pass {
    /// The stores agree, after a heal if one was needed: the token of Redis's last write
    /// (where the pump's handle starts), the first report and what the heal did.
    Agreed { token: Option<String>, report: Box<Report>, healed: Option<Healed> },
    /// A store did not answer: an outage, never a heal.
    Away(StoreError),
    /// A store refused in a way that stops the stages (it forgot, or this instance is fenced).
    Stopped(StoreError),
    /// The evidence is not enough, the heal budget is spent, or the stores still disagree
    /// after a heal: what a person must decide (exit 6).
    Person(String),
}

/// The consistency pass the daemon and the simulator run before an instance's stages start
/// (U25, #20, #37): the check in full; when it found something, the heal budget asked, the
/// heal, the heal recorded when it changed something, and the check again. Logs its findings
/// (ERROR), suspicions (WARN) and outcome; the caller decides what the outcome means for the
/// instance.
pub fn pass(st: &mut Stores<'_>, policy: PassPolicy, now: SystemTime) -> Pass {
    let report = match check(st, Depth::Full { sample: policy.sample }, now) {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    report.warn();
    if report.is_clean() {
        let asked = match policy.asking.as_ref().filter(|_| report.redis.seq == 0) {
            Some(a) => ask::on_empty(st, a, now),
            None => Ok(None),
        };
        return match asked.and_then(|_| heal(st, &report, now)) {
            Ok(_) => {
                let token = report.redis.token.clone();
                agreed(st, token, report, None, now)
            }
            Err(e) => healing_failed(e),
        };
    }
    report.log();
    match st.pg.heals_since(HealBudget::since(now)) {
        Ok(recent) => {
            if let Err(why) = policy.budget.allows(&recent, now) {
                error!("consistency: not healed: {why}");
                return Pass::Person(why);
            }
        }
        Err(e) => return failed(e),
    }
    let healed = match heal_asking(st, &report, now, policy.asking.as_ref()) {
        Ok(h) => h,
        Err(e) => return healing_failed(e),
    };
    if healed.changed() {
        let record = crate::ports::HealRecord {
            at: now,
            epoch: policy.epoch,
            store: healed.store(),
            summary: healed.summary(),
        };
        if let Err(e) = st.pg.record_heal(&record) {
            warn!("consistency: the heal was not recorded in the heal log ({e}); it does not count against the budget");
        }
    }
    let after = match check(st, Depth::Full { sample: policy.sample }, now) {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    if let Some(f) = after.findings.first() {
        after.log();
        error!("consistency: still behind after healing; a person must decide (docs/operations.md)");
        return Pass::Person(f.line());
    }
    log::info!("consistency: healed; the stores agree again");
    agreed(st, after.redis.token, report, Some(healed), now)
}

/// The stores agree: the job of this instance's rules `msgx rules apply` asked for, if one is
/// open, runs now, before the stages start (#65); the pump's handle starts from the token of
/// Redis's last write — the job's, when it wrote.
fn agreed(
    st: &mut Stores<'_>,
    token: Option<String>,
    report: Report,
    healed: Option<Healed>,
    now: SystemTime,
) -> Pass {
    let token = match rules::run_open(st, now) {
        Ok(Some(rules::Ran::Done { wrote: true, .. })) => match st.flights.audit() {
            Ok(marks) => marks.token,
            Err(e) => return failed(e),
        },
        Ok(_) => token,
        Err(e) => return failed(e),
    };
    let token = Some(token.unwrap_or_else(|| NO_HISTORY.into()));
    Pass::Agreed { token, report: Box::new(report), healed }
}

/// A heal that did not finish: a store away is an outage; not enough evidence is a person's.
fn healing_failed(e: HealError) -> Pass {
    match e {
        HealError::Person(why) => {
            error!("consistency: not healed: {why}");
            Pass::Person(why)
        }
        HealError::Store(e) => failed(e),
    }
}

/// A store error during the pass: away (waited out), stopping (forgot, fenced), or a refusal a
/// person must look at.
fn failed(e: StoreError) -> Pass {
    if e.is_unavailable() {
        Pass::Away(e)
    } else if e.stops() {
        Pass::Stopped(e)
    } else {
        error!("consistency: not healed: {e}");
        Pass::Person(e.to_string())
    }
}
