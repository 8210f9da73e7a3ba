//! Backfill (backfill thread): terminal rows owe one processed mark on their mailbox row
//! (INV-8). The mark is written only where it is still empty (INV-7, C-5); a missing row is
//! abandoned at once (MISSING_ROW, C-16); a failed write is retried with the doubling
//! backoff `backfill-backoff-ms` … `backfill-backoff-cap-ms` (G-BACKFILL-BACKOFF).

use std::sync::Arc;
use std::time::Duration;

use log::{error, info, warn};

use crate::clock::Clock;
use crate::config::Pipeline;
use crate::error::StoreError;
use crate::ports::{Mailbox, Mark, ProcStore};
use crate::stats::{self, Stats};

/// The delay after the `attempts`-th failed mark (1-based): base, 2·base, 4·base, … ≤ cap.
pub fn delay(attempts: u32, base: Duration, cap: Duration) -> Duration {
    let shift = attempts.max(1) - 1;
    let factor = 1u32.checked_shl(shift.min(31)).unwrap_or(u32::MAX);
    base.checked_mul(factor).unwrap_or(cap).min(cap)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    Idle,
    Marked { written: usize, already: usize, missing: usize },
    Failed { rescheduled: usize },
}

pub struct Backfill<P, M> {
    procs: P,
    mailbox: M,
    clock: Arc<dyn Clock>,
    base: Duration,
    cap: Duration,
    overdue: Duration,
    batch: usize,
    stats: Arc<Stats>,
}

impl<P: ProcStore, M: Mailbox> Backfill<P, M> {
    pub fn new(procs: P, mailbox: M, clock: Arc<dyn Clock>, cfg: &Pipeline, stats: Arc<Stats>) -> Self {
        Backfill {
            procs,
            mailbox,
            clock,
            base: cfg.backfill_backoff,
            cap: cfg.backfill_backoff_cap,
            overdue: cfg.overdue_backfill,
            batch: cfg.backfill_batch,
            stats,
        }
    }

