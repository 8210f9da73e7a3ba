//! A flight's live state and the one rule that changes it. Every field carries the MSG_ID of
//! the message that last wrote it, and a delete leaves the deleting MSG_ID behind (a
//! tombstone): a change from message `m` applies to a field only if no later message wrote it
//! and no later message deleted the flight. So the state of a flight is the state its messages
//! give it in MSG_ID order, whatever order they were processed in — a late row (PRE-2), a
//! replayed message or a retried round can never put an older value over a newer one.
//!
//! This is the one place the rule is written. It runs in the pump's overlay while a round is
//! decided, in the in-memory twin, and in the Redis adapter, which plays a round on the flights
//! it read and sends the apply script only the difference (`store/flights/net.rs`, #23); the
//! FlightStore conformance suite runs the same cases on the twin and on Redis.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Flight, FlightChange};

/// How long a flight that holds nothing keeps its versions (its tombstone) after the last write
/// that left it so: a message older than the delete that arrives within it changes nothing.
pub const TOMBSTONE_KEEP: std::time::Duration = std::time::Duration::from_secs(7 * 86_400);

/// One flight as Redis holds it: fields, their versions, and the last delete.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FlightState {
    pub fields: Flight,
    /// Field → MSG_ID of the message that last set or cleared it. A cleared field keeps its
    /// version, so an older value cannot come back.
    pub versions: BTreeMap<String, i64>,
    /// MSG_ID of the last message that deleted the flight (0: never deleted).
    pub deleted: i64,
}

impl FlightState {
    /// A state whose fields have no versions yet (data written before versions existed, or
    /// a test's hand-made flight): any message may change them.
    pub fn of(fields: Flight) -> FlightState {
        FlightState { fields, ..Default::default() }
    }

    /// The flight holds something.
    pub fn exists(&self) -> bool {
        !self.fields.is_empty()
    }

    /// Whether message `m` may write `field`: nothing newer wrote it or deleted the flight.
    pub fn writable(&self, field: &str, m: i64) -> bool {
        self.deleted <= m && self.versions.get(field).copied().unwrap_or(0) <= m
    }

    /// Applies `c`, made by message `m`: first the delete (every field no later message wrote
    /// goes, and the tombstone moves to `m`), then the sets and clears that are not superseded.
    pub fn apply(&mut self, c: &FlightChange, m: i64) {
        if c.delete {
            let versions = &self.versions;
            self.fields.retain(|f, _| versions.get(f).copied().unwrap_or(0) > m);
            self.deleted = self.deleted.max(m);
        }
        for (f, v) in &c.set {
            if self.writable(f, m) {
                // A field the flight holds is overwritten in place, its key and buffer kept:
                // the round's overlay plays every decision on its flights (#23).
                match self.fields.get_mut(f) {
                    Some(old) => old.clone_from(v),
                    None => drop(self.fields.insert(f.clone(), v.clone())),
                }
                self.set_version(f, m);
            }
        }
        for f in &c.clear {
            if self.writable(f, m) {
                self.fields.remove(f);
                self.set_version(f, m);
            }
        }
    }

    fn set_version(&mut self, f: &str, m: i64) {
        match self.versions.get_mut(f) {
            Some(v) => *v = m,
            None => drop(self.versions.insert(f.to_string(), m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(flid: &str, kv: &[(&str, &str)]) -> FlightChange {
        FlightChange {
            flid: flid.into(),
            set: kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        }
    }

    fn delete(flid: &str) -> FlightChange {
        FlightChange { flid: flid.into(), delete: true, ..Default::default() }
    }

    #[test]
    fn a_newer_value_is_never_overwritten_by_an_older_message() {
        let mut s = FlightState::default();
        s.apply(&set("F", &[("STND", "B")]), 20);
        s.apply(&set("F", &[("STND", "A"), ("GATE", "G1")]), 10); // a late row
        assert_eq!(s.fields["STND"], "B", "20 wrote STND after 10");
        assert_eq!(s.fields["GATE"], "G1", "nobody newer wrote GATE");
        assert_eq!(s.versions["STND"], 20);
    }

    #[test]
    fn in_any_order_the_result_is_the_msg_id_order_result() {
        let changes = [
            (1, set("F", &[("STND", "A"), ("GATE", "1")])),
            (2, delete("F")),
            (3, set("F", &[("STND", "C")])),
            (4, FlightChange { flid: "F".into(), clear: vec!["STND".into()], ..Default::default() }),
            (5, set("F", &[("GATE", "5")])),
        ];
        let mut ordered = FlightState::default();
        for (m, c) in &changes {
            ordered.apply(c, *m);
        }
        // Every permutation of five changes ends in the same state.
        let mut idx: Vec<usize> = (0..changes.len()).collect();
        let mut permutations = 0;
        loop {
            let mut s = FlightState::default();
            for &i in &idx {
                s.apply(&changes[i].1, changes[i].0);
            }
            assert_eq!(s.fields, ordered.fields, "order {idx:?}");
            permutations += 1;
            // next lexicographic permutation
            let Some(k) = (0..idx.len() - 1).rev().find(|&k| idx[k] < idx[k + 1]) else { break };
            let l = (k + 1..idx.len()).rev().find(|&l| idx[k] < idx[l]).expect("exists");
            idx.swap(k, l);
            idx[k + 1..].reverse();
        }
        assert_eq!(permutations, 120);
        assert_eq!(ordered.fields, Flight::from([("GATE".to_string(), "5".to_string())]));
    }

    #[test]
    fn a_delete_keeps_what_a_later_message_wrote_and_blocks_older_writes() {
        let mut s = FlightState::default();
        s.apply(&set("F", &[("STND", "A")]), 1);
        s.apply(&set("F", &[("GATE", "G9")]), 9);
        s.apply(&delete("F"), 5);
        assert_eq!(s.fields, Flight::from([("GATE".to_string(), "G9".to_string())]));
        s.apply(&set("F", &[("STND", "late")]), 4);
        assert!(!s.fields.contains_key("STND"), "deleted by 5 after 4 wrote it");
        s.apply(&set("F", &[("STND", "new")]), 6);
        assert_eq!(s.fields["STND"], "new");
    }

    #[test]
    fn a_field_written_again_holds_the_new_value_and_version_whatever_its_length() {
        let mut s = FlightState::default();
        for (m, v) in [(1, "A12"), (2, "a much longer stand name"), (3, ""), (4, "B")] {
            s.apply(&set("F", &[("STND", v), ("GATE", &format!("G{m}"))]), m);
            assert_eq!((s.fields["STND"].as_str(), s.versions["STND"]), (v, m));
            assert_eq!((s.fields["GATE"].clone(), s.versions["GATE"]), (format!("G{m}"), m));
        }
        let clear = FlightChange { flid: "F".into(), clear: vec!["GATE".into()], ..Default::default() };
        s.apply(&clear, 5);
        assert_eq!((s.fields.get("GATE"), s.versions["GATE"]), (None, 5));
        assert_eq!(s.fields.len(), 1);
    }

    #[test]
    fn a_change_that_deletes_then_sets_keeps_its_own_sets() {
        let mut s = FlightState::of(Flight::from([("OLD".to_string(), "x".to_string())]));
        let mut c = set("F", &[("NEW", "y")]);
        c.delete = true;
        s.apply(&c, 7);
        assert_eq!(s.fields, Flight::from([("NEW".to_string(), "y".to_string())]));
        assert_eq!(s.deleted, 7);
    }
}
