//! The daily plan's rule, written once (#38): how a decision changes the flights, the plan's
//! index and its generation. The Redis apply script plays it as a difference (`store::flights`,
//! `net`), the in-memory twin and the heal's replay ([`Replay`]) play it here.

use std::collections::BTreeMap;

use super::{Decision, FlightState};

/// Applies message `m`'s decision to `flights`, the plan's index `sodt` and its `generation`
/// (`(generation, the snapshot that last advanced it)`); false when it is a snapshot not newer
/// than the generation, which changes nothing.
pub fn apply(
    flights: &mut BTreeMap<String, FlightState>,
    sodt: &mut BTreeMap<String, i64>,
    generation: &mut (i64, i64),
    m: i64,
    d: &Decision,
) -> bool {
    if d.snapshot && generation.1 >= m {
        return false;
    }
    for c in &d.flights {
        let st = flights.entry(c.flid.clone()).or_default();
        st.apply(c, m);
        if st.exists() {
            if let Some(k) = c.sodt {
                sodt.insert(c.flid.clone(), k);
            }
        } else {
            sodt.remove(&c.flid);
        }
    }
    if d.snapshot {
        *generation = (generation.0 + 1, m);
    }
    true
}

/// The FLIDs the plan's index holds in `[a, b]`, by SODT then FLID: a snapshot's window.
pub fn window(sodt: &BTreeMap<String, i64>, (a, b): (i64, i64)) -> Vec<String> {
    let mut w: Vec<(i64, &String)> =
        sodt.iter().filter(|(_, k)| **k >= a && **k <= b).map(|(f, k)| (*k, f)).collect();
    w.sort();
    w.into_iter().map(|(_, f)| f.clone()).collect()
}

/// Flights and the plan as the heal replays them: loaded from Redis as the messages name them,
/// then changed by the same rule as every store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    pub flights: BTreeMap<String, FlightState>,
    pub sodt: BTreeMap<String, i64>,
    pub generation: (i64, i64),
}

impl Replay {
    pub fn new(generation: (i64, i64)) -> Replay {
        Replay { generation, ..Default::default() }
    }

    /// Adds a flight as Redis holds it (its SODT key in the index, if any).
    pub fn load(&mut self, flid: &str, f: FlightState, sodt: Option<i64>) {
        if let Some(k) = sodt.filter(|_| f.exists()) {
            self.sodt.insert(flid.to_string(), k);
        }
        self.flights.insert(flid.to_string(), f);
    }

    pub fn apply(&mut self, m: i64, d: &Decision) -> bool {
        apply(&mut self.flights, &mut self.sodt, &mut self.generation, m, d)
    }

    /// Moves the generation to snapshot `m` without its changes (a snapshot whose text is gone,
    /// whose window the AODB is asked for: its answer is a newer snapshot). Only forward.
    pub fn advance_to(&mut self, m: i64) {
        if m > self.generation.1 {
            self.generation = (self.generation.0 + 1, m);
        }
    }

    /// As [`Replay::apply`], for a snapshot own PostgreSQL recorded as having advanced the plan
    /// when it was taken (`RedisRecord::Generation`): its changes are played again even when
    /// Redis's generation is past it now — a Redis that lost the snapshot and kept a later one
    /// of another window (seed 2155) would otherwise never get its window back. The generation
    /// only moves forward.
    pub fn apply_advanced(&mut self, m: i64, d: &Decision) {
        if !self.apply(m, d) {
            let mut behind = (self.generation.0, m - 1);
            apply(&mut self.flights, &mut self.sodt, &mut behind, m, d);
        }
    }

    pub fn window(&self, w: (i64, i64)) -> Vec<String> {
        window(&self.sodt, w)
    }
}
