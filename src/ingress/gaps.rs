//! Gap tracking for the poller (PRE-2). MySQL hands out AUTO_INCREMENT IDs before commit, so
//! a smaller ID can become visible after a larger one was read — the bug that makes Kafka
//! Connect's JDBC source lose rows (its issues #27 and #915). Every ID skipped over while
//! reading is a gap; the watermark stays below the lowest gap until the ID shows up or the gap
//! is older than `max-commit-delay` (a rolled-back insert never shows up). Pure: ids and
//! times in, ranges out.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

/// IDs `lo..=hi`, none of them seen yet, first noticed at `since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub lo: i64,
    pub hi: i64,
    pub since: SystemTime,
}

/// The unresolved gaps, sorted and disjoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gaps {
    ranges: VecDeque<Gap>,
}

impl Gaps {
    /// Records the IDs skipped over when `ids` (ascending) were read after `high`.
    pub fn observe(&mut self, high: i64, ids: &[i64], now: SystemTime) {
        let mut prev = high;
        for &id in ids {
            debug_assert!(id > prev, "ids must ascend past high");
            if id > prev + 1 {
                self.ranges.push_back(Gap { lo: prev + 1, hi: id - 1, since: now });
            }
            prev = id;
        }
    }

    /// Removes IDs that became visible (committed late, or visible but not for msgx).
    pub fn resolve(&mut self, seen: &[i64]) {
        if seen.is_empty() {
            return;
        }
        let mut out = VecDeque::with_capacity(self.ranges.len());
        for g in self.ranges.drain(..) {
            let mut lo = g.lo;
            for &id in seen.iter().filter(|&&id| id >= g.lo && id <= g.hi) {
                if id > lo {
                    out.push_back(Gap { lo, hi: id - 1, since: g.since });
                }
                lo = lo.max(id + 1);
            }
            if lo <= g.hi {
                out.push_back(Gap { lo, hi: g.hi, since: g.since });
            }
        }
        self.ranges = out;
    }

    /// Drops and returns the gaps noticed at least `delay` ago: their IDs are taken to be
    /// rolled back (PRE-2 bounds the commit delay).
    pub fn expire(&mut self, now: SystemTime, delay: Duration) -> Vec<Gap> {
        let (old, keep): (Vec<Gap>, Vec<Gap>) =
            self.ranges.drain(..).partition(|g| now.duration_since(g.since).is_ok_and(|age| age >= delay));
        self.ranges = keep.into();
        old
    }

    /// The highest ID with nothing unresolved at or below it, given the highest ID read.
    pub fn watermark(&self, high: i64) -> i64 {
        self.ranges.front().map(|g| g.lo - 1).unwrap_or(high).min(high)
    }

    /// When the gap holding `id` was noticed, if `id` is in one.
    pub fn noticed(&self, id: i64) -> Option<SystemTime> {
        self.ranges.iter().find(|g| g.lo <= id && id <= g.hi).map(|g| g.since)
    }

    /// The lowest gap noticed less than `grace` ago, if any (SPEC §4.9, commit grace): rows
    /// above it wait for it, so a lower ID that commits shortly after a higher one still goes
    /// first. Returns its first ID and when its grace ends.
    pub fn fresh(&self, now: SystemTime, grace: Duration) -> Option<(i64, SystemTime)> {
        self.ranges
            .iter()
            .find(|g| now.duration_since(g.since).map_or(true, |age| age < grace))
            .map(|g| (g.lo, g.since + grace))
    }

    /// The lowest `n` gaps, the ones holding the watermark back.
    pub fn lowest(&self, n: usize) -> impl Iterator<Item = &Gap> {
        self.ranges.iter().take(n)
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// How many IDs are unresolved.
    pub fn ids(&self) -> u64 {
        self.ranges.iter().map(|g| (g.hi - g.lo + 1) as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    fn spans(g: &Gaps) -> Vec<(i64, i64)> {
        g.ranges.iter().map(|g| (g.lo, g.hi)).collect()
    }

    #[test]
    fn skipped_ids_become_gaps_and_hold_the_watermark() {
        let now = FakeClock::new().now();
        let mut g = Gaps::default();
        g.observe(0, &[1, 2, 5, 6, 10], now);
        assert_eq!(spans(&g), [(3, 4), (7, 9)]);
        assert_eq!(g.watermark(10), 2);
        assert_eq!(g.ids(), 5);
        g.observe(10, &[11], now);
        assert_eq!(spans(&g), [(3, 4), (7, 9)], "contiguous reads add nothing");
        assert_eq!(Gaps::default().watermark(10), 10);
    }

    #[test]
    fn a_late_id_resolves_its_place_and_splits_the_range() {
        let now = FakeClock::new().now();
        let mut g = Gaps::default();
        g.observe(0, &[10], now); // 1..=9 unseen
        g.resolve(&[1, 5, 9]);
        assert_eq!(spans(&g), [(2, 4), (6, 8)]);
        assert_eq!(g.watermark(10), 1);
        g.resolve(&[2, 3, 4]);
        assert_eq!(g.watermark(10), 5);
        g.resolve(&[6, 7, 8, 42]);
        assert!(g.is_empty());
        assert_eq!(g.watermark(10), 10);
    }

    #[test]
    fn gaps_expire_after_the_max_commit_delay() {
        let clock = FakeClock::new();
        let mut g = Gaps::default();
        g.observe(0, &[3], clock.now());
        clock.advance(Duration::from_secs(60));
        g.observe(3, &[5], clock.now());
        let delay = Duration::from_secs(300);
        clock.advance(Duration::from_secs(239));
        assert!(g.expire(clock.now(), delay).is_empty());
        clock.advance(Duration::from_secs(1));
        let gone = g.expire(clock.now(), delay);
        assert_eq!(gone.iter().map(|g| (g.lo, g.hi)).collect::<Vec<_>>(), [(1, 2)]);
        assert_eq!(g.watermark(5), 3, "the younger gap still holds");
        clock.advance(Duration::from_secs(60));
        assert_eq!(g.expire(clock.now(), delay).len(), 1);
        assert_eq!(g.watermark(5), 5);
    }

    #[test]
    fn a_fresh_gap_holds_rows_above_it_for_the_grace_only() {
        let clock = FakeClock::new();
        let grace = Duration::from_secs(2);
        let mut g = Gaps::default();
        g.observe(0, &[1, 3], clock.now());
        assert_eq!(g.fresh(clock.now(), grace), Some((2, clock.now() + grace)));
        assert_eq!(g.noticed(2), Some(clock.now()));
        assert_eq!(g.noticed(3), None);
        clock.advance(Duration::from_millis(1999));
        assert!(g.fresh(clock.now(), grace).is_some());
        clock.advance(Duration::from_millis(1));
        assert_eq!(g.fresh(clock.now(), grace), None, "after the grace rows flow past it");
        g.observe(3, &[6], clock.now());
        assert_eq!(
            g.fresh(clock.now(), grace).map(|f| f.0),
            Some(4),
            "the older gap no longer holds, the new one does"
        );
    }

    #[test]
    fn a_huge_jump_is_one_range() {
        let now = FakeClock::new().now();
        let mut g = Gaps::default();
        g.observe(0, &[1_000_000_001], now);
        assert_eq!(spans(&g), [(1, 1_000_000_000)]);
        assert_eq!(g.ids(), 1_000_000_000);
    }
}
