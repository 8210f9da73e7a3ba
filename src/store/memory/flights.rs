//! Live flight state (Redis), in memory: the same rules as the Redis apply script, which the
//! FlightStore conformance suite checks case by case on both.

use std::collections::BTreeMap;

use super::{fault_controls, Shared};
use crate::error::StoreError;
pub use crate::handlers::FlightState;
use crate::handlers::{Decision, Flight};
use crate::ports::{FlightStore, Prepared, RoundNeed, StoreResult};

#[derive(Debug, Default)]
pub struct FlightsState {
    /// Every flight msgx holds, with versions; a deleted flight keeps its versions (tombstone).
    pub flights: BTreeMap<String, FlightState>,
    pub applied: BTreeMap<i64, Decision>,
    /// FLID → SODT (`yyyyMMddHHmm`): the daily plan's index for snapshot windows.
    pub sodt: BTreeMap<String, i64>,
    /// The plan's generation and the message that last advanced it.
    pub generation: (i64, i64),
    /// The newest lease epoch that wrote here (the fence, PRE-5).
    pub epoch: i64,
}

/// Applies one decision of message `m` as the Redis script does; false when a snapshot is not
/// newer than the plan's generation (then only its empty journal entry is written).
pub fn apply_decision(s: &mut FlightsState, m: i64, d: &Decision) -> bool {
    if d.snapshot && s.generation.1 >= m {
        s.applied.insert(m, Decision::default());
        return false;
    }
    for c in &d.flights {
        let st = s.flights.entry(c.flid.clone()).or_default();
        st.apply(c, m);
        if st.exists() {
            if let Some(k) = c.sodt {
                s.sodt.insert(c.flid.clone(), k);
            }
        } else {
            s.sodt.remove(&c.flid);
        }
    }
    if d.snapshot {
        s.generation = (s.generation.0 + 1, m);
    }
    // As the Redis journal: what a retry must emit again, not the flight changes.
    let journal =
        Decision { events: d.events.clone(), references: d.references.clone(), ..Default::default() };
    s.applied.insert(m, journal);
    true
}

#[derive(Debug, Clone, Default)]
pub struct MemFlights(pub(crate) Shared<FlightsState>, Option<i64>);

fault_controls!(MemFlights);

impl MemFlights {
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle whose applies carry the lease epoch, as the Redis adapter's do.
    pub fn fenced(&self, epoch: i64) -> MemFlights {
        MemFlights(self.0.clone(), Some(epoch))
    }

    /// A flight's fields (`None` when msgx holds nothing for it).
    pub fn flight(&self, flid: &str) -> Option<Flight> {
        self.0.lock().state.flights.get(flid).filter(|f| f.exists()).map(|f| f.fields.clone())
    }

    /// (generation, message id that last advanced it).
    pub fn generation(&self) -> (i64, i64) {
        self.0.lock().state.generation
    }

    pub fn applied_ids(&self) -> Vec<i64> {
        self.0.lock().state.applied.keys().copied().collect()
    }

    /// A copy of the state, for assertions.
    pub fn inspect<R>(&self, f: impl FnOnce(&FlightsState) -> R) -> R {
        f(&self.0.lock().state)
    }

    /// Every flight that holds something: FLID → fields.
    /// Moves the fence to `epoch` unless a newer one is there, as `RedisFlights::claim` does
    /// for a new lease holder before its stages start.
    pub fn claim(&self, epoch: i64) -> StoreResult<()> {
        self.0.write("redis", |s| {
            if s.epoch > epoch {
                return Err(StoreError::fenced(
                    "redis",
                    format!("MSGX_FENCED: epoch {} holds the flights", s.epoch),
                ));
            }
            s.epoch = epoch;
            Ok(())
        })
    }

    pub fn all(&self) -> BTreeMap<String, Flight> {
        self.inspect(|s| {
            s.flights.iter().filter(|(_, f)| f.exists()).map(|(k, f)| (k.clone(), f.fields.clone())).collect()
        })
    }
}

impl FlightStore for MemFlights {
    fn prepare(&mut self, need: &RoundNeed, forget: &[i64]) -> StoreResult<Prepared> {
        // One round trip: the DELs of `forget` ride along with the reads.
        self.0.write("redis", |s| {
            for id in forget {
                s.applied.remove(id);
            }
            let applied =
                need.msg_ids.iter().filter_map(|m| s.applied.get(m).map(|d| (*m, d.clone()))).collect();
            let flights =
                need.flids.iter().filter_map(|f| s.flights.get(f).map(|v| (f.clone(), v.clone()))).collect();
            let window = match need.window {
                Some((a, b)) => {
                    let mut w: Vec<(i64, String)> = s
                        .sodt
                        .iter()
                        .filter(|(_, k)| **k >= a && **k <= b)
                        .map(|(f, k)| (*k, f.clone()))
                        .collect();
                    w.sort();
                    w.into_iter().map(|(_, f)| f).collect()
                }
                None => Vec::new(),
            };
            Ok(Prepared { applied, flights, window })
        })
    }

    fn apply(&mut self, decisions: &[(i64, &Decision)]) -> StoreResult<Vec<bool>> {
        let fence = self.1;
        self.0.write("redis", |s| {
            if let Some(e) = fence {
                if s.epoch > e {
                    return Err(StoreError::fenced(
                        "redis",
                        format!("MSGX_FENCED: epoch {} holds the flights, this instance has {e}", s.epoch),
                    ));
                }
                s.epoch = e;
            }
            Ok(decisions.iter().map(|(m, d)| apply_decision(s, *m, d)).collect())
        })
    }

    fn forget(&mut self, msg_ids: &[i64]) -> StoreResult<()> {
        self.0.write("redis", |s| {
            for id in msg_ids {
                s.applied.remove(id);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod conformance {
    crate::flight_conformance_tests!((super::MemFlights::new(), ()));
}
