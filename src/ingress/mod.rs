//! Ingress (poll thread): finds new mailbox rows and enqueues them as PENDING in own
//! PostgreSQL. Nothing is parsed here.
//!
//! Gap-safe (PRE-2, see [`gaps`]): rows are read past the highest ID seen so far (`high`,
//! in memory), every skipped ID is a gap that is probed again each round, and the persisted
//! watermark — from which a restarted poller reads again — stays below the lowest unresolved
//! gap until the ID shows up or `max-commit-delay` has passed.
//!
//! Order across commit races (SPEC §4.9): rows above a gap younger than `commit-grace` are
//! held in memory and not enqueued until the gap fills (then all go in ID order) or the grace
//! passes (then they flow on, and a row that fills the gap later is processed late: WARN
//! `late row`). With no gap, nothing is held: the grace costs nothing. A gap is dated by the
//! clock read *after* the read that showed it, never by the round's start: a round that first
//! waited on a store (a PostgreSQL stall, a locked watermark) would otherwise date what it then
//! sees seconds too early and let the rows above it flow before the grace is over (#69).
//!
//! A compensating rescan walks the IDs at or below the watermark in chunks of
//! `rescan-chunk` (by the primary key, `rescan-pause` apart, a pass every `rescan-interval`)
//! and enqueues unmarked rows that have no `PROC_STATE` (a failed compat enqueue, a row that
//! appeared after its gap expired). Its errors never fail the poll round: it backs off alone.
//!
//! The PRE-3 guard: a mailbox whose IDs were reset (truncated or recreated: its next ID at or
//! below the watermark), or that shows unmarked a row msgx processed and marked, or a row msgx
//! processed now holding another message (an ID reused, a mark cleared), is not trusted: the
//! poller stops enqueuing and says so with an ERROR every minute, naming the IDs, until the
//! mailbox is put right or a person moves the watermark (`msgx reset-watermark`).

pub mod compat;
pub mod gaps;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use log::{error, info, warn};

use crate::clock::Clock;
use crate::config::Pipeline;
use crate::domain::{InboundRow, MailboxRow};
use crate::error::StoreError;
use crate::ports::{Held, Intake, MailboxScan, MailboxTexts, Raw};
use crate::stage::{human, Next, RoundReport, Stage};
use crate::stats::{self, Stats};
use gaps::{Gap, Gaps};

/// Gaps probed per round, lowest first (the ones holding the watermark).
const PROBED_GAPS: usize = 8;
/// Text the rescan reads per chunk to compare the rows msgx processed with what it recorded: a
/// sample (a reused table shows in its first rows), so a drain's shared mailbox is not read twice.
const REPLACED_BUDGET: u64 = 256 << 10;
/// How often the mailbox's IDs are checked against the watermark, and a halt repeated.
const PRE3_EVERY: Duration = Duration::from_secs(60);

/// Why the poller stopped enqueuing (PRE-3). It lasts while its condition holds (checked
/// again every minute) or until a person moves the watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Halt {
    pub why: String,
    /// The reused row, when that is the reason (else the IDs were reset).
    pub reused: Option<i64>,
    pub since: SystemTime,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Nothing new.
    Idle,
    /// Rows read past `high`, how many rows were newly enqueued, whether the read came back
    /// full (poll again at once), and until when rows are held behind a fresh gap.
    Polled { seen: usize, new: usize, full: bool, held_until: Option<SystemTime> },
}

impl RoundReport for Round {
    fn next(&self) -> Next {
        match self {
            Round::Polled { full: true, .. } => Next::Now,
            Round::Polled { held_until: Some(t), .. } => Next::At(*t),
            _ => Next::Idle,
        }
    }

    fn progressed(&self) -> bool {
        matches!(self, Round::Polled { new, .. } if *new > 0)
    }
}

