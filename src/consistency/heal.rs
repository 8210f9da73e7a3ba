//! Healing a store that forgot, where the evidence proves what to do (#20); otherwise an error
//! that says what a person must decide. Never a guess.
//!
//! - **PostgreSQL behind**: every message Redis holds a record of (a journal entry, an outcome
//!   told) that PostgreSQL has no row for is enqueued again, its mark ignored, with the mailbox
//!   rows not marked yet up to the highest of them; the pump then processes them in MSG_ID
//!   order, reusing each decision Redis already applied (its journal, I2), so the outbox gets the
//!   same events under the same identities. The watermark moves to the highest of them, never
//!   past a row msgx had not processed (the poller's commit grace stays in force above it,
//!   §4.9). Proven only while the journal still holds every decision above the first forgotten
//!   row (`journal:pruned` below it). A marked row without such a record is enqueued only where
//!   no one but msgx marks rows (`mailbox.inbound.exclusive-marks`): else someone else marked it.
//! - **Redis behind**: the flights are rebuilt from the mailbox texts of the SUCCEEDED messages
//!   in MSG_ID order through the same pure handlers, on top of what Redis still holds (field
//!   versions make a message already there change nothing), and written whole — Redis only, no
//!   new events; each journal entry Redis acknowledged and lost is written again with the events
//!   its message made. Proven only while the mailbox still holds every text.
//! - **History is never re-interpreted** (#52). A message is decided again only under the rules
//!   that decided it (`PROC_STATE.RULES_VERSION` = the version of the rulebook the healing instance carries,
//!   `Stores::rules`, #65):
//!   the golden decisions prove the same rules give the same decision. A message decided under
//!   other rules (an earlier release's, or not known) is laid on as it was *announced*: the
//!   changes its `KAFKA:msg` events carry, so Redis holds what a consumer that applied every
//!   event holds — a field the newer rules read into its text (a vendor element the older
//!   release skipped) is not made up. One that announced nothing (its events held above
//!   `OUTBOX_PRUNED`, none there) changes nothing. Decided again under today's rules, counted
//!   and named in a WARN and the heal's summary, are only those whose announcement cannot be
//!   read back: a daily-plan snapshot (its `KAFKA:schd` rows hold the newest record per
//!   flight, not each message's), and a message whose events retention may have taken.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use log::{info, warn};

use super::ask::{self, Asking};
use super::{texts, unknown_now, Behind, FindingKind, Report, Stores};
use crate::codec;
use crate::domain::{InboundRow, NewEvent, RedisRecord, Target};
use crate::error::StoreError;
use crate::handlers::plan::Replay;
use crate::handlers::{self, Decision, FlightState, View};
use crate::ports::{Restore, RoundNeed, SucceededRow};
use crate::requests::Request;

/// Why a heal did not happen.
#[derive(Debug, thiserror::Error)]
pub enum HealError {
    /// A store did not answer or refused: try again later.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The evidence is not enough: what a person must decide.
    #[error("{0}")]
    Person(String),
}

/// What a heal did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Healed {
    /// PostgreSQL: rows enqueued again, how many of them were marked, and their MSG_ID range.
    pub enqueued: usize,
    pub marked: usize,
    pub range: Option<(i64, i64)>,
    /// Redis: flights written, journal entries written again, from how many messages, from
    /// which MSG_ID.
    pub flights: usize,
    pub journal: usize,
    pub messages: usize,
    pub from: Option<i64>,
    /// Requests to the AODB for the windows whose texts are gone (#41): their REQ_IDs.
    pub asked: Vec<i64>,
    /// Messages decided under other rules than this release's (#52): how they were laid on.
    pub other: OtherRules,
}

/// How a rebuild laid on the messages decided under rules other than this release's (#52,
/// module documentation): as announced, or — their announcement not readable — decided again
/// under today's rules (the first few named).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtherRules {
    /// The version of the rules they were decided again under: the healing instance's.
    pub rules: u32,
    pub announced: usize,
    pub redecided: usize,
    pub first_redecided: Vec<i64>,
}

