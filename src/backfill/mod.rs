//! Backfill (backfill thread): terminal rows owe one processed mark on their mailbox row
//! (INV-8). The mark is written only where it is still empty (INV-7, C-5); a missing row is
//! abandoned at once (MISSING_ROW, C-16); a refused write is retried with the doubling
//! backoff `backfill-backoff-ms` … `backfill-backoff-cap-ms` (G-BACKFILL-BACKOFF). A mailbox
//! that is unavailable stalls the stage instead: nothing is charged, nothing goes overdue
//! (SPEC §4.9).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use log::{error, info, warn};

use crate::config::Pipeline;
use crate::error::StoreError;
use crate::lease::Gate;
use crate::ports::{MailboxMarks, Mark, MarkLedger, OwedMark};
use crate::stage::{Next, RoundReport, Stage};
use crate::stats::{self, Stats};

/// The delay after the `attempts`-th refused mark (1-based): base, 2·base, 4·base, … ≤ cap.
pub fn delay(attempts: u32, base: Duration, cap: Duration) -> Duration {
    crate::policy::doubling(base, attempts, cap)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    Idle,
    Marked {
        written: usize,
        already: usize,
        missing: usize,
    },
    /// The mailbox refused the marks; they are retried after the backfill backoff.
    Failed {
        rescheduled: usize,
    },
}

impl RoundReport for Round {
    fn next(&self) -> Next {
        match self {
            Round::Marked { .. } => Next::Now,
            Round::Failed { .. } | Round::Idle => Next::Idle,
        }
    }

    fn progressed(&self) -> bool {
        false
    }
}

pub struct Backfill<P, M> {
    ledger: P,
    mailbox: M,
    base: Duration,
    cap: Duration,
    overdue: Duration,
    batch: usize,
    gate: Arc<dyn Gate>,
    stats: Arc<Stats>,
}

impl<P: MarkLedger, M: MailboxMarks> Stage for Backfill<P, M> {
    type Round = Round;
    const ID: crate::stage::StageId = crate::stage::StageId::Backfill;

    fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        Backfill::round(self, now)
    }
}

impl<P: MarkLedger, M: MailboxMarks> Backfill<P, M> {
    pub fn new(ledger: P, mailbox: M, cfg: &Pipeline, gate: Arc<dyn Gate>, stats: Arc<Stats>) -> Self {
        Backfill {
            ledger,
            mailbox,
            base: cfg.backfill_backoff,
            cap: cfg.backfill_backoff_cap,
            overdue: cfg.overdue_backfill,
            batch: cfg.backfill_batch,
            gate,
            stats,
        }
    }

