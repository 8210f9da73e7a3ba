//! The heal budget (#37): heals are limited by rate, never for the life of a process. A heal that
//! changed something is recorded in own PostgreSQL (`CONSISTENCY_HEAL`), so every instance —
//! a restarted one, the hot standby that takes over — counts the same heals; a finding that
//! healed nothing and an outage during a heal are not heals.

use std::time::{Duration, SystemTime};

use crate::ports::HealRecord;

/// The budget's window.
pub const HOUR: Duration = Duration::from_secs(3600);

/// At most `per_hour` heals in any hour (`msgx.consistency-check.max-heals-per-hour`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealBudget {
    pub per_hour: u32,
}

impl HealBudget {
    /// Where the heals to count start at `now`.
    pub fn since(now: SystemTime) -> SystemTime {
        now.checked_sub(HOUR).unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// Whether one more heal may run at `now`, given those recorded since [`HealBudget::since`];
    /// `Err` says why not, for the ERROR a person reads.
    pub fn allows(&self, recent: &[HealRecord], now: SystemTime) -> Result<(), String> {
        let since = HealBudget::since(now);
        let spent: Vec<&HealRecord> = recent.iter().filter(|h| h.at >= since).collect();
        if spent.len() < self.per_hour as usize {
            return Ok(());
        }
        let last = spent.last().map(|h| format!("; the last: {} {}", h.store, h.summary)).unwrap_or_default();
        Err(format!(
            "{} heal(s) in the last hour, the most msgx.consistency-check.max-heals-per-hour ({}) allows: a store that keeps forgetting needs a person{last}",
            spent.len(),
            self.per_hour
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Store;

    fn heal(at: SystemTime) -> HealRecord {
        HealRecord { at, epoch: 1, store: Store::Redis, summary: "2 flight(s) rebuilt".into() }
    }

    #[test]
    fn heals_are_limited_by_rate_not_for_the_life_of_the_process() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let b = HealBudget { per_hour: 2 };
        let mut log = vec![heal(t0)];
        assert!(b.allows(&log, t0).is_ok());
        log.push(heal(t0 + Duration::from_secs(60)));
        let spent = b.allows(&log, t0 + Duration::from_secs(120)).unwrap_err();
        assert!(
            spent.contains("2 heal(s) in the last hour") && spent.contains("max-heals-per-hour (2)"),
            "{spent}"
        );
        // An hour after the first, one more is allowed again: a week of heals is not a limit.
        assert!(b.allows(&log, t0 + HOUR + Duration::from_secs(1)).is_ok());
    }
}
