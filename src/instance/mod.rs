//! The instance as one sans-IO machine (#56): what an instance does next, from standing by to
//! its end, as effects out and what came of them in. The order of effects — the floor read,
//! the lease claimed above it, the flights claimed for the epoch won, the stores compared, the
//! stages served, the lease given back, the pause — is decided here and nowhere else: the
//! daemon performs the effects on its threads and the real stores (`daemon::lifetimes`), the
//! simulator on its twins (`sim`), `msgx rebuild-flights` once, as a tool (`cli::consistency`).
//! The effects that are one call to a port are performed by the one interpreter,
//! [`effects::perform`]; the others (compare, serve, wait, stand down, exit) by each
//! driver in its own time, and answered with an [`Input`].
//!
//! What comes after a claim, a comparison and a holding is [`Lifecycle`]'s; the states are drawn
//! in docs/architecture.md ("An instance's life").

use std::collections::VecDeque;
use std::time::Duration;

pub mod effects;
pub mod lifecycle;

use crate::clock::Mono;
use crate::config::Config;
use crate::consistency::Pass;
use crate::error::StoreError;
use crate::ports::{Claim, LeaseHolder};
use crate::stage::OutagePolicy;
use lifecycle::{End, FlightsClaim, Lifecycle, Next, Served};

/// What an instance's rules read from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct InstancePolicy {
    /// `msgx.consistency-check.on-startup`: compare the stores before the stages first start.
    pub compare_on_start: bool,
    pub outage: OutagePolicy,
    /// `msgx.lease.renew-every`: how often a standby tries the lease again.
    pub look_every: Duration,
    /// A tool (`msgx rebuild-flights --yes`): it takes the lease once, never stands by, and
    /// ends where an instance would stand by.
    pub tool: bool,
}

impl InstancePolicy {
    pub fn of(cfg: &Config, tool: bool) -> InstancePolicy {
        InstancePolicy {
            compare_on_start: cfg.pipeline.check_on_startup && !tool,
            outage: cfg.pipeline.outage,
            look_every: cfg.lease.renew_every,
            tool,
        }
    }
}

/// What the instance asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Read the newest lease epoch Redis saw (0 when it cannot say): a new epoch is taken above
    /// it. Answered by [`Input::Floor`].
    ReadFloor,
    /// Claim the lease above `floor`, noting when the claim was sent (the lease gate counts
    /// from then). Answered by [`Input::Lease`].
    ClaimLease { floor: i64 },
    /// Claim the flights in Redis for the epoch just won. Answered by [`Input::Flights`].
    ClaimFlights { epoch: i64 },
    /// Compare the stores (and heal) under `epoch`, the lease renewed meanwhile. Answered by
    /// [`Input::Compared`].
    Compare { epoch: i64 },
    /// Serve under `epoch` (a tool: do its work), the gate counting from `since`, the pump's
    /// Redis handle from `token`. Answered by [`Input::Served`].
    Serve { epoch: i64, since: Mono, token: Option<String> },
    /// Not serving any more: a store forgot (`forgot`: the servers as they are now are the
    /// baseline compared next) or could not be compared; the lease is given back and looked
    /// for again after `pause`. Said; answered by [`Input::Done`].
    StandDown { forgot: bool, pause: Duration, why: String },
    /// Give the lease of `epoch` back at once, so a standby need not wait for its expiry.
    /// Answered by [`Input::Done`].
    Release { epoch: i64 },
    /// Wait, unless stop is asked. Answered by [`Input::Done`] or [`Input::Stop`].
    Wait(Duration),
    /// The end: nothing follows.
    Exit(End),
}

/// What came of an effect.
#[derive(Debug)]
pub enum Input {
    Floor(i64),
    Lease {
        claim: Result<Claim, StoreError>,
        sent: Mono,
    },
    Flights(FlightsClaim),
    Compared(Pass),
    /// A holding ended; `stale`: a newer instance holds the lease; `stopping`: stop was asked.
    Served {
        served: Served,
        stale: bool,
        stopping: bool,
    },
    Done,
    /// Stop was asked (SIGTERM): the answer to any effect. The lease is given back if held,
    /// then the end.
    Stop,
    /// The driver met an end of its own while performing an effect — a store refused while it
    /// was opened, a stage failed: the lease is given back if held, then `End`. Every way an
    /// instance ends goes through the machine (#65).
    Failed(End),
}

