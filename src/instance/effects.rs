//! The one interpreter of the instance's effects that are one call to a port (#56): the floor
//! read, the lease claimed, the flights claimed, the lease given back. The daemon performs
//! them on the real stores, the simulator on its twins, `msgx rebuild-flights` on the real
//! stores once: the same calls, in the order [`super::Instance`] asks for them.

use std::time::Duration;

use log::{error, info, warn};

use super::lifecycle::FlightsClaim;
use super::{Effect, Input};
use crate::clock::Clock;
use crate::ports::{Claimant, FlightsFence, LeaseStore};

/// What a lifetime's port calls are made on: the lease, Redis's fence, who claims, for how long,
/// and the clock the claim's sending is read on.
pub struct Edges<'a, L: LeaseStore, F: FlightsFence> {
    pub lease: &'a mut L,
    pub fence: &'a mut F,
    pub me: &'a Claimant,
    pub duration: Duration,
    pub clock: &'a dyn Clock,
}

/// Performs `effect` when it is one call to a port and says what came of it; `None` for those
/// the driver performs in its own time (compare, serve, stand down, wait, exit).
pub fn perform<L: LeaseStore, F: FlightsFence>(effect: &Effect, e: &mut Edges<'_, L, F>) -> Option<Input> {
    match *effect {
        Effect::ReadFloor => Some(Input::Floor(epoch_seen(e.fence))),
        Effect::ClaimLease { floor } => {
            let sent = e.clock.mono();
            Some(Input::Lease { claim: e.lease.claim_above(e.me, e.duration, floor), sent })
        }
        Effect::ClaimFlights { epoch } => Some(Input::Flights(claim_flights(e.fence, e.lease, epoch))),
        Effect::Release { epoch } => {
            match e.lease.release(e.me, epoch) {
                Ok(()) => info!("lease released epoch={epoch}"),
                Err(err) => warn!("lease not released ({err}); a standby takes over when it expires"),
            }
            Some(Input::Done)
        }
        Effect::Compare { .. }
        | Effect::Serve { .. }
        | Effect::StandDown { .. }
        | Effect::Wait(_)
        | Effect::Exit(_) => None,
    }
}

/// The newest lease epoch Redis saw (0 when it cannot say): a new epoch is taken above it.
fn epoch_seen(fence: &mut impl FlightsFence) -> i64 {
    match fence.epoch_held() {
        Ok(e) => e,
        Err(e) => {
            warn!("the lease epoch Redis saw is not known ({e}); the new epoch is PostgreSQL's alone");
            0
        }
    }
}

/// Claims the flights for `epoch` on Redis's fence, and tells how it ended: fenced by a newer
/// epoch own PostgreSQL knows of, another instance is newer; by one it never handed out,
/// PostgreSQL lost commits; Redis away, an outage: a pass never compares before this
/// instance's claim is in Redis (seed 6299).
fn claim_flights(fence: &mut impl FlightsFence, lease: &mut impl LeaseStore, epoch: i64) -> FlightsClaim {
    match fence.claim(epoch) {
        Ok(()) => FlightsClaim::Ours,
        Err(e) if e.is_fenced() => {
            let held = fence.epoch_held().unwrap_or(epoch + 1);
            let pg_epoch = lease.holder().map(|h| h.epoch).unwrap_or(epoch);
            if pg_epoch < held {
                error!(
                    "postgres lost commits: its lease epoch is {pg_epoch} but Redis holds the flights for epoch {held}, which only PostgreSQL can have handed out"
                );
                FlightsClaim::PostgresBehind(format!(
                    "postgres lease epoch {pg_epoch} is behind epoch {held} seen in Redis"
                ))
            } else {
                FlightsClaim::Newer(format!("Redis holds the flights for epoch {held}"))
            }
        }
        Err(e) => {
            warn!("flights not claimed for epoch {epoch} ({e}): Redis is away; nothing is compared or served under this epoch until a claim reaches it");
            FlightsClaim::Away(e)
        }
    }
}