pub struct Poller<P, M> {
    intake: P,
    mailbox: M,
    /// Read after each store call whose result is dated: a round's `now` is when it started,
    /// and a call may block for seconds (#69).
    clock: Arc<dyn Clock>,
    batch: usize,
    max_commit_delay: Duration,
    grace: Duration,
    rescan_every: Duration,
    stats: Arc<Stats>,
    /// The highest ID read; starts at the persisted watermark.
    high: Option<i64>,
    gaps: Gaps,
    /// Rows read above a fresh gap, waiting for it (the commit grace).
    held: Vec<InboundRow>,
    next_rescan: Option<SystemTime>,
    rescan_cursor: i64,
    rescan_chunk: i64,
    rescan_pause: Duration,
    /// Consecutive rescan failures (its own backoff).
    rescan_failures: u32,
    /// PRE-3: enqueuing stopped, and when it was last said.
    halt: Option<(Halt, SystemTime)>,
    next_id_check: Option<SystemTime>,
    /// The watermark as this poller last read or wrote it: another value means a person
    /// moved it (`msgx reset-watermark`).
    known: Option<i64>,
    include_day_boundary: bool,
    max_message_bytes: u64,
    /// The configured `msgx.codec.max-*`: the reuse check reads a header as the pump would.
    limits: crate::codec::Limits,
}

impl<P: Intake, M: MailboxScan + MailboxTexts> Stage for Poller<P, M> {
    type Round = Round;
    const ID: crate::stage::StageId = crate::stage::StageId::Poll;

    fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        Poller::round(self, now)
    }

    fn held(&self) -> Option<(&'static str, SystemTime)> {
        self.halt.as_ref().map(|(h, _)| ("mailbox:PRE-3", h.since))
    }
}

impl<P: Intake, M: MailboxScan + MailboxTexts> Poller<P, M> {
    pub fn new(intake: P, mailbox: M, cfg: &Pipeline, stats: Arc<Stats>, clock: Arc<dyn Clock>) -> Self {
        Poller {
            intake,
            mailbox,
            clock,
            batch: cfg.poll_batch,
            max_commit_delay: cfg.max_commit_delay,
            grace: cfg.commit_grace,
            rescan_every: cfg.rescan_interval,
            stats,
            high: None,
            gaps: Gaps::default(),
            held: Vec::new(),
            next_rescan: None,
            rescan_cursor: 0,
            rescan_chunk: cfg.rescan_chunk as i64,
            rescan_pause: cfg.rescan_pause,
            rescan_failures: 0,
            halt: None,
            next_id_check: None,
            known: None,
            include_day_boundary: cfg.include_day_boundary,
            max_message_bytes: cfg.max_message_bytes,
            limits: crate::codec::Limits::of(cfg),
        }
    }

    /// Why enqueuing is stopped (PRE-3), if it is.
    pub fn halted(&self) -> Option<&Halt> {
        self.halt.as_ref().map(|(h, _)| h)
    }

    /// PRE-3: once a minute, checks the mailbox's IDs against the watermark (or whether the
    /// halt's condition still holds) and says the halt again. True while halted.
    fn guard(&mut self, now: SystemTime, persisted: i64) -> Result<bool, StoreError> {
        if let Some(known) = self.known.filter(|k| *k != persisted) {
            info!(
                "watermark moved from {known} to {persisted} by a person: the poller reads again from there (PRE-3)"
            );
            self.halt = None;
            self.high = Some(persisted);
            self.gaps = Gaps::default();
            self.held.clear();
            self.rescan_cursor = 0;
            self.next_id_check = None;
        }
        self.known = Some(persisted);
        if persisted > 0 && self.next_id_check.is_none_or(|t| t <= now) {
            self.next_id_check = Some(now + PRE3_EVERY);
            let still = match self.halt.as_ref().and_then(|(h, _)| h.reused) {
                Some(id) => {
                    let held = self.intake.held(&[id])?;
                    self.suspect(&held)?.map(|(_, why)| why)
                }
                None => self.reset(persisted)?,
            };
            match (still, &mut self.halt) {
                (None, Some((h, _))) => {
                    info!("poll resumes (PRE-3): the mailbox no longer shows what stopped it ({})", h.why);
                    self.halt = None;
                }
                (Some(why), None) => {
                    // Only the reset is looked for here; a reused row is found by the rescan.
                    self.stop(Halt { why, reused: None, since: now });
                }
                _ => {}
            }
        }
        let Some((h, said)) = &mut self.halt else { return Ok(false) };
        if now.duration_since(*said).unwrap_or_default() >= PRE3_EVERY {
            *said = now;
            error!(
                "poll stopped (PRE-3): {}; nothing is enqueued until the mailbox is put right or a person runs `msgx reset-watermark --to N --yes`",
                h.why
            );
        }
        Ok(true)
    }

