//! An instance's life around its stages (#38), as a pure step: what comes after the lease is
//! won, after the stores were compared, and after a holding ended. [`super`]'s machine
//! asks it, and the daemon, the simulator and `msgx rebuild-flights` drive that machine: one set
//! of rules, so the simulator proves the daemon's.
//!
//! The states and their transitions are drawn in docs/architecture.md ("An instance's life").

use std::time::Duration;

use crate::consistency::Pass;
use crate::error::StoreError;
use crate::stage::runner::Halt;
use crate::stage::OutagePolicy;

/// How the claim of the flights for a new epoch ended (`RedisFlights::claim`).
#[derive(Debug)]
pub enum FlightsClaim {
    /// Claimed for the epoch: Redis refuses every older epoch's write from now on.
    Ours,
    /// Redis could not be reached: the claim is not in Redis, so nothing is compared or served
    /// under this epoch — an older instance's heal could still write there, and this one would
    /// take that history for a forget (seed 6299, #56). An outage: tried again.
    Away(StoreError),
    /// A newer instance holds them and own PostgreSQL knows its epoch: this one is stale.
    Newer(String),
    /// Redis holds them for an epoch own PostgreSQL never handed out: PostgreSQL lost commits.
    PostgresBehind(String),
}

/// How a holding of the lease ended: what each stage's and the lease keeper's thread returns,
/// what the supervisor reports, and what the instance machine hears (#56: one type from a
/// stage's turn, [`Halt`], to the machine, which says what follows and how the process ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// Stop was asked: every stage finished its round.
    Stopped,
    /// A newer instance holds the lease.
    Fenced(String),
    /// A store forgot what it acknowledged.
    Forgot(String),
    /// A stage asked for work between two holdings (a `msgx rules apply` job, #65): the stores
    /// are compared, and the work done, under the lease still held.
    Asked(String),
}

impl From<Halt> for Served {
    fn from(h: Halt) -> Served {
        match h {
            Halt::Fenced(why) => Served::Fenced(why),
            Halt::Forgot(why) => Served::Forgot(why),
            Halt::Asked(why) => Served::Asked(why),
        }
    }
}

/// How an instance (or a tool that takes the lease) ends: the one stop type from a holding to
/// the process's exit code ([`End::exit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Stop was asked (exit 0).
    Stopped,
    /// Exit 1: a newer instance holds the lease.
    Fenced(String),
    /// Exit 6: what a person must decide.
    NotHealed(String),
    /// Exit 1: a tool found the lease held by an instance (a tool never stands by).
    Held(String),
    /// Exit 4: a store could not be reached or refused where nothing waits it out — a tool's,
    /// or one refused while an instance opened it.
    Away(String),
    /// Exit 1: a stage failed; the process stops so that systemd starts it again.
    Failed(String),
    /// Exit 3: own PostgreSQL's schema is not one this release runs on (checked before an
    /// instance starts, so never the machine's).
    Schema(String),
}

impl End {
    /// The one table from an end to the process's exit code (#65): the daemon's
    /// (`DaemonError::exit` goes through it), a tool's and the simulator's.
    pub fn exit(&self) -> crate::exit::Exit {
        use crate::exit::Exit;
        match self {
            End::Stopped => Exit::Ok,
            End::Fenced(_) | End::Held(_) | End::Failed(_) => Exit::Failed,
            End::NotHealed(_) => Exit::Forgot,
            End::Away(_) => Exit::Unreachable,
            End::Schema(_) => Exit::Schema,
        }
    }

    /// Why it ended, for a line of the log or a tool's error.
    pub fn why(&self) -> &str {
        match self {
            End::Stopped => "stopped",
            End::Fenced(why)
            | End::NotHealed(why)
            | End::Held(why)
            | End::Away(why)
            | End::Failed(why)
            | End::Schema(why) => why,
        }
    }
}

/// What the instance does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Compare the stores (and heal), the lease held and renewed.
    Compare,
    /// Serve, the pump's Redis handle starting from this token.
    Serve(Option<String>),
    /// Give the lease back and stand by again after `pause`; the stores are compared before the
    /// stages start again. `forgot`: a store forgot (own PostgreSQL's witness is rebased);
    /// otherwise a store was away while they were compared. `why`: for the log.
    Again { pause: Duration, forgot: bool, why: String },
    /// End; give the lease back first when `release`.
    End { end: End, release: bool },
}

/// What an instance remembers from one holding of the lease to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// A store forgot, or a comparison was cut short: compare before serving again.
    recheck: bool,
    /// Comparisons in a row a store was away for (the pause before the next doubles).
    away: u32,
}