/// One instance, from standing by to its end.
#[derive(Debug)]
pub struct Instance {
    policy: InstancePolicy,
    life: Lifecycle,
    floor: i64,
    /// The epoch held and when its claim was sent.
    held: Option<(i64, Mono)>,
    /// Effects that follow one another, each answered by `Done`.
    queue: VecDeque<Effect>,
    /// The effect asked for last (an input answers it).
    asked: Option<Effect>,
}

impl Instance {
    pub fn new(policy: InstancePolicy) -> Instance {
        Instance {
            policy,
            life: Lifecycle::default(),
            floor: 0,
            held: None,
            queue: VecDeque::new(),
            asked: None,
        }
    }

    /// The first effect: the floor read.
    pub fn start(&mut self) -> Effect {
        self.ask(Effect::ReadFloor)
    }

    /// What follows `input`, the answer to the effect asked for last.
    pub fn on(&mut self, input: Input) -> Effect {
        let asked = self.asked.take();
        assert!(
            !matches!(asked, None | Some(Effect::Exit(_))),
            "an input answers an effect asked for: {input:?}"
        );
        let next = match input {
            Input::Floor(floor) => {
                self.floor = floor;
                Effect::ClaimLease { floor }
            }
            Input::Lease { claim, sent } => self.leased(claim, sent),
            Input::Flights(claim) => {
                let next = self.life.claimed(claim, self.policy.compare_on_start, &self.policy.outage);
                self.follow(next)
            }
            Input::Compared(pass) => {
                let next = self.life.compared(pass, &self.policy.outage);
                self.follow(next)
            }
            Input::Served { served, stale, stopping } => {
                let next = self.life.served(served, stale, stopping);
                self.follow(next)
            }
            Input::Done => self.queue.pop_front().expect("a step in a row answered by done"),
            Input::Stop => self.end(End::Stopped),
            Input::Failed(end) => self.end(end),
        };
        self.ask(next)
    }

    fn ask(&mut self, effect: Effect) -> Effect {
        self.asked = Some(effect.clone());
        effect
    }

    /// The end, the lease given back first if it is held.
    fn end(&mut self, end: End) -> Effect {
        self.queue.clear();
        match self.held.take() {
            Some((epoch, _)) => {
                self.queue.push_back(Effect::Exit(end));
                Effect::Release { epoch }
            }
            None => Effect::Exit(end),
        }
    }

    /// The lease claimed (or not): the flights next, or another look after a pause.
    fn leased(&mut self, claim: Result<Claim, StoreError>, sent: Mono) -> Effect {
        let again = Effect::ClaimLease { floor: self.floor };
        match claim {
            Ok(Claim::Acquired { epoch, .. }) => {
                self.held = Some((epoch, sent));
                Effect::ClaimFlights { epoch }
            }
            Err(e) if e.stops() => Effect::Exit(End::NotHealed(e.to_string())),
            Ok(Claim::HeldBy(h)) if self.policy.tool => Effect::Exit(End::Held(held_by(&h))),
            Err(e) if self.policy.tool => Effect::Exit(End::Away(e.to_string())),
            Ok(Claim::HeldBy(_)) | Err(_) => {
                self.queue = VecDeque::from([again]);
                Effect::Wait(self.policy.look_every)
            }
        }
    }

    /// Does what the lifecycle said, holding the epoch won last.
    fn follow(&mut self, next: Next) -> Effect {
        let (epoch, since) = self.held.expect("a holding follows a won lease");
        match next {
            Next::Compare => Effect::Compare { epoch },
            Next::Serve(token) => Effect::Serve { epoch, since, token },
            Next::Again { why, .. } if self.policy.tool => {
                self.held = None;
                self.queue = VecDeque::from([Effect::Exit(End::Away(why))]);
                Effect::Release { epoch }
            }
            Next::Again { pause, forgot, why } => {
                self.held = None;
                self.queue =
                    VecDeque::from([Effect::Release { epoch }, Effect::Wait(pause), Effect::ReadFloor]);
                Effect::StandDown { forgot, pause, why }
            }
            Next::End { end, release } => {
                self.held = None;
                if !release {
                    return Effect::Exit(end);
                }
                self.queue = VecDeque::from([Effect::Exit(end)]);
                Effect::Release { epoch }
            }
        }
    }
}