impl OtherRules {
    /// How message `m`, decided under other rules, is laid on: `d` is today's decision of its
    /// text, `events` what the outbox holds of what it announced, `held` whether the outbox
    /// holds every event it wrote (above `OUTBOX_PRUNED`).
    fn lay(&mut self, m: i64, d: Decision, events: &[NewEvent], held: bool) -> Decision {
        let plan = d.snapshot || d.events.iter().any(|e| e.target == Target::KafkaSchd);
        if !plan {
            if events.iter().any(|e| e.target == Target::KafkaMsg) {
                match handlers::announced(events) {
                    Ok(flights) => {
                        self.announced += 1;
                        return Decision { flights, ..Default::default() };
                    }
                    Err(e) => warn!(
                        "rebuild: msg_id={m}: {}; decided again under today's rules",
                        crate::logline::Quoted(&e.to_string())
                    ),
                }
            } else if d.events.is_empty() {
                // Today's rules announce nothing of it either: no consumer holds otherwise.
                return d;
            } else if held {
                self.announced += 1;
                return Decision::default();
            }
        }
        self.redecided += 1;
        if self.first_redecided.len() < 10 {
            self.first_redecided.push(m);
        }
        d
    }

    fn line(&self) -> Option<String> {
        (self.announced + self.redecided > 0).then(|| {
            format!(
                "{} message(s) decided under other rules laid on as announced, {} decided again under rules {}",
                self.announced,
                self.redecided,
                self.rules
            )
        })
    }
}

impl Healed {
    /// Whether the heal changed any store (what the heal budget counts).
    pub fn changed(&self) -> bool {
        self.enqueued > 0 || self.flights > 0 || self.journal > 0 || !self.asked.is_empty()
    }

    /// One line for the heal log and `msgx status`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some((a, b)) = self.range {
            parts.push(format!("{} row(s) enqueued again (MSG_ID {a}..{b})", self.enqueued));
        }
        if self.flights > 0 || self.journal > 0 {
            parts.push(format!(
                "{} flight(s) and {} journal entry(ies) rebuilt from MSG_ID {}",
                self.flights,
                self.journal,
                self.from.unwrap_or(0)
            ));
        }
        parts.extend(self.other.line());
        if !self.asked.is_empty() {
            let ids: Vec<String> = self.asked.iter().map(i64::to_string).collect();
            parts.push(format!(
                "the AODB asked for {} window(s) whose texts are gone (req_id {})",
                ids.len(),
                ids.join(", ")
            ));
        }
        parts.join("; ")
    }

    /// The store a heal's record names: PostgreSQL when it enqueued rows (it heals first).
    pub fn store(&self) -> crate::error::Store {
        if self.enqueued > 0 {
            crate::error::Store::Postgres
        } else {
            crate::error::Store::Redis
        }
    }
}

/// Heals what `report` found, PostgreSQL first (the rebuild reads its SUCCEEDED messages); a
/// text gone from the mailbox is a person's to decide.
pub fn heal(st: &mut Stores<'_>, report: &Report, now: SystemTime) -> Result<Healed, HealError> {
    heal_asking(st, report, now, None)
}

/// As [`heal`]; with `asking`, a text gone from the mailbox makes the heal ask the AODB for its
/// flights' windows instead (`ask`, #41).
pub fn heal_asking(
    st: &mut Stores<'_>,
    report: &Report,
    now: SystemTime,
    asking: Option<&Asking>,
) -> Result<Healed, HealError> {
    let mut healed = Healed::default();
    if report.behind(Behind::Postgres) {
        heal_postgres(st, report, now, &mut healed)?;
    }
    if report.behind(Behind::Redis) {
        let empty = report.finding(FindingKind::FlightsEmpty).is_some();
        let from = if empty {
            0
        } else {
            [FindingKind::JournalMissing, FindingKind::VersionsBehind, FindingKind::GenerationBehind]
                .iter()
                .filter_map(|k| report.finding(*k).and_then(|f| f.ids.first().copied()))
                .min()
                .unwrap_or(0)
        };
        let how = How { only: None, write: true, asking };
        let Rebuilt { flights, journal, messages, asked, other } = rebuild(st, from, &how, now)?;
        if empty {
            // Nothing of the old journal is there: everything up to now counts as dropped.
            let top = st.pg.succeeded_last(1)?.first().map_or(0, |m| m.msg_id);
            st.flights.set_pruned(top)?;
        }
        let rules = other.line().map(|l| format!("; {l}")).unwrap_or_default();
        info!("healed redis: {flights} flight(s) and {journal} journal entry(ies) rebuilt from {messages} SUCCEEDED message(s) from MSG_ID {from}{rules}");
        (healed.flights, healed.journal, healed.messages, healed.from, healed.other) =
            (flights, journal, messages, Some(from), other);
        healed.asked = asked.iter().map(|r| r.req_id).collect();
    }
    if report.needs_pruned_mark && !report.behind(Behind::Redis) {
        let top = st.pg.succeeded_last(1)?.first().map_or(0, |m| m.msg_id);
        st.flights.set_pruned(top)?;
        info!("consistency: the Redis journal is kept from now on (journal:pruned set to {top})");
    }
    Ok(healed)
}