impl Lifecycle {
    /// The lease is won and the flights claimed (or not): compare first, or serve.
    pub fn claimed(&mut self, flights: FlightsClaim, compare_on_start: bool, outage: &OutagePolicy) -> Next {
        match flights {
            FlightsClaim::Away(e) => self.away_from(&e, outage),
            FlightsClaim::Ours if compare_on_start || self.recheck => Next::Compare,
            FlightsClaim::Ours => Next::Serve(None),
            FlightsClaim::Newer(why) => Next::End { end: End::Fenced(why), release: false },
            FlightsClaim::PostgresBehind(why) => {
                self.recheck = true;
                Next::Again { pause: Duration::ZERO, forgot: true, why }
            }
        }
    }

    /// The stores were compared (and healed).
    pub fn compared(&mut self, pass: Pass, outage: &OutagePolicy) -> Next {
        match pass {
            Pass::Agreed { token, .. } => {
                (self.recheck, self.away) = (false, 0);
                Next::Serve(token)
            }
            Pass::Stopped(e) if e.is_fenced() => Next::End { end: End::Fenced(e.to_string()), release: true },
            // An outage (or a store that moved on while compared), never a heal: the lease goes
            // to whoever reaches the stores first, and they are compared again.
            Pass::Away(e) | Pass::Stopped(e) => self.away_from(&e, outage),
            Pass::Person(why) => Next::End { end: End::NotHealed(why), release: true },
        }
    }

    fn away_from(&mut self, e: &StoreError, outage: &OutagePolicy) -> Next {
        self.recheck |= e.stops();
        self.away += 1;
        Next::Again { pause: outage.retry_in(self.away), forgot: false, why: e.to_string() }
    }

    /// A holding ended; `stale`: a newer instance holds the lease (nothing to give back);
    /// `stopping`: stop was asked.
    pub fn served(&mut self, served: Served, stale: bool, stopping: bool) -> Next {
        match served {
            Served::Stopped => Next::End { end: End::Stopped, release: !stale },
            Served::Fenced(why) => Next::End { end: End::Fenced(why), release: !stale },
            Served::Forgot(why) if stopping => Next::End { end: End::NotHealed(why), release: true },
            Served::Forgot(why) => {
                self.recheck = true;
                Next::Again { pause: Duration::ZERO, forgot: true, why }
            }
            Served::Asked(_) if stopping => Next::End { end: End::Stopped, release: !stale },
            Served::Asked(_) if stale => {
                Next::End { end: End::Fenced("lease taken over".into()), release: false }
            }
            Served::Asked(_) => Next::Compare,
        }
    }
}

/// The lease renewer while the stores are compared (#38, #54): the one rule the daemon's
/// renewer thread (`daemon::renewing`) and the simulator follow. It renews on every turn unless
/// a step of the pass has made no progress for `msgx.watchdog.stuck-after` — then it lets the
/// lease run out, so a standby takes over from a stuck heal —, and stops for good once the lease
/// was taken over (the heal's writes are fenced from then on).
#[derive(Debug, Default)]
pub struct CompareRenewer {
    said_stuck: bool,
    taken_over: bool,
}

/// What the renewer does on a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Renew the lease now.
    Renew,
    /// Not now: the pass is stuck (`say`: the first time, for the log line) — or, `say` false
    /// and nothing stuck, the lease was taken over and nothing is renewed any more.
    Withhold { say: bool },
}

impl CompareRenewer {
    /// A turn; `stuck`: a step of the pass has made no progress for `stuck-after`.
    pub fn turn(&mut self, stuck: bool) -> Renewal {
        if self.taken_over {
            return Renewal::Withhold { say: false };
        }
        if stuck {
            return Renewal::Withhold { say: !std::mem::replace(&mut self.said_stuck, true) };
        }
        Renewal::Renew
    }

    /// A renewal's answer: `Ok(false)`, the lease was taken over (true is returned once, for
    /// the log line); an error is an outage, and the next turn renews again.
    pub fn renewed(&mut self, answer: &Result<bool, StoreError>) -> bool {
        let now = matches!(answer, Ok(false)) && !self.taken_over;
        self.taken_over |= now;
        now
    }