    pub fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        // Past R a refused mark is not tried again: abandoned, listed, reconciled by a person
        // (C-16). A mark that was never refused (the mailbox was away) is never overdue.
        if let Some(owed_before) = now.checked_sub(self.overdue) {
            let overdue = self.ledger.backfill_overdue(owed_before, self.batch)?;
            if !overdue.is_empty() {
                self.ledger.backfill_abandon(&overdue, "OVERDUE", now)?;
                for id in &overdue {
                    error!("backfill abandoned msg_id={id} reason=OVERDUE (unmarked longer than overdue-backfill)");
                }
                stats::add(&self.stats.marks_overdue, overdue.len() as u64);
            }
        }
        let owed = self.ledger.due_backfills(now, self.batch)?;
        if owed.is_empty() {
            return Ok(Round::Idle);
        }
        let ids: Vec<i64> = owed.iter().map(|o| o.msg_id).collect();
        // The shared mailbox cannot check the lease: a stale instance must not mark (PRE-5).
        self.gate.check()?;
        let (ids, marks): (Vec<i64>, Vec<Mark>) = match self.marks(&ids, now)? {
            Marks::All(marks) => (ids, marks),
            Marks::Some { marked, refused } => {
                self.refused(&owed, &refused, now)?;
                if marked.is_empty() {
                    return Ok(Round::Failed { rescheduled: refused.len() });
                }
                marked.into_iter().unzip()
            }
        };
        debug_assert_eq!(marks.len(), ids.len());
        let pick = |m: Mark| -> Vec<i64> {
            ids.iter().zip(&marks).filter(|(_, x)| **x == m).map(|(id, _)| *id).collect()
        };
        let (written, already, missing) =
            (pick(Mark::Written), pick(Mark::AlreadyMarked), pick(Mark::Missing));
        let settled: Vec<i64> = written.iter().chain(&already).copied().collect();
        if !settled.is_empty() {
            self.ledger.backfill_settled(&settled, now)?;
        }
        for id in &already {
            info!("backfill already-marked msg_id={id} (marked by someone else; nothing overwritten)");
        }
        if !missing.is_empty() {
            self.ledger.backfill_abandon(&missing, "MISSING_ROW", now)?;
            for id in &missing {
                error!("backfill abandoned msg_id={id} reason=MISSING_ROW (the mailbox row is gone)");
            }
        }
        stats::add(&self.stats.marks_written, written.len() as u64);
        stats::add(&self.stats.marks_already, already.len() as u64);
        stats::add(&self.stats.marks_missing, missing.len() as u64);
        Ok(Round::Marked { written: written.len(), already: already.len(), missing: missing.len() })
    }

    /// The marks of `ids` in one statement. One the mailbox refuses (a trigger, a constraint)
    /// is looked for row by row (SPEC §4.9's culprit rule), so only the refused rows are
    /// charged; an outage stalls the stage with nothing charged.
    fn marks(&mut self, ids: &[i64], now: SystemTime) -> Result<Marks, StoreError> {
        // The gate (the lease as this instance last confirmed it) and own PostgreSQL (the lease
        // as it is): a failover can forget the one the gate trusts (#56).
        let gate = self.gate.clone();
        let ledger = std::cell::RefCell::new(&mut self.ledger);
        let still_ours = move || {
            gate.check()?;
            ledger.borrow_mut().still_holds()
        };
        let whole = match self.mailbox.mark(ids, now, &still_ours) {
            Ok(marks) => return Ok(Marks::All(marks)),
            Err(e) if e.is_rejected() => e,
            Err(e) => return Err(e),
        };
        let mut marked = Vec::with_capacity(ids.len());
        let mut refused = Vec::new();
        if ids.len() > 1 {
            warn!(
                "mailbox refused {} marks in one statement ({whole}); marking them one at a time",
                ids.len()
            );
            for id in ids {
                match self.mailbox.mark(&[*id], now, &still_ours) {
                    Ok(m) => marked.push((*id, m[0])),
                    Err(e) if e.is_rejected() => refused.push((*id, e.to_string())),
                    Err(e) => return Err(e),
                }
            }
        } else {
            refused.push((ids[0], whole.to_string()));
        }
        Ok(Marks::Some { marked, refused })
    }

    /// Refused marks: each retried after its own doubling backoff (G-BACKFILL-BACKOFF).
    fn refused(
        &mut self,
        owed: &[OwedMark],
        refused: &[(i64, String)],
        now: SystemTime,
    ) -> Result<(), StoreError> {
        for (id, error) in refused {
            let attempts = owed.iter().find(|o| o.msg_id == *id).map_or(0, |o| o.attempts);
            self.ledger.backfill_retry(&[*id], error, &[now + delay(attempts + 1, self.base, self.cap)])?;
            warn!("backfill failed msg_id={id} attempts={} error={error:?}", attempts + 1);
        }
        stats::add(&self.stats.marks_failed, refused.len() as u64);
        Ok(())
    }
}

/// What marking a batch came to.
enum Marks {
    /// One statement marked them all.
    All(Vec<Mark>),
    /// The statement was refused; row by row, these were marked and these refused.
    Some { marked: Vec<(i64, Mark)>, refused: Vec<(i64, String)> },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::config::Config;
    use crate::lease::LeaseGate;
    use crate::ports::Settle;
    use crate::store::memory::{Fault, MemMailbox, MemPg};
    use crate::testkit::{self, Twins};

    fn setup(ids: &[i64]) -> (FakeClock, MemPg, MemMailbox, Backfill<MemPg, MemMailbox>) {
        let Twins { clock, pg, mailbox, .. } = Twins::new();
        for &id in ids {
            mailbox.insert(id, Some("<MSG/>"));
        }
        pg.arrive(ids, clock.now());
        let gate = Arc::new(LeaseGate::open());
        let b =
            Backfill::new(pg.clone(), mailbox.clone(), &Config::defaults().pipeline, gate, testkit::stats());
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
        let (c, _pg, mailbox, mut b) = setup(&[1]);
        assert_eq!(b.round(c.now()).unwrap(), Round::Idle);
        assert_eq!(mailbox.row(1).unwrap().processed_at, None);
    }

