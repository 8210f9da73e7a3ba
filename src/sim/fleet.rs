//! The fleet (#65): instances of two releases stopped, started and upgraded under every fault
//! the simulator injects. A release is a value — its rulebook —, so the next one is this
//! release's rulebook plus one mapping, run beside it in the same world: an upgrade deploys it
//! (instances started from then on run it), a rollback deploys this one again, and systemd's
//! SIGTERM stops an instance the way every restart, deploy and upgrade does — its stages
//! finish their round and close, the lease is given back, and systemd starts the deployed
//! release in its place.
//!
//! A stop is checked: an instance that stops from a holding gives the lease back unless a
//! newer instance holds it (a stop that kept it would leave the fleet without a writer until
//! it expired; planted as `Bug::StopKeepsLease`).

use std::sync::Arc;
use std::time::Duration;

use super::{Life, Sim};
use crate::clock::Clock;
use crate::codec::Rulebook;
use crate::fixtures::next_release;
use crate::instance::lifecycle::{End, Served};
use crate::instance::{Effect, Input};
use crate::ports::Claim;

/// The rulebook of the release whose decisions carry `version` (this release's when not known).
pub fn rules_of(version: Option<u32>) -> Arc<Rulebook> {
    let next = next_release();
    match version == Some(next.version()) {
        true => next,
        false => Rulebook::this_release(),
    }
}

/// The name a release goes by in the step log.
pub fn release_name(rules: &Rulebook) -> String {
    format!("rules {}", rules.version())
}

impl Sim {
    /// An upgrade, or its rollback: the other release is deployed, and every instance started
    /// from now on runs it. Those running keep theirs until they stop.
    pub(super) fn deploy(&mut self) {
        let next = next_release();
        let to = if self.deployed.version() == next.version() { Rulebook::this_release() } else { next };
        self.say(format!("{} deployed: instances started from now on run it", release_name(&to)));
        self.deployed = to;
    }

    /// An operator runs the next release's `msgx rules apply --since …` (#65): its messages from
    /// a MSG_ID on are decided again under its rules by the active instance of that release
    /// (now, or once one is deployed and takes over), every difference told. Only the next
    /// release's: a rollback's job would keep what it cannot take back, which the model (each
    /// message decided under its recorded rules) does not hold, and is proven in `consistency`.
    pub(super) fn rules_apply(&mut self) {
        use crate::ports::RulesJobs;
        let top = self.pg.inspect(|s| s.procs.keys().next_back().copied().unwrap_or(0));
        let since = self.rng.range(1, top.max(1) as u64) as i64;
        let rules = next_release().version();
        let line = match self.pg.session().ask_rules_apply(since, rules, self.clock.now()) {
            Ok(job) => format!(
                "operator asks rules apply job={} since MSG_ID {since} under rules {rules}",
                job.job_id
            ),
            Err(e) => format!("operator's rules apply failed: {e}"),
        };
        self.say(line);
    }

    /// systemd stops an instance (SIGTERM), then starts the deployed release in its place.
    pub(super) fn sigterm(&mut self) {
        let live: Vec<usize> = (0..self.instances.len())
            .filter(|k| !matches!(self.instances[*k].life, Life::Gone) && !self.instances[*k].stopping)
            .collect();
        if live.is_empty() {
            return;
        }
        let k = *self.rng.pick(&live);
        self.instances[k].stopping = true;
        let name = self.instances[k].name.clone();
        self.say(format!("{name} is sent SIGTERM"));
        self.stop_now(k);
    }

    /// What a stop asked of instance `k` does now, as the daemon's threads hear it: a standby's
    /// pause ends at once; an active instance's stages finish their round and close; a pass runs
    /// to its end first (the machine then asks to serve, and the holding ends at once); a
    /// frozen process hears the signal when it is scheduled again.
    pub(super) fn stop_now(&mut self, k: usize) {
        match &self.instances[k].life {
            Life::Standby { .. } if self.instances[k].fresh => {
                // Stopped before its first look at the lease: nothing held, nothing to say.
                self.instances[k].life = Life::Gone;
                let name = self.instances[k].name.clone();
                self.say(format!("{name} stops before it started"));
                self.restart();
            }
            Life::Standby { .. } => {
                let next = self.instances[k].machine.on(Input::Stop);
                self.drive(k, next);
            }
            Life::Active(_) => self.served(k, Served::Stopped),
            Life::Comparing(_) | Life::Frozen { .. } | Life::Gone => {}
        }
    }

    /// systemd starts the deployed release after a stop.
    pub(super) fn restart(&mut self) {
        let delay = Duration::from_millis(self.rng.range(0, 3000));
        self.spawn_standby(delay);
    }

    /// What instance `k`'s port call `call` came to, noted for the stop's check: the epoch it won
    /// last, and the epoch whose release reached own PostgreSQL (`reached`: the call was made;
    /// a store that failed it is an outage, and the lease expires instead).
    pub(super) fn note_held(&mut self, k: usize, call: &Effect, input: &Input, reached: bool) {
        let i = &mut self.instances[k];
        match (call, input) {
            (Effect::ClaimLease { .. }, Input::Lease { claim: Ok(Claim::Acquired { epoch, .. }), .. }) => {
                i.held = Some(*epoch)
            }
            (Effect::Release { epoch }, _) if reached => i.released = Some(*epoch),
            _ => {}
        }
    }

    /// Instance `k` ends with `end`: a stop from a holding must have given the lease back — the
    /// release asked of own PostgreSQL — unless a newer instance holds it, or it expired.
    pub(super) fn check_stop(&mut self, k: usize, end: &End) {
        let (i, now) = (&self.instances[k], self.clock.now());
        let Some(epoch) = i.held.filter(|_| *end == End::Stopped) else { return };
        let lease = self.pg.inspect(|s| s.lease.clone());
        let ours = lease.epoch == epoch && lease.holder.as_deref() == Some(i.me.id.as_str());
        if ours && lease.expires_at.is_some_and(|t| t > now) && i.released != Some(epoch) {
            self.broken.get_or_insert(format!(
                "{} stopped at step {} and kept the lease of epoch {epoch}: no standby can take over until it expires",
                i.name, self.step
            ));
        }
    }

    /// A holding begins under `rules`: a takeover from an instance of another release is said.
    pub(super) fn note_takeover(&mut self, k: usize) {
        let version = self.instances[k].rules.version();
        if self.serving.is_some_and(|v| v != version) {
            let name = self.instances[k].name.clone();
            let from = self.serving.unwrap_or_default();
            self.say(format!("{name} of rules {version} takes over from an instance of rules {from}"));
        }
        self.serving = Some(version);
    }
}
