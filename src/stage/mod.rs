//! What every stage has in common: a round at `now` that says when it wants the next one
//! ([`Stage`], [`Next`]), and the rules for a stage whose store is away ([`Outages`], SPEC
//! §4.9). Both are plain functions of state and time; the daemon runs them on threads and the
//! simulator runs them step by step on a fake clock.

use crate::error::Store;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::clock::Mono;
use crate::error::{StoreError, StoreErrorKind};

pub mod runner;

/// The stages of an active instance, in the order the daemon starts them. Upstream first: a
/// stage that makes work rings the doorbells of [`StageId::rings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StageId {
    Poll,
    Process,
    Dispatch,
    Outbound,
    Backfill,
    Jobs,
    Sentinel,
}

impl StageId {
    pub const ALL: [StageId; 7] = [
        StageId::Poll,
        StageId::Process,
        StageId::Dispatch,
        StageId::Outbound,
        StageId::Backfill,
        StageId::Jobs,
        StageId::Sentinel,
    ];

    /// The name in log lines (`stage=process`), `stage=…`.
    pub fn name(self) -> &'static str {
        match self {
            StageId::Poll => "poll",
            StageId::Process => "process",
            StageId::Dispatch => "dispatch",
            StageId::Outbound => "outbound",
            StageId::Backfill => "backfill",
            StageId::Jobs => "jobs",
            StageId::Sentinel => "sentinel",
        }
    }

    /// The stages that have work when this one made progress: new PENDING rows for the pump,
    /// new outcomes (events, intents, marks) for the three behind it.
    pub fn rings(self) -> &'static [StageId] {
        match self {
            StageId::Poll => &[StageId::Process],
            StageId::Process => &[StageId::Dispatch, StageId::Outbound, StageId::Backfill],
            _ => &[],
        }
    }

    /// Whether a doorbell wakes it (the jobs and the sentinel keep their own interval).
    pub fn has_bell(self) -> bool {
        StageId::ALL.iter().any(|s| s.rings().contains(&self))
    }

    /// How long it sleeps when it has nothing to do.
    pub fn idle(self, cfg: &crate::config::Pipeline) -> Duration {
        match self {
            StageId::Jobs => cfg.jobs_interval,
            StageId::Sentinel => cfg.check_interval,
            _ => cfg.poll_interval,
        }
    }
}

/// When a stage wants its next round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Work is ready: at once.
    Now,
    /// Nothing may happen before this time (a head in backoff, the next flush), unless a
    /// doorbell rings first.
    At(SystemTime),
    /// Nothing to do: after the stage's idle interval, or when a doorbell rings.
    Idle,
}

/// What a stage's round reports, beyond its own details.
pub trait RoundReport: fmt::Debug {
    fn next(&self) -> Next;
    /// Whether the stages downstream have something new (their doorbells ring).
    fn progressed(&self) -> bool;
    /// Work an operator asked of the instance between two holdings (a `msgx rules apply`
    /// job, #65): the stages stop, and the instance does it before they start again.
    fn asks(&self) -> Option<String> {
        None
    }
}

/// A stage: one round of work at `now`. A store error that is not charged to a message or an
/// event comes back as `Err`: unavailable stalls the stage (no attempt charged), fenced stops
/// the process, rejected (nothing to charge it to) stalls it with an ERROR.
pub trait Stage {
    type Round: RoundReport;
    /// Which stage it is (its name in log lines: `stage=process`).
    const ID: StageId;
    fn round(&mut self, now: SystemTime) -> Result<Self::Round, StoreError>;
    /// Called once when the stage stops cleanly: finish what is on its way.
    fn close(&mut self) {}
    /// Held by a condition only a person can clear (the poller's PRE-3 halt): what it waits
    /// for and since when. Shown as a stall by `msgx status` and `status --check`.
    fn held(&self) -> Option<(&'static str, SystemTime)> {
        None
    }
}

/// How a stage retries a store that is away and when it alerts: a value of the configuration.
pub use crate::config::OutagePolicy;

impl OutagePolicy {
    /// The pause after the `n`-th consecutive failure (1-based): backoff, doubling, capped.
    pub fn retry_in(&self, n: u32) -> Duration {
        crate::policy::doubling(self.backoff, n, self.cap)
    }
}

