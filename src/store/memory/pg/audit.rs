//! What the consistency sentinel reads (#20).

use super::*;

impl crate::ports::StateAudit for MemPg {
    fn known_max(&mut self) -> StoreResult<i64> {
        self.read(|s| Ok(s.procs.keys().next_back().copied().unwrap_or(0)))
    }

    fn unknown(&mut self, ids: &[i64]) -> StoreResult<Vec<i64>> {
        self.read(|s| Ok(ids.iter().copied().filter(|m| !s.procs.contains_key(m)).collect()))
    }

    fn succeeded_above(&mut self, after: i64, limit: usize) -> StoreResult<Vec<i64>> {
        self.read(|s| {
            let ok = |p: &MemProc| p.row.state == ProcStatus::Succeeded;
            let mut ids: Vec<i64> = s
                .procs
                .range(after + 1..)
                .chain(s.hst.range(after + 1..))
                .filter(|(_, p)| ok(p))
                .map(|(m, _)| *m)
                .collect();
            ids.sort_unstable();
            ids.truncate(limit);
            Ok(ids)
        })
    }

    fn succeeded_last(&mut self, limit: usize) -> StoreResult<Vec<i64>> {
        self.read(|s| {
            let mut ids: Vec<i64> = s
                .procs
                .iter()
                .rev()
                .filter(|(_, p)| p.row.state == ProcStatus::Succeeded)
                .take(limit)
                .map(|(m, _)| *m)
                .collect();
            ids.reverse();
            Ok(ids)
        })
    }

    fn newest_succeeded_of(&mut self, tags: &[String]) -> StoreResult<Option<i64>> {
        self.read(|s| {
            Ok(s.procs
                .values()
                .chain(s.hst.values())
                .filter(|p| p.row.state == ProcStatus::Succeeded)
                .filter(|p| p.row.type_tag.as_ref().is_some_and(|t| tags.contains(t)))
                .map(|p| p.row.msg_id)
                .max())
        })
    }

    fn newest_write(&mut self) -> StoreResult<Option<SystemTime>> {
        self.read(|s| Ok(s.procs.values().rev().take(1000).map(|p| p.updated_at).max()))
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
