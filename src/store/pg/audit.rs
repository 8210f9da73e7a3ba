//! What the consistency check reads of own PostgreSQL (#20).

use super::Pg;
use crate::domain::{NewEvent, Target};
use crate::error::{Store, StoreError};
use crate::ports::{StateAudit, StoreResult};

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

    fn succeeded_above(&mut self, after: i64, limit: usize) -> StoreResult<Vec<i64>> {
        let rows = self.run(|c| {
            c.query(
                "SELECT msg_id FROM (
                     SELECT msg_id FROM proc_state WHERE state = 'SUCCEEDED' AND msg_id > $1
                     UNION ALL
                     SELECT msg_id FROM proc_state_hst WHERE state = 'SUCCEEDED' AND msg_id > $1
                 ) s ORDER BY msg_id LIMIT $2",
                &[&after, &(limit as i64)],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn succeeded_last(&mut self, limit: usize) -> StoreResult<Vec<i64>> {
        let rows = self.run(|c| {
            c.query(
                "SELECT msg_id FROM (SELECT msg_id FROM proc_state WHERE state = 'SUCCEEDED'
                     ORDER BY msg_id DESC LIMIT $1) s ORDER BY msg_id",
                &[&(limit as i64)],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn newest_succeeded_of(&mut self, tags: &[String]) -> StoreResult<Option<i64>> {
        self.run(|c| {
            Ok(c.query_one(
                "SELECT GREATEST(
                     (SELECT max(msg_id) FROM proc_state WHERE state = 'SUCCEEDED' AND type_tag = ANY($1)),
                     (SELECT max(msg_id) FROM proc_state_hst WHERE state = 'SUCCEEDED' AND type_tag = ANY($1)))",
                &[&tags],
            )?
            .get(0))
        })
    }

    fn newest_write(&mut self) -> StoreResult<Option<std::time::SystemTime>> {
        // Among the newest rows by MSG_ID (the primary key): no scan of the table every round.
        self.run(|c| {
            Ok(c.query_one(
                "SELECT max(updated_at) FROM (SELECT updated_at FROM proc_state ORDER BY msg_id DESC LIMIT 1000) s",
                &[],
            )?
            .get(0))
        })
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