/// A line the stage runner logs (levels: see [`Notice::level`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The stage stalled on `store`.
    Started { stage: &'static str, store: Store, kind: StoreErrorKind, error: String },
    /// Still stalled after `outage-alert-after`, and every `outage-alert-every` after that.
    StillDown { stage: &'static str, store: Store, kind: StoreErrorKind, down_for: Duration, error: String },
    /// The stage ran a round again.
    Ended { stage: &'static str, store: Store, down_for: Duration },
}

impl Notice {
    pub fn level(&self) -> log::Level {
        match self {
            Notice::Started { kind: StoreErrorKind::Unavailable, .. } => log::Level::Warn,
            Notice::Started { .. } | Notice::StillDown { .. } => log::Level::Error,
            Notice::Ended { .. } => log::Level::Info,
        }
    }
}

fn verb(kind: StoreErrorKind) -> &'static str {
    match kind {
        StoreErrorKind::Rejected => "store refused",
        StoreErrorKind::Untrusted => "store not trusted",
        _ => "store unavailable",
    }
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::Started { stage, store, kind, error } => {
                write!(f, "{} store={store} stage={stage} error={error:?}; the stage waits for it, nothing is charged to a message", verb(*kind))
            }
            Notice::StillDown { stage, store, kind, down_for, error } => write!(
                f,
                "{} store={store} stage={stage} down_for={} error={error:?}; still waiting",
                verb(*kind),
                human(*down_for)
            ),
            Notice::Ended { stage, store, down_for } => {
                write!(f, "store available again store={store} stage={stage} down_for={}", human(*down_for))
            }
        }
    }
}

/// `850ms`, `31.2s`, `4m05s`, `2h10m`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{}.{}s", ms / 1000, ms % 1000 / 100)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1000)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Outage {
    since: SystemTime,
    kind: StoreErrorKind,
    last_alert: Option<SystemTime>,
}

/// The outages of one stage: which stores it is waiting for, since when, and what to say.
#[derive(Debug, Clone)]
pub struct Outages {
    stage: &'static str,
    policy: OutagePolicy,
    open: BTreeMap<Store, Outage>,
    failures: u32,
}

impl Outages {
    pub fn new(stage: &'static str, policy: OutagePolicy) -> Outages {
        Outages { stage, policy, open: BTreeMap::new(), failures: 0 }
    }

    /// A round failed on `e` (not fenced): what to log and how long to wait before the next.
    pub fn failed(&mut self, e: &StoreError, now: SystemTime) -> (Vec<Notice>, Duration) {
        debug_assert!(!e.stops(), "a fenced stage stops; it does not stall");
        self.failures = self.failures.saturating_add(1);
        let mut notices = Vec::new();
        let stage = self.stage;
        let o = self.open.entry(e.store).or_insert_with(|| {
            notices.push(Notice::Started { stage, store: e.store, kind: e.kind, error: e.detail.clone() });
            Outage { since: now, kind: e.kind, last_alert: None }
        });
        // A store that refused and now cannot be reached (or back) is the same outage; one
        // that became untrusted meanwhile (a server back with another certificate) is said at
        // once, as an ERROR: it will not pass by itself (#64).
        if e.kind == StoreErrorKind::Untrusted && o.kind != StoreErrorKind::Untrusted && notices.is_empty() {
            notices.push(Notice::Started { stage, store: e.store, kind: e.kind, error: e.detail.clone() });
        }
        o.kind = e.kind;
        let down_for = now.duration_since(o.since).unwrap_or_default();
        let due = match o.last_alert {
            None => {
                down_for >= self.policy.alert_after && !notices.iter().any(|n| n.level() == log::Level::Error)
            }
            Some(t) => now.duration_since(t).unwrap_or_default() >= self.policy.alert_every,
        };
        if due {
            o.last_alert = Some(now);
            notices.push(Notice::StillDown {
                stage,
                store: e.store,
                kind: e.kind,
                down_for,
                error: e.detail.clone(),
            });
        }
        if o.last_alert.is_none() && notices.iter().any(|n| n.level() == log::Level::Error) {
            // A refusal is an ERROR at once; the next alert comes `alert-every` later.
            o.last_alert = Some(now);
        }
        (notices, self.policy.retry_in(self.failures))
    }