/// Enqueues again, ignoring their marks, the messages PostgreSQL forgot (module documentation).
fn heal_postgres(
    st: &mut Stores<'_>,
    report: &Report,
    now: SystemTime,
    healed: &mut Healed,
) -> Result<(), HealError> {
    let known = report.pg_known_max;
    let (by_redis, proven) = forgotten(st, known)?;
    let Some(top) = proven.last().copied() else { return Ok(()) };
    let span = Span::read(st, known, top, &proven)?;
    // Deciding a row again is the same decision only for a row Redis still holds a record of
    // (its journal entry, or an outcome that needed none), or one never settled: a row at or
    // below `journal:pruned` may have been settled and its record dropped — deciding it again
    // could publish different events (and a mark there may be msgx's own).
    let pruned = report.redis.pruned;
    let doubtful = span.seen.iter().chain(&proven).copied().filter(|m| !by_redis.contains(m)).min();
    if let Some(first) = doubtful.filter(|f| pruned.is_none_or(|p| *f <= p)) {
        return Err(HealError::Person(format!(
            "postgres lost the outcome of mailbox rows from MSG_ID {first} on ({} proven, up to MSG_ID {top}), and the Redis journal no longer holds every decision above MSG_ID {} (redis.journal-keep): processing them again would decide them on today's flight state and could publish different events. A person must decide: restore own PostgreSQL from a newer backup, or accept deciding them again",
            proven.len(),
            pruned.map_or("?".to_string(), |p| p.to_string())
        )));
    }
    let rows = span.rows;
    let watermark = st.pg.watermark()?;
    for chunk in rows.chunks(1_000) {
        // Never past a row msgx had not processed: the highest proven row at most.
        let wm = chunk.last().map_or(watermark, |r| r.id).min(top).max(watermark);
        st.pg.enqueue(chunk, Some(wm), now)?;
    }
    if let (Some(a), Some(b)) = (rows.first(), rows.last()) {
        healed.range = Some((a.id, b.id));
        info!(
            "healed postgres: {} mailbox row(s) enqueued again from MSG_ID {} to {} ({} of them marked processed before); each is processed again in MSG_ID order, a decision Redis already applied is reused with its events",
            rows.len(),
            a.id,
            b.id,
            span.marked
        );
    }
    if span.foreign > 0 {
        warn!("consistency: {} mailbox row(s) up to MSG_ID {top} are marked processed without a record that msgx settled them; left alone", span.foreign);
    }
    (healed.enqueued, healed.marked) = (rows.len(), span.marked);
    Ok(())
}