    /// Stops enqueuing; the ERROR is said at the next guard, at once (as if last said a
    /// minute ago), then every minute.
    fn stop(&mut self, halt: Halt) {
        let said = halt.since.checked_sub(PRE3_EVERY).unwrap_or(halt.since);
        self.halt = Some((halt, said));
    }

    /// Why the mailbox's IDs look reset below `persisted`, if they do. Both must say so: a
    /// purge that emptied the table keeps its AUTO_INCREMENT.
    fn reset(&mut self, persisted: i64) -> Result<Option<String>, StoreError> {
        let (highest, auto) = self.mailbox.ids_in_use()?;
        let reset = highest.is_none_or(|h| h < persisted) && auto.is_none_or(|a| a <= persisted);
        Ok(reset.then(|| {
            format!(
                "the mailbox's highest ID is {} and its next ID {}, but msgx has read up to {persisted}: its IDs were reset (table truncated or recreated); new rows would hide below the watermark",
                highest.map_or("none".into(), |h| h.to_string()),
                auto.map_or("unknown".into(), |a| a.to_string()),
            )
        }))
    }

    /// The first of `held` (unmarked in the mailbox when read) that msgx processed and marked,
    /// and that the mailbox still shows unmarked after PROC_STATE was read: the backfill
    /// records a mark only after the mailbox committed it, so a row marked meanwhile is no
    /// suspect.
    fn reused(&mut self, held: &[Held]) -> Result<Option<i64>, StoreError> {
        for id in held.iter().filter(|h| h.marked).map(|h| h.msg_id) {
            if !self.mailbox.unmarked(id, id, 1)?.is_empty() {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// Unresolved gap IDs (for the stats line and tests).
    pub fn gap_ids(&self) -> u64 {
        self.gaps.ids()
    }

    /// One round. `started` is when it began; what it reads is dated by the clock read after
    /// the read (a store call may have blocked meanwhile: #69).
    pub fn round(&mut self, started: SystemTime) -> Result<Round, StoreError> {
        let persisted = self.intake.watermark()?;
        if self.guard(self.after(started), persisted)? {
            return Ok(Round::Idle);
        }
        let high = *self.high.get_or_insert(persisted);
        // Work on copies; they replace the poller's state only once the enqueue committed.
        let mut gaps = self.gaps.clone();
        // While a batch of rows waits behind a gap, nothing more is read: bounded memory.
        let reading = self.held.len() < self.batch;
        let seen = if reading { self.mailbox.rows(high + 1, i64::MAX, self.batch)? } else { Vec::new() };
        let ids: Vec<i64> = seen.iter().map(|r| r.id).collect();
        gaps.observe(high, &ids, self.after(started));
        let mut candidates: Vec<InboundRow> = self.held.clone();
        candidates.extend(seen.iter().filter(|r| r.wanted).map(|r| r.inbound()));

        let (late, late_notes) = self.probe_gaps(&mut gaps, &mut candidates, started)?;
        candidates.sort_by_key(|r| r.id);
        candidates.dedup_by_key(|r| r.id);
        // Every read of the round is done: from here on `now` is when they were.
        let now = self.after(started);
        // The commit grace: rows above the lowest fresh gap wait for it.
        let fresh = gaps.fresh(now, self.grace);
        let (enqueue, held): (Vec<InboundRow>, Vec<InboundRow>) =
            candidates.into_iter().partition(|r| fresh.is_none_or(|(lo, _)| r.id < lo));
        let expired = gaps.expire(now, self.max_commit_delay);

        let new_high = ids.last().copied().unwrap_or(high);
        let watermark = gaps.watermark(new_high);
        debug_assert!(held.first().is_none_or(|h| h.id > watermark), "held rows are above the watermark");
        let new = if enqueue.is_empty() && watermark == persisted {
            Vec::new()
        } else {
            self.intake.enqueue(&enqueue, (watermark != persisted).then_some(watermark), now)?
        };
        self.high = Some(new_high);
        self.known = Some(watermark);
        self.gaps = gaps;
        self.held = held;
        self.say_gaps(&late_notes, &expired);
        // Only rows that are new here: a restarted poller reads again from the watermark.
        for id in &new {
            info!("received msg_id={id}");
        }
        stats::add(&self.stats.polled, seen.len() as u64);
        stats::add(&self.stats.enqueued, new.len() as u64);
        let rescued = self.rescan(self.after(started), watermark);
        let held_until = if self.held.is_empty() { None } else { fresh.map(|(_, until)| until) };
        if seen.is_empty() && late.is_empty() && new.is_empty() && rescued == 0 && held_until.is_none() {
            return Ok(Round::Idle);
        }
        // Not read because a full batch was held: there may be more, poll again at once.
        let full = seen.len() == self.batch || (!reading && held_until.is_none());
        Ok(Round::Polled { seen: seen.len(), new: new.len() + rescued, full, held_until })
    }

    /// The time now, read after a store call: never before the round's start (a wall clock
    /// stepped back mid-round dates nothing earlier than the round itself).
    fn after(&self, started: SystemTime) -> SystemTime {
        if crate::planted::on(crate::planted::Bug::RoundTimeReused) {
            return started;
        }
        self.clock.after(started)
    }

    /// The lowest gaps read again: the rows that appeared in them since (late rows, PRE-2)
    /// join `candidates`, with how long after the gap was noticed; the gaps they fill close.
    #[allow(clippy::type_complexity)]
    fn probe_gaps(
        &mut self,
        gaps: &mut Gaps,
        candidates: &mut Vec<InboundRow>,
        started: SystemTime,
    ) -> Result<(Vec<MailboxRow>, Vec<(i64, Duration)>), StoreError> {
        let probes: Vec<(i64, i64)> = gaps.lowest(PROBED_GAPS).map(|g| (g.lo, g.hi)).collect();
        let mut late = Vec::new();
        for (lo, hi) in probes {
            late.extend(self.mailbox.rows(lo, hi, self.batch)?);
        }
        // The age a late row is said with: when the probe showed it, not when the round began.
        let now = self.after(started);
        let mut notes = Vec::new();
        for r in late.iter().filter(|r| r.wanted) {
            let age = gaps.noticed(r.id).and_then(|t| now.duration_since(t).ok()).unwrap_or_default();
            notes.push((r.id, age));
            candidates.push(r.inbound());
        }
        gaps.resolve(&late.iter().map(|r| r.id).collect::<Vec<_>>());
        Ok((late, notes))
    }

    /// One line per gap filled (INFO within commit-grace, WARN past it) and per gap released.
    fn say_gaps(&self, late: &[(i64, Duration)], expired: &[Gap]) {
        for (id, age) in late {
            if *age < self.grace {
                info!(
                    "gap filled msg_id={id} {} after higher ids were read, within commit-grace: in ID order",
                    human(*age)
                );
            } else {
                warn!(
                    "late row msg_id={id} became visible {} after higher ids were read, past commit-grace: processed after them (PRE-2)",
                    human(*age)
                );
            }
        }
        for g in expired {
            info!(
                "gap released msg_id={}..={}: not visible within max-commit-delay, taken as rolled back",
                g.lo, g.hi
            );
        }
    }

    /// PRE-3 (b): the first unmarked row msgx has a PROC_STATE row for (`held`) that is not
    /// what msgx made of its ID — marked by msgx already, or holding another message now — and
    /// why.
    fn suspect(&mut self, held: &[Held]) -> Result<Option<(i64, String)>, StoreError> {
        if let Some(id) = self.reused(held)? {
            return Ok(Some((id, reused_why(id))));
        }
        self.replaced(held)
    }

    /// The first of `held` (unmarked rows msgx has a PROC_STATE row for) whose body now names
    /// another message than the one msgx processed under that ID — its identity (INV-9) differs
    /// from the one recorded — and why. Bounded: at most `REPLACED_BUDGET` bytes of text per
    /// chunk; rows past it are compared in a later pass.
    fn replaced(&mut self, held: &[Held]) -> Result<Option<(i64, String)>, StoreError> {
        let held: Vec<(i64, &str)> =
            held.iter().filter_map(|h| Some((h.msg_id, h.identity.as_deref()?))).collect();
        if held.is_empty() {
            return Ok(None);
        }
        let ids: Vec<i64> = held.iter().map(|(id, _)| *id).collect();
        let raws = self.mailbox.raws(&ids, self.max_message_bytes, REPLACED_BUDGET)?;
        for (id, was) in held {
            let now = match raws.get(&id) {
                Some(Raw::Body(b)) => {
                    crate::codec::text_of(b).and_then(|t| crate::codec::decode_head(t, &self.limits))
                }
                // Gone meanwhile, too large or beyond this pass's budget: not a verdict.
                _ => continue,
            };
            // Only an identity read and found different proves a reuse: a header msgx cannot
            // read now (half written, past a limit) is no verdict either (#68: a row re-read
            // under the default limits was called reused and halted ingress).
            let Ok(now) = now else { continue };
            // Either setting of include-day-boundary, and a release before #53, may have
            // recorded it.
            if !crate::codec::same_identity(&now, was) {
                let is = format!(
                    "identity {}",
                    crate::logline::Upstream(&crate::codec::identity(&now, self.include_day_boundary))
                );
                // Both identities are upstream text: quoted, so neither can end the line (#53).
                let was = crate::logline::Upstream(was);
                return Ok(Some((
                    id,
                    format!(
                        "mailbox row {id} is unmarked and now holds {is}, but msgx processed MSG_ID {id} as identity {was}: the mailbox reused the ID"
                    ),
                )));
            }
        }
        Ok(None)
    }

    /// One chunk of the compensating rescan when one is due; how many rows it enqueued. A
    /// failure is the rescan's, not the round's: it backs off on its own and the poll goes on.
    fn rescan(&mut self, now: SystemTime, watermark: i64) -> usize {
        if self.next_rescan.is_some_and(|t| t > now) {
            return 0;
        }
        match self.rescan_chunk(now, watermark) {
            Ok(n) => {
                self.rescan_failures = 0;
                n
            }
            Err(e) => {
                self.rescan_failures += 1;
                let wait =
                    crate::policy::doubling(self.rescan_pause, self.rescan_failures + 1, self.rescan_every);
                if self.rescan_failures == 1 {
                    warn!(
                        "rescan failed at msg_id={}: {e}; polling goes on, the rescan tries again in {}",
                        self.rescan_cursor + 1,
                        human(wait)
                    );
                }
                self.next_rescan = Some(now + wait);
                0
            }
        }
    }

    /// IDs (cursor, cursor + chunk], never above the watermark: a range of the primary key,
    /// so no chunk scans the table.
    fn rescan_chunk(&mut self, now: SystemTime, watermark: i64) -> Result<usize, StoreError> {
        let lo = self.rescan_cursor + 1;
        if lo > watermark {
            // A full pass is done: start over after the interval.
            self.rescan_cursor = 0;
            self.next_rescan = Some(now + self.rescan_every);
            return Ok(0);
        }
        let hi = (self.rescan_cursor + self.rescan_chunk).min(watermark);
        let rows = self.mailbox.unmarked(lo, hi, self.rescan_chunk as usize)?;
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let held = if ids.is_empty() { Vec::new() } else { self.intake.held(&ids)? };
        if let Some((id, why)) = self.suspect(&held)? {
            self.stop(Halt { why, reused: Some(id), since: now });
            self.next_id_check = Some(now + PRE3_EVERY);
            return Ok(0);
        }
        // `held` is ascending: a search, not a scan of it per row (10 000 × 10 000 before).
        let missing: Vec<InboundRow> =
            rows.into_iter().filter(|r| held.binary_search_by_key(&r.id, |h| h.msg_id).is_err()).collect();
        let new = if missing.is_empty() { Vec::new() } else { self.intake.enqueue(&missing, None, now)? };
        for id in &new {
            warn!("rescan found msg_id={id} unmarked in the mailbox without PROC_STATE; enqueued");
        }
        stats::add(&self.stats.rescued, new.len() as u64);
        self.rescan_cursor = hi;
        self.next_rescan = Some(now + self.rescan_pause);
        Ok(new.len())
    }
}

#[cfg(test)]
mod tests;

fn reused_why(id: i64) -> String {
    format!(
        "mailbox row {id} is unmarked, but msgx processed MSG_ID {id} and wrote its mark: the mailbox reused the ID or cleared the mark"
    )
}