    /// A round succeeded: every outage of the stage is over.
    pub fn recovered(&mut self, now: SystemTime) -> Vec<Notice> {
        self.failures = 0;
        let stage = self.stage;
        std::mem::take(&mut self.open)
            .into_iter()
            .map(|(store, o)| Notice::Ended {
                stage,
                store,
                down_for: now.duration_since(o.since).unwrap_or_default(),
            })
            .collect()
    }

    /// The store the stage waits for longest, and since when.
    pub fn stalled_on(&self) -> Option<(&'static str, SystemTime)> {
        self.open.iter().map(|(s, o)| (s.name(), o.since)).min_by_key(|(_, since)| *since)
    }
}

/// Which stages are stalled on which store, for the stats line, the heartbeat and `msgx
/// status`. Shared by the stage threads.
#[derive(Debug, Clone, Default)]
pub struct StallBoard(Arc<Mutex<BTreeMap<&'static str, (&'static str, SystemTime)>>>);

impl StallBoard {
    pub fn set(&self, stage: &'static str, stalled: Option<(&'static str, SystemTime)>) {
        let mut b = self.0.lock().expect("stall board poisoned");
        match stalled {
            Some(s) => b.insert(stage, s),
            None => b.remove(stage),
        };
    }

    /// `stage:store` pairs, e.g. `process:redis,backfill:mailbox`; empty when nothing stalls.
    pub fn describe(&self) -> String {
        let b = self.0.lock().expect("stall board poisoned");
        b.iter().map(|(stage, (store, _))| format!("{stage}:{store}")).collect::<Vec<_>>().join(",")
    }

    /// (stage, store, since) of every stalled stage.
    pub fn snapshot(&self) -> Vec<(&'static str, &'static str, SystemTime)> {
        let b = self.0.lock().expect("stall board poisoned");
        b.iter().map(|(stage, (store, since))| (*stage, *store, *since)).collect()
    }
}

