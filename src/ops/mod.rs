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

/// Why the instance is not ready, as `/ready` says it to whoever asks (#54): a code to match
/// and a short text, never a host, a pid or a store's error — those stay behind the token
/// (the console, `msgx status`) and in systemd's status line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    Starting,
    Stopping,
    /// Another instance holds the lease.
    Standby,
    /// Holding the lease, comparing the stores before the stages start.
    Comparing,
    /// Not serving until the stores are compared or a person decides.
    Stopped,
    /// The lease store cannot be reached.
    LeaseUnreachable,
    /// The lease was not confirmed in time.
    LeaseUnconfirmed,
    /// A stage waits for a store (its name).
    StoreAway(&'static str),
    /// The broker refuses the event a Kafka target holds at (the target, #67).
    EventRefused(&'static str),
}

impl NotReady {
    pub fn code(self) -> &'static str {
        match self {
            NotReady::Starting => "starting",
            NotReady::Stopping => "stopping",
            NotReady::Standby => "standby",
            NotReady::Comparing => "comparing-stores",
            NotReady::Stopped => "stopped",
            NotReady::LeaseUnreachable => "lease-unreachable",
            NotReady::LeaseUnconfirmed => "lease-unconfirmed",
            NotReady::StoreAway(_) => "store-away",
            NotReady::EventRefused(_) => "event-refused",
        }
    }

    pub fn text(self) -> String {
        match self {
            NotReady::Starting => "the lease is not claimed yet".into(),
            NotReady::Stopping => "msgx is stopping".into(),
            NotReady::Standby => "another instance holds the lease".into(),
            NotReady::Comparing => "comparing the stores before the stages start".into(),
            NotReady::Stopped => "not serving; msgx status says why".into(),
            NotReady::LeaseUnreachable => "the lease store cannot be reached".into(),
            NotReady::LeaseUnconfirmed => "the lease is not confirmed".into(),
            NotReady::StoreAway(store) => format!("waiting for {store}"),
            NotReady::EventRefused(target) => {
                format!("the broker refuses the event {target} holds at; msgx status says which")
            }
        }
    }
}

/// What the running instance is, as the endpoint sees it.
#[derive(Clone)]
enum Role {
    /// Starting, stopping, or unable to reach the lease store: why, and the details.
    Starting(NotReady, String),
    /// Up, not serving: a hot standby (the lease store answered that another instance holds
    /// the lease), or the holder comparing the stores before its stages start.
    Standby(NotReady, String),
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
        let role = Role::Starting(NotReady::Starting, "starting: the lease is not claimed yet".into());
        Ops { stats, pulse: Pulse::default(), role: Mutex::new(role) }
    }

    /// Not serving and not a standby yet (or any more): `why` is what `/ready` answers,
    /// `detail` what systemd's status line says.
    pub fn starting(&self, why: NotReady, detail: impl Into<String>) {
        *self.role.lock().expect("ops role poisoned") = Role::Starting(why, detail.into());
    }

    /// Up, not serving (a hot standby, or comparing the stores).
    pub fn standby(&self, why: NotReady, detail: impl Into<String>) {
        *self.role.lock().expect("ops role poisoned") = Role::Standby(why, detail.into());
    }

    /// Holding the lease, with the stages' gate and stall board.
    pub fn active(&self, gate: Arc<LeaseGate>, board: StallBoard) {
        *self.role.lock().expect("ops role poisoned") = Role::Active { gate, board };
    }

    fn role(&self) -> Role {
        self.role.lock().expect("ops role poisoned").clone()
    }

    /// `/ready`: Ok only while this instance holds the lease and no stage waits for a store;
    /// otherwise why not.
    pub fn ready(&self) -> Result<(), NotReady> {
        match self.role() {
            Role::Starting(why, _) | Role::Standby(why, _) => Err(why),
            Role::Active { gate, board } => {
                gate.check().map_err(|_| NotReady::LeaseUnconfirmed)?;
                if let Some((_, store, _)) = board.snapshot().first() {
                    return Err(NotReady::StoreAway(store));
                }
                match self.stats.refused.held().first() {
                    Some((target, _)) => Err(NotReady::EventRefused(target.as_str())),
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
            Role::Starting(..) | Role::Standby(..) => Vec::new(),
        }
    }

    /// systemd's view (#42): whether the instance is up — serving, or standing by with the
    /// lease store reached — and its one-line status; `gauges` is what the last read of own
    /// PostgreSQL said (lag, DEAD), if any.
    pub fn summary(&self, gauges: Option<&str>) -> (bool, String) {
        let (up, mut line) = match self.role() {
            // Waiting out a store is being up (#54): systemd hears READY and the status says
            // what msgx waits for, instead of a start that times out and a restart loop.
            Role::Starting(why, detail) => (why != NotReady::Starting, detail),
            Role::Standby(_, detail) => (true, detail),
            Role::Active { gate, board } => {
                let mut line = format!("active epoch={}", gate.epoch());
                if let Err(e) = gate.check() {
                    line.push_str(&format!("; the lease is not confirmed: {e}"));
                }
                for (stage, store, _) in board.snapshot() {
                    line.push_str(&format!("; stage {stage} waits for store {store}"));
                }
                for (target, event_id) in self.stats.refused.held() {
                    line.push_str(&format!("; {target} holds at event {event_id}: the broker refuses it"));
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
        ops.standby(NotReady::Standby, "lease held by host=b pid=7");
        assert_eq!(ops.ready(), Err(NotReady::Standby));
        assert!(
            !NotReady::Standby.text().contains("host="),
            "no host nor pid where a token is not asked for"
        );
        let clock = FakeClock::new();
        let gate =
            Arc::new(LeaseGate::new(3, Arc::new(clock.clone()), clock.mono(), Duration::from_secs(10)));
        let board = StallBoard::default();
        ops.active(gate.clone(), board.clone());
        assert_eq!((ops.ready(), ops.lease()), (Ok(()), Some(3)));
        board.set("process", Some(("redis", clock.now())));
        assert_eq!(ops.ready(), Err(NotReady::StoreAway("redis")));
        assert_eq!(ops.stalled(), vec![("process", "redis")]);
        board.set("process", None);
        clock.advance(Duration::from_secs(11));
        assert_eq!(ops.ready(), Err(NotReady::LeaseUnconfirmed));
        assert_eq!(ops.lease(), None);
    }
}
