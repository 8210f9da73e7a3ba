//! Jobs (jobs thread; never in the way of the head): event retention (G-EVENT-RETENTION),
//! archiving settled terminal rows to PROC_STATE_HST (G-PROC-HST), and the requests' timeouts
//! (G-REQ-TRACK). All touch only rows the pump is done with (SENT events; terminal rows whose
//! mark is written; requests through conditional writes the answer guard's also respect), so
//! they need no lock against the pump (SPEC §4.6). None touches flights (INV-18).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use log::{info, warn};

use crate::config::Config;
use crate::error::StoreError;
use crate::ports::{ArchiveCut, ArchivedAs, Housekeeping, Requests};
use crate::stage::{Next, RoundReport, Stage};
use crate::stats::{self, Stats};

mod requests;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Round {
    pub events_deleted: usize,
    pub archived: usize,
    /// Candidates that no longer qualified when their transaction re-checked them.
    pub skipped: usize,
    /// Candidates the store refused to archive (each named in a WARN; they stay in PROC_STATE).
    pub refused: usize,
    /// A batch came back full: run again at once.
    pub more: bool,
}

impl RoundReport for Round {
    fn next(&self) -> Next {
        if self.more {
            Next::Now
        } else {
            Next::Idle
        }
    }

    fn progressed(&self) -> bool {
        false
    }
}

pub struct Jobs<H> {
    store: H,
    retention: Duration,
    archive_after: Duration,
    dead_keep: Duration,
    /// How msgx asks the AODB (`msgx.requests.*`): timeouts and a heal's next tries.
    asking: crate::requests::Asking,
    batch: usize,
    stats: Arc<Stats>,
}

impl<H: Housekeeping + Requests> Stage for Jobs<H> {
    type Round = Round;
    const ID: crate::stage::StageId = crate::stage::StageId::Jobs;

    fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        Jobs::round(self, now)
    }
}

impl<H: Housekeeping + Requests> Jobs<H> {
    pub fn new(store: H, cfg: &Config, stats: Arc<Stats>) -> Self {
        let p = &cfg.pipeline;
        Jobs {
            store,
            retention: p.event_retention,
            archive_after: p.archive_after,
            dead_keep: p.dead_keep,
            asking: crate::requests::Asking::of(cfg),
            batch: p.backfill_batch.max(100),
            stats,
        }
    }