/// What PostgreSQL forgot that msgx settled: what Redis holds a record of (a journal entry, an
/// outcome told, its highest MSG_IDs) and PostgreSQL has no row for; and those with the marks
/// where only msgx marks rows (#37).
fn forgotten(st: &mut Stores<'_>, known: i64) -> Result<(BTreeSet<i64>, BTreeSet<i64>), HealError> {
    let mut recorded: BTreeSet<i64> = st.flights.journal_ids()?.into_iter().collect();
    recorded.extend(st.flights.settled_ids()?);
    let marks = st.flights.audit()?;
    recorded.extend([marks.applied_max, marks.settled_max].into_iter().filter(|m| *m > 0));
    let recorded: Vec<i64> = recorded.into_iter().collect();
    let by_redis: BTreeSet<i64> = unknown_now(st, &recorded)?.into_iter().collect();
    let mut proven = by_redis.clone();
    if st.mailbox.exclusive_marks() {
        let mut marked = marked_above(st, known)?;
        marked.extend(super::late_marked(st, known)?);
        proven.extend(unknown_now(st, &marked)?);
    }
    Ok((by_redis, proven))
}

/// The mailbox rows from the highest MSG_ID PostgreSQL knows to the highest forgotten one.
struct Span {
    /// To enqueue again, in MSG_ID order: each one proven forgotten, or not marked yet (not
    /// processed, or processed and not marked: its record is then there unless dropped); and
    /// the proven late rows below.
    rows: Vec<InboundRow>,
    /// Every row of the span the mailbox holds for msgx, marked or not.
    seen: Vec<i64>,
    /// Rows enqueued that were marked; marked rows left alone (someone else marked them).
    marked: usize,
    foreign: usize,
}

impl Span {
    fn read(st: &mut Stores<'_>, known: i64, top: i64, proven: &BTreeSet<i64>) -> Result<Span, HealError> {
        let mut span = Span { rows: Vec::new(), seen: Vec::new(), marked: 0, foreign: 0 };
        let mut from = known + 1;
        while from <= top {
            st.beat.beat();
            let page = st.mailbox.ours(from, top, 5_000, false)?;
            for r in &page {
                span.seen.push(r.row.id);
                match (proven.contains(&r.row.id), r.marked) {
                    (true, m) => {
                        span.marked += usize::from(m);
                        span.rows.push(r.row);
                    }
                    (false, false) => span.rows.push(r.row),
                    (false, true) => span.foreign += 1,
                }
            }
            match page.last() {
                Some(last) if page.len() == 5_000 => from = last.row.id + 1,
                _ => break,
            }
        }
        // Proven rows the read above did not cover (late rows below the highest known).
        let listed: BTreeSet<i64> = span.rows.iter().map(|r| r.id).collect();
        let late = proven.iter().filter(|m| !listed.contains(m));
        span.rows.extend(late.map(|id| InboundRow { id: *id, received_at: None }));
        span.rows.sort_by_key(|r| r.id);
        Ok(span)
    }
}

/// Every mailbox row marked with msgx's status above `known`, in pages.
fn marked_above(st: &mut Stores<'_>, known: i64) -> Result<Vec<i64>, HealError> {
    let (mut out, mut from) = (Vec::new(), known + 1);
    loop {
        st.beat.beat();
        let page = st.mailbox.ours(from, i64::MAX, 5_000, true)?;
        out.extend(page.iter().map(|r| r.row.id));
        match page.last() {
            Some(last) if page.len() == 5_000 => from = last.row.id + 1,
            _ => return Ok(out),
        }
    }
}

