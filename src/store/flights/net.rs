//! A round's decisions as the net writes they make to the flights Redis holds (#23).
//!
//! The adapter remembers what its last read found ([`Known`]: the flights, the plan's
//! generation, and the `applied:token` they stood under). A round is played on those flights
//! here with [`FlightState::apply`] — the one version rule the pump's overlay and the in-memory
//! twin use — and only the difference goes to the apply script: the fields and versions that
//! changed, the fields that went, a tombstone's time to live, the plan's index. The script
//! writes them blindly once it has checked that nothing wrote to Redis since the read (the
//! token is still the one read; every write of flights moves it): then the flights are what
//! was read, and the difference is right. Pure: no I/O here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::handlers::{Decision, FlightState};

/// What the adapter last read of Redis, as it stands after the handle's own applies since.
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// `applied:token` when it was read (`None`: Redis had none).
    pub token: Option<String>,
    /// `schd:gen`'s `msg_id` (`-1`: none), when it was read.
    pub generation_msg: Option<i64>,
    /// Every flight read, as it stands (empty: it holds nothing); shared with the round that
    /// decides on it ([`crate::handlers::FlightView`]).
    pub flights: HashMap<String, Arc<FlightState>>,
}

/// How many flights the adapter keeps known between rounds (beyond it, the next round reads
/// its flights whole): a bound on memory, about a busy hour's flights.
pub const KNOWN_FLIGHTS_MAX: usize = 1024;

/// A flight known from an earlier read that Redis cannot have changed but by a write (which
/// moves the token): it holds fields — its versions have no time to live — or nothing at all.
/// The versions of a flight that holds nothing expire on their own, so it is read again.
pub fn lasting(f: &FlightState) -> bool {
    f.exists() || (f.versions.is_empty() && f.deleted == 0)
}

/// What becomes of a flight's versions' time to live (its tombstone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ttl {
    #[default]
    Keep,
    /// The flight holds nothing now: its versions go `TOMBSTONE_TTL` after this round.
    Expire,
    /// It was deleted once and holds fields again: its versions stay.
    Persist,
}

impl Ttl {
    pub fn word(self) -> &'static str {
        match self {
            Ttl::Keep => "",
            Ttl::Expire => "expire",
            Ttl::Persist => "persist",
        }
    }
}

/// The plan's index for one flight after the round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Index {
    Untouched,
    /// It holds nothing: out of the index.
    Remove,
    /// Scored by this SODT.
    At(i64),
}

/// A round played on the known flights.
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// Per decision: applied (a snapshot not newer than the plan's generation is not).
    pub applied: Vec<bool>,
    /// How many snapshots advance the generation, and the last one's MSG_ID.
    pub generations: i64,
    pub generation_msg: i64,
    /// Every flight the applied decisions change, in the order first changed, with what it
    /// was before them (its state after them is in the `Known` it was played on).
    pub flights: Vec<(String, Before)>,
    /// The plan's index: (SODT, FLID) to add, FLIDs to remove.
    pub index_add: Vec<(i64, String)>,
    pub index_remove: Vec<String>,
}

/// What a flight was before a round, as far as the round can have changed it: the fields its
/// changes name (value and version), every field's name when one deletes it, the tombstone.
/// Only that is copied: the flight is played in place (#23).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Before {
    named: Vec<(String, Option<String>, Option<i64>)>,
    /// Every field's name, once a change deletes the flight.
    all: Option<Vec<String>>,
    deleted: i64,
    existed: bool,
    had_versions: bool,
}

impl Before {
    fn of(st: &FlightState) -> Before {
        Before {
            deleted: st.deleted,
            existed: st.exists(),
            had_versions: st.deleted > 0 || !st.versions.is_empty(),
            ..Default::default()
        }
    }

