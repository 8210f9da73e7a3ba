//! Policy shared by several stages and stores, as plain functions: how long to back off, what
//! a failure makes of a row ([`retry`]), and which rows an operator may bring back
//! ([`replay`]). Stages and store adapters import it here, never from one another.

use std::time::Duration;

pub mod replay;
pub mod retry;

/// The pause after the `n`-th consecutive failure (1-based): `base`, 2·base, 4·base, … never
/// more than `cap`. The one doubling backoff of msgx (store outages, refused marks, the
/// ingress rescan).
pub fn doubling(base: Duration, n: u32, cap: Duration) -> Duration {
    let factor = 1u32.checked_shl(n.max(1).saturating_sub(1).min(31)).unwrap_or(u32::MAX);
    base.checked_mul(factor).unwrap_or(cap).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_starts_at_base_and_stops_at_cap() {
        let (b, cap) = (Duration::from_millis(200), Duration::from_secs(2));
        let got: Vec<u128> =
            [0, 1, 2, 3, 4, 5, 6, 40, u32::MAX].iter().map(|n| doubling(b, *n, cap).as_millis()).collect();
        assert_eq!(got, [200, 200, 400, 800, 1600, 2000, 2000, 2000, 2000]);
    }
}