/// Rebuilds flights from the SUCCEEDED messages from MSG_ID `from` on, on top of what Redis
/// holds, and writes those that changed — only `only`'s when given. Only what the messages read
/// is read from Redis (the flights they name, a snapshot's window), once each: a heal costs the
/// messages since its evidence, not every flight ever held (#38). With `write` false nothing is
/// written (`msgx rebuild-flights` without `--yes`).
fn rebuild(st: &mut Stores<'_>, from: i64, how: &How<'_>, now: SystemTime) -> Result<Rebuilt, HealError> {
    let (only, write) = (how.only, how.write);
    let pruned = st.flights.audit()?.pruned;
    let mut replay = Rebuild::new(st, None)?;
    let generation = replay.plan.generation;
    let (journal, messages, gone) = replay_onto(st, &mut replay, from, pruned, how.asking.is_some())?;
    let asked = match how.asking {
        Some(a) if !gone.is_empty() && write => ask::for_gone(st, &mut replay, a, &gone, now)?,
        _ => Vec::new(),
    };
    let Rebuild { plan, seed, other, .. } = replay;
    if other.redecided > 0 {
        warn!(
            "rebuild: {} message(s) decided under other rules were decided again under this release's (RULES_VERSION {}), first msg_id={:?}: what they announced cannot be read back (a daily-plan snapshot, or events past msgx.pipeline.event-retention)",
            other.redecided,
            other.rules,
            other.first_redecided
        );
    }
    let changed: Vec<(String, FlightState, Option<i64>)> = plan
        .flights
        .iter()
        .filter(|(k, _)| only.is_none_or(|o| o.contains(k)))
        .filter(|(k, f)| seed.get(*k).map(|(s, i)| (s, *i)) != Some((*f, plan.sodt.get(*k).copied())))
        .map(|(k, f)| (k.clone(), f.clone(), plan.sodt.get(k).copied()))
        .collect();
    let journal = if only.is_some() { Vec::new() } else { journal };
    let entries = journal.len();
    if write {
        let generation = (plan.generation != generation).then_some(plan.generation);
        st.flights.restore(&Restore { flights: changed.clone(), generation, journal }, now)?;
    }
    Ok(Rebuilt { flights: changed.len(), journal: entries, messages, asked, other })
}

/// What a rebuild did: flights that differ, journal entries written again, messages read,
/// requests to the AODB, and how the messages of other rules were laid on.
struct Rebuilt {
    flights: usize,
    journal: usize,
    messages: usize,
    asked: Vec<Request>,
    other: OtherRules,
}

/// What a rebuild does: only some flights (`msgx rebuild-flights --flid`), whether it writes,
/// and whether it asks the AODB for what the mailbox no longer holds.
struct How<'a> {
    only: Option<&'a [String]>,
    write: bool,
    asking: Option<&'a Asking>,
}

/// The heal's replay: the plan as the messages leave it, each flight as Redis held it when first
/// read (`seed`), and the windows already read.
pub(super) struct Rebuild {
    pub(super) plan: Replay,
    seed: BTreeMap<String, (FlightState, Option<i64>)>,
    windows: Vec<(i64, i64)>,
    /// `OUTBOX_PRUNED`: above it every event a message wrote is held (read once, when the first
    /// message of other rules needs it).
    events_pruned: Option<i64>,
    other: OtherRules,
    /// `msgx rules apply` (#65): from which MSG_ID every message is decided again under this
    /// release's rules, and what that found.
    pub(super) again: Option<Again>,
}

/// What deciding the messages from `since` on again under this release's rules found (#65).
#[derive(Debug, Default)]
pub(super) struct Again {
    pub(super) since: i64,
    /// Each flight a message from `since` on changed: the last such message and its type tag
    /// (the difference is told under it).
    pub(super) last: BTreeMap<String, (i64, String)>,
    /// The messages decided under other rules until now (their `RULES_VERSION` moves).
    pub(super) redecided: Vec<i64>,
    /// Fields other rules announced that today's decision of the same message does not write
    /// (`msg_id`, `FLID.field`): kept as they are, since no earlier value is known here.
    pub(super) kept: Vec<(i64, String)>,
    /// SUCCEEDED messages read.
    pub(super) messages: usize,
}

impl Rebuild {
    /// A replay on the plan's generation as Redis holds it, nothing read yet.
    fn new(st: &mut Stores<'_>, again: Option<Again>) -> Result<Rebuild, HealError> {
        Ok(Rebuild {
            plan: Replay::new(st.flights.generation_of()?),
            seed: BTreeMap::new(),
            windows: Vec::new(),
            events_pruned: None,
            other: OtherRules { rules: st.rules.version(), ..Default::default() },
            again,
        })
    }

    /// A replay of the SUCCEEDED messages on top of what Redis holds, every one from `since` on
    /// decided again under this release's rules (`msgx rules apply`, #65).
    pub(super) fn again(st: &mut Stores<'_>, since: i64) -> Result<Rebuild, HealError> {
        let pruned = st.flights.audit()?.pruned;
        let mut replay = Rebuild::new(st, Some(Again { since, ..Default::default() }))?;
        let (_, messages, _) = replay_onto(st, &mut replay, since, pruned, false)?;
        if let Some(a) = replay.again.as_mut() {
            a.messages = messages;
        }
        Ok(replay)
    }

