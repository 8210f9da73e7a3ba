//! Jobs (jobs thread; never in the way of the head): event retention (G-EVENT-RETENTION) and
//! archiving settled terminal rows to PROC_STATE_HST (G-PROC-HST). Both touch only rows the
//! pump is done with (SENT events; terminal rows whose mark is written), with conditional
//! writes, so they need no lock against the pump (SPEC §4.6). Neither touches flights (INV-18).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use log::info;

use crate::config::Pipeline;
use crate::error::StoreError;
use crate::ports::Housekeeping;
use crate::stage::{Next, RoundReport, Stage};
use crate::stats::{self, Stats};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Round {
    pub events_deleted: usize,
    pub archived: usize,
    pub skipped: usize,
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
    batch: usize,
    stats: Arc<Stats>,
}

impl<H: Housekeeping> Stage for Jobs<H> {
    type Round = Round;
    const NAME: &'static str = "jobs";

    fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        Jobs::round(self, now)
    }
}

impl<H: Housekeeping> Jobs<H> {
    pub fn new(store: H, cfg: &Pipeline, stats: Arc<Stats>) -> Self {
        Jobs {
            store,
            retention: cfg.event_retention,
            archive_after: cfg.archive_after,
            batch: cfg.backfill_batch.max(100),
            stats,
        }
    }

    pub fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        let mut r = Round::default();
        if let Some(cut) = now.checked_sub(self.retention) {
            r.events_deleted = self.store.delete_sent_events(cut, self.batch)?;
        }
        if let Some(cut) = now.checked_sub(self.archive_after) {
            let a = self.store.archive(cut, self.batch, now)?;
            (r.archived, r.skipped) = (a.archived, a.skipped);
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::config::Config;
    use crate::domain::{EventStatus, InboundRow, NewEvent, ProcStatus, Target};
    use crate::ports::{Fifo, Intake, MarkLedger, Outbox, RoundRecord, Settle};
    use crate::store::memory::MemPg;

    #[test]
    fn retention_and_archive_follow_their_periods_on_the_fake_clock() {
        let clock = FakeClock::new();
        let mut pg = MemPg::new();
        pg.enqueue(&[InboundRow { id: 1, received_at: None }], Some(1), clock.now()).unwrap();
        let ev = NewEvent {
            target: Target::KafkaMsg.as_str().into(),
            partition_key: "F".into(),
            event_type: "UPSERT".into(),
            state_version: 1,
            payload_json: "{}".into(),
        };
        pg.commit(&RoundRecord::of(&[Settle::succeeded(1, "k", vec![ev])]), clock.now()).unwrap();
        let id = pg.pending(Target::KafkaMsg, 1).unwrap()[0].event_id;
        pg.mark_sent(&[(id, 1)], clock.now()).unwrap();
        pg.backfill_settled(&[1], clock.now()).unwrap();
        let mut jobs = Jobs::new(pg.clone(), &Config::defaults().pipeline, Arc::new(Stats::default()));
        assert_eq!(jobs.round(clock.now()).unwrap(), Round::default());
        clock.advance(Duration::from_secs(86_401)); // archive-after 1d
        assert_eq!(jobs.round(clock.now()).unwrap(), Round { archived: 1, ..Default::default() });
        assert_eq!(pg.proc(1).unwrap().row.state, ProcStatus::Archived);
        assert_eq!(pg.inspect(|s| s.events[&id].state), EventStatus::Sent, "7d retention not reached");
        clock.advance(Duration::from_secs(6 * 86_400));
        assert_eq!(jobs.round(clock.now()).unwrap(), Round { events_deleted: 1, ..Default::default() });
        assert!(pg.inspect(|s| s.events.is_empty()));
    }
}
