//! Operators' reads of a message's life (#40): the dead-letter queue listed (`msgx dead`), and a
//! message's row and outbox events (`msgx trace`). Read only, from own PostgreSQL, never on a
//! stage's path.

use std::time::SystemTime;

use super::Pg;
use crate::domain::{MsgEvent, Target};
use crate::error::ErrorClass;
use crate::error::StoreError;
use crate::ports::{
    DeadFilter, DeadLetter, Decided, Landed, LineageReads, Position, StoreResult, TraceEvent, TraceRow,
};

impl LineageReads for Pg {
    /// The DEAD messages still in PROC_STATE (dismissed ones too, marked), oldest MSG_ID first.
    fn dead_letters(&mut self, f: &DeadFilter) -> StoreResult<Vec<DeadLetter>> {
        let class = f.class.map(|c| c.as_str().to_string());
        self.run(|c| {
            let rows = c.query(
                "SELECT msg_id, type_tag, error_class, last_error, attempts, updated_at, dismissed_at, dismissed_note
                 FROM proc_state
                 WHERE state = 'DEAD' AND ($1::text IS NULL OR error_class = $1)
                   AND ($2::timestamptz IS NULL OR updated_at >= $2)
                 ORDER BY msg_id LIMIT $3",
                &[&class, &f.since, &f.limit],
            )?;
            Ok(rows
                .iter()
                .map(|r| DeadLetter {
                    msg_id: r.get(0),
                    type_tag: r.get(1),
                    class: r.get::<_, Option<&str>>(2).and_then(ErrorClass::parse),
                    error: r.get(3),
                    attempts: r.get(4),
                    since: r.get(5),
                    dismissed: r
                        .get::<_, Option<SystemTime>>(6)
                        .map(|at| (at, r.get::<_, Option<String>>(7).unwrap_or_default())),
                })
                .collect())
        })
    }

    /// The `KAFKA:msg` events of flight `flid`, newest first, at most `limit` (SENT ones until
    /// `event-retention` prunes them): the messages that changed it.
    fn flight_events(&mut self, flid: &str, limit: i64) -> StoreResult<Vec<TraceEvent>> {
        self.run(|c| {
            let rows = c.query(
                &format!(
                    "SELECT {EVENT_COLS} FROM msg_event WHERE target = 'KAFKA:msg' AND partition_key = $1
                     ORDER BY event_id DESC LIMIT $2"
                ),
                &[&flid, &limit],
            )?;
            Ok(rows.iter().map(trace_event).collect::<Result<Vec<_>, _>>())
        })?
    }

    /// What each of `ids` is and when it got its outcome (PROC_STATE, or the archive's copy).
    fn decided(&mut self, ids: &[i64]) -> StoreResult<std::collections::BTreeMap<i64, Decided>> {
        self.run(|c| {
            let rows = c.query(
                "SELECT msg_id, type_tag, updated_at FROM proc_state WHERE msg_id = ANY($1) AND state <> 'ARCHIVED'
                 UNION ALL SELECT msg_id, type_tag, updated_at FROM proc_state_hst WHERE msg_id = ANY($1)",
                &[&ids],
            )?;
            Ok(rows.iter().map(|r| (r.get(0), Decided { type_tag: r.get(1), at: r.get(2) })).collect())
        })
    }

    /// `msg_id`'s row — from PROC_STATE, else the archive — and its outbox events in EVENT_ID
    /// order (SENT ones until `event-retention` prunes them).
    fn trace(&mut self, msg_id: i64) -> StoreResult<(Option<TraceRow>, Vec<TraceEvent>)> {
        self.run(|c| {
            let cols =
                "state, attempts, error_class, last_error, type_tag, identity_key, enqueued_at, updated_at,
                        CASE WHEN snapshot_stale THEN 'stale' ELSE redis_record END,
                        backfill_at, backfill_abandoned_reason, dismissed_at";
            let live = c.query(
                &format!("SELECT {cols}, NULL::timestamptz FROM proc_state WHERE msg_id = $1"),
                &[&msg_id],
            )?;
            // An archived row leaves a stub in PROC_STATE (state ARCHIVED, the rest cleared): the
            // whole row is the archive's copy.
            let stub = live.first().is_some_and(|r| r.get::<_, &str>(0) == "ARCHIVED");
            let rows = if live.is_empty() || stub {
                c.query(
                    &format!("SELECT {cols}, archived_at FROM proc_state_hst WHERE msg_id = $1"),
                    &[&msg_id],
                )?
            } else {
                live
            };
            let row = rows.first().map(|r| TraceRow {
                state: r.get(0),
                attempts: r.get(1),
                class: r.get::<_, Option<&str>>(2).and_then(ErrorClass::parse),
                error: r.get(3),
                type_tag: r.get(4),
                identity: r.get(5),
                enqueued_at: r.get(6),
                updated_at: r.get(7),
                redis_record: r.get(8),
                marked_at: r.get(9),
                mark_abandoned: r.get(10),
                dismissed_at: r.get(11),
                archived_at: r.get(12),
            });
            let rows = c.query(
                &format!("SELECT {EVENT_COLS} FROM msg_event WHERE msg_id = $1 ORDER BY event_id"),
                &[&msg_id],
            )?;
            let events = rows.iter().map(trace_event).collect::<Result<Vec<_>, _>>();
            Ok(events.map(|events| (row, events)))
        })?
    }
}

/// A receipt from its columns: a Kafka record's, or a COUTMSGS row's.
fn landed(
    topic: Option<String>,
    partition: Option<i32>,
    offset: Option<i64>,
    row: Option<i64>,
) -> Option<Landed<'static>> {
    match (topic, partition, offset, row) {
        (Some(topic), Some(partition), Some(offset), _) => {
            Some(Landed::Kafka { topic: topic.into(), at: Position { partition, offset } })
        }
        (_, _, _, Some(row)) => Some(Landed::Outbound { row }),
        _ => None,
    }
}

/// The columns [`trace_event`] reads, in its order.
const EVENT_COLS: &str =
    "event_id, target, state, attempts, created_at, sent_at, last_error, payload_json, ordinal,
     partition_key, state_version, sent_topic, sent_partition, sent_offset, sent_row_id, msg_id";

/// One outbox event from a row of [`EVENT_COLS`], with the `event_key` it was delivered under.
fn trace_event(r: &postgres::Row) -> Result<TraceEvent, StoreError> {
    let target: String = r.get(1);
    let key = MsgEvent {
        event_id: r.get(0),
        msg_id: r.get(15),
        target: super::known_state(Target::parse(&target), "MSG_EVENT.TARGET", &target)?,
        partition_key: r.get(9),
        state_version: r.get(10),
        payload_json: r.get(7),
        attempts: 0,
        next_attempt_at: None,
        last_attempt_at: None,
        created_at: None,
        ordinal: r.get(8),
    }
    .key();
    Ok(TraceEvent {
        event_id: r.get(0),
        msg_id: r.get(15),
        event_key: key,
        target,
        state: r.get(2),
        attempts: r.get(3),
        created_at: r.get(4),
        sent_at: r.get(5),
        error: r.get(6),
        payload_json: r.get(7),
        landed: landed(r.get(11), r.get(12), r.get(13), r.get(14)),
    })
}