    /// Each flight whose values the replay changed, as Redis held it and as the replay left it,
    /// with their SODT keys: `(flid, before, sodt before, after, sodt after)`. Versions alone
    /// are no change: the replay's are those of MSG_ID order, which may differ from the order
    /// the pump took the messages in (a late row), and say nothing a consumer holds.
    #[allow(clippy::type_complexity)]
    pub(super) fn changed(&self) -> Vec<(String, FlightState, Option<i64>, FlightState, Option<i64>)> {
        self.plan
            .flights
            .iter()
            .filter_map(|(k, f)| {
                let (before, sodt) = self.seed.get(k).cloned().unwrap_or_default();
                let sodt = sodt.filter(|_| before.exists());
                let after = self.plan.sodt.get(k).copied();
                (before.fields != f.fields).then(|| (k.clone(), before, sodt, f.clone(), after))
            })
            .collect()
    }

    /// Reads from Redis, once each, the flights of `flids` not read yet.
    pub(super) fn load(&mut self, st: &mut Stores<'_>, mut flids: Vec<String>) -> Result<(), HealError> {
        flids.retain(|f| !self.seed.contains_key(f));
        flids.sort();
        flids.dedup();
        for chunk in flids.chunks(500) {
            for (flid, f, sodt) in st.flights.flights_of(chunk)? {
                self.plan.load(&flid, f.clone(), sodt);
                self.seed.insert(flid, (f, sodt));
            }
            // Read, and held nothing: known as nothing.
            for flid in chunk {
                self.seed.entry(flid.clone()).or_default();
            }
        }
        Ok(())
    }

    /// Reads from Redis, once, the flights the plan's index holds in a snapshot's window.
    fn load_window(&mut self, st: &mut Stores<'_>, window: Option<(i64, i64)>) -> Result<(), HealError> {
        let Some(w) = window.filter(|w| !self.windows.contains(w)) else { return Ok(()) };
        let read = RoundNeed { window: Some(w), ..Default::default() };
        let held = st.flights.prepare(&read, &[], SystemTime::UNIX_EPOCH)?.window;
        self.windows.push(w);
        self.load(st, held)
    }
}