    pub fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        let mut r = Round::default();
        if let Some(cut) = now.checked_sub(self.retention) {
            r.events_deleted = self.store.delete_sent_events(cut, self.batch)?;
        }
        if let (Some(settled_before), Some(dead_before)) =
            (now.checked_sub(self.archive_after), now.checked_sub(self.dead_keep))
        {
            self.archive(&ArchiveCut { settled_before, dead_before }, now, &mut r)?;
        }
        self.keep_requests(now)?;
        r.more = r.events_deleted == self.batch || r.archived + r.skipped == self.batch;
        if r.events_deleted > 0 {
            stats::add(&self.stats.events_deleted, r.events_deleted as u64);
            info!("retention deleted events={} (SENT longer than event-retention)", r.events_deleted);
        }
        if r.archived + r.skipped > 0 {
            stats::add(&self.stats.archived, r.archived as u64);
            info!("archived rows={} skipped={} (to PROC_STATE_HST)", r.archived, r.skipped);
        }
        Ok(r)
    }

    /// One archive pass, a transaction per row. A row the store refuses is that row's trouble
    /// (SPEC §4.9's culprit rule): named in a WARN and left where it is, while the others move
    /// on; when the store refuses every candidate it refuses the archive, and the stage stalls.
    fn archive(&mut self, cut: &ArchiveCut, now: SystemTime, r: &mut Round) -> Result<(), StoreError> {
        let ids = self.store.archive_candidates(cut, self.batch)?;
        let mut first_refusal = None;
        for id in &ids {
            match self.store.archive_one(*id, cut, now) {
                Ok(Some(ArchivedAs::Settled)) => r.archived += 1,
                Ok(Some(ArchivedAs::DeadUndealt)) => {
                    r.archived += 1;
                    warn!(
                        "dead message archived msg_id={id}: nobody replayed or dismissed it within msgx.proc-state.dead-keep ({}); PROC_STATE_HST keeps it",
                        crate::config::format_duration(self.dead_keep)
                    );
                }
                Ok(None) => r.skipped += 1,
                Err(e) if e.is_rejected() => {
                    r.refused += 1;
                    warn!("archive refused msg_id={id}: {e}; the row stays in PROC_STATE");
                    first_refusal.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        match first_refusal {
            Some(e) if r.refused == ids.len() => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::config::Config;
    use crate::domain::{EventStatus, InboundRow, NewEvent, ProcStatus, Target};
    use crate::error::ErrorClass;
    use crate::ports::{Fifo, Intake, MarkLedger, Outbox, RoundRecord, Sent, Settle};
    use crate::store::memory::MemPg;

    #[test]
    fn retention_and_archive_follow_their_periods_on_the_fake_clock() {
        let clock = FakeClock::new();
        let mut pg = MemPg::new();
        pg.enqueue(&[InboundRow { id: 1, received_at: None }], Some(1), clock.now()).unwrap();
        let ev = NewEvent {
            target: Target::KafkaMsg,
            partition_key: "F".into(),
            event_type: "UPSERT".into(),
            state_version: 1,
            payload_json: "{}".into(),
        };
        pg.commit(&RoundRecord::of(&[Settle::succeeded(1, "k", vec![ev])]), clock.now()).unwrap();
        let id = pg.pending(Target::KafkaMsg, 1).unwrap()[0].event_id;
        pg.mark_sent(&[Sent::unlanded(id, 1)], clock.now()).unwrap();
        pg.backfill_settled(&[1], clock.now()).unwrap();
        let mut jobs = Jobs::new(pg.clone(), &Config::defaults(), Arc::new(Stats::default()));
        assert_eq!(jobs.round(clock.now()).unwrap(), Round::default());
        clock.advance(Duration::from_secs(86_401)); // archive-after 1d
        assert_eq!(jobs.round(clock.now()).unwrap(), Round { archived: 1, ..Default::default() });
        assert_eq!(pg.proc(1).unwrap().row.state, ProcStatus::Archived);
        assert_eq!(pg.inspect(|s| s.events[&id].state), EventStatus::Sent, "7d retention not reached");
        clock.advance(Duration::from_secs(6 * 86_400));
        assert_eq!(jobs.round(clock.now()).unwrap(), Round { events_deleted: 1, ..Default::default() });
        assert!(pg.inspect(|s| s.events.is_empty()));
    }

    fn dead_rows(pg: &mut MemPg, ids: &[i64], at: SystemTime) {
        let rows: Vec<InboundRow> = ids.iter().map(|id| InboundRow { id: *id, received_at: None }).collect();
        pg.enqueue(&rows, ids.iter().max().copied(), at).unwrap();
        let dead = |id| {
            Settle::failed(
                id,
                crate::ports::Failure::Dead { class: ErrorClass::Exhausted, error: "poison".into() },
            )
        };
        let settles: Vec<Settle> = ids.iter().map(|id| dead(*id)).collect();
        pg.commit(&RoundRecord::of(&settles), at).unwrap();
        pg.backfill_settled(ids, at).unwrap();
    }

    /// #21 item 2: past `archive-after` a DEAD message is still in PROC_STATE (replayable,
    /// counted); a dismissed one is archived; an undealt one only after `dead-keep`.
    #[test]
    fn regression_the_dead_letter_queue_outlasts_archive_after() {
        use crate::ports::Operator;
        let clock = FakeClock::new();
        let mut pg = MemPg::new();
        dead_rows(&mut pg, &[1, 2], clock.now());
        let mut jobs = Jobs::new(pg.clone(), &Config::defaults(), Arc::new(Stats::default()));
        clock.advance(Duration::from_secs(3 * 86_400));
        assert_eq!(jobs.round(clock.now()).unwrap(), Round::default(), "Monday: still in the queue");
        assert_eq!(pg.proc(1).unwrap().row.state, ProcStatus::Dead);
        pg.dismiss(&[1], "resent corrected as 4711", clock.now()).unwrap();
        clock.advance(Duration::from_secs(86_401));
        assert_eq!(jobs.round(clock.now()).unwrap(), Round { archived: 1, ..Default::default() });
        assert_eq!(pg.proc(1).unwrap().row.state, ProcStatus::Archived);
        assert_eq!(
            pg.inspect(|s| s.hst[&1].dismissed_note.clone()).as_deref(),
            Some("resent corrected as 4711")
        );
        assert_eq!(pg.proc(2).unwrap().row.state, ProcStatus::Dead, "undealt: kept");
        clock.advance(Duration::from_secs(27 * 86_400)); // 31 days after it died: dead-keep 30d
        assert_eq!(jobs.round(clock.now()).unwrap(), Round { archived: 1, ..Default::default() });
        assert_eq!(pg.proc(2).unwrap().row.state, ProcStatus::Archived);
    }

    /// #21 item 5: a row the store refuses to archive is that row's trouble: the others move on.
    #[test]
    fn regression_one_row_refused_by_the_archive_holds_back_no_other() {
        use crate::store::memory::Fault;
        let clock = FakeClock::new();
        let mut pg = MemPg::new();
        pg.enqueue(
            &(1..=3).map(|id| InboundRow { id, received_at: None }).collect::<Vec<_>>(),
            Some(3),
            clock.now(),
        )
        .unwrap();
        let settles: Vec<Settle> =
            (1..=3).map(|id| Settle::succeeded(id, &format!("k{id}"), vec![])).collect();
        pg.commit(&RoundRecord::of(&settles), clock.now()).unwrap();
        pg.backfill_settled(&[1, 2, 3], clock.now()).unwrap();
        let mut jobs = Jobs::new(pg.clone(), &Config::defaults(), Arc::new(Stats::default()));
        clock.advance(Duration::from_secs(86_401));
        // Let retention, the candidates and the first row through; refuse the second row.
        pg.inject_later(3, Fault::Rejected, 1);
        let r = jobs.round(clock.now()).unwrap();
        assert_eq!((r.archived, r.refused), (2, 1), "{r:?}");
        assert_eq!(pg.proc(2).unwrap().row.state, ProcStatus::Succeeded, "the refused row stays");
        assert_eq!(pg.proc(3).unwrap().row.state, ProcStatus::Archived, "the row behind it moved on");
        // Every candidate refused: the store refuses the archive, and the stage stalls on it.
        pg.inject_later(2, Fault::Rejected, 1);
        assert!(jobs.round(clock.now()).unwrap_err().is_rejected());
        assert_eq!(jobs.round(clock.now()).unwrap().archived, 1, "and goes on once it stops refusing");
    }
}