/// `host=… pid=… epoch=…` of a lease holder, as the log lines name it.
pub fn holder_line(h: &LeaseHolder) -> String {
    format!("host={} pid={} epoch={}", h.host.as_deref().unwrap_or("?"), h.pid.unwrap_or(0), h.epoch)
}

fn held_by(h: &LeaseHolder) -> String {
    format!("an instance holds the lease ({}): stop msgx first, its pump writes the flights", holder_line(h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Store;

    fn policy(tool: bool) -> InstancePolicy {
        let s = Duration::from_secs;
        InstancePolicy {
            compare_on_start: !tool,
            outage: OutagePolicy { backoff: s(1), cap: s(8), alert_after: s(60), alert_every: s(600) },
            look_every: s(2),
            tool,
        }
    }

    fn won(epoch: i64) -> Input {
        Input::Lease { claim: Ok(Claim::Acquired { epoch, previous: None }), sent: Mono::default() }
    }

    fn holder(epoch: i64) -> LeaseHolder {
        LeaseHolder {
            holder: Some("other".into()),
            host: Some("h".into()),
            pid: Some(7),
            epoch,
            since: None,
            renewed_at: None,
            expires_at: None,
            free: false,
            status: String::new(),
        }
    }

    /// An instance under `policy` that read the floor 0 and is asked to claim the lease.
    fn looking(policy: InstancePolicy) -> Instance {
        let mut i = Instance::new(policy);
        assert_eq!(i.start(), Effect::ReadFloor);
        assert_eq!(i.on(Input::Floor(0)), Effect::ClaimLease { floor: 0 });
        i
    }

    /// An instance under `policy` that won the lease under `epoch`, asked to claim the flights.
    fn holding(policy: InstancePolicy, epoch: i64) -> Instance {
        let mut i = looking(policy);
        assert_eq!(i.on(won(epoch)), Effect::ClaimFlights { epoch });
        i
    }

    fn agreed() -> Input {
        Input::Compared(Pass::Agreed { token: Some("t".into()), report: Default::default(), healed: None })
    }

    /// The order of a first start: floor, lease above it, flights, compare, serve; a stop ends
    /// it with the lease given back.
    #[test]
    fn a_start_reads_the_floor_claims_the_lease_and_the_flights_then_compares_and_serves() {
        let mut i = Instance::new(policy(false));
        assert_eq!(i.start(), Effect::ReadFloor);
        assert_eq!(i.on(Input::Floor(4)), Effect::ClaimLease { floor: 4 });
        assert_eq!(i.on(won(5)), Effect::ClaimFlights { epoch: 5 });
        assert_eq!(i.on(Input::Flights(FlightsClaim::Ours)), Effect::Compare { epoch: 5 });
        let serve = Effect::Serve { epoch: 5, since: Mono::default(), token: Some("t".into()) };
        assert_eq!(i.on(agreed()), serve);
        let stopped = Input::Served { served: Served::Stopped, stale: false, stopping: true };
        assert_eq!(i.on(stopped), Effect::Release { epoch: 5 });
        assert_eq!(i.on(Input::Done), Effect::Exit(End::Stopped));
    }

    /// A standby looks again with the same floor while another holds the lease or the lease
    /// store is away; a stop while it waits ends it.
    #[test]
    fn a_standby_looks_again_until_it_wins_or_is_stopped() {
        let mut i = Instance::new(policy(false));
        i.start();
        i.on(Input::Floor(3));
        let held = Input::Lease { claim: Ok(Claim::HeldBy(holder(3))), sent: Mono::default() };
        assert_eq!(i.on(held), Effect::Wait(Duration::from_secs(2)));
        assert_eq!(i.on(Input::Done), Effect::ClaimLease { floor: 3 });
        let away = Input::Lease {
            claim: Err(StoreError::unavailable(Store::Lease, "refused")),
            sent: Mono::default(),
        };
        assert_eq!(i.on(away), Effect::Wait(Duration::from_secs(2)));
        assert_eq!(i.on(Input::Stop), Effect::Exit(End::Stopped));
    }

    /// Seed 6299's rule, in order: Redis away at the claim of the flights is an outage — said,
    /// the lease given back, a doubling pause, and the floor read again before the next claim.
    #[test]
    fn a_claim_of_the_flights_that_did_not_reach_redis_gives_the_lease_back_and_starts_again() {
        let mut i = holding(policy(false), 1);
        let away = StoreError::unavailable(Store::Redis, "refused");
        let down = i.on(Input::Flights(FlightsClaim::Away(away.clone())));
        let pause = Duration::from_secs(1);
        assert_eq!(down, Effect::StandDown { forgot: false, pause, why: away.to_string() });
        assert_eq!(i.on(Input::Done), Effect::Release { epoch: 1 });
        assert_eq!(i.on(Input::Done), Effect::Wait(Duration::from_secs(1)));
        assert_eq!(i.on(Input::Done), Effect::ReadFloor);
        i.on(Input::Floor(1));
        assert_eq!(i.on(won(2)), Effect::ClaimFlights { epoch: 2 });
    }

    /// A store that forgot while serving: stood down as forgot, and compared before the stages
    /// start again even when no comparison is asked at start.
    #[test]
    fn a_forget_while_serving_stands_down_and_is_compared_under_the_next_epoch() {
        let mut i = holding(InstancePolicy { compare_on_start: false, ..policy(false) }, 1);
        assert!(matches!(i.on(Input::Flights(FlightsClaim::Ours)), Effect::Serve { epoch: 1, .. }));
        let forgot =
            Input::Served { served: Served::Forgot("redis forgot".into()), stale: false, stopping: false };
        let down = Effect::StandDown { forgot: true, pause: Duration::ZERO, why: "redis forgot".into() };
        assert_eq!(i.on(forgot), down);
        assert_eq!(i.on(Input::Done), Effect::Release { epoch: 1 });
        assert_eq!(i.on(Input::Done), Effect::Wait(Duration::ZERO));
        i.on(Input::Done);
        i.on(Input::Floor(1));
        i.on(won(2));
        assert_eq!(i.on(Input::Flights(FlightsClaim::Ours)), Effect::Compare { epoch: 2 });
    }

    /// A stage asked for work between two holdings (a `msgx rules apply` job, #65): the stores
    /// are compared under the same lease, nothing given back; at a stop, the lease is.
    #[test]
    fn work_asked_while_serving_is_done_in_a_comparison_under_the_lease_held() {
        let mut i = holding(InstancePolicy { compare_on_start: false, ..policy(false) }, 1);
        assert!(matches!(i.on(Input::Flights(FlightsClaim::Ours)), Effect::Serve { epoch: 1, .. }));
        let asked =
            |stopping| Input::Served { served: Served::Asked("job 1".into()), stale: false, stopping };
        assert_eq!(i.on(asked(false)), Effect::Compare { epoch: 1 });
        let agreed = Pass::Agreed { token: None, report: Box::default(), healed: None };
        assert!(matches!(i.on(Input::Compared(agreed)), Effect::Serve { epoch: 1, .. }));
        assert_eq!(i.on(asked(true)), Effect::Release { epoch: 1 });
        assert_eq!(i.on(Input::Done), Effect::Exit(End::Stopped));
    }

    /// Fenced at the claim: a newer instance holds the flights; nothing to give back.
    #[test]
    fn a_newer_holder_of_the_flights_ends_the_instance_without_a_release() {
        let mut i = holding(policy(false), 1);
        let newer = Input::Flights(FlightsClaim::Newer("epoch 9".into()));
        assert_eq!(i.on(newer), Effect::Exit(End::Fenced("epoch 9".into())));
    }

    /// A tool never stands by: a lease held by an instance ends it at once, an outage after the
    /// lease was won gives it back and ends it, and its work is served without a comparison.
    #[test]
    fn a_tool_takes_the_lease_once_and_ends_where_an_instance_would_stand_by() {
        let mut t = looking(policy(true));
        let held = Input::Lease { claim: Ok(Claim::HeldBy(holder(3))), sent: Mono::default() };
        assert!(matches!(t.on(held), Effect::Exit(End::Held(why)) if why.contains("host=h pid=7 epoch=3")));
        let mut t = holding(policy(true), 4);
        let away = StoreError::unavailable(Store::Redis, "refused");
        assert_eq!(t.on(Input::Flights(FlightsClaim::Away(away.clone()))), Effect::Release { epoch: 4 });
        assert_eq!(t.on(Input::Done), Effect::Exit(End::Away(away.to_string())));
        let mut t = holding(policy(true), 5);
        assert!(matches!(
            t.on(Input::Flights(FlightsClaim::Ours)),
            Effect::Serve { epoch: 5, token: None, .. }
        ));
        let done = Input::Served { served: Served::Stopped, stale: false, stopping: false };
        assert_eq!(t.on(done), Effect::Release { epoch: 5 });
        assert_eq!(t.on(Input::Done), Effect::Exit(End::Stopped));
    }

    /// #65: every way an instance ends goes through the machine. Stop answers any effect, and
    /// an end the driver met itself (a store refused during the comparison, a stage failed, a
    /// session not opened for the lease keeper) gives the lease back first when it is held —
    /// before, the daemon's `?` ended the process holding it, and a standby waited out its
    /// expiry.
    #[test]
    fn a_stop_or_a_failure_in_any_state_gives_the_lease_back_before_the_end() {
        let mut i = holding(policy(false), 3);
        assert_eq!(i.on(Input::Flights(FlightsClaim::Ours)), Effect::Compare { epoch: 3 });
        let refused = End::Away("postgres refused: permission denied".into());
        assert_eq!(i.on(Input::Failed(refused.clone())), Effect::Release { epoch: 3 });
        assert_eq!(i.on(Input::Done), Effect::Exit(refused));
        let mut i = holding(policy(false), 4);
        assert_eq!(i.on(Input::Flights(FlightsClaim::Ours)), Effect::Compare { epoch: 4 });
        assert!(matches!(i.on(agreed()), Effect::Serve { epoch: 4, .. }));
        let failed = End::Failed("dispatch".into());
        assert_eq!(i.on(Input::Failed(failed.clone())), Effect::Release { epoch: 4 });
        assert_eq!(i.on(Input::Done), Effect::Exit(failed));
        // Asked to stop while it claims the flights: the lease it just won goes back.
        let mut i = holding(policy(false), 5);
        assert_eq!(i.on(Input::Stop), Effect::Release { epoch: 5 });
        assert_eq!(i.on(Input::Done), Effect::Exit(End::Stopped));
        // Nothing held: the end at once.
        let mut i = looking(policy(false));
        assert_eq!(i.on(Input::Failed(End::Failed("x".into()))), Effect::Exit(End::Failed("x".into())));
        let mut i = looking(policy(false));
        assert_eq!(i.on(Input::Stop), Effect::Exit(End::Stopped));
    }

    /// One table from an end to the exit code, the daemon's errors through it.
    #[test]
    fn every_end_has_its_exit_code_and_the_daemons_errors_go_through_the_table() {
        use crate::exit::Exit;
        let ends = [
            (End::Stopped, Exit::Ok),
            (End::Fenced("x".into()), Exit::Failed),
            (End::Held("x".into()), Exit::Failed),
            (End::Failed("x".into()), Exit::Failed),
            (End::NotHealed("x".into()), Exit::Forgot),
            (End::Away("x".into()), Exit::Unreachable),
            (End::Schema("x".into()), Exit::Schema),
        ];
        for (end, exit) in ends {
            assert_eq!(end.exit(), exit, "{end:?}");
        }
        use crate::daemon::DaemonError;
        let errors = [
            (DaemonError::StageFailed("pump".into()), Exit::Failed),
            (DaemonError::Fenced("x".into()), Exit::Failed),
            (DaemonError::Forgot("x".into()), Exit::Forgot),
            (DaemonError::Store(StoreError::unavailable(Store::Mailbox, "refused")), Exit::Unreachable),
        ];
        for (e, exit) in errors {
            assert_eq!(e.exit(), exit, "{e}");
        }
    }

    #[test]
    #[should_panic(expected = "an input answers an effect asked for")]
    fn nothing_is_heard_after_the_end() {
        let mut i = looking(policy(false));
        i.on(Input::Lease {
            claim: Err(StoreError::forgot(Store::Lease, "went back")),
            sent: Mono::default(),
        });
        i.on(Input::Done);
    }
}