/// When each watched loop's current turn began (`None`: between turns, waiting).
#[derive(Clone, Default)]
pub struct Pulse(Arc<Mutex<BTreeMap<&'static str, Option<Mono>>>>);

/// A turn under way; the loop is between turns again when it is dropped.
pub struct Turning {
    pulse: Pulse,
    name: &'static str,
}

impl Drop for Turning {
    fn drop(&mut self) {
        self.pulse.0.lock().expect("pulse poisoned").insert(self.name, None);
    }
}

impl Pulse {
    /// `name` starts a turn at `now`.
    pub fn turning(&self, name: &'static str, now: Mono) -> Turning {
        self.0.lock().expect("pulse poisoned").insert(name, Some(now));
        Turning { pulse: self.clone(), name }
    }

    /// `name`'s turn is making progress at `now`: it is measured from here, so a step that is
    /// long but moving (a heal page by page, the daily check) is never taken for stuck; one
    /// between turns stays so.
    pub fn beat(&self, name: &'static str, now: Mono) {
        if let Some(since @ Some(_)) = self.0.lock().expect("pulse poisoned").get_mut(name) {
            *since = Some(now);
        }
    }

    /// Every watched loop and how long its current turn has lasted (`None`: waiting).
    pub fn turns(&self, now: Mono) -> Vec<(&'static str, Option<Duration>)> {
        let p = self.0.lock().expect("pulse poisoned");
        p.iter()
            .map(|(name, since)| (*name, since.map(|s| now.as_duration().saturating_sub(s.as_duration()))))
            .collect()
    }

    /// The loop whose turn has lasted longest, if longer than `limit`.
    pub fn stuck(&self, now: Mono, limit: Duration) -> Option<(&'static str, Duration)> {
        let p = self.0.lock().expect("pulse poisoned");
        p.iter()
            .filter_map(|(name, since)| {
                since.map(|s| (*name, now.as_duration().saturating_sub(s.as_duration())))
            })
            .filter(|(_, took)| *took > limit)
            .max_by_key(|(_, took)| *took)
    }
}

/// A long step's way to say it is moving (#54): each page of a heal, each chunk of a check
/// beats, so the watchdog and the lease keeper take only a step that makes no progress for
/// `msgx.watchdog.stuck-after` for stuck. [`Beat::default`] beats nothing (a command, a test).
#[derive(Clone, Default)]
pub struct Beat(Option<(Pulse, &'static str, Arc<dyn crate::clock::Clock>)>);

impl Beat {
    /// Beats `name`'s turn on `pulse`, on `clock`'s monotonic time.
    pub fn of(pulse: &Pulse, name: &'static str, clock: Arc<dyn crate::clock::Clock>) -> Beat {
        Beat(Some((pulse.clone(), name, clock)))
    }

    pub fn beat(&self) {
        if let Some((pulse, name, clock)) = &self.0 {
            pulse.beat(name, clock.mono());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    fn policy() -> OutagePolicy {
        OutagePolicy {
            backoff: Duration::from_millis(200),
            cap: Duration::from_secs(2),
            alert_after: Duration::from_secs(60),
            alert_every: Duration::from_secs(600),
        }
    }

    #[test]
    fn reconnect_backoff_doubles_to_its_cap() {
        let got: Vec<u128> = (1..=6).map(|n| policy().retry_in(n).as_millis()).collect();
        assert_eq!(got, [200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(policy().retry_in(u32::MAX), Duration::from_secs(2));
    }

    #[test]
    fn a_two_hour_outage_logs_warn_once_then_an_error_at_one_minute_and_every_ten() {
        let clock = FakeClock::new();
        let mut o = Outages::new("process", policy());
        let e = StoreError::unavailable(Store::Redis, "connection refused");
        let mut lines: Vec<(log::Level, Duration)> = Vec::new();
        let start = clock.now();
        while clock.now().duration_since(start).unwrap() < Duration::from_secs(7200) {
            let (notices, wait) = o.failed(&e, clock.now());
            lines.extend(notices.iter().map(|n| (n.level(), clock.now().duration_since(start).unwrap())));
            assert!(wait <= Duration::from_secs(2));
            assert_eq!(o.stalled_on(), Some(("redis", start)));
            clock.advance(wait);
        }
        let ended = o.recovered(clock.now());
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].level(), log::Level::Info);
        assert!(ended[0]
            .to_string()
            .starts_with("store available again store=redis stage=process down_for=2h00m"));
        let warns = lines.iter().filter(|(l, _)| *l == log::Level::Warn).count();
        let errors: Vec<u64> =
            lines.iter().filter(|(l, _)| *l == log::Level::Error).map(|(_, at)| at.as_secs()).collect();
        assert_eq!(warns, 1, "one WARN when it starts");
        assert_eq!(errors.len(), 12, "at 1 min, then every 10 min: {errors:?}");
        assert!((60..62).contains(&errors[0]), "{errors:?}");
        assert!(errors.windows(2).all(|w| (600..602).contains(&(w[1] - w[0]))), "{errors:?}");
        assert_eq!(o.stalled_on(), None);
        assert!(o.recovered(clock.now()).is_empty(), "nothing more to end");
    }

    #[test]
    fn a_refusal_is_an_error_at_once() {
        let now = FakeClock::new().now();
        let mut o = Outages::new("poll", policy());
        let (n, _) = o.failed(&StoreError::rejected(Store::Mailbox, "SELECT command denied"), now);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].level(), log::Level::Error);
        assert!(n[0].to_string().starts_with("store refused store=mailbox stage=poll"), "{}", n[0]);
        let (n, _) = o.failed(&StoreError::rejected(Store::Mailbox, "again"), now + Duration::from_secs(61));
        assert!(n.is_empty(), "the next alert is alert-every later");
    }

    #[test]
    fn an_untrusted_store_is_an_error_at_once_and_charges_nothing() {
        // #64: a certificate from another CA will not pass by itself — an ERROR at once, even
        // when the outage began as a store that was merely away.
        let now = FakeClock::new().now();
        let mut o = Outages::new("process", policy());
        let refused = || {
            StoreError::new(Store::Redis, StoreErrorKind::Untrusted, "certificate verify failed (another CA)")
        };
        assert!(refused().is_unavailable(), "waited out like an outage: nothing is charged");
        let (n, _) = o.failed(&refused(), now);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].level(), log::Level::Error);
        assert!(n[0].to_string().starts_with("store not trusted store=redis stage=process"), "{}", n[0]);
        let mut away = Outages::new("process", policy());
        let (n, _) = away.failed(&StoreError::unavailable(Store::Redis, "connection refused"), now);
        assert_eq!(n[0].level(), log::Level::Warn);
        let (n, _) = away.failed(&refused(), now + Duration::from_secs(1));
        assert_eq!(n.len(), 1, "the server came back with a certificate msgx refuses: said at once");
        assert_eq!(n[0].level(), log::Level::Error);
        let (n, _) = away.failed(&refused(), now + Duration::from_secs(2));
        assert!(n.is_empty(), "once, then alert-every");
    }

    #[test]
    fn two_stores_away_are_two_outages_and_both_end() {
        let now = FakeClock::new().now();
        let mut o = Outages::new("backfill", policy());
        o.failed(&StoreError::unavailable(Store::Mailbox, "gone away"), now);
        let (n, _) =
            o.failed(&StoreError::unavailable(Store::Postgres, "refused"), now + Duration::from_secs(1));
        assert_eq!(n.len(), 1, "the second store starts its own outage");
        assert_eq!(o.stalled_on().map(|s| s.0), Some("mailbox"), "the longest one");
        assert_eq!(o.recovered(now + Duration::from_secs(5)).len(), 2);
    }

    #[test]
    fn durations_read_like_a_person_writes_them() {
        let h = |ms| human(Duration::from_millis(ms));
        assert_eq!([h(850), h(31_240), h(245_000), h(7_800_000)], ["850ms", "31.2s", "4m05s", "2h10m"]);
    }

    #[test]
    fn the_board_names_stalled_stages() {
        let b = StallBoard::default();
        let now = FakeClock::new().now();
        b.set("process", Some(("redis", now)));
        b.set("backfill", Some(("mailbox", now)));
        assert_eq!(b.describe(), "backfill:mailbox,process:redis");
        b.set("process", None);
        assert_eq!(b.describe(), "backfill:mailbox");
    }

    #[test]
    fn a_turn_longer_than_the_limit_is_stuck_and_a_finished_one_is_not() {
        let clock = FakeClock::new();
        let pulse = Pulse::default();
        let limit = Duration::from_secs(60);
        let process = pulse.turning("process", clock.mono());
        clock.advance(Duration::from_secs(30));
        let _poll = pulse.turning("poll", clock.mono());
        assert_eq!(pulse.stuck(clock.mono(), limit), None);
        clock.advance(Duration::from_secs(31));
        assert_eq!(pulse.stuck(clock.mono(), limit), Some(("process", Duration::from_secs(61))));
        drop(process);
        assert_eq!(pulse.stuck(clock.mono(), limit), None, "process is between turns");
        clock.advance(Duration::from_secs(30));
        assert_eq!(pulse.stuck(clock.mono(), limit), Some(("poll", Duration::from_secs(61))));
    }

    #[test]
    fn a_long_step_that_beats_is_never_stuck_and_one_that_stops_beating_is() {
        let clock = FakeClock::new();
        let pulse = Pulse::default();
        let limit = Duration::from_secs(120);
        let beat = Beat::of(&pulse, "start-up pass", std::sync::Arc::new(clock.clone()));
        let turn = pulse.turning("start-up pass", clock.mono());
        for _page in 0..100 {
            clock.advance(Duration::from_secs(60));
            beat.beat();
            assert_eq!(pulse.stuck(clock.mono(), limit), None, "a page a minute for 100 minutes");
        }
        clock.advance(Duration::from_secs(121));
        assert_eq!(pulse.stuck(clock.mono(), limit), Some(("start-up pass", Duration::from_secs(121))));
        drop(turn);
        beat.beat();
        assert_eq!(pulse.stuck(clock.mono(), limit), None, "a beat between turns starts none");
        Beat::default().beat();
    }
}
