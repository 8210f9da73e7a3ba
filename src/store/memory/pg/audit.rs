//! What the consistency sentinel reads (#20).

use super::*;
use crate::ports::SucceededRow;

impl crate::ports::StateAudit for MemPg {
    fn known_max(&mut self) -> StoreResult<i64> {
        self.read(|s| Ok(s.procs.keys().next_back().copied().unwrap_or(0)))
    }

    fn unknown(&mut self, ids: &[i64]) -> StoreResult<Vec<i64>> {
        self.read(|s| Ok(ids.iter().copied().filter(|m| !s.procs.contains_key(m)).collect()))
    }

    fn succeeded_above(&mut self, after: i64, limit: usize) -> StoreResult<Vec<SucceededRow>> {
        self.read(|s| {
            let mut rows: Vec<SucceededRow> = s
                .procs
                .range(after + 1..)
                .chain(s.hst.range(after + 1..))
                .filter(|(_, p)| p.row.state == ProcStatus::Succeeded)
                .map(|(_, p)| succeeded_row(p))
                .collect();
            rows.sort_unstable_by_key(|r| r.msg_id);
            rows.truncate(limit);
            Ok(rows)
        })
    }

    fn succeeded_last(&mut self, limit: usize) -> StoreResult<Vec<SucceededRow>> {
        self.read(|s| {
            let mut rows: Vec<SucceededRow> = s
                .procs
                .values()
                .rev()
                .filter(|p| p.row.state == ProcStatus::Succeeded)
                .take(limit)
                .map(succeeded_row)
                .collect();
            rows.reverse();
            Ok(rows)
        })
    }

    fn newest_recorded(&mut self) -> StoreResult<Option<i64>> {
        self.read(|s| {
            Ok(s.procs
                .values()
                .chain(s.hst.values())
                .filter(|p| p.row.state == ProcStatus::Succeeded && p.redis_record.is_some())
                .map(|p| p.row.msg_id)
                .max())
        })
    }

    fn generation_above(&mut self, after: i64) -> StoreResult<Option<i64>> {
        self.read(|s| {
            Ok(s.procs
                .range(after + 1..)
                .chain(s.hst.range(after + 1..))
                .map(|(_, p)| p)
                .filter(|p| p.row.state == ProcStatus::Succeeded)
                .filter(|p| p.redis_record == Some(crate::domain::RedisRecord::Generation))
                .map(|p| p.row.msg_id)
                .max())
        })
    }

    fn newest_enqueue(&mut self) -> StoreResult<Option<SystemTime>> {
        self.read(|s| Ok(s.procs.values().rev().take(1000).map(|p| p.enqueued_at).max()))
    }

    fn events_pruned(&mut self) -> StoreResult<i64> {
        self.read(|s| Ok(s.events_pruned))
    }

    fn events_of(&mut self, ids: &[i64]) -> StoreResult<Vec<(i64, crate::domain::NewEvent)>> {
        self.read(|s| Ok(MemPg::outbox_of(s, ids)))
    }
}

impl MemPg {
    /// As `StateAudit::events_of` (the twin keeps no event type: every one is an upsert).
    fn outbox_of(s: &PgState, ids: &[i64]) -> Vec<(i64, crate::domain::NewEvent)> {
        let mut out: Vec<(i64, Option<i32>, i64, crate::domain::NewEvent)> = s
            .events
            .values()
            .filter_map(|e| {
                let m = e.event.msg_id.filter(|m| ids.contains(m))?;
                let ev = crate::domain::NewEvent {
                    target: e.event.target,
                    partition_key: e.event.partition_key.clone(),
                    event_type: "UPSERT".into(),
                    state_version: e.event.state_version,
                    payload_json: e.event.payload_json.clone(),
                };
                Some((m, e.event.ordinal, e.event.event_id, ev))
            })
            .collect();
        out.sort_by_key(|(m, o, id, _)| (*m, o.unwrap_or(i32::MAX), *id));
        out.into_iter().map(|(m, _, _, e)| (m, e)).collect()
    }
}

fn succeeded_row(p: &MemProc) -> SucceededRow {
    SucceededRow { msg_id: p.row.msg_id, record: p.redis_record, at: p.updated_at, rules: p.rules_version }
}

impl crate::ports::HealLog for MemPg {
    fn heals_since(&mut self, since: SystemTime) -> StoreResult<Vec<crate::ports::HealRecord>> {
        self.read(|s| Ok(s.heals.iter().filter(|h| h.at >= since).cloned().collect()))
    }

    fn record_heal(&mut self, heal: &crate::ports::HealRecord) -> StoreResult<()> {
        self.write(|s| {
            s.heals.push(heal.clone());
            Ok(())
        })
    }
}
