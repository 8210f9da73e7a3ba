//! Time, injected. Nothing in msgx reads the wall clock except [`SystemClock`]; every rule that
//! depends on time takes `now` from a [`Clock`], so unit tests drive it with [`FakeClock`] and
//! never sleep.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub mod zone;

/// A reading of a monotonic clock: time since an arbitrary origin that never goes back,
/// whatever the wall clock does (an NTP step, `date -s`). For durations that guard safety —
/// the lease gate — never for timestamps that are stored or compared across processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Mono(Duration);

impl Mono {
    pub fn from_duration(d: Duration) -> Mono {
        Mono(d)
    }

    pub fn as_duration(self) -> Duration {
        self.0
    }

    /// `self + d`, saturating.
    pub fn after(self, d: Duration) -> Mono {
        Mono(self.0.saturating_add(d))
    }
}

/// A source of "now": the wall clock for what is stored and shown, and a monotonic one for
/// what must not move with it.
pub trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;
    fn mono(&self) -> Mono;

    /// The time now, read after a call that may have blocked, never before `earlier` (what the
    /// caller already dated): a wall clock stepped back meanwhile dates nothing earlier (#69).
    fn after(&self, earlier: SystemTime) -> SystemTime {
        self.now().max(earlier)
    }
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

/// The monotonic origin of this process.
static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn mono(&self) -> Mono {
        Mono(ORIGIN.get_or_init(std::time::Instant::now).elapsed())
    }
}

/// A clock that moves only when told to. Clones share the same time. Its monotonic reading
/// moves with every step forward and stands still when the wall time is set back.
#[derive(Debug, Clone)]
pub struct FakeClock {
    now: Arc<Mutex<(SystemTime, Duration)>>,
}

impl FakeClock {
    /// Starts at `2026-01-01T00:00:00Z`, a fixed point so that snapshots stay stable.
    pub fn new() -> Self {
        Self::at(UNIX_EPOCH + Duration::from_secs(1_767_225_600))
    }

    pub fn at(t: SystemTime) -> Self {
        FakeClock { now: Arc::new(Mutex::new((t, Duration::ZERO))) }
    }

    pub fn advance(&self, d: Duration) {
        let mut now = self.now.lock().expect("fake clock poisoned");
        now.0 += d;
        now.1 += d;
    }

    /// Moves the wall time to `t`: forward, the monotonic reading moves as far; backward (a
    /// clock step), it stands still.
    pub fn set(&self, t: SystemTime) {
        let mut now = self.now.lock().expect("fake clock poisoned");
        if let Ok(d) = t.duration_since(now.0) {
            now.1 += d;
        }
        now.0 = t;
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> SystemTime {
        self.now.lock().expect("fake clock poisoned").0
    }

    fn mono(&self) -> Mono {
        Mono(self.now.lock().expect("fake clock poisoned").1)
    }
}

/// A UTC calendar time, as the shared mailbox's `DATETIME` columns hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CivilTime {
    pub year: i32,
    pub month: u8,
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
    pub micros: u32,
}

impl CivilTime {
    /// UTC calendar time of `t` (times before 1970 clamp to the epoch: msgx never meets them).
    pub fn from_system(t: SystemTime) -> CivilTime {
        let t = t.max(UNIX_EPOCH);
        let ts = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::MAX);
        let dt = jiff::tz::TimeZone::UTC.to_datetime(ts);
        CivilTime {
            year: i32::from(dt.year()),
            month: dt.month() as u8,
            day: dt.day() as u8,
            hour: dt.hour() as u8,
            minute: dt.minute() as u8,
            second: dt.second() as u8,
            micros: (dt.subsec_nanosecond() / 1_000) as u32,
        }
    }

    /// `2026-01-01T00:00:00.000000Z`.
    pub fn to_rfc3339(self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.micros
        )
    }

    /// The instant; a time jiff cannot hold (before year −9999 or after 9999, or not a
    /// calendar time) clamps to the epoch, as a time before 1970 does.
    pub fn to_system(self) -> SystemTime {
        let dt = jiff::civil::DateTime::new(
            self.year.clamp(-9999, 9999) as i16,
            self.month as i8,
            self.day as i8,
            self.hour as i8,
            self.minute as i8,
            self.second as i8,
            (self.micros * 1_000) as i32,
        );
        dt.ok()
            .and_then(|dt| jiff::tz::TimeZone::UTC.to_timestamp(dt).ok())
            .and_then(|ts| SystemTime::try_from(ts).ok())
            .filter(|t| *t >= UNIX_EPOCH)
            .unwrap_or(UNIX_EPOCH)
    }
}

/// A time as operators read it: RFC 3339, UTC.
pub fn rfc3339(t: SystemTime) -> String {
    CivilTime::from_system(t).to_rfc3339()
}

/// Milliseconds since the epoch, for log lines and JSON payloads.
pub fn unix_millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_told() {
        let c = FakeClock::new();
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        c.advance(Duration::from_secs(5));
        assert_eq!(c.now(), t0 + Duration::from_secs(5));
        let shared = c.clone();
        shared.advance(Duration::from_millis(1));
        assert_eq!(c.now(), t0 + Duration::from_millis(5001));
    }

    #[test]
    fn civil_time_of_known_instants() {
        let t = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        let c = CivilTime::from_system(t);
        assert_eq!((c.year, c.month, c.day, c.hour, c.minute, c.second), (2026, 1, 1, 0, 0, 0));
        // 2024-02-29T23:59:59Z, a leap day.
        let c = CivilTime::from_system(UNIX_EPOCH + Duration::from_secs(1_709_251_199));
        assert_eq!((c.year, c.month, c.day, c.hour, c.minute, c.second), (2024, 2, 29, 23, 59, 59));
    }

    #[test]
    fn civil_time_round_trips_over_decades() {
        let mut secs = 0u64;
        while secs < 4_102_444_800 {
            let t = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(123_456);
            assert_eq!(CivilTime::from_system(t).to_system(), t, "at {secs}");
            secs += 86_400 * 37 + 3_601;
        }
    }
}
