//! What the consistency check reads of own PostgreSQL (#20).

use super::Pg;
use crate::domain::{NewEvent, RedisRecord, Target};
use crate::error::{Store, StoreError};
use crate::ports::{HealLog, HealRecord, StateAudit, StoreResult, SucceededRow};

impl StateAudit for Pg {
    fn known_max(&mut self) -> StoreResult<i64> {
        self.run(|c| Ok(c.query_one("SELECT COALESCE(MAX(msg_id), 0)::bigint FROM proc_state", &[])?.get(0)))
    }

    fn unknown(&mut self, ids: &[i64]) -> StoreResult<Vec<i64>> {
        let rows = self.run(|c| {
            c.query(
                "SELECT id FROM unnest($1::bigint[]) AS u(id)
                 WHERE NOT EXISTS (SELECT 1 FROM proc_state p WHERE p.msg_id = u.id) ORDER BY id",
                &[&ids],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn succeeded_above(&mut self, after: i64, limit: usize) -> StoreResult<Vec<SucceededRow>> {
        let rows = self.run(|c| {
            c.query(
                "SELECT msg_id, redis_record, updated_at, rules_version, snapshot_stale FROM (
                     SELECT msg_id, redis_record, updated_at, rules_version, snapshot_stale FROM proc_state WHERE state = 'SUCCEEDED' AND msg_id > $1
                     UNION ALL
                     SELECT msg_id, redis_record, updated_at, rules_version, snapshot_stale FROM proc_state_hst WHERE state = 'SUCCEEDED' AND msg_id > $1
                 ) s ORDER BY msg_id LIMIT $2",
                &[&after, &(limit as i64)],
            )
        })?;
        rows.iter().map(succeeded_row).collect()
    }

    fn succeeded_last(&mut self, limit: usize) -> StoreResult<Vec<SucceededRow>> {
        let rows = self.run(|c| {
            c.query(
                "SELECT msg_id, redis_record, updated_at, rules_version, snapshot_stale FROM (SELECT msg_id, redis_record, updated_at, rules_version, snapshot_stale FROM proc_state
                     WHERE state = 'SUCCEEDED' ORDER BY msg_id DESC LIMIT $1) s ORDER BY msg_id",
                &[&(limit as i64)],
            )
        })?;
        rows.iter().map(succeeded_row).collect()
    }

    fn newest_recorded(&mut self) -> StoreResult<Option<i64>> {
        // Newest first on the key: it stops at the first such row, which is recent while msgx
        // runs; only a PostgreSQL that never recorded one reads every row (an empty Redis).
        self.run(|c| {
            Ok(c.query_one(
                "SELECT GREATEST(
                     (SELECT max(msg_id) FROM proc_state WHERE state = 'SUCCEEDED' AND redis_record IS NOT NULL),
                     (SELECT max(msg_id) FROM proc_state_hst WHERE state = 'SUCCEEDED' AND redis_record IS NOT NULL))",
                &[],
            )?
            .get(0))
        })
    }

    fn generation_above(&mut self, after: i64) -> StoreResult<Option<i64>> {
        // A range on the key: the rows since the snapshot Redis holds, not the whole table.
        self.run(|c| {
            Ok(c.query_one(
                "SELECT GREATEST(
                     (SELECT max(msg_id) FROM proc_state
                      WHERE msg_id > $1 AND state = 'SUCCEEDED' AND redis_record = 'generation'),
                     (SELECT max(msg_id) FROM proc_state_hst
                      WHERE msg_id > $1 AND state = 'SUCCEEDED' AND redis_record = 'generation'))",
                &[&after],
            )?
            .get(0))
        })
    }

    fn newest_enqueue(&mut self) -> StoreResult<Option<std::time::SystemTime>> {
        // Among the newest rows by MSG_ID (the primary key): no scan of the table every round.
        self.run(|c| {
            Ok(c.query_one(
                "SELECT max(enqueued_at) FROM (SELECT enqueued_at FROM proc_state ORDER BY msg_id DESC LIMIT 1000) s",
                &[],
            )?
            .get(0))
        })
    }

    fn events_pruned(&mut self) -> StoreResult<i64> {
        self.run(|c| Ok(c.query_one("SELECT msg_id FROM outbox_pruned WHERE id = 1", &[])?.get(0)))
    }

    fn events_of(&mut self, ids: &[i64]) -> StoreResult<Vec<(i64, NewEvent)>> {
        let rows = self.run(|c| {
            c.query(
                "SELECT msg_id, target, partition_key, event_type, state_version, payload_json FROM msg_event
                 WHERE msg_id = ANY($1) ORDER BY msg_id, ordinal NULLS LAST, event_id",
                &[&ids],
            )
        })?;
        rows.iter()
            .map(|r| {
                let text: String = r.get(1);
                let target = Target::parse(&text).ok_or_else(|| {
                    StoreError::rejected(
                        Store::Postgres,
                        format!("msg_event.target {text:?} is no target msgx knows"),
                    )
                })?;
                let e = NewEvent {
                    target,
                    partition_key: r.get(2),
                    event_type: r.get(3),
                    state_version: r.get(4),
                    payload_json: r.get(5),
                };
                Ok((r.get(0), e))
            })
            .collect()
    }
}

/// A `(msg_id, redis_record, updated_at)` row; a record no msgx writes is an error that names it.
fn succeeded_row(r: &postgres::Row) -> StoreResult<SucceededRow> {
    let text: Option<String> = r.get(1);
    let record = match text {
        None => None,
        Some(t) => Some(RedisRecord::from_columns(&t, r.get(4)).ok_or_else(|| {
            StoreError::rejected(
                Store::Postgres,
                format!("proc_state.redis_record {t:?} is no record msgx writes"),
            )
        })?),
    };
    let rules: Option<i32> = r.get(3);
    Ok(SucceededRow {
        msg_id: r.get(0),
        record,
        at: r.get(2),
        rules: rules.and_then(|v| u32::try_from(v).ok()),
    })
}

impl HealLog for Pg {
    fn heals_since(&mut self, since: std::time::SystemTime) -> StoreResult<Vec<HealRecord>> {
        let rows = self.run(|c| {
            c.query(
                "SELECT healed_at, epoch, store, summary FROM consistency_heal WHERE healed_at >= $1
                 ORDER BY healed_at, heal_id LIMIT 1000",
                &[&since],
            )
        })?;
        rows.iter()
            .map(|r| {
                let name: String = r.get(2);
                let store = Store::parse(&name).ok_or_else(|| {
                    StoreError::rejected(
                        Store::Postgres,
                        format!("consistency_heal.store {name:?} is no store msgx knows"),
                    )
                })?;
                Ok(HealRecord { at: r.get(0), epoch: r.get(1), store, summary: r.get(3) })
            })
            .collect()
    }

    fn record_heal(&mut self, h: &HealRecord) -> StoreResult<()> {
        let summary = super::clip(&h.summary, 1000);
        self.run(|c| {
            c.execute(
                "INSERT INTO consistency_heal (healed_at, epoch, store, summary) VALUES ($1, $2, $3, $4)",
                &[&h.at, &h.epoch, &h.store.name(), &summary],
            )
        })?;
        Ok(())
    }
}