    /// Whether the lease was taken over while compared.
    pub fn taken_over(&self) -> bool {
        self.taken_over
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Store;

    fn outage() -> OutagePolicy {
        let s = Duration::from_secs;
        OutagePolicy { backoff: s(1), cap: s(8), alert_after: s(60), alert_every: s(600) }
    }

    #[test]
    fn a_forget_while_serving_is_compared_before_the_stages_start_again() {
        let mut lc = Lifecycle::default();
        assert_eq!(
            lc.claimed(FlightsClaim::Ours, false, &outage()),
            Next::Serve(None),
            "no comparison asked at start"
        );
        let next = lc.served(Served::Forgot("redis forgot".into()), false, false);
        assert!(matches!(next, Next::Again { pause: Duration::ZERO, forgot: true, .. }), "{next:?}");
        assert_eq!(
            lc.claimed(FlightsClaim::Ours, false, &outage()),
            Next::Compare,
            "compared after a forget"
        );
    }

    /// Seed 6299 (#56): Redis away at the claim — nothing is compared or served under an epoch
    /// whose claim is not in Redis; the lease goes back, claimed again after the outage pause.
    #[test]
    fn a_claim_that_did_not_reach_redis_is_an_outage_not_a_start() {
        let mut lc = Lifecycle::default();
        let away = StoreError::unavailable(Store::Redis, "connection refused");
        let next = lc.claimed(FlightsClaim::Away(away.clone()), true, &outage());
        assert_eq!(next, Next::Again { pause: Duration::from_secs(1), forgot: false, why: away.to_string() });
        let next = lc.claimed(FlightsClaim::Away(away), false, &outage());
        assert!(
            matches!(next, Next::Again { pause, .. } if pause == Duration::from_secs(2)),
            "doubles: {next:?}"
        );
        assert_eq!(lc.claimed(FlightsClaim::Ours, false, &outage()), Next::Serve(None));
    }

    #[test]
    fn a_store_away_during_the_comparison_is_an_outage_with_a_doubling_pause() {
        let mut lc = Lifecycle::default();
        let away = || Pass::Away(StoreError::unavailable(Store::Mailbox, "refused"));
        let pauses: Vec<Next> = (0..4).map(|_| lc.compared(away(), &outage())).collect();
        let secs: Vec<u64> = pauses
            .iter()
            .map(|n| if let Next::Again { pause, .. } = n { pause.as_secs() } else { 99 })
            .collect();
        assert_eq!(secs, [1, 2, 4, 8]);
        let agreed = Pass::Agreed { token: Some("t".into()), report: Default::default(), healed: None };
        assert_eq!(lc.compared(agreed, &outage()), Next::Serve(Some("t".into())));
        assert_eq!(
            lc.claimed(FlightsClaim::Ours, false, &outage()),
            Next::Serve(None),
            "agreed: nothing owed"
        );
    }

    /// #54, #65: the one renewal rule while compared — a stuck pass is not covered (said once),
    /// an outage is tried again, a takeover ends the renewals.
    #[test]
    fn the_renewer_withholds_for_a_stuck_pass_and_stops_after_a_takeover() {
        let mut r = CompareRenewer::default();
        assert_eq!(r.turn(false), Renewal::Renew);
        assert_eq!(r.turn(true), Renewal::Withhold { say: true });
        assert_eq!(r.turn(true), Renewal::Withhold { say: false }, "said once");
        assert_eq!(r.turn(false), Renewal::Renew, "moving again: renewed again");
        assert!(!r.renewed(&Err(StoreError::unavailable(Store::Lease, "refused"))));
        assert_eq!(r.turn(false), Renewal::Renew, "an outage: tried again");
        assert!(r.renewed(&Ok(false)), "taken over: said");
        assert!(!r.renewed(&Ok(false)) && r.taken_over());
        assert_eq!(r.turn(false), Renewal::Withhold { say: false });
    }

    #[test]
    fn what_ends_an_instance_and_whether_it_gives_the_lease_back() {
        let mut lc = Lifecycle::default();
        let fenced = Pass::Stopped(StoreError::fenced(Store::Redis, "MSGX_FENCED"));
        assert!(matches!(lc.compared(fenced, &outage()), Next::End { end: End::Fenced(_), release: true }));
        let person = Pass::Person("the journal no longer covers it".into());
        assert!(matches!(
            lc.compared(person, &outage()),
            Next::End { end: End::NotHealed(_), release: true }
        ));
        assert!(matches!(
            lc.claimed(FlightsClaim::Newer("epoch 9".into()), true, &outage()),
            Next::End { end: End::Fenced(_), release: false }
        ));
        assert_eq!(lc.served(Served::Stopped, true, true), Next::End { end: End::Stopped, release: false });
        let forgot_at_stop = lc.served(Served::Forgot("x".into()), false, true);
        assert!(matches!(forgot_at_stop, Next::End { end: End::NotHealed(_), release: true }));
    }
}
