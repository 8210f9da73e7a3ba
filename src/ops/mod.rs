//! The operations endpoint (`metrics.listen`, SPEC §7): `GET /metrics` in the Prometheus text
//! format, `GET /live` and `GET /ready`, on a small bounded listener of its own, apart from the
//! compat endpoint. It reads what the stages share — the counters ([`Stats`]), the stall board,
//! the lease gate — and a few gauges from own PostgreSQL, read at most every
//! [`metrics::GAUGES_TTL`] however often it is scraped.

pub mod console;
pub mod http;
pub mod metrics;
pub mod notify;

use std::sync::{Arc, Mutex};

use crate::error::Store;
use crate::lease::LeaseGate;
use crate::stage::{Pulse, StallBoard};
use crate::stats::Stats;

/// The stores whose health `/ready` and `msgx_store_up` report.
pub const STORES: [Store; 4] = [Store::Postgres, Store::Mailbox, Store::Redis, Store::Kafka];

/// What the running instance is, as the endpoint sees it.
#[derive(Clone)]
enum Role {
    /// Starting, stopping, or unable to reach the lease store (why, for `/ready`).
    Starting(String),
    /// Up, not serving: a hot standby (the lease store answered that another instance holds
    /// the lease), or the holder comparing the stores before its stages start.
    Standby(String),
    /// Holding the lease: its gate and stall board.
    Active { gate: Arc<LeaseGate>, board: StallBoard },
}

/// Shared by the daemon (which sets the role) and the endpoint (which reads it).
pub struct Ops {
    pub stats: Arc<Stats>,
    /// When each stage's current turn began: what the watchdog reads (#42).
    pub pulse: Pulse,
    role: Mutex<Role>,
}

impl Ops {
    pub fn new(stats: Arc<Stats>) -> Ops {
        let role = Role::Starting("starting: the lease is not claimed yet".into());
        Ops { stats, pulse: Pulse::default(), role: Mutex::new(role) }
    }

    /// Not serving and not a standby yet (or any more); `why` is what `/ready` answers.
    pub fn starting(&self, why: impl Into<String>) {
        *self.role.lock().expect("ops role poisoned") = Role::Starting(why.into());
    }

    /// Up, not serving (a hot standby, or comparing the stores); `why` is what `/ready` answers.
    pub fn standby(&self, why: impl Into<String>) {
        *self.role.lock().expect("ops role poisoned") = Role::Standby(why.into());
    }

    /// Holding the lease, with the stages' gate and stall board.
    pub fn active(&self, gate: Arc<LeaseGate>, board: StallBoard) {
        *self.role.lock().expect("ops role poisoned") = Role::Active { gate, board };
    }

    fn role(&self) -> Role {
        self.role.lock().expect("ops role poisoned").clone()
    }

    /// `/ready`: Ok only while this instance holds the lease and no stage waits for a store;
    /// otherwise the one-line reason.
    pub fn ready(&self) -> Result<(), String> {
        match self.role() {
            Role::Starting(why) | Role::Standby(why) => Err(why),
            Role::Active { gate, board } => {
                gate.check().map_err(|e| format!("the lease is not confirmed: {e}"))?;
                match board.snapshot().first() {
                    Some((stage, store, _)) => Err(format!("stage {stage} waits for store {store}")),
                    None => Ok(()),
                }
            }
        }
    }

    /// The lease epoch held, if the lease is confirmed now.
    pub fn lease(&self) -> Option<i64> {
        match self.role() {
            Role::Active { gate, .. } if gate.check().is_ok() => Some(gate.epoch()),
            _ => None,
        }
    }

    /// (stage, store) of every stalled stage.
    pub fn stalled(&self) -> Vec<(&'static str, &'static str)> {
        match self.role() {
            Role::Active { board, .. } => {
                board.snapshot().into_iter().map(|(stage, store, _)| (stage, store)).collect()
            }
            Role::Starting(_) | Role::Standby(_) => Vec::new(),
        }
    }

    /// systemd's view (#42): whether the instance is up — serving, or standing by with the
    /// lease store reached — and its one-line status; `gauges` is what the last read of own
    /// PostgreSQL said (lag, DEAD), if any.
    pub fn summary(&self, gauges: Option<&str>) -> (bool, String) {
        let (up, mut line) = match self.role() {
            Role::Starting(why) => (false, why),
            Role::Standby(why) => (true, why),
            Role::Active { gate, board } => {
                let mut line = format!("active epoch={}", gate.epoch());
                if let Err(e) = gate.check() {
                    line.push_str(&format!("; the lease is not confirmed: {e}"));
                }
                for (stage, store, _) in board.snapshot() {
                    line.push_str(&format!("; stage {stage} waits for store {store}"));
                }
                (true, line)
            }
        };
        if let Some(g) = gauges {
            line.push_str("; ");
            line.push_str(g);
        }
        (up, line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use std::time::Duration;

    #[test]
    fn ready_only_while_active_with_a_confirmed_lease_and_no_stage_waiting() {
        let ops = Ops::new(Arc::new(Stats::default()));
        ops.standby("lease held by host=b pid=7");
        assert_eq!(ops.ready(), Err("lease held by host=b pid=7".to_string()));
        let clock = FakeClock::new();
        let gate =
            Arc::new(LeaseGate::new(3, Arc::new(clock.clone()), clock.mono(), Duration::from_secs(10)));
        let board = StallBoard::default();
        ops.active(gate.clone(), board.clone());
        assert_eq!((ops.ready(), ops.lease()), (Ok(()), Some(3)));
        board.set("process", Some(("redis", clock.now())));
        assert_eq!(ops.ready(), Err("stage process waits for store redis".to_string()));
        assert_eq!(ops.stalled(), vec![("process", "redis")]);
        board.set("process", None);
        clock.advance(Duration::from_secs(11));
        assert!(ops.ready().unwrap_err().starts_with("the lease is not confirmed"));
        assert_eq!(ops.lease(), None);
    }
}
