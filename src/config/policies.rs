//! The value types the configuration gives the parts that act on it: plain values, so that
//! `config` is a leaf (#43) — the stage runner, the lease and the health check import them
//! from here and keep their rules (`impl` blocks) beside their code.

use std::time::Duration;

/// How a stage retries a store that is away and when it alerts (`msgx.pipeline.reconnect-*`,
/// `outage-alert-*`). Its rule is `stage::OutagePolicy::retry_in`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutagePolicy {
    pub backoff: Duration,
    pub cap: Duration,
    pub alert_after: Duration,
    pub alert_every: Duration,
}

/// `msgx.lease.*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePolicy {
    /// How long a renewal holds the lease (by the database's clock).
    pub duration: Duration,
    /// How often the active instance renews, and how often a standby looks.
    pub renew_every: Duration,
    /// `msgx.watchdog.stuck-after`: a loop in one turn longer than this stops the renewals, so
    /// a standby takes over (#54).
    pub stuck_after: Duration,
}

/// The health check's thresholds (`msgx.health.*`). A count threshold of 0 is off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thresholds {
    pub head_age_warning: Duration,
    pub head_age_critical: Duration,
    pub dead_warning: u64,
    pub dead_critical: u64,
    pub abandoned_warning: u64,
    pub abandoned_critical: u64,
    pub stalled_warning: Duration,
    pub stalled_critical: Duration,
}

/// Which family's request msgx writes to `COUTMSGS` (`msgx.requests.dialect`, SPEC §4.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestDialect {
    /// Family A (SIS): `RQFD` for a window of flights, `RQRD` for a reference list.
    Sis,
    /// Family B (the integration platform): `REQE-RQDF`, answered with `RMID` = its `MGID`.
    Platform,
}

impl RequestDialect {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestDialect::Sis => "sis",
            RequestDialect::Platform => "platform",
        }
    }
}

/// `msgx.requests.*`: how msgx asks the AODB for data (SPEC §4.11). Its rules are in
/// `requests`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPolicy {
    pub dialect: RequestDialect,
    /// How long a request waits for its answer once in `COUTMSGS` before it is EXPIRED.
    pub timeout: Duration,
    /// `SNDR` of every request (and `SORC` in family B).
    pub sender: String,
    /// Family B's `RCVR` (empty: the element is written empty).
    pub receiver: String,
    /// Family B's `APOT` and the request's `BAPT` (empty: written empty).
    pub airport: String,
    /// How an RQFD's `STDB`/`STDE` write a time (strftime, written upper case); checked at
    /// start-up, so writing a request never fails on it.
    pub window_format: String,
    /// `msgx.requests.on-empty`: a first start with an empty Redis asks for today's flights.
    pub on_empty: bool,
    /// `msgx.requests.heal-tries`: how many times a heal asks for a window (#55).
    pub heal_tries: u16,
    /// `msgx.requests.heal-backoff`: the pause before a heal's next try, doubled after each.
    pub heal_backoff: Duration,
    /// `msgx.requests.heal-window`: the window (`FROM/TO`, a request key) a heal asks for when
    /// nothing tells the day of a lost message's flights — a person's decision; `None`: stop.
    pub heal_window: Option<String>,
}
