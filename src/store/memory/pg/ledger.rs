//! The backfill ledger: marks owed, settled, retried, abandoned (INV-8, C-16).

use super::*;

impl MarkLedger for MemPg {
    fn still_holds(&mut self) -> StoreResult<()> {
        self.write(|_| Ok(()))
    }

    fn due_backfills(&mut self, now: SystemTime, limit: usize) -> StoreResult<Vec<OwedMark>> {
        self.read(|s| {
            let mut due: Vec<_> = s
                .procs
                .values()
                .filter(|p| {
                    p.row.state.is_terminal() && p.backfill_at.is_none() && p.backfill_abandoned_at.is_none()
                })
                .filter_map(|p| {
                    p.backfill_next_at.filter(|t| *t <= now).map(|t| (t, p.row.msg_id, p.backfill_attempts))
                })
                .collect();
            due.sort();
            Ok(due
                .into_iter()
                .take(limit)
                .map(|(_, msg_id, attempts)| OwedMark { msg_id, attempts })
                .collect())
        })
    }

    fn backfill_settled(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            for id in ids {
                if let Some(p) = s.procs.get_mut(id).filter(|p| p.backfill_at.is_none()) {
                    p.backfill_at = Some(now);
                    p.backfill_next_at = None;
                    p.updated_at = now;
                }
            }
            Ok(())
        })
    }

    fn backfill_retry(&mut self, ids: &[i64], error: &str, next_at: &[SystemTime]) -> StoreResult<()> {
        self.write(|s| {
            for (id, next) in ids.iter().zip(next_at) {
                // Only a mark still owed (as PostgreSQL's `backfill_at IS NULL`). A retry is no
                // lifecycle step: UPDATED_AT keeps the terminal time (the overdue anchor).
                if let Some(p) = s.procs.get_mut(id).filter(|p| p.backfill_at.is_none()) {
                    p.backfill_attempts += 1;
                    p.backfill_error = Some(error.to_string());
                    p.backfill_next_at = Some(*next);
                }
            }
            Ok(())
        })
    }

    fn backfill_abandon(&mut self, ids: &[i64], reason: &str, now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            for id in ids {
                if let Some(p) = s.procs.get_mut(id).filter(|p| p.backfill_at.is_none()) {
                    p.backfill_abandoned_at = Some(now);
                    p.backfill_abandoned_reason = Some(reason.to_string());
                    p.backfill_next_at = None;
                    p.updated_at = now;
                }
            }
            Ok(())
        })
    }

    fn backfill_overdue(&mut self, owed_before: SystemTime, limit: usize) -> StoreResult<Vec<i64>> {
        self.read(|s| {
            Ok(s.procs
                .values()
                .filter(|p| {
                    p.row.state.is_terminal()
                        && p.backfill_at.is_none()
                        && p.backfill_abandoned_at.is_none()
                        && p.backfill_next_at.is_some()
                        && p.backfill_attempts > 0
                        && p.updated_at <= owed_before
                })
                .take(limit)
                .map(|p| p.row.msg_id)
                .collect())
        })
    }
}
