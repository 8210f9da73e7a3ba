//! The lease row (`MSGX_LEASE`, migration V007) in own PostgreSQL. Expiry is decided by the
//! database's clock, so the instances' clocks need not agree; the epoch it hands out fences
//! every write transaction (`msgx_fence`).

use crate::error::Store;
use std::time::{Duration, SystemTime};

use super::Pg;
use crate::error::StoreError;
use crate::ports::{Claim, Claimant, LeaseHolder, LeaseStore, StoreResult};

const HOLDER: &str = "holder, host, pid, epoch, acquired_at, renewed_at, expires_at, \
     (holder IS NULL OR expires_at IS NULL OR expires_at < clock_timestamp()) AS free, status";

fn holder(r: &postgres::Row) -> LeaseHolder {
    LeaseHolder {
        holder: r.get("holder"),
        host: r.get("host"),
        pid: r.get("pid"),
        epoch: r.get("epoch"),
        since: r.get::<_, Option<SystemTime>>("acquired_at"),
        renewed_at: r.get::<_, Option<SystemTime>>("renewed_at"),
        expires_at: r.get::<_, Option<SystemTime>>("expires_at"),
        free: r.get("free"),
        status: r.get("status"),
    }
}

fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

impl LeaseStore for Pg {
    fn claim_above(&mut self, me: &Claimant, duration: Duration, floor: i64) -> StoreResult<Claim> {
        let pid = me.pid as i32;
        self.write(|c| {
            // FOR UPDATE: a claim waits for the holder's fenced transactions in flight (they
            // hold the row FOR KEY SHARE, V009), and two claimants cannot both win. A renewal
            // is a plain UPDATE, which those transactions do not block.
            let row =
                c.query_one(&format!("SELECT {HOLDER} FROM msgx_lease WHERE id = 1 FOR UPDATE"), &[])?;
            let before = holder(&row);
            if !before.free && before.holder.as_deref() != Some(me.id.as_str()) {
                return Ok(Ok(Claim::HeldBy(before)));
            }
            let epoch: i64 = c
                .query_one(
                    "UPDATE msgx_lease SET epoch = GREATEST(epoch, $5) + 1, holder = $1, host = $2, pid = $3,
                         acquired_at = clock_timestamp(), renewed_at = clock_timestamp(),
                         expires_at = clock_timestamp() + $4 * interval '1 millisecond', status = '{}'
                     WHERE id = 1 RETURNING epoch",
                    &[&me.id, &me.host, &pid, &(millis(duration) as f64), &floor],
                )?
                .get(0);
            let previous = before.holder.is_some().then_some(before);
            Ok(Ok(Claim::Acquired { epoch, previous }))
        })
    }

    fn renew(&mut self, me: &Claimant, epoch: i64, duration: Duration, status: &str) -> StoreResult<bool> {
        // Not through the fence: a stale renewal must answer "stale", not fail.
        // The renewal also shows where the server is (every second): the highest WAL position
        // msgx saw acknowledged, against which a promoted replica is judged (#19).
        let row = self.run(|c| {
            c.query_opt(
                "UPDATE msgx_lease SET renewed_at = clock_timestamp(),
                     expires_at = clock_timestamp() + $3 * interval '1 millisecond', status = $4
                 WHERE id = 1 AND epoch = $1 AND holder = $2
                 RETURNING pg_current_wal_insert_lsn()::text, pg_walfile_name(pg_current_wal_insert_lsn())",
                &[&epoch, &me.id, &(millis(duration) as f64), &status],
            )
        })?;
        if let Some(r) = &row {
            let (lsn, file): (String, String) = (r.get(0), r.get(1));
            if let (Some(lsn), Some(timeline)) =
                (super::witness::parse_lsn(&lsn), super::witness::timeline_of(&file))
            {
                // Within one session the position only moves on; a new session was judged on connect.
                let before = super::witness::seen(self.store_name());
                let _ = super::witness::witness(
                    self.store_name(),
                    before,
                    super::witness::Sighting { system: None, timeline, lsn },
                    super::witness::Source::OwnWrite,
                );
            }
        }
        Ok(row.is_some())
    }

    fn release(&mut self, me: &Claimant, epoch: i64) -> StoreResult<()> {
        self.run(|c| {
            c.execute(
                "UPDATE msgx_lease SET holder = NULL, expires_at = clock_timestamp(), status = '{}'
                 WHERE id = 1 AND epoch = $1 AND holder = $2",
                &[&epoch, &me.id],
            )
        })?;
        Ok(())
    }

    fn holder(&mut self) -> StoreResult<LeaseHolder> {
        let row = self.run(|c| c.query_opt(&format!("SELECT {HOLDER} FROM msgx_lease WHERE id = 1"), &[]))?;
        row.as_ref()
            .map(holder)
            .ok_or_else(|| StoreError::rejected(Store::Postgres, "the lease row is missing (migration V007)"))
    }
}