    /// Remembers what `c` may change of `st` (before it is applied).
    fn note(&mut self, st: &FlightState, c: &crate::handlers::FlightChange) {
        let names = c.set.iter().map(|(f, _)| f).chain(&c.clear);
        for f in names {
            if !self.named.iter().any(|(n, _, _)| n == f) {
                self.named.push((f.clone(), st.fields.get(f).cloned(), st.versions.get(f).copied()));
            }
        }
        if c.delete && self.all.is_none() {
            self.all = Some(st.fields.keys().cloned().collect());
        }
    }
}

/// The FLIDs the round's decisions change that `known` does not hold, each once.
pub fn unknown_flids<'d>(known: &Known, decisions: &[(i64, &'d Decision)]) -> Vec<&'d str> {
    let mut out: Vec<&str> = Vec::new();
    for (_, d) in decisions {
        for c in &d.flights {
            if !known.flights.contains_key(&c.flid) && !out.contains(&c.flid.as_str()) {
                out.push(&c.flid);
            }
        }
    }
    out
}

/// Plays `decisions` (MSG_ID order) on `known`'s flights in place, which must hold every
/// flight they change ([`unknown_flids`] is empty) and the generation when one is a snapshot.
/// `known` is what Redis holds only once the round's writes are done: the caller drops it
/// when they are not.
pub fn play(known: &mut Known, decisions: &[(i64, &Decision)]) -> Round {
    let mut last = known.generation_msg.unwrap_or(-1);
    let mut round = Round::default();
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut index: Vec<Index> = Vec::new();
    for (m, d) in decisions {
        let applied = !d.snapshot || *m > last;
        round.applied.push(applied);
        if !applied {
            continue;
        }
        if d.snapshot {
            assert!(known.generation_msg.is_some(), "a snapshot is played on a known generation");
            last = *m;
            round.generations += 1;
        }
        for c in &d.flights {
            // The round's decisions are made and their view dropped: a state is shared with
            // nothing now, and is played in place, not copied.
            let st =
                Arc::make_mut(known.flights.get_mut(&c.flid).expect("every flight a round changes is known"));
            let k = *at.entry(c.flid.as_str()).or_insert_with(|| {
                round.flights.push((c.flid.clone(), Before::of(st)));
                index.push(Index::Untouched);
                round.flights.len() - 1
            });
            round.flights[k].1.note(st, c);
            st.apply(c, *m);
            // As the twin: a flight that holds nothing is out of the index, one that holds
            // something is scored by the last SODT a change gave it.
            if !st.exists() {
                index[k] = Index::Remove;
            } else if let Some(s) = c.sodt {
                index[k] = Index::At(s);
            }
        }
    }
    round.generation_msg = last;
    for ((flid, _), i) in round.flights.iter().zip(index) {
        match i {
            Index::Untouched => {}
            Index::Remove => round.index_remove.push(flid.clone()),
            Index::At(s) => round.index_add.push((s, flid.clone())),
        }
    }
    round
}

/// What one flight's script writes: fields set (name, value), fields gone, versions set
/// (name, MSG_ID; `~del` the tombstone), and the versions' time to live.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Writes<'a> {
    pub set: Vec<(&'a str, &'a str)>,
    pub gone: Vec<&'a str>,
    pub versions: Vec<(&'a str, i64)>,
    pub ttl: Ttl,
}

/// The field that holds the tombstone in the versions hash.
pub const TOMBSTONE: &str = "~del";