/// Every SUCCEEDED message from MSG_ID `from` on decided again, in order, on the replay; the
/// journal entries Redis acknowledged and is missing above `pruned` (with the events the outbox
/// holds); how many messages were read; and, with `asking`, the messages whose text the
/// mailbox no longer holds (without it, such a message stops the replay for a person).
#[allow(clippy::type_complexity)]
fn replay_onto(
    st: &mut Stores<'_>,
    replay: &mut Rebuild,
    from: i64,
    pruned: Option<i64>,
    asking: bool,
) -> Result<(Vec<(i64, Decision)>, usize, Vec<ask::Gone>), HealError> {
    let mut gone = Vec::new();
    let mut journal = Vec::new();
    let mut messages = 0;
    let mut after = from - 1;
    loop {
        st.beat.beat();
        let rows = st.pg.succeeded_above(after, 2_000)?;
        let Some(last) = rows.last().map(|m| m.msg_id) else { break };
        let ids: Vec<i64> = rows.iter().map(|m| m.msg_id).collect();
        let missing = missing_entries(st, &rows, pruned)?;
        // Decided under other rules: laid on as announced (module documentation, #52).
        let other: BTreeSet<i64> =
            rows.iter().filter(|m| !st.rules.decided(m.rules)).map(|m| m.msg_id).collect();
        if !other.is_empty() && replay.events_pruned.is_none() {
            replay.events_pruned = Some(st.pg.events_pruned()?);
        }
        let wanted: BTreeSet<i64> = missing.iter().chain(&other).copied().collect();
        let mut made: BTreeMap<i64, Vec<NewEvent>> = BTreeMap::new();
        for (m, e) in st.pg.events_of(&wanted.into_iter().collect::<Vec<_>>())? {
            made.entry(m).or_default().push(e);
        }
        // What Redis acknowledged of each decision: a snapshot that advanced the plan when it
        // was taken is played again as such (seed 2155).
        let row: BTreeMap<i64, SucceededRow> = rows.iter().map(|m| (m.msg_id, *m)).collect();
        let record: BTreeMap<i64, Option<RedisRecord>> = rows.iter().map(|m| (m.msg_id, m.record)).collect();
        let (limits, rules) = (st.limits, st.rules.clone());
        let (page, missing_texts) = decode_page(texts(st, &ids)?, from, asking, &limits, &rules)?;
        gone.extend(missing_texts.into_iter().map(|m| (m, record[&m])));
        // What the page's messages read, from Redis in one go (not a round trip a message).
        let mut need = handlers::Need::default();
        for msg in page.iter().filter_map(|(_, msg)| msg.as_ref()) {
            let n = handlers::need_of(msg);
            need.flids.extend(n.flids);
            replay.load_window(st, n.window)?;
        }
        replay.load(st, need.flids)?;
        for (m, msg) in page {
            // A snapshot the pump found stale changed nothing when it was taken, after a newer
            // one; replayed in MSG_ID order, before that one, it would lay its window on.
            let msg = msg.filter(|_| record[&m] != Some(RedisRecord::Stale));
            if let Some(msg) = msg {
                let made = made.get(&m).map_or(&[][..], Vec::as_slice);
                let again = replay.again.as_ref().is_some_and(|a| m >= a.since);
                let lay = match (other.contains(&m), again) {
                    (true, true) => Lay::Again(made),
                    (false, _) => Lay::Decided,
                    (true, false) => Lay::Announced(made),
                };
                redecide(st, replay, m, &msg, record[&m] == Some(RedisRecord::Generation), lay)?;
            }
            if missing.contains(&m) {
                let events = made.remove(&m).unwrap_or_default();
                journal.push((m, Decision { events, rules: row[&m].rules, ..Default::default() }));
            }
            messages += 1;
        }
        after = last;
    }
    Ok((journal, messages, gone))
}

/// The journal entries of `rows` Redis acknowledged above `pruned` and no longer holds. Only an
/// entry Redis acknowledged is owed, with the events its message made then (the outbox):
/// deciding it again on today's flights could say less.
fn missing_entries(
    st: &mut Stores<'_>,
    rows: &[SucceededRow],
    pruned: Option<i64>,
) -> Result<Vec<i64>, HealError> {
    let owed: Vec<i64> = rows
        .iter()
        .filter(|m| m.record.is_some() && pruned.is_some_and(|p| m.msg_id > p))
        .map(|m| m.msg_id)
        .collect();
    let has = st.flights.journal_has(&owed)?;
    Ok(owed.iter().zip(has).filter(|(_, h)| !h).map(|(m, _)| *m).collect())
}

/// The page's texts decoded, in MSG_ID order (`None`: it no longer decodes, and is left out); a
/// text the mailbox no longer holds is a person's to decide — or, `asking`, left out and listed.
#[allow(clippy::type_complexity)]
fn decode_page(
    texts: Vec<(i64, Option<String>)>,
    from: i64,
    asking: bool,
    limits: &codec::Limits,
    rules: &codec::Rulebook,
) -> Result<(Vec<(i64, Option<codec::Message>)>, Vec<i64>), HealError> {
    let mut out = Vec::with_capacity(texts.len());
    let mut gone = Vec::new();
    for (m, text) in texts {
        if text.is_none() && asking {
            gone.push(m);
            out.push((m, None));
            continue;
        }
        let Some(text) = text else {
            return Err(HealError::Person(format!(
                "the mailbox no longer holds the text of SUCCEEDED message {m}: Redis cannot be rebuilt from MSG_ID {from} without it. A person must decide: restore the mailbox rows, or accept the flights as Redis holds them (msgx rebuild-flights --flid for the others)"
            )));
        };
        match codec::decode_with(&text, limits, rules) {
            Ok(msg) => out.push((m, Some(msg))),
            Err(e) => {
                warn!("rebuild: SUCCEEDED message {m} no longer decodes: {e}; left out");
                out.push((m, None));
            }
        }
    }
    Ok((out, gone))
}

