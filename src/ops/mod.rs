//! The operations endpoint (`metrics.listen`, SPEC §7): `GET /metrics` in the Prometheus text
//! format, `GET /live` and `GET /ready`, on a small bounded listener of its own, apart from the
//! compat endpoint. It reads what the stages share — the counters ([`Stats`]), the stall board,
//! the lease gate — and a few gauges from own PostgreSQL, read at most every
//! [`metrics::GAUGES_TTL`] however often it is scraped.

pub mod http;
pub mod metrics;

use std::sync::{Arc, Mutex};

use crate::error::Store;
use crate::lease::LeaseGate;
use crate::stage::StallBoard;
use crate::stats::Stats;

/// The stores whose health `/ready` and `msgx_store_up` report.
pub const STORES: [Store; 4] = [Store::Postgres, Store::Mailbox, Store::Redis, Store::Kafka];

/// What the running instance is, as the endpoint sees it.
#[derive(Clone)]
enum Role {
    /// Starting, or waiting as a hot standby (why, for `/ready`).
    Standby(String),
    /// Holding the lease: its gate and stall board.
    Active { gate: Arc<LeaseGate>, board: StallBoard },
}

/// Shared by the daemon (which sets the role) and the endpoint (which reads it).
pub struct Ops {
    pub stats: Arc<Stats>,
    role: Mutex<Role>,
}

impl Ops {
    pub fn new(stats: Arc<Stats>) -> Ops {
        Ops { stats, role: Mutex::new(Role::Standby("starting: the lease is not claimed yet".into())) }
    }

    /// Waiting for the lease; `why` is what `/ready` answers.
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
            Role::Standby(why) => Err(why),
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
            Role::Standby(_) => Vec::new(),
        }
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