/// What turns the flight `before` described into `after` in Redis (`writes` is cleared first:
/// one buffer for a round's flights).
pub fn diff<'a>(before: &'a Before, after: &'a FlightState, writes: &mut Writes<'a>) {
    writes.set.clear();
    writes.gone.clear();
    writes.versions.clear();
    for (f, value, version) in &before.named {
        let now = after.versions.get(f).copied();
        match after.fields.get_key_value(f) {
            Some((f, v)) if value.as_ref() != Some(v) || version != &now => writes.set.push((f, v)),
            Some(_) => {}
            None if value.is_some() => writes.gone.push(f),
            None => {}
        }
        if let (Some(m), true) = (now, version != &now) {
            writes.versions.push((f, m));
        }
    }
    // A delete takes fields no change names, and those a change names only after it (noted
    // without the value the delete took).
    for f in before.all.iter().flatten() {
        if !after.fields.contains_key(f) && !writes.gone.contains(&f.as_str()) {
            writes.gone.push(f);
        }
    }
    if after.deleted != before.deleted {
        writes.versions.push((TOMBSTONE, after.deleted));
    }
    let changed = !writes.set.is_empty() || !writes.gone.is_empty() || !writes.versions.is_empty();
    // Versions have a time to live only while the flight holds nothing: a flight that holds
    // fields again keeps them, whether a delete or a clear left them behind.
    writes.ttl = if !after.exists() && changed {
        Ttl::Expire
    } else if after.exists() && !before.existed && before.had_versions {
        Ttl::Persist
    } else {
        Ttl::Keep
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::FlightChange;

    fn change(flid: &str, set: &[(&str, &str)], clear: &[&str], delete: bool) -> FlightChange {
        FlightChange {
            flid: flid.into(),
            set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            clear: clear.iter().map(|c| c.to_string()).collect(),
            delete,
            sodt: None,
        }
    }

    /// The writes done as the script does them: what Redis holds afterwards.
    fn written(before: &FlightState, w: &Writes<'_>) -> FlightState {
        let mut s = before.clone();
        for (f, v) in &w.set {
            s.fields.insert(f.to_string(), v.to_string());
        }
        for f in &w.gone {
            s.fields.remove(*f);
        }
        for (f, m) in &w.versions {
            match *f {
                TOMBSTONE => s.deleted = *m,
                f => drop(s.versions.insert(f.to_string(), *m)),
            }
        }
        s
    }

    #[test]
    fn the_writes_turn_what_was_read_into_what_the_round_ends_as() {
        let mut rng = crate::sim::rng::Rng::new(0x2545_f491_4f6c_dd1d);
        let mut next = move |n: u64| rng.below(n);
        let names = ["STND", "GATE", "EOBT"];
        for case in 0..2000 {
            let mut before = FlightState::default();
            for m in 1..=next(4) as i64 {
                let f = names[next(3) as usize];
                before.apply(&change("F", &[(f, &format!("v{}", next(3)))], &[], next(6) == 0), m * 10);
            }
            let mut changes = Vec::new();
            for _ in 0..1 + next(4) {
                let (f, m) = (names[next(3) as usize], next(60) as i64);
                let set = [(f, format!("v{}", next(3)))];
                let set: Vec<(&str, &str)> = set.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let c = match next(4) {
                    0 => change("F", &[], &[f], false),
                    1 => change("F", &set, &[], true),
                    _ => change("F", &set, &[], false),
                };
                changes.push((m, Decision { flights: vec![c], ..Default::default() }));
            }
            let mut want = before.clone();
            changes.iter().for_each(|(m, d)| want.apply(&d.flights[0], *m));
            let mut known = Known::default();
            known.flights.insert("F".into(), Arc::new(before.clone()));
            let round = play(&mut known, &changes.iter().map(|(m, d)| (*m, d)).collect::<Vec<_>>());
            let after = &*known.flights["F"];
            assert_eq!(after, &want, "case {case}: played in place by the one rule");
            let mut w = Writes::default();
            diff(&round.flights[0].1, after, &mut w);
            assert_eq!(&written(&before, &w), after, "case {case}: {before:?} → {after:?} by {w:?}");
            let unchanged = &before == after;
            assert_eq!(
                w.set.is_empty() && w.gone.is_empty() && w.versions.is_empty(),
                unchanged,
                "case {case}"
            );
            if !after.exists() && !unchanged {
                assert_eq!(w.ttl, Ttl::Expire, "case {case}: an empty flight's versions expire");
            }
        }
    }

    /// `changes` played on a known flight `F` that was `before`.
    fn played(before: &FlightState, changes: &[(i64, FlightChange)]) -> (Known, Round) {
        let mut known = Known::default();
        known.flights.insert("F".into(), Arc::new(before.clone()));
        let ds: Vec<(i64, Decision)> = changes
            .iter()
            .map(|(m, c)| (*m, Decision { flights: vec![c.clone()], ..Default::default() }))
            .collect();
        let round = play(&mut known, &ds.iter().map(|(m, d)| (*m, d)).collect::<Vec<_>>());
        (known, round)
    }

    #[test]
    fn a_value_restated_by_the_same_message_is_written_again_only_when_it_differs() {
        let mut before = FlightState::default();
        before.apply(&change("F", &[("STND", "A")], &[], false), 5);
        let (known, round) = played(&before, &[(5, change("F", &[("STND", "A")], &[], false))]);
        let mut w = Writes::default();
        diff(&round.flights[0].1, &known.flights["F"], &mut w);
        assert_eq!(w, Writes { ttl: Ttl::Keep, ..Default::default() });
        let (known, round) = played(&before, &[(5, change("F", &[("STND", "B")], &[], false))]);
        diff(&round.flights[0].1, &known.flights["F"], &mut w);
        assert_eq!(w.set, [("STND", "B")], "same MSG_ID, another value: written");
    }

    #[test]
    fn a_flight_deleted_once_that_holds_fields_again_keeps_its_versions() {
        let mut before = FlightState::default();
        before.apply(&change("F", &[("STND", "A")], &[], false), 1);
        before.apply(&change("F", &[], &[], true), 2);
        let (known, round) = played(&before, &[(3, change("F", &[("GATE", "G1")], &[], false))]);
        let mut w = Writes::default();
        diff(&round.flights[0].1, &known.flights["F"], &mut w);
        assert_eq!((w.set.as_slice(), w.ttl), ([("GATE", "G1")].as_slice(), Ttl::Persist));
    }

    /// A field a change clears after another change of the round deleted the flight: the
    /// delete took its value, and the clear must still take it out of Redis.
    #[test]
    fn a_field_cleared_after_a_delete_in_the_same_round_goes() {
        let mut before = FlightState::default();
        before.apply(&change("F", &[("STND", "A"), ("GATE", "G")], &[], false), 1);
        let changes =
            [(2, change("F", &[], &[], true)), (3, change("F", &[("GATE", "H")], &["STND"], false))];
        let (known, round) = played(&before, &changes);
        let mut w = Writes::default();
        diff(&round.flights[0].1, &known.flights["F"], &mut w);
        assert_eq!((w.set.as_slice(), w.gone.as_slice()), ([("GATE", "H")].as_slice(), ["STND"].as_slice()));
    }

    #[test]
    fn a_round_plays_snapshots_only_when_newer_and_indexes_as_the_twin() {
        let mut known = Known { generation_msg: Some(10), ..Default::default() };
        known.flights.insert("A".into(), Arc::default());
        known.flights.insert("B".into(), Arc::default());
        let mut a = change("A", &[("STND", "1")], &[], false);
        a.sodt = Some(202601010800);
        let mut snap = Decision { snapshot: true, flights: vec![a.clone()], ..Default::default() };
        let stale = snap.clone();
        snap.flights.push(change("B", &[], &[], true));
        let plain =
            Decision { flights: vec![change("A", &[("GATE", "G")], &[], false)], ..Default::default() };
        let round = play(&mut known, &[(9, &stale), (11, &snap), (12, &plain), (13, &snap.clone())]);
        assert_eq!(round.applied, [false, true, true, true]);
        assert_eq!((round.generations, round.generation_msg), (2, 13));
        assert_eq!(round.index_add, [(202601010800, "A".to_string())]);
        assert_eq!(round.index_remove, ["B"], "a deleted flight leaves the index");
        assert_eq!(round.flights.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(), ["A", "B"]);
        assert!(unknown_flids(&known, &[(1, &plain)]).is_empty());
        let other = Decision { flights: vec![change("C", &[], &[], true)], ..Default::default() };
        assert_eq!(unknown_flids(&known, &[(1, &other), (2, &other)]), ["C"]);
    }
}