/// How a message is laid on in a rebuild (#52): decided again (this release's rules decided
/// it), or as the events the outbox holds of it announced; or, by `msgx rules apply` (#65),
/// decided again under this release's rules although other rules decided it (what they
/// announced, to find what today's decision no longer writes).
enum Lay<'a> {
    Decided,
    Announced(&'a [NewEvent]),
    Again(&'a [NewEvent]),
}

/// Decides message `m` again on the replay, whose flights it reads were read from Redis before,
/// and applies it. A decision may change a flight its message does not read (a schedule's
/// records): that flight is read as Redis holds it before the change is laid on, as the pump's
/// apply does — else it would be written back whole with only this message's fields (seed 4998).
/// `advanced`: own PostgreSQL recorded that this snapshot advanced the plan when it was taken.
fn redecide(
    st: &mut Stores<'_>,
    replay: &mut Rebuild,
    m: i64,
    msg: &codec::Message,
    advanced: bool,
    lay: Lay<'_>,
) -> Result<(), HealError> {
    let flights = handlers::flids_of(msg)
        .filter_map(|f| replay.plan.flights.get(f).map(|s| (f.to_string(), std::sync::Arc::new(s.clone()))))
        .collect();
    let window = handlers::window_of(msg).map(|w| replay.plan.window(w)).unwrap_or_default();
    let Ok(d) = handlers::decide(&View { flights, window }, msg, m) else { return Ok(()) };
    let d = match lay {
        Lay::Decided => d,
        Lay::Announced(events) => {
            let held = replay.events_pruned.is_some_and(|p| m > p);
            replay.other.lay(m, d, events, held)
        }
        Lay::Again(events) => {
            if let Some(a) = replay.again.as_mut() {
                a.redecided.push(m);
                a.keep(m, &d, events, &replay.plan);
            }
            d
        }
    };
    if let Some(a) = replay.again.as_mut().filter(|a| m >= a.since) {
        let tag = msg.kind.type_tag();
        for c in &d.flights {
            a.last.insert(c.flid.clone(), (m, tag.to_string()));
        }
    }
    if !d.flights.is_empty() || d.snapshot {
        replay.load(st, d.flights.iter().map(|c| c.flid.clone()).collect())?;
        if advanced {
            replay.plan.apply_advanced(m, &d);
        } else {
            replay.plan.apply(m, &d);
        }
    }
    Ok(())
}

/// `msgx rebuild-flights`: every flight (or those of `only`) rebuilt from every SUCCEEDED message
/// held; with `write` false, what it would change. Returns (flights that differ, messages read).
pub fn rebuild_flights(
    st: &mut Stores<'_>,
    only: Option<&[String]>,
    now: SystemTime,
    write: bool,
) -> Result<(usize, usize), HealError> {
    let how = How { only, write, asking: None };
    rebuild(st, 0, &how, now).map(|r| (r.flights, r.messages))
}

impl Again {
    /// Notes the fields `events` (what other rules announced of message `m`) wrote that `d`,
    /// today's decision of it, does not, where the value is still `m`'s (`plan`: no later
    /// message wrote it): no earlier value of them is known here, so they stay.
    fn keep(&mut self, m: i64, d: &Decision, events: &[NewEvent], plan: &Replay) {
        let Ok(announced) = handlers::announced(events) else { return };
        for c in announced {
            let today = d.flights.iter().filter(|t| t.flid == c.flid);
            let written: BTreeSet<&str> = today
                .flat_map(|t| t.set.iter().map(|(f, _)| f.as_str()).chain(t.clear.iter().map(String::as_str)))
                .collect();
            let fields = c.set.iter().map(|(f, _)| f.as_str()).chain(c.clear.iter().map(String::as_str));
            let versions = plan.flights.get(&c.flid).map(|f| &f.versions);
            let still = |f: &&str| versions.and_then(|v| v.get(*f)) == Some(&m);
            for f in fields.filter(|f| *f != "FFID" && !written.contains(f)).filter(still) {
                self.kept.push((m, format!("{}.{f}", c.flid)));
            }
        }
    }
}