    #[test]
    fn terminal_rows_are_marked_once() {
        let (clock, pg, mailbox, mut b) = setup(&[1, 2]);
        pg.record(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        pg.record(&[Settle::skipped(2, crate::domain::SkipReason::Ignored("LDM-*".into()))], clock.now())
            .unwrap();
        assert_eq!(b.round(clock.now()).unwrap(), Round::Marked { written: 2, already: 0, missing: 0 });
        let row = mailbox.row(1).unwrap();
        assert_eq!((row.processed_at, row.status.as_str()), (Some(clock.now()), "PROCESSED"));
        assert!(pg.proc(1).unwrap().backfill_at.is_some());
        assert_eq!(b.round(clock.now()).unwrap(), Round::Idle, "settled rows are not marked again");
    }

    #[test]
    fn a_mark_by_someone_else_is_never_overwritten() {
        let (clock, pg, mailbox, mut b) = setup(&[1]);
        let theirs = clock.now();
        mailbox.mark_externally(1, theirs);
        clock.advance(Duration::from_secs(5));
        pg.record(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        assert_eq!(b.round(clock.now()).unwrap(), Round::Marked { written: 0, already: 1, missing: 0 });
        let row = mailbox.row(1).unwrap();
        assert_eq!((row.processed_at, row.status.as_str()), (Some(theirs), "DONE-ELSEWHERE"));
        assert!(pg.proc(1).unwrap().backfill_at.is_some());
    }

    #[test]
    fn missing_row_is_abandoned_at_once() {
        let (clock, pg, mailbox, mut b) = setup(&[1]);
        mailbox.remove(1);
        pg.record(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        assert_eq!(b.round(clock.now()).unwrap(), Round::Marked { written: 0, already: 0, missing: 1 });
        let p = pg.proc(1).unwrap();
        assert_eq!(p.backfill_abandoned_reason.as_deref(), Some("MISSING_ROW"));
        assert_eq!(p.backfill_at, None);
        assert_eq!(b.round(clock.now()).unwrap(), Round::Idle);
    }

    #[test]
    fn a_mark_still_refused_after_overdue_backfill_is_abandoned() {
        let (clock, pg, mailbox, mut b) = setup(&[1, 2]);
        pg.record(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        clock.advance(Duration::from_secs(86_400));
        pg.record(&[Settle::succeeded(2, "k2", vec![])], clock.now()).unwrap();
        mailbox.inject(Fault::Rejected, u32::MAX);
        // Refused for 30 days: retries do not move the anchor (the terminal time).
        let mut rounds = 0;
        while pg.proc(1).unwrap().backfill_abandoned_at.is_none() {
            clock.advance(Duration::from_secs(900));
            b.round(clock.now()).unwrap();
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
    fn a_refused_mark_backs_off_then_marks() {
        let (clock, pg, mailbox, mut b) = setup(&[1]);
        pg.record(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        mailbox.inject(Fault::Rejected, 2);
        assert_eq!(b.round(clock.now()).unwrap(), Round::Failed { rescheduled: 1 });
        assert_eq!(b.round(clock.now()).unwrap(), Round::Idle, "not due before 30s");
        clock.advance(Duration::from_secs(30));
        assert_eq!(b.round(clock.now()).unwrap(), Round::Failed { rescheduled: 1 });
        clock.advance(Duration::from_secs(59));
        assert_eq!(b.round(clock.now()).unwrap(), Round::Idle, "second delay is 60s");
        clock.advance(Duration::from_secs(1));
        assert_eq!(b.round(clock.now()).unwrap(), Round::Marked { written: 1, already: 0, missing: 0 });
        assert_eq!(pg.proc(1).unwrap().backfill_attempts, 2);
    }

    #[test]
    fn a_mailbox_away_for_two_hours_charges_nothing_and_nothing_goes_overdue() {
        let mut cfg = Config::defaults().pipeline;
        cfg.overdue_backfill = Duration::from_secs(3600); // shorter than the outage
        let clock = FakeClock::new();
        let (pg, mailbox) = (MemPg::new(), MemMailbox::new());
        mailbox.insert(1, Some("<MSG/>"));
        pg.arrive(&[1], clock.now());
        let gate = Arc::new(LeaseGate::open());
        let mut b = Backfill::new(pg.clone(), mailbox.clone(), &cfg, gate, Arc::new(Stats::default()));
        pg.record(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        mailbox.set_down(true);
        for _ in 0..3600 {
            let e = b.round(clock.now()).unwrap_err();
            assert!(e.is_unavailable(), "{e}");
            clock.advance(Duration::from_secs(2));
        }
        let p = pg.proc(1).unwrap();
        assert_eq!(
            (p.backfill_attempts, p.backfill_abandoned_at),
            (0, None),
            "no attempt charged, not overdue"
        );
        mailbox.set_down(false);
        assert_eq!(b.round(clock.now()).unwrap(), Round::Marked { written: 1, already: 0, missing: 0 });
    }

    #[test]
    fn a_stale_instance_marks_nothing() {
        let (clock, pg, mailbox, _) = setup(&[1]);
        pg.record(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        let gate = Arc::new(LeaseGate::open());
        gate.stale();
        let mut b = Backfill::new(
            pg.clone(),
            mailbox.clone(),
            &Config::defaults().pipeline,
            gate,
            Arc::new(Stats::default()),
        );
        assert!(b.round(clock.now()).unwrap_err().is_fenced());
        assert_eq!(mailbox.row(1).unwrap().processed_at, None);
    }

    /// Seed 13144 (#56): own PostgreSQL failed over to a replica that never saw this instance's
    /// lease, and a newer epoch was claimed there; this instance's gate still trusts the lease
    /// it confirmed. The mark transaction asks PostgreSQL too, and writes no mark.
    #[test]
    fn regression_a_holder_whose_lease_postgres_forgot_marks_nothing() {
        use crate::ports::{Claim, Claimant, LeaseStore};
        let (clock, mut pg, mailbox, _) = setup(&[1]);
        pg.record(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        let me = Claimant { id: "b:2:0".into(), host: "b".into(), pid: 2 };
        let Claim::Acquired { epoch: 2, .. } = pg.claim_above(&me, Duration::from_secs(10), 1).unwrap()
        else {
            panic!("epoch 2 claimed above the epoch 1 Redis saw")
        };
        let gate = Arc::new(LeaseGate::open());
        let stats = Arc::new(Stats::default());
        let mut b = Backfill::new(pg.fenced(1), mailbox.clone(), &Config::defaults().pipeline, gate, stats);
        assert!(b.round(clock.now()).unwrap_err().is_fenced());
        assert_eq!(mailbox.row(1).unwrap().processed_at, None, "no mark by epoch 1");
    }

    /// #21 item 4: a mark the mailbox refuses for one row (a trigger) holds back none of the
    /// rows of its statement: they are marked one at a time, only the refused row backs off and
    /// is the only one that can go OVERDUE.
    #[test]
    fn regression_one_refused_mark_holds_back_no_other_row_of_its_statement() {
        let ids: Vec<i64> = (1..=5).collect();
        let (clock, pg, mailbox, mut b) = setup(&ids);
        let settles: Vec<Settle> =
            ids.iter().map(|id| Settle::succeeded(*id, &format!("k{id}"), vec![])).collect();
        pg.record(&settles, clock.now()).unwrap();
        mailbox.tamper(|s| s.refuse_marks.insert(3));
        assert_eq!(b.round(clock.now()).unwrap(), Round::Marked { written: 4, already: 0, missing: 0 });
        for id in [1, 2, 4, 5] {
            assert!(mailbox.row(id).unwrap().processed_at.is_some(), "row {id} marked");
            assert!(pg.proc(id).unwrap().backfill_at.is_some(), "row {id} settled");
        }
        let p = pg.proc(3).unwrap();
        assert_eq!((p.backfill_at, p.backfill_attempts), (None, 1));
        assert!(p.backfill_error.unwrap_or_default().contains("marks of row 3 are refused"));
        clock.advance(Duration::from_secs(31 * 86_400));
        b.round(clock.now()).unwrap();
        let abandoned: Vec<i64> =
            ids.iter().copied().filter(|id| pg.proc(*id).unwrap().backfill_abandoned_at.is_some()).collect();
        assert_eq!(abandoned, vec![3], "only the refused row is OVERDUE");
    }

    /// #21 item 9: a `backfill-backoff-ms` that is not the default is the one used.
    #[test]
    fn regression_the_configured_backfill_backoff_is_used() {
        let clock = FakeClock::new();
        let (pg, mailbox) = (MemPg::new(), MemMailbox::new());
        mailbox.insert(1, Some("<MSG/>"));
        pg.arrive(&[1], clock.now());
        let mut cfg = Config::defaults().pipeline;
        cfg.backfill_backoff = Duration::from_secs(5);
        let mut b = Backfill::new(
            pg.clone(),
            mailbox.clone(),
            &cfg,
            Arc::new(LeaseGate::open()),
            Arc::new(Stats::default()),
        );
        pg.record(&[Settle::succeeded(1, "k1", vec![])], clock.now()).unwrap();
        mailbox.inject(Fault::Rejected, 2);
        assert_eq!(b.round(clock.now()).unwrap(), Round::Failed { rescheduled: 1 });
        assert_eq!(pg.proc(1).unwrap().backfill_next_at, Some(clock.now() + Duration::from_secs(5)));
        clock.advance(Duration::from_secs(5));
        assert_eq!(b.round(clock.now()).unwrap(), Round::Failed { rescheduled: 1 });
        assert_eq!(
            pg.proc(1).unwrap().backfill_next_at,
            Some(clock.now() + Duration::from_secs(10)),
            "doubling"
        );
    }
}
