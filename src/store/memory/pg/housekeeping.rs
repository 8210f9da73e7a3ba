//! Retention and the archive.

use super::*;

fn archivable(p: &MemProc, cut: &ArchiveCut) -> bool {
    // Settled: the mark written, or abandoned and reconciled by a person (C-16).
    let settled =
        p.backfill_at.is_some() || (p.backfill_abandoned_at.is_some() && p.backfill_reconciled_at.is_some());
    let kept = match p.row.state {
        ProcStatus::Succeeded | ProcStatus::Skipped => true,
        ProcStatus::Dead => p.dismissed_at.is_some() || p.updated_at < cut.dead_before,
        _ => false,
    };
    kept && settled && p.updated_at < cut.settled_before
}

impl Housekeeping for MemPg {
    fn delete_sent_events(&mut self, sent_before: SystemTime, limit: usize) -> StoreResult<usize> {
        self.write(|s| {
            let ids: Vec<i64> = s
                .events
                .values()
                .filter(|e| e.state == EventStatus::Sent && e.sent_at.is_some_and(|t| t < sent_before))
                .take(limit)
                .map(|e| e.event.event_id)
                .collect();
            for id in &ids {
                if let Some(m) = s.events.remove(id).and_then(|e| e.event.msg_id) {
                    s.events_pruned = s.events_pruned.max(m);
                }
            }
            Ok(ids.len())
        })
    }

    fn archive_candidates(&mut self, cut: &ArchiveCut, limit: usize) -> StoreResult<Vec<i64>> {
        self.read(|s| {
            Ok(s.procs.values().filter(|p| archivable(p, cut)).take(limit).map(|p| p.row.msg_id).collect())
        })
    }

    fn archive_one(
        &mut self,
        msg_id: i64,
        cut: &ArchiveCut,
        now: SystemTime,
    ) -> StoreResult<Option<ArchivedAs>> {
        self.write(|s| {
            let Some(p) = s.procs.get_mut(&msg_id).filter(|p| archivable(p, cut)) else {
                return Ok(None); // re-checked: no longer a candidate, nothing kept
            };
            let undealt = p.row.state == ProcStatus::Dead && p.dismissed_at.is_none();
            let mut copy = p.clone();
            copy.archived_at = Some(now);
            s.hst.insert(msg_id, copy);
            p.row = ProcRow {
                msg_id,
                state: ProcStatus::Archived,
                attempts: 0,
                next_attempt_at: None,
                error_class: None,
                last_error: None,
                identity_key: p.row.identity_key.take(),
                first_failed_at: None,
                type_tag: None,
                received_at: None,
            };
            p.updated_at = now;
            p.received_at = None;
            p.backfill_at = None;
            p.backfill_next_at = None;
            p.backfill_attempts = 0;
            p.backfill_error = None;
            p.archived_at = Some(now);
            p.dismissed_at = None;
            p.dismissed_note = None;
            Ok(Some(if undealt { ArchivedAs::DeadUndealt } else { ArchivedAs::Settled }))
        })
    }
}
