//! One writer, fenced (PRE-5, SPEC §4.9). The lease lives in own PostgreSQL
//! ([`LeaseStore`](crate::ports::LeaseStore)); its epoch fences every write the stores can
//! check (PostgreSQL's `msgx_fence`, the Redis apply script). What they cannot check — a Kafka
//! produce, a mark in the shared mailbox — waits behind the [`LeaseGate`]: open only while this
//! process's lease is confirmed by the database, closed for good once a newer holder exists.

use crate::error::Store;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::clock::{unix_millis, Clock, Mono};
use crate::error::StoreError;
use crate::ports::Claimant;

/// `msgx.lease.*`: a value of the configuration.
pub use crate::config::LeasePolicy;

impl Claimant {
    /// This process: host name, pid and start time (a restarted process is a new claimant).
    pub fn this_process(now: SystemTime) -> Claimant {
        // uname(2), not /proc/sys/kernel/hostname: the hardened unit's ProcSubset=pid hides
        // /proc/sys, and every instance was `unknown-host` — the lease and `/ready` could no
        // longer tell the hosts apart (#68).
        let host = Some(rustix::system::uname().nodename().to_string_lossy().trim().to_string())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown-host".to_string());
        let pid = std::process::id();
        Claimant { id: format!("{host}:{pid}:{}", unix_millis(now)), host, pid }
    }
}

/// Whether this process may write what the stores cannot fence. Shared by the stages; the
/// lease thread confirms it after every renewal. Timed on the monotonic clock (#21 item 7): a
/// wall clock stepped back cannot keep a cut-off instance producing past its lease.
pub struct LeaseGate {
    epoch: i64,
    clock: Arc<dyn Clock>,
    /// The monotonic millis until which the last renewal holds the lease for sure.
    valid_until: AtomicU64,
    stale: AtomicBool,
    /// A store forgot what it acknowledged (#19): closed for good, and every stage that asks
    /// says so, whichever stops first.
    forgot: AtomicBool,
}

impl std::fmt::Debug for LeaseGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGate").field("epoch", &self.epoch).field("stale", &self.is_stale()).finish()
    }
}

fn millis(m: Mono) -> u64 {
    m.as_duration().as_millis().min(u64::MAX as u128) as u64
}

/// What a stage asks of the lease before it writes where no fence reaches (Kafka, the
/// mailbox, COUTMSGS), and what the runner tells it when the instance must stop.
pub trait Gate: Send + Sync {
    /// Ok while the lease is confirmed (see [`LeaseGate::check`]).
    fn check(&self) -> Result<(), StoreError>;
    /// A newer holder exists: closed for good.
    fn stale(&self);
    /// A store forgot what it acknowledged: closed for good.
    fn forgot(&self);
}

impl Gate for LeaseGate {
    fn check(&self) -> Result<(), StoreError> {
        LeaseGate::check(self)
    }

    fn stale(&self) {
        LeaseGate::stale(self)
    }

    fn forgot(&self) {
        LeaseGate::forgot(self)
    }
}

impl LeaseGate {
    /// A gate for `epoch`, open for `valid_for` from `confirmed` (the claim's send time).
    pub fn new(epoch: i64, clock: Arc<dyn Clock>, confirmed: Mono, valid_for: Duration) -> LeaseGate {
        LeaseGate {
            epoch,
            clock,
            valid_until: AtomicU64::new(millis(confirmed.after(valid_for))),
            stale: AtomicBool::new(false),
            forgot: AtomicBool::new(false),
        }
    }

    /// A gate that is always open (tests and tools that hold no lease).
    pub fn open() -> LeaseGate {
        LeaseGate {
            epoch: 0,
            clock: Arc::new(crate::clock::SystemClock),
            valid_until: AtomicU64::new(u64::MAX),
            stale: AtomicBool::new(false),
            forgot: AtomicBool::new(false),
        }
    }

    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// A renewal sent at `sent` succeeded: the database's expiry is at least `sent + duration`
    /// (it was computed after the request left), so the lease is ours until then whatever the
    /// database's clock or this machine's wall clock says.
    pub fn confirm(&self, sent: Mono, duration: Duration) {
        self.valid_until.fetch_max(millis(sent.after(duration)), Ordering::SeqCst);
    }

