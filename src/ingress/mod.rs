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
//! `late row`). With no gap, nothing is held: the grace costs nothing.
//!
//! A compensating rescan pages through unmarked rows at or below the watermark and enqueues
//! any that have no `PROC_STATE` (a failed compat enqueue, a row that appeared after its gap
//! expired).

pub mod compat;
pub mod gaps;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use log::{info, warn};

use crate::config::Pipeline;
use crate::domain::InboundRow;
use crate::error::StoreError;
use crate::ports::{Intake, MailboxScan};
use crate::stage::{human, Next, RoundReport, Stage};
use crate::stats::{self, Stats};
use gaps::Gaps;

/// Gaps probed per round, lowest first (the ones holding the watermark).
const PROBED_GAPS: usize = 8;

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
}

impl<P: Intake, M: MailboxScan> Stage for Poller<P, M> {
    type Round = Round;
    const NAME: &'static str = "poll";

    fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        Poller::round(self, now)
    }
}

impl<P: Intake, M: MailboxScan> Poller<P, M> {
    pub fn new(intake: P, mailbox: M, cfg: &Pipeline, stats: Arc<Stats>) -> Self {
        Poller {
            intake,
            mailbox,
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
        }
    }

    /// Unresolved gap IDs (for the stats line and tests).
    pub fn gap_ids(&self) -> u64 {
        self.gaps.ids()
    }

    pub fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        let persisted = self.intake.watermark()?;
        let high = *self.high.get_or_insert(persisted);
        // Work on copies; they replace the poller's state only once the enqueue committed.
        let mut gaps = self.gaps.clone();
        // While a batch of rows waits behind a gap, nothing more is read: bounded memory.
        let reading = self.held.len() < self.batch;
        let seen = if reading { self.mailbox.rows(high + 1, i64::MAX, self.batch)? } else { Vec::new() };
        let ids: Vec<i64> = seen.iter().map(|r| r.id).collect();
        gaps.observe(high, &ids, now);
        let mut candidates: Vec<InboundRow> = self.held.clone();
        candidates.extend(seen.iter().filter(|r| r.wanted).map(|r| r.inbound()));

        let probes: Vec<(i64, i64)> = gaps.lowest(PROBED_GAPS).map(|g| (g.lo, g.hi)).collect();
        let mut late = Vec::new();
        for (lo, hi) in probes {
            late.extend(self.mailbox.rows(lo, hi, self.batch)?);
        }
        let mut late_notes = Vec::new();
        for r in late.iter().filter(|r| r.wanted) {
            let age = gaps.noticed(r.id).and_then(|t| now.duration_since(t).ok()).unwrap_or_default();
            late_notes.push((r.id, age));
            candidates.push(r.inbound());
        }
        gaps.resolve(&late.iter().map(|r| r.id).collect::<Vec<_>>());
        candidates.sort_by_key(|r| r.id);
        candidates.dedup_by_key(|r| r.id);
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
        self.gaps = gaps;
        self.held = held;
        for (id, age) in late_notes {
            if age < self.grace {
                info!(
                    "gap filled msg_id={id} {} after higher ids were read, within commit-grace: in ID order",
                    human(age)
                );
            } else {
                warn!(
                    "late row msg_id={id} became visible {} after higher ids were read, past commit-grace: processed after them (PRE-2)",
                    human(age)
                );
            }
        }
        for g in expired {
            info!(
                "gap released msg_id={}..={}: not visible within max-commit-delay, taken as rolled back",
                g.lo, g.hi
            );
        }
        // Only rows that are new here: a restarted poller reads again from the watermark.
        for id in &new {
            info!("received msg_id={id}");
        }
        stats::add(&self.stats.polled, seen.len() as u64);
        stats::add(&self.stats.enqueued, new.len() as u64);
        let rescued = self.rescan(now, watermark)?;
        let held_until = if self.held.is_empty() { None } else { fresh.map(|(_, until)| until) };
        if seen.is_empty() && late.is_empty() && new.is_empty() && rescued == 0 && held_until.is_none() {
            return Ok(Round::Idle);
        }
        // Not read because a full batch was held: there may be more, poll again at once.
        let full = seen.len() == self.batch || (!reading && held_until.is_none());
        Ok(Round::Polled { seen: seen.len(), new: new.len() + rescued, full, held_until })
    }

    /// One page of the compensating rescan when it is due; returns how many rows it enqueued.
    fn rescan(&mut self, now: SystemTime, watermark: i64) -> Result<usize, StoreError> {
        if self.next_rescan.is_some_and(|t| t > now) {
            return Ok(0);
        }
        let rows = self.mailbox.unmarked(self.rescan_cursor + 1, watermark, self.batch)?;
        let Some(last) = rows.last().map(|r| r.id) else {
            // A full pass is done: start over after the interval.
            self.rescan_cursor = 0;
            self.next_rescan = Some(now + self.rescan_every);
            return Ok(0);
        };
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let known = self.intake.known(&ids)?;
        let missing: Vec<InboundRow> = rows.into_iter().filter(|r| !known.contains(&r.id)).collect();
        let new = if missing.is_empty() { Vec::new() } else { self.intake.enqueue(&missing, None, now)? };
        for id in &new {
            warn!("rescan found msg_id={id} unmarked in the mailbox without PROC_STATE; enqueued");
        }
        stats::add(&self.stats.rescued, new.len() as u64);
        self.rescan_cursor = last;
        Ok(new.len())
    }
}

#[cfg(test)]
mod tests;
