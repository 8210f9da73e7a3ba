//! One writer, fenced (PRE-5, SPEC §4.9). The lease lives in own PostgreSQL
//! ([`LeaseStore`](crate::ports::LeaseStore)); its epoch fences every write the stores can
//! check (PostgreSQL's `msgx_fence`, the Redis apply script). What they cannot check — a Kafka
//! produce, a mark in the shared mailbox — waits behind the [`LeaseGate`]: open only while this
//! process's lease is confirmed by the database, closed for good once a newer holder exists.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock::unix_millis;
use crate::error::StoreError;
use crate::ports::Claimant;

/// `msgx.lease.*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePolicy {
    /// How long a renewal holds the lease (by the database's clock).
    pub duration: Duration,
    /// How often the active instance renews, and how often a standby looks.
    pub renew_every: Duration,
}

impl Claimant {
    /// This process: host name, pid and start time (a restarted process is a new claimant).
    pub fn this_process(now: SystemTime) -> Claimant {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown-host".to_string());
        let pid = std::process::id();
        Claimant { id: format!("{host}:{pid}:{}", unix_millis(now)), host, pid }
    }
}

/// Whether this process may write what the stores cannot fence. Shared by the stages; the
/// lease thread confirms it after every renewal.
#[derive(Debug)]
pub struct LeaseGate {
    epoch: i64,
    /// Unix millis until which the last renewal holds the lease for sure.
    valid_until: AtomicI64,
    stale: AtomicBool,
}

impl LeaseGate {
    /// A gate for `epoch`, open until `valid_until`.
    pub fn new(epoch: i64, valid_until: SystemTime) -> LeaseGate {
        LeaseGate {
            epoch,
            valid_until: AtomicI64::new(unix_millis(valid_until)),
            stale: AtomicBool::new(false),
        }
    }

    /// A gate that is always open (tests and tools that hold no lease).
    pub fn open() -> LeaseGate {
        LeaseGate::new(0, UNIX_EPOCH + Duration::from_secs(u32::MAX as u64 * 4))
    }

    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// A renewal sent at `sent_at` succeeded: the database's expiry is at least
    /// `sent_at + duration` (it was computed after the request left), so the lease is ours
    /// until then whatever the database's clock says.
    pub fn confirm(&self, sent_at: SystemTime, duration: Duration) {
        self.valid_until.fetch_max(unix_millis(sent_at + duration), Ordering::SeqCst);
    }

    /// A newer holder exists: closed for good.
    pub fn stale(&self) {
        self.stale.store(true, Ordering::SeqCst);
    }

    pub fn is_stale(&self) -> bool {
        self.stale.load(Ordering::SeqCst)
    }

    /// Ok while the lease is confirmed; unavailable (the stage waits, SPEC §4.9) while it is
    /// not confirmed but nobody newer is known; fenced once a newer holder exists.
    pub fn check(&self, now: SystemTime) -> Result<(), StoreError> {
        if crate::planted::on(crate::planted::Bug::GateNeverCloses) {
            return Ok(());
        }
        if self.is_stale() {
            return Err(StoreError::fenced(
                "lease",
                format!("epoch {} was taken over by a newer instance", self.epoch),
            ));
        }
        let until = self.valid_until.load(Ordering::SeqCst);
        if unix_millis(now) >= until {
            return Err(StoreError::unavailable(
                "lease",
                format!(
                    "the lease (epoch {}) is not confirmed since {}ms ago: its store is unreachable; writes wait",
                    self.epoch,
                    unix_millis(now) - until
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    #[test]
    fn the_gate_is_open_while_renewals_confirm_it_and_closes_for_good_when_stale() {
        let clock = FakeClock::new();
        let d = Duration::from_secs(10);
        let gate = LeaseGate::new(3, clock.now() + d);
        assert!(gate.check(clock.now()).is_ok());
        clock.advance(Duration::from_secs(9));
        gate.confirm(clock.now(), d);
        clock.advance(Duration::from_secs(9));
        assert!(gate.check(clock.now()).is_ok(), "renewed at 9 s: good until 19 s");
        clock.advance(Duration::from_secs(1));
        let e = gate.check(clock.now()).unwrap_err();
        assert!(e.is_unavailable() && e.store == "lease", "{e}");
        gate.confirm(clock.now(), d);
        assert!(gate.check(clock.now()).is_ok(), "a late renewal that nobody overtook opens it again");
        gate.stale();
        assert!(gate.check(clock.now()).unwrap_err().is_fenced());
        gate.confirm(clock.now(), d);
        assert!(gate.check(clock.now()).unwrap_err().is_fenced(), "stale is for good");
    }

    #[test]
    fn an_older_confirmation_never_shortens_the_lease() {
        let clock = FakeClock::new();
        let d = Duration::from_secs(10);
        let gate = LeaseGate::new(1, clock.now() + d);
        gate.confirm(clock.now() - Duration::from_secs(5), d);
        clock.advance(Duration::from_secs(9));
        assert!(gate.check(clock.now()).is_ok());
    }
}