    pub fn round(&mut self) -> Result<Round, StoreError> {
        let now = self.clock.now();
        // Past R the mark is not tried again: abandoned, listed, reconciled by a person (C-16).
        if let Some(owed_before) = now.checked_sub(self.overdue) {
            let overdue = self.procs.backfill_overdue(owed_before, self.batch)?;
            if !overdue.is_empty() {
                self.procs.backfill_abandon(&overdue, "OVERDUE", now)?;
                for id in &overdue {
                    error!("backfill abandoned msg_id={id} reason=OVERDUE (unmarked longer than overdue-backfill)");
                }
                stats::add(&self.stats.marks_overdue, overdue.len() as u64);
            }
        }
        let ids = self.procs.due_backfills(now, self.batch)?;
        if ids.is_empty() {
            return Ok(Round::Idle);
        }
        match self.mailbox.mark(&ids, now) {
            Ok(marks) => {
                debug_assert_eq!(marks.len(), ids.len());
                let pick = |m: Mark| -> Vec<i64> {
                    ids.iter().zip(&marks).filter(|(_, x)| **x == m).map(|(id, _)| *id).collect()
                };
                let (written, already, missing) =
                    (pick(Mark::Written), pick(Mark::AlreadyMarked), pick(Mark::Missing));
                let settled: Vec<i64> = written.iter().chain(&already).copied().collect();
                if !settled.is_empty() {
                    self.procs.backfill_settled(&settled, now)?;
                }
                for id in &already {
                    info!(
                        "backfill already-marked msg_id={id} (marked by someone else; nothing overwritten)"
                    );
                }
                if !missing.is_empty() {
                    self.procs.backfill_abandon(&missing, "MISSING_ROW", now)?;
                    for id in &missing {
                        error!("backfill abandoned msg_id={id} reason=MISSING_ROW (the mailbox row is gone)");
                    }
                }
                stats::add(&self.stats.marks_written, written.len() as u64);
                stats::add(&self.stats.marks_already, already.len() as u64);
                stats::add(&self.stats.marks_missing, missing.len() as u64);
                Ok(Round::Marked { written: written.len(), already: already.len(), missing: missing.len() })
            }
            Err(e) => {
                for id in &ids {
                    let attempts = self.procs.backfill_attempts(*id)? + 1;
                    let next = now + delay(attempts, self.base, self.cap);
                    self.procs.backfill_retry(*id, &e.to_string(), next)?;
                    warn!("backfill failed msg_id={id} attempts={attempts} error={:?}", e.to_string());
                }
                stats::add(&self.stats.marks_failed, ids.len() as u64);
                Ok(Round::Failed { rescheduled: ids.len() })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::config::Config;
    use crate::domain::InboundRow;
    use crate::ports::Settle;
    use crate::store::memory::{MemMailbox, MemPg};

    fn setup(ids: &[i64]) -> (FakeClock, MemPg, MemMailbox, Backfill<MemPg, MemMailbox>) {
        let clock = FakeClock::new();
        let mut pg = MemPg::new();
        let mailbox = MemMailbox::new();
        for &id in ids {
            mailbox.insert(id, Some("<MSG/>"));
            pg.enqueue(&[InboundRow { id, received_at: None }], Some(id), clock.now()).unwrap();
        }
        let b = Backfill::new(
            pg.clone(),
            mailbox.clone(),
            Arc::new(clock.clone()),
            &Config::defaults().pipeline,
            Arc::new(Stats::default()),
        );
        (clock, pg, mailbox, b)
    }

    #[test]
    fn backoff_doubles_from_30s_to_the_15min_cap() {
        let (base, cap) = (Duration::from_secs(30), Duration::from_secs(900));
        let got: Vec<u64> = (1..=8).map(|a| delay(a, base, cap).as_secs()).collect();
        assert_eq!(got, vec![30, 60, 120, 240, 480, 900, 900, 900]);
        assert_eq!(delay(0, base, cap), base);
        assert_eq!(delay(u32::MAX, base, cap), cap);
    }

    #[test]
    fn pending_and_failed_rows_owe_no_mark() {
        let (_c, _pg, mailbox, mut b) = setup(&[1]);
        assert_eq!(b.round().unwrap(), Round::Idle);
        assert_eq!(mailbox.row(1).unwrap().processed_at, None);
    }

    #[test]
    fn terminal_rows_are_marked_once() {
        let (clock, mut pg, mailbox, mut b) = setup(&[1, 2]);
        pg.commit(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        pg.commit(&[Settle::skipped(2, "ignored:LDM-*")], clock.now()).unwrap();
        assert_eq!(b.round().unwrap(), Round::Marked { written: 2, already: 0, missing: 0 });
        let row = mailbox.row(1).unwrap();
        assert_eq!((row.processed_at, row.status.as_str()), (Some(clock.now()), "PROCESSED"));
        assert!(pg.proc(1).unwrap().backfill_at.is_some());
        assert_eq!(b.round().unwrap(), Round::Idle, "settled rows are not marked again");
    }

    #[test]
    fn a_mark_by_someone_else_is_never_overwritten() {
        let (clock, mut pg, mailbox, mut b) = setup(&[1]);
        let theirs = clock.now();
        mailbox.mark_externally(1, theirs);
        clock.advance(Duration::from_secs(5));
        pg.commit(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        assert_eq!(b.round().unwrap(), Round::Marked { written: 0, already: 1, missing: 0 });
        let row = mailbox.row(1).unwrap();
        assert_eq!((row.processed_at, row.status.as_str()), (Some(theirs), "DONE-ELSEWHERE"));
        assert!(pg.proc(1).unwrap().backfill_at.is_some());
    }

    #[test]
    fn missing_row_is_abandoned_at_once() {
        let (clock, mut pg, mailbox, mut b) = setup(&[1]);
        mailbox.remove(1);
        pg.commit(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        assert_eq!(b.round().unwrap(), Round::Marked { written: 0, already: 0, missing: 1 });
        let p = pg.proc(1).unwrap();
        assert_eq!(p.backfill_abandoned_reason.as_deref(), Some("MISSING_ROW"));
        assert_eq!(p.backfill_at, None);
        assert_eq!(b.round().unwrap(), Round::Idle);
    }

    #[test]
    fn a_mark_still_failing_after_overdue_backfill_is_abandoned() {
        let (clock, mut pg, mailbox, mut b) = setup(&[1, 2]);
        pg.commit(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        clock.advance(Duration::from_secs(86_400));
        pg.commit(&[Settle::succeeded(2, "k2", vec![])], clock.now()).unwrap();
        mailbox.fail_next(u32::MAX);
        // Keep failing for 30 days: retries do not move the anchor (the terminal time).
        let mut rounds = 0;
        while pg.proc(1).unwrap().backfill_abandoned_at.is_none() {
            clock.advance(Duration::from_secs(900));
            b.round().unwrap();
            rounds += 1;
            assert!(rounds < 3000, "never abandoned");
        }
        let p1 = pg.proc(1).unwrap();
        assert_eq!(p1.backfill_abandoned_reason.as_deref(), Some("OVERDUE"));
        let owed = clock.now().duration_since(p1.updated_at).unwrap();
        assert!(owed <= Duration::from_secs(900), "abandoned in the round it became overdue");
        assert!(pg.proc(2).unwrap().backfill_abandoned_at.is_none(), "one day younger: still retried");
        assert!(pg.proc(1).unwrap().backfill_attempts > 1);
    }

    #[test]
    fn mailbox_outage_backs_off_then_marks() {
        let (clock, mut pg, mailbox, mut b) = setup(&[1]);
        pg.commit(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        mailbox.fail_next(2);
        assert_eq!(b.round().unwrap(), Round::Failed { rescheduled: 1 });
        assert_eq!(b.round().unwrap(), Round::Idle, "not due before 30s");
        clock.advance(Duration::from_secs(30));
        assert_eq!(b.round().unwrap(), Round::Failed { rescheduled: 1 });
        clock.advance(Duration::from_secs(59));
        assert_eq!(b.round().unwrap(), Round::Idle, "second delay is 60s");
        clock.advance(Duration::from_secs(1));
        assert_eq!(b.round().unwrap(), Round::Marked { written: 1, already: 0, missing: 0 });
        assert_eq!(pg.proc(1).unwrap().backfill_attempts, 2);
    }
}
