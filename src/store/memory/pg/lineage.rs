//! The operator's reads of a message's life (#40) on the twin, as `store::pg::lineage` answers
//! them: the dead-letter queue, a message's row and events, a flight's messages.

use super::*;
use crate::ports::{DeadFilter, DeadLetter, Decided, LineageReads, TraceEvent, TraceRow};

impl LineageReads for MemPg {
    fn dead_letters(&mut self, f: &DeadFilter) -> StoreResult<Vec<DeadLetter>> {
        self.read(|s| {
            Ok(s.procs
                .values()
                .filter(|p| p.row.state == ProcStatus::Dead)
                .filter(|p| f.class.is_none() || p.row.error_class == f.class)
                .filter(|p| f.since.is_none_or(|since| p.updated_at >= since))
                .take(usize::try_from(f.limit).unwrap_or(0))
                .map(|p| DeadLetter {
                    msg_id: p.row.msg_id,
                    type_tag: p.row.type_tag.clone(),
                    class: p.row.error_class,
                    error: p.row.last_error.clone(),
                    attempts: p.row.attempts as i32,
                    since: p.updated_at,
                    dismissed: p.dismissed_at.map(|at| (at, p.dismissed_note.clone().unwrap_or_default())),
                })
                .collect())
        })
    }

    fn trace(&mut self, msg_id: i64) -> StoreResult<(Option<TraceRow>, Vec<TraceEvent>)> {
        self.read(|s| {
            // An archived row leaves a stub (state ARCHIVED): the whole row is the archive's copy.
            let live = s.procs.get(&msg_id).filter(|p| p.row.state != ProcStatus::Archived);
            let row = match live {
                Some(p) => Some(trace_row(p, None)),
                None => s.hst.get(&msg_id).map(|p| trace_row(p, p.archived_at)),
            };
            let events = s.events.values().filter(|e| e.event.msg_id == Some(msg_id)).map(trace_event);
            Ok((row, events.collect()))
        })
    }

    fn flight_events(&mut self, flid: &str, limit: i64) -> StoreResult<Vec<TraceEvent>> {
        self.read(|s| {
            Ok(s.events
                .values()
                .rev()
                .filter(|e| e.event.target == Target::KafkaMsg && e.event.partition_key == flid)
                .take(usize::try_from(limit).unwrap_or(0))
                .map(trace_event)
                .collect())
        })
    }

    fn decided(&mut self, ids: &[i64]) -> StoreResult<BTreeMap<i64, Decided>> {
        self.read(|s| {
            let live =
                ids.iter().filter_map(|id| s.procs.get(id)).filter(|p| p.row.state != ProcStatus::Archived);
            let archived = ids.iter().filter_map(|id| s.hst.get(id));
            Ok(live
                .chain(archived)
                .map(|p| (p.row.msg_id, Decided { type_tag: p.row.type_tag.clone(), at: p.updated_at }))
                .collect())
        })
    }
}

fn trace_row(p: &MemProc, archived_at: Option<SystemTime>) -> TraceRow {
    TraceRow {
        state: p.row.state.as_str().to_string(),
        archived_at,
        attempts: p.row.attempts as i32,
        class: p.row.error_class,
        error: p.row.last_error.clone(),
        type_tag: p.row.type_tag.clone(),
        identity: p.row.identity_key.clone(),
        enqueued_at: p.enqueued_at,
        updated_at: p.updated_at,
        redis_record: p.redis_record.map(|r| r.as_str().to_string()),
        marked_at: p.backfill_at,
        mark_abandoned: p.backfill_abandoned_reason.clone(),
        dismissed_at: p.dismissed_at,
    }
}

fn trace_event(e: &MemEvent) -> TraceEvent {
    TraceEvent {
        event_id: e.event.event_id,
        msg_id: e.event.msg_id,
        event_key: e.event.key(),
        target: e.event.target.as_str().to_string(),
        state: e.state.as_str().to_string(),
        attempts: e.event.attempts as i32,
        // The twin stamps every event it writes; one a test planted without a time reads as the epoch.
        created_at: e.event.created_at.unwrap_or(SystemTime::UNIX_EPOCH),
        sent_at: e.sent_at,
        error: e.last_error.clone(),
        payload_json: e.event.payload_json.clone(),
        landed: e.landed.clone(),
    }
}
