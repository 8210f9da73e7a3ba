//! The lease row.

use super::*;

fn lease_holder(l: &MemLease, now: SystemTime) -> LeaseHolder {
    LeaseHolder {
        holder: l.holder.clone(),
        host: Some(l.host.clone()).filter(|h| !h.is_empty()),
        pid: (l.pid > 0).then_some(l.pid as i32),
        epoch: l.epoch,
        since: l.acquired_at,
        renewed_at: l.acquired_at,
        expires_at: l.expires_at,
        free: l.holder.is_none() || l.expires_at.is_none_or(|t| t < now),
        status: l.status.clone(),
    }
}

impl LeaseStore for MemPg {
    fn claim_above(&mut self, me: &Claimant, duration: Duration, floor: i64) -> StoreResult<Claim> {
        self.session_write(|s| {
            let now = s.clock.now();
            let before = lease_holder(&s.lease, now);
            if !before.free && before.holder.as_deref() != Some(me.id.as_str()) {
                return Ok(Claim::HeldBy(before));
            }
            s.lease = MemLease {
                epoch: s.lease.epoch.max(floor) + 1,
                holder: Some(me.id.clone()),
                host: me.host.clone(),
                pid: me.pid,
                acquired_at: Some(now),
                expires_at: Some(now + duration),
                status: "{}".into(),
            };
            let previous = before.holder.is_some().then_some(before);
            Ok(Claim::Acquired { epoch: s.lease.epoch, previous })
        })
    }

    fn renew(&mut self, me: &Claimant, epoch: i64, duration: Duration, status: &str) -> StoreResult<bool> {
        self.session_write(|s| {
            if s.lease.epoch != epoch || s.lease.holder.as_deref() != Some(me.id.as_str()) {
                return Ok(false);
            }
            s.lease.expires_at = Some(s.clock.now() + duration);
            s.lease.status = status.to_string();
            Ok(true)
        })
    }

    fn release(&mut self, me: &Claimant, epoch: i64) -> StoreResult<()> {
        self.session_write(|s| {
            if s.lease.epoch == epoch && s.lease.holder.as_deref() == Some(me.id.as_str()) {
                s.lease.holder = None;
                s.lease.expires_at = Some(s.clock.now());
                s.lease.status = "{}".into();
            }
            Ok(())
        })
    }

    fn holder(&mut self) -> StoreResult<LeaseHolder> {
        self.read(|s| Ok(lease_holder(&s.lease, s.clock.now())))
    }
}