    /// A newer holder exists: closed for good.
    pub fn stale(&self) {
        self.stale.store(true, Ordering::SeqCst);
    }

    pub fn is_stale(&self) -> bool {
        self.stale.load(Ordering::SeqCst) || self.forgot.load(Ordering::SeqCst)
    }

    /// A store forgot what it acknowledged: closed for good, reported as such.
    pub fn forgot(&self) {
        self.forgot.store(true, Ordering::SeqCst);
    }

    /// Ok while the lease is confirmed; unavailable (the stage waits, SPEC §4.9) while it is
    /// not confirmed but nobody newer is known; fenced once a newer holder exists.
    pub fn check(&self) -> Result<(), StoreError> {
        if self.forgot.load(Ordering::SeqCst) {
            return Err(StoreError::forgot(
                Store::Lease,
                "a store forgot what it acknowledged: every stage stops before it writes again",
            ));
        }
        if self.is_stale() {
            return Err(StoreError::fenced(
                Store::Lease,
                format!("epoch {} was taken over by a newer instance", self.epoch),
            ));
        }
        let until = self.valid_until.load(Ordering::SeqCst);
        let now = millis(self.clock.mono());
        if now >= until {
            return Err(StoreError::unavailable(
                Store::Lease,
                format!(
                    "the lease (epoch {}) is not confirmed since {}ms ago: its store is unreachable; writes wait",
                    self.epoch,
                    now - until
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    fn gate(clock: &FakeClock, epoch: i64, d: Duration) -> LeaseGate {
        LeaseGate::new(epoch, Arc::new(clock.clone()), clock.mono(), d)
    }

    #[test]
    fn the_gate_is_open_while_renewals_confirm_it_and_closes_for_good_when_stale() {
        let clock = FakeClock::new();
        let d = Duration::from_secs(10);
        let gate = gate(&clock, 3, d);
        assert!(gate.check().is_ok());
        clock.advance(Duration::from_secs(9));
        gate.confirm(clock.mono(), d);
        clock.advance(Duration::from_secs(9));
        assert!(gate.check().is_ok(), "renewed at 9 s: good until 19 s");
        clock.advance(Duration::from_secs(1));
        let e = gate.check().unwrap_err();
        assert!(e.is_unavailable() && e.store == Store::Lease, "{e}");
        gate.confirm(clock.mono(), d);
        assert!(gate.check().is_ok(), "a late renewal that nobody overtook opens it again");
        gate.stale();
        assert!(gate.check().unwrap_err().is_fenced());
        gate.confirm(clock.mono(), d);
        assert!(gate.check().unwrap_err().is_fenced(), "stale is for good");
    }

    #[test]
    fn an_older_confirmation_never_shortens_the_lease() {
        let clock = FakeClock::new();
        let d = Duration::from_secs(10);
        let gate = gate(&clock, 1, d);
        gate.confirm(Mono::default(), Duration::from_secs(1));
        clock.advance(Duration::from_secs(9));
        assert!(gate.check().is_ok());
    }

    /// #21 item 7: the wall clock stepped back an hour while the lease store is unreachable:
    /// the gate still closes when the last confirmation runs out.
    #[test]
    fn regression_a_wall_clock_stepped_back_does_not_keep_the_gate_open() {
        let clock = FakeClock::new();
        let d = Duration::from_secs(10);
        let gate = gate(&clock, 4, d);
        clock.advance(Duration::from_secs(5));
        clock.set(clock.now() - Duration::from_secs(3600));
        assert!(gate.check().is_ok(), "5 s of 10 gone");
        clock.advance(Duration::from_secs(5));
        let e = gate.check().unwrap_err();
        assert!(e.is_unavailable(), "closed after 10 s of real time, the step notwithstanding: {e}");
    }

    /// Seen in the suite: a stage stopped on a PostgreSQL that lost commits closed the gate,
    /// and another stage reported "fenced" first, so the process exited 1 instead of 6.
    #[test]
    fn regression_a_gate_closed_for_a_forgetful_store_says_so_to_every_stage() {
        let clock = FakeClock::new();
        let gate = gate(&clock, 2, Duration::from_secs(10));
        gate.forgot();
        let e = gate.check().unwrap_err();
        assert_eq!(e.kind, crate::error::StoreErrorKind::Forgot, "{e}");
        assert!(gate.is_stale(), "closed for good: the lease is not released either");
    }
}
