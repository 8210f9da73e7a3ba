//! Ingress (poll thread): finds new mailbox rows and enqueues them as PENDING in own
//! PostgreSQL. Nothing is parsed here.
//!
//! Gap-safe (PRE-2, see [`gaps`]): rows are read past the highest ID seen so far (`high`,
//! in memory), every skipped ID is a gap that is probed again each round, and the persisted
//! watermark — from which a restarted poller reads again — stays below the lowest unresolved
//! gap until the ID shows up or `max-commit-delay` has passed. A compensating rescan pages
//! through unmarked rows at or below the watermark and enqueues any that have no
//! `PROC_STATE` (a failed compat enqueue, a row that appeared after its gap expired).

pub mod compat;
pub mod gaps;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use log::{info, warn};

use crate::clock::Clock;
use crate::config::Pipeline;
use crate::domain::InboundRow;
use crate::error::StoreError;
use crate::ports::{Mailbox, ProcStore};
use crate::stats::{self, Stats};
use gaps::Gaps;

/// Gaps probed per round, lowest first (the ones holding the watermark).
const PROBED_GAPS: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Nothing new.
    Idle,
    /// Rows read past `high`, how many rows were newly enqueued, and whether the read came back
    /// full (poll again at once).
    Polled { seen: usize, new: usize, full: bool },
}

pub struct Poller<P, M> {
    procs: P,
    mailbox: M,
    clock: Arc<dyn Clock>,
    batch: usize,
    max_commit_delay: Duration,
    rescan_every: Duration,
    stats: Arc<Stats>,
    /// The highest ID read; starts at the persisted watermark.
    high: Option<i64>,
    gaps: Gaps,
    next_rescan: Option<SystemTime>,
    rescan_cursor: i64,
}

impl<P: ProcStore, M: Mailbox> Poller<P, M> {
    pub fn new(procs: P, mailbox: M, clock: Arc<dyn Clock>, cfg: &Pipeline, stats: Arc<Stats>) -> Self {
        Poller {
            procs,
            mailbox,
            clock,
            batch: cfg.poll_batch,
            max_commit_delay: cfg.max_commit_delay,
            rescan_every: cfg.rescan_interval,
            stats,
            high: None,
            gaps: Gaps::default(),
            next_rescan: None,
            rescan_cursor: 0,
        }
    }

    /// Unresolved gap IDs (for the stats line and tests).
    pub fn gap_ids(&self) -> u64 {
        self.gaps.ids()
    }

    pub fn round(&mut self) -> Result<Round, StoreError> {
        let now = self.clock.now();
        let persisted = self.procs.watermark()?;
        let high = *self.high.get_or_insert(persisted);
        // Work on copies; they replace the poller's state only once the enqueue committed.
        let mut gaps = self.gaps.clone();
        let seen = self.mailbox.rows(high + 1, i64::MAX, self.batch)?;
        let ids: Vec<i64> = seen.iter().map(|r| r.id).collect();
        gaps.observe(high, &ids, now);
        let mut enqueue: Vec<InboundRow> = seen.iter().filter(|r| r.wanted).map(|r| r.inbound()).collect();

        let probes: Vec<(i64, i64)> = gaps.lowest(PROBED_GAPS).map(|g| (g.lo, g.hi)).collect();
        let mut late = Vec::new();
        for (lo, hi) in probes {
            late.extend(self.mailbox.rows(lo, hi, self.batch)?);
        }
        gaps.resolve(&late.iter().map(|r| r.id).collect::<Vec<_>>());
        for r in late.iter().filter(|r| r.wanted) {
            info!("late row msg_id={} became visible after higher ids were read (PRE-2)", r.id);
            enqueue.push(r.inbound());
        }
        enqueue.sort_by_key(|r| r.id);
        let expired = gaps.expire(now, self.max_commit_delay);

        let new_high = ids.last().copied().unwrap_or(high);
        let watermark = gaps.watermark(new_high);
        let new = if enqueue.is_empty() && watermark == persisted {
            Vec::new()
        } else {
            self.procs.enqueue(&enqueue, (watermark != persisted).then_some(watermark), now)?
        };
        self.high = Some(new_high);
        self.gaps = gaps;
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
        if seen.is_empty() && late.is_empty() && rescued == 0 {
            return Ok(Round::Idle);
        }
        Ok(Round::Polled { seen: seen.len(), new: new.len() + rescued, full: seen.len() == self.batch })
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
        let known = self.procs.known(&ids)?;
        let missing: Vec<InboundRow> = rows.into_iter().filter(|r| !known.contains(&r.id)).collect();
        let new = if missing.is_empty() { Vec::new() } else { self.procs.enqueue(&missing, None, now)? };
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
