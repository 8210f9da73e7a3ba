//! Ingress (poll thread): finds new mailbox rows past the watermark and enqueues them as
//! PENDING in own PostgreSQL, advancing the watermark in the same transaction (a single-row
//! overwrite, PRE-5). Nothing is parsed here.
//!
//! Known gap (issue #6): IDs are handed out before commit (PRE-2), so a smaller ID can
//! become visible after a larger one was polled; the watermark does not yet hold below such
//! gaps, and there is no compensating rescan yet.

use std::sync::Arc;

use log::info;

use crate::clock::Clock;
use crate::error::StoreError;
use crate::ports::{Mailbox, ProcStore};
use crate::stats::{self, Stats};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Nothing new.
    Idle,
    /// Rows seen, how many were new, and whether the batch was full (poll again at once).
    Polled { seen: usize, new: usize, full: bool },
}

pub struct Poller<P, M> {
    procs: P,
    mailbox: M,
    clock: Arc<dyn Clock>,
    batch: usize,
    stats: Arc<Stats>,
}

impl<P: ProcStore, M: Mailbox> Poller<P, M> {
    pub fn new(procs: P, mailbox: M, clock: Arc<dyn Clock>, batch: usize, stats: Arc<Stats>) -> Self {
        Poller { procs, mailbox, clock, batch, stats }
    }

    pub fn round(&mut self) -> Result<Round, StoreError> {
        let watermark = self.procs.watermark()?;
        let rows = self.mailbox.fetch_after(watermark, self.batch)?;
        let Some(last) = rows.last() else { return Ok(Round::Idle) };
        debug_assert!(rows.windows(2).all(|w| w[0].id < w[1].id), "mailbox rows must come in ID order");
        let new = self.procs.enqueue(&rows, last.id, self.clock.now())?;
        stats::add(&self.stats.polled, rows.len() as u64);
        stats::add(&self.stats.enqueued, new as u64);
        for r in &rows {
            info!("received msg_id={}", r.id);
        }
        log::debug!(
            "polled rows={} new={new} first_msg_id={} last_msg_id={}",
            rows.len(),
            rows[0].id,
            last.id
        );
        Ok(Round::Polled { seen: rows.len(), new, full: rows.len() == self.batch })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::domain::ProcStatus;
    use crate::store::memory::{MemMailbox, MemPg};

    #[test]
    fn polls_in_batches_advances_the_watermark_and_enqueues_once() {
        let (pg, mailbox) = (MemPg::new(), MemMailbox::new());
        for id in [3, 5, 9] {
            mailbox.insert(id, Some("<MSG/>"));
        }
        let mut p = Poller::new(
            pg.clone(),
            mailbox.clone(),
            Arc::new(FakeClock::new()),
            2,
            Arc::new(Stats::default()),
        );
        assert_eq!(p.round().unwrap(), Round::Polled { seen: 2, new: 2, full: true });
        assert_eq!(pg.inspect(|s| s.watermark), 5);
        assert_eq!(p.round().unwrap(), Round::Polled { seen: 1, new: 1, full: false });
        assert_eq!(p.round().unwrap(), Round::Idle);
        assert_eq!(pg.inspect(|s| s.procs.keys().copied().collect::<Vec<_>>()), vec![3, 5, 9]);
        assert!(pg.inspect(|s| s.procs.values().all(|p| p.row.state == ProcStatus::Pending)));
    }

    #[test]
    fn marked_and_foreign_status_rows_are_not_taken() {
        let (pg, mailbox) = (MemPg::new(), MemMailbox::new());
        mailbox.insert(1, Some("<MSG/>"));
        mailbox.mark_externally(1, FakeClock::new().now());
        let mut p =
            Poller::new(pg.clone(), mailbox, Arc::new(FakeClock::new()), 10, Arc::new(Stats::default()));
        assert_eq!(p.round().unwrap(), Round::Idle);
    }

    #[test]
    fn a_store_failure_is_returned_and_the_next_round_recovers() {
        let (pg, mailbox) = (MemPg::new(), MemMailbox::new());
        mailbox.insert(1, Some("<MSG/>"));
        let mut p =
            Poller::new(pg.clone(), mailbox, Arc::new(FakeClock::new()), 10, Arc::new(Stats::default()));
        pg.fail_next(2);
        assert!(p.round().is_err());
        assert!(p.round().is_err());
        assert_eq!(p.round().unwrap(), Round::Polled { seen: 1, new: 1, full: false });
    }
}
