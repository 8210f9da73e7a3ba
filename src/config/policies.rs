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
