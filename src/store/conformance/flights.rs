//! The FlightStore conformance suite: the same cases on the in-memory twin (unit tests) and
//! on Redis through the apply script (`tests/flights_store.rs`), so the simulator's twin is the
//! store msgx really runs on.

use crate::domain::{NewEvent, Target};
use crate::handlers::{Decision, FlightChange};
use std::time::{Duration, SystemTime};

use crate::ports::{Applying, FlightAudit, FlightStore, FlightsFence, RoundNeed};

/// The suite's clock: a fixed instant, moved on by hand.
const T0: SystemTime = SystemTime::UNIX_EPOCH;

fn at(secs: u64) -> SystemTime {
    T0 + Duration::from_secs(1_700_000_000 + secs)
}

/// A flight store for the suite: second handles on the same data.
pub trait FlightTwin: FlightStore + FlightAudit + FlightsFence + Sized {
    /// A handle on the same data that cannot reach it (the server down, the network cut).
    fn unreachable_twin(&self) -> Self;
    /// Its applies carry `epoch`.
    fn fenced_twin(&self, epoch: i64) -> Self;
    /// Journal entries stay `keep` after PostgreSQL holds their outcome.
    fn keeping_twin(&self, keep: Duration) -> Self;
    /// What a restart without persistence or a FLUSHALL does: everything of msgx's is gone.
    fn lose_everything(&self);
    /// A handle that saw `token` (what a consistency pass read, #20).
    fn expecting_twin(&self, token: Option<String>) -> Self;
}

impl FlightTwin for crate::store::memory::MemFlights {
    fn unreachable_twin(&self) -> Self {
        let h = self.handle();
        h.inject(crate::store::memory::Fault::Unavailable, 1);
        h
    }
    fn fenced_twin(&self, epoch: i64) -> Self {
        self.handle().fenced(epoch)
    }
    fn keeping_twin(&self, keep: Duration) -> Self {
        self.handle().keeping(keep)
    }
    fn lose_everything(&self) {
        self.replace_state(Default::default());
    }
    fn expecting_twin(&self, token: Option<String>) -> Self {
        self.handle().expecting(token)
    }
}

impl FlightTwin for crate::store::flights::RedisFlights {
    fn unreachable_twin(&self) -> Self {
        // A port nothing listens on: the connection is refused.
        crate::store::flights::RedisFlights::new("redis://127.0.0.1:1/", "msgx:unreachable:").expect("a URL")
    }
    fn fenced_twin(&self, epoch: i64) -> Self {
        self.twin().fenced(epoch)
    }
    fn keeping_twin(&self, keep: Duration) -> Self {
        self.twin().keeping(keep)
    }
    fn lose_everything(&self) {
        self.twin().drop_everything().expect("the prefix's keys deleted");
    }
    fn expecting_twin(&self, token: Option<String>) -> Self {
        self.twin().expecting(token)
    }
}

fn change(flid: &str, set: &[(&str, &str)], clear: &[&str]) -> FlightChange {
    FlightChange {
        flid: flid.into(),
        set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        clear: clear.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    }
}

fn decision(changes: Vec<FlightChange>, events: usize) -> Decision {
    Decision {
        flights: changes,
        events: (0..events)
            .map(|n| NewEvent {
                target: Target::KafkaMsg,
                partition_key: "F".into(),
                event_type: "UPSERT".into(),
                state_version: n as i64,
                payload_json: format!("{{\"n\":{n}}}"),
            })
            .collect(),
        ..Default::default()
    }
}

fn set(flid: &str, kv: &[(&str, &str)]) -> Decision {
    decision(vec![change(flid, kv, &[])], 1)
}

fn read<S: FlightTwin>(s: &mut S, flids: &[&str], msg_ids: &[i64]) -> crate::ports::Prepared {
    let need = RoundNeed {
        msg_ids: msg_ids.to_vec(),
        flids: flids.iter().map(|f| f.to_string()).collect(),
        window: None,
        ..Default::default()
    };
    s.prepare(&need, &[], at(0)).unwrap()
}

fn fields<S: FlightTwin>(s: &mut S, flid: &str) -> Vec<(String, String)> {
    read(s, &[flid], &[])
        .flights
        .get(flid)
        .map(|f| f.fields.clone().into_iter().collect())
        .unwrap_or_default()
}

pub fn an_apply_is_read_back_with_versions_and_its_journal<S: FlightTwin>(mut s: S) {
    let d = set("F", &[("STND", "A1"), ("GATE", "G2")]);
    assert_eq!(s.apply(&Applying::unnamed_all(&[(5, &d)])).unwrap(), vec![true]);
    let p = read(&mut s, &["F", "NOPE"], &[5, 6]);
    let f = &p.flights["F"];
    assert_eq!(f.fields["STND"], "A1");
    assert_eq!((f.versions["STND"], f.versions["GATE"]), (5, 5));
    assert!(!p.flights.contains_key("NOPE"), "an unknown flight is absent");
    let journal = &p.applied[&5];
    assert_eq!(
        (&journal.events, &journal.references),
        (&d.events, &d.references),
        "the journal keeps what a retry emits"
    );
    assert!(!p.applied.contains_key(&6));
}

pub fn a_round_applies_in_order_and_an_older_message_never_overwrites<S: FlightTwin>(mut s: S) {
    let (a, b) = (set("F", &[("STND", "A")]), set("F", &[("STND", "B")]));
    s.apply(&Applying::unnamed_all(&[(1, &a), (2, &b)])).unwrap();
    assert_eq!(fields(&mut s, "F"), [("STND".into(), "B".into())]);
    let late = set("F", &[("STND", "OLD"), ("GATE", "G")]);
    s.apply(&Applying::unnamed_all(&[(1, &late)])).unwrap();
    assert_eq!(
        fields(&mut s, "F"),
        [("GATE".into(), "G".into()), ("STND".into(), "B".into())],
        "2 wrote STND after 1"
    );
}

pub fn a_clear_keeps_its_version<S: FlightTwin>(mut s: S) {
    s.apply(&Applying::unnamed_all(&[(1, &set("F", &[("STND", "A"), ("GATE", "G")]))])).unwrap();
    s.apply(&Applying::unnamed_all(&[(3, &decision(vec![change("F", &[], &["STND"])], 0))])).unwrap();
    s.apply(&Applying::unnamed_all(&[(2, &set("F", &[("STND", "OLD")]))])).unwrap();
    let p = read(&mut s, &["F"], &[]);
    assert_eq!(p.flights["F"].fields.get("STND"), None, "cleared by 3, not brought back by 2");
    assert_eq!(p.flights["F"].versions["STND"], 3);
}

pub fn a_restated_value_moves_its_version<S: FlightTwin>(mut s: S) {
    s.apply(&Applying::unnamed_all(&[(1, &set("F", &[("STND", "A")]))])).unwrap();
    s.apply(&Applying::unnamed_all(&[(9, &decision(vec![change("F", &[("STND", "A")], &[])], 0))])).unwrap();
    s.apply(&Applying::unnamed_all(&[(5, &set("F", &[("STND", "OLD")]))])).unwrap();
    assert_eq!(fields(&mut s, "F"), [("STND".into(), "A".into())]);
}

pub fn a_delete_leaves_a_tombstone<S: FlightTwin>(mut s: S) {
    s.apply(&Applying::unnamed_all(&[(10, &set("F", &[("STND", "A")]))])).unwrap();
    let mut del = change("F", &[], &[]);
    del.delete = true;
    s.apply(&Applying::unnamed_all(&[(20, &decision(vec![del], 1))])).unwrap();
    assert!(fields(&mut s, "F").is_empty(), "deleted");
    let p = read(&mut s, &["F"], &[]);
    assert_eq!(p.flights.get("F").map(|f| f.deleted), Some(20), "the tombstone is read back");
    s.apply(&Applying::unnamed_all(&[(15, &set("F", &[("STND", "OLD")]))])).unwrap();
    assert!(fields(&mut s, "F").is_empty(), "an older message does not revive it");
    s.apply(&Applying::unnamed_all(&[(25, &set("F", &[("STND", "NEW")]))])).unwrap();
    assert_eq!(fields(&mut s, "F"), [("STND".into(), "NEW".into())], "a newer one does");
}

pub fn a_snapshot_applies_once_and_only_if_newer<S: FlightTwin>(mut s: S) {
    let mut snap = set("F", &[("STND", "S")]);
    snap.snapshot = true;
    assert_eq!(s.apply(&Applying::unnamed_all(&[(10, &snap)])).unwrap(), vec![true]);
    assert_eq!(
        s.apply(&Applying::unnamed_all(&[(10, &snap)])).unwrap(),
        vec![false],
        "the same snapshot again changes nothing"
    );
    let mut older = set("F", &[("STND", "OLDER")]);
    (older.snapshot, older.rules) = (true, Some(3));
    assert_eq!(s.apply(&Applying::unnamed_all(&[(7, &older)])).unwrap(), vec![false]);
    assert_eq!(fields(&mut s, "F"), [("STND".into(), "S".into())]);
    let p = read(&mut s, &[], &[7]);
    assert!(p.applied[&7].events.is_empty(), "a refused snapshot is journalled as the empty decision");
    assert_eq!(p.applied[&7].rules, Some(3), "with the rules that decided it, on either store");
    // With a window read, the snapshot that last advanced the plan (#68: what tells a reused
    // stale snapshot from an applied one); none read without a window.
    let window = RoundNeed { msg_ids: vec![7], window: Some((0, 1)), ..Default::default() };
    assert_eq!(s.prepare(&window, &[], at(0)).unwrap().generation_msg, Some(10));
    assert_eq!(read(&mut s, &[], &[7]).generation_msg, None);
    assert_eq!(s.apply(&Applying::unnamed_all(&[(12, &snap)])).unwrap(), vec![true]);
    assert_eq!(s.prepare(&window, &[], at(0)).unwrap().generation_msg, Some(12));
}

/// Before any snapshot, the plan's generation names no message: -1, as Redis says it.
pub fn no_snapshot_yet_is_generation_minus_one<S: FlightTwin>(mut s: S) {
    let window = RoundNeed { window: Some((0, 1)), ..Default::default() };
    assert_eq!(s.prepare(&window, &[], at(0)).unwrap().generation_msg, Some(-1));
}

pub fn a_window_reads_the_plan_index<S: FlightTwin>(mut s: S) {
    for (flid, sodt) in [("A", 202601010800), ("B", 202601011200), ("C", 202601020800)] {
        let mut c = change(flid, &[("FFID", flid)], &[]);
        c.sodt = Some(sodt);
        s.apply(&Applying::unnamed_all(&[(1, &decision(vec![c], 0))])).unwrap();
    }
    let need = RoundNeed {
        msg_ids: vec![],
        flids: vec![],
        window: Some((202601010000, 202601012359)),
        ..Default::default()
    };
    assert_eq!(s.prepare(&need, &[], at(0)).unwrap().window, ["A", "B"], "in SODT order");
    let mut gone = change("A", &[], &[]);
    gone.delete = true;
    s.apply(&Applying::unnamed_all(&[(2, &decision(vec![gone], 0))])).unwrap();
    assert_eq!(s.prepare(&need, &[], at(0)).unwrap().window, ["B"], "a deleted flight leaves the index");
}

pub fn forgotten_journal_entries_are_gone<S: FlightTwin>(mut s: S) {
    s.apply(&Applying::unnamed_all(&[(1, &set("F", &[("STND", "A")])), (2, &set("F", &[("STND", "B")]))]))
        .unwrap();
    let need = RoundNeed { msg_ids: vec![1, 2], flids: vec![], window: None, ..Default::default() };
    let p = s.prepare(&need, &[1], at(0)).unwrap();
    assert_eq!(p.applied.keys().copied().collect::<Vec<_>>(), [2], "forget rides along with the read");
    s.forget(&[2], at(0)).unwrap();
    assert!(s.prepare(&need, &[], at(0)).unwrap().applied.is_empty());
    assert_eq!(fields(&mut s, "F"), [("STND".into(), "B".into())], "forgetting the journal keeps the flight");
}

pub fn a_read_that_asks_for_nothing_gets_nothing<S: FlightTwin>(mut s: S) {
    let p = s.prepare(&RoundNeed::default(), &[], at(0)).expect("not an error (found by msgx verify)");
    assert_eq!(p, Default::default());
}

pub fn a_stale_epoch_applies_nothing<S: FlightTwin>(s: S) {
    let mut new = s.fenced_twin(2);
    let mut stale = s.fenced_twin(1);
    new.apply(&Applying::unnamed_all(&[(1, &set("F", &[("STND", "NEW")]))])).unwrap();
    let err = stale.apply(&Applying::unnamed_all(&[(2, &set("F", &[("STND", "STALE")]))])).unwrap_err();
    assert!(err.is_fenced(), "{err}");
    assert_eq!(fields(&mut new, "F"), [("STND".into(), "NEW".into())]);
    assert!(read(&mut new, &[], &[2]).applied.is_empty(), "not even journalled");
}

pub fn journal_entries_stay_for_the_keep_window_and_the_highest_dropped_is_kept<S: FlightTwin>(s: S) {
    let mut s = s.keeping_twin(Duration::from_secs(60));
    s.apply(&Applying::unnamed_all(&[
        (1, &set("F", &[("STND", "A")])),
        (2, &set("F", &[("STND", "B")])),
        (3, &set("F", &[("STND", "C")])),
    ]))
    .unwrap();
    s.forget(&[1, 2], at(0)).unwrap();
    let need = RoundNeed { msg_ids: vec![1, 2, 3], flids: vec![], window: None, ..Default::default() };
    let kept = s.prepare(&need, &[], at(59)).unwrap();
    assert_eq!(kept.applied.len(), 3, "within the keep window every entry stays");
    assert_eq!(s.audit().unwrap().pruned, Some(0), "nothing dropped yet: complete from the first apply on");
    s.forget(&[3], at(61)).unwrap();
    let p = s.prepare(&need, &[], at(61)).unwrap();
    assert_eq!(p.applied.keys().copied().collect::<Vec<_>>(), [3], "done 61 s ago: gone; done now: kept");
    assert_eq!(s.audit().unwrap().pruned, Some(2), "the highest MSG_ID dropped");
    assert_eq!(s.journal_has(&[1, 2, 3, 4]).unwrap(), [false, false, true, false]);
}

/// Seed 3591: the MSG_ID a decision is journalled for is read back under its identity, a later
/// decision of the same identity takes it over, and it goes with its journal entry.
pub fn an_identity_is_read_back_as_its_journal_entry_holds_it<S: FlightTwin>(s: S) {
    let mut s = s.keeping_twin(Duration::from_secs(60));
    let (a, b, c) = (set("F", &[("STND", "A")]), set("F", &[("STND", "B")]), set("G", &[("STND", "C")]));
    s.apply(&[
        Applying { msg_id: 18, identity: "MU|FLOP|STND|7", decision: &a },
        Applying { msg_id: 19, identity: "MU|FLOP|STND|8", decision: &b },
    ])
    .unwrap();
    s.apply(&[Applying { msg_id: 20, identity: "MU|FLOP|STND|8", decision: &c }]).unwrap();
    let ids = ["MU|FLOP|STND|7", "MU|FLOP|STND|8", "MU|FLOP|STND|9"].map(String::from).to_vec();
    let need = RoundNeed { msg_ids: vec![21], identities: ids, ..Default::default() };
    let owners =
        |p: crate::ports::Prepared| p.owners.into_iter().collect::<std::collections::BTreeMap<_, _>>();
    let got = owners(s.prepare(&need, &[], at(0)).unwrap());
    assert_eq!(got, [("MU|FLOP|STND|7".to_string(), 18), ("MU|FLOP|STND|8".to_string(), 20)].into());
    s.forget(&[18, 19], at(0)).unwrap();
    s.forget(&[20], at(61)).unwrap();
    let got = owners(s.prepare(&need, &[], at(61)).unwrap());
    assert_eq!(got, [("MU|FLOP|STND|8".to_string(), 20)].into(), "18's went with its entry; 19's was 20's");
}

pub fn a_store_that_lost_its_applies_refuses_the_next_as_forgot<S: FlightTwin>(s: S) {
    let mut s = s.fenced_twin(3);
    s.apply(&Applying::unnamed_all(&[(1, &set("F", &[("STND", "A")]))])).unwrap();
    s.apply(&Applying::unnamed_all(&[(2, &set("F", &[("STND", "B")]))])).unwrap();
    let marks = s.audit().unwrap();
    assert_eq!((marks.epoch, marks.applied_max), (3, 2));
    s.lose_everything();
    let err = s.apply(&Applying::unnamed_all(&[(3, &set("F", &[("STND", "C")]))])).unwrap_err();
    assert_eq!(err.kind, crate::error::StoreErrorKind::Forgot, "{err}");
    assert!(fields(&mut s, "F").is_empty(), "nothing written on a store that forgot");
    let marks = s.audit().unwrap();
    assert_eq!((marks.epoch, marks.pruned, marks.applied_max), (0, None, 0), "an empty store says so");
    let mut fresh = s.fenced_twin(3);
    fresh
        .apply(&Applying::unnamed_all(&[(3, &set("F", &[("STND", "C")]))]))
        .expect("a new handle has seen no applies");
}

/// #38: a heal is fenced like an apply — once a newer epoch holds the flights (a standby took
/// over while the heal ran), nothing more of it is written, flights, journal or marks.
pub fn a_restore_by_a_superseded_epoch_writes_nothing<S: FlightTwin>(s: S) {
    let mut healer = s.fenced_twin(1);
    healer.apply(&Applying::unnamed_all(&[(1, &set("F", &[("STND", "OLD")]))])).unwrap();
    let mut newer = s.fenced_twin(2);
    newer.apply(&Applying::unnamed_all(&[(2, &set("F", &[("STND", "NEW")]))])).unwrap();
    let mut stale = crate::handlers::FlightState::default();
    stale.apply(&change("F", &[("STND", "OLD")], &[]), 1);
    let restore = crate::ports::Restore {
        flights: vec![("F".into(), stale, None)],
        generation: Some((9, 1)),
        journal: vec![(1, set("F", &[]))],
    };
    let before = healer.audit().unwrap();
    let err = healer.restore(&restore, at(0)).unwrap_err();
    assert!(err.is_fenced(), "{err}");
    assert!(healer.set_pruned(99).unwrap_err().is_fenced());
    assert_eq!(fields(&mut newer, "F"), [("STND".into(), "NEW".into())], "the newer holder's write stands");
    let after = newer.audit().unwrap();
    assert_eq!((after.seq, after.pruned), (before.seq, before.pruned), "nothing of the heal counted");
    assert_ne!(newer.generation_of().unwrap(), (9, 1));
}

pub fn a_restore_writes_flights_generation_and_journal_whole<S: FlightTwin>(mut s: S) {
    s.apply(&Applying::unnamed_all(&[(1, &set("F", &[("STND", "OLD"), ("GATE", "G1")]))])).unwrap();
    s.apply(&Applying::unnamed_all(&[(2, &set("X", &[("STND", "X")]))])).unwrap();
    let mut f = crate::handlers::FlightState::default();
    f.apply(&change("F", &[("STND", "NEW")], &[]), 5);
    let gone = crate::handlers::FlightState { deleted: 6, ..Default::default() };
    let journal = set("F", &[]);
    let restore = crate::ports::Restore {
        flights: vec![("F".into(), f.clone(), Some(202612011200)), ("X".into(), gone, None)],
        generation: Some((4, 3)),
        journal: vec![(5, journal.clone())],
    };
    let before = s.audit().unwrap().seq;
    s.restore(&restore, at(0)).unwrap();
    assert_eq!(s.audit().unwrap().seq, before + 1, "a restore counts as a write a rollback can lose");
    let got = read(&mut s, &["F", "X"], &[5]);
    assert_eq!(*got.flights["F"], f, "the flight is exactly the rebuilt one (GATE gone)");
    assert!(!got.flights.get("X").is_some_and(|x| x.exists()), "a rebuilt delete deletes");
    assert_eq!(got.applied[&5].events, journal.events, "the journal entry is back");
    assert_eq!(s.generation_of().unwrap(), (4, 3));
    let need = RoundNeed {
        msg_ids: vec![],
        flids: vec![],
        window: Some((202612010000, 202612020000)),
        ..Default::default()
    };
    assert_eq!(s.prepare(&need, &[], at(0)).unwrap().window, ["F"], "the plan index follows");
}

/// A late message for a flight deleted after it (its values refused by the tombstone) does not
/// put the flight back in the daily plan's index: a snapshot's window would name a flight
/// that has no fields. The Redis script indexed it; the twin did not (#23, found by the
/// merged-round case below).
pub fn regression_a_late_message_does_not_index_a_deleted_flight<S: FlightTwin>(mut s: S) {
    let mut first = change("F", &[("STND", "A")], &[]);
    first.sodt = Some(202601010800);
    s.apply(&Applying::unnamed_all(&[(10, &decision(vec![first], 0))])).unwrap();
    let mut gone = change("F", &[], &[]);
    gone.delete = true;
    s.apply(&Applying::unnamed_all(&[(20, &decision(vec![gone], 0))])).unwrap();
    let mut late = change("F", &[("STND", "OLD")], &[]);
    late.sodt = Some(202601010800);
    s.apply(&Applying::unnamed_all(&[(15, &decision(vec![late], 0))])).unwrap();
    let need = RoundNeed {
        msg_ids: vec![],
        flids: vec!["F".into()],
        window: Some((0, i64::MAX)),
        ..Default::default()
    };
    let p = s.prepare(&need, &[], at(0)).unwrap();
    assert!(p.flights.get("F").is_some_and(|f| f.fields.is_empty()), "the tombstone refused the late value");
    assert!(p.window.is_empty(), "a deleted flight is not in the index: {:?}", p.window);
}

/// Rounds of many changes per flight — sets, clears, deletes, SODTs, snapshots, late rows —
/// end where the same changes applied one by one under `FlightState::apply`'s rules end
/// (fields, versions, tombstone, the plan's index): the store may merge a round per flight
/// (#23), never change what it means.
pub fn a_round_merged_per_flight_ends_as_its_changes_one_by_one<S: FlightTwin>(mut s: S) {
    use crate::handlers::FlightState;
    use std::collections::BTreeMap;
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (names, flids) = (["STND", "GATE", "EOBT", "ACFT"], ["F1", "F2", "F3"]);
    let mut model: BTreeMap<String, (FlightState, Option<i64>)> = BTreeMap::new();
    let mut last_snapshot = -1;
    let mut m0 = 1000;
    for r in 0..500 {
        // A round's MSG_IDs ascend; a round now and then is late rows below the ones before.
        let mut m = if r % 7 == 6 { m0 - 500 } else { m0 };
        let mut decisions = Vec::new();
        for _ in 0..1 + next(8) {
            m += 1 + next(3) as i64;
            let mut d = decision(Vec::new(), 1);
            d.snapshot = next(10) == 0;
            for flid in flids {
                if next(2) == 0 {
                    continue;
                }
                let mut c = change(flid, &[], &[]);
                // A fifth of the changes delete the flight and nothing else (it stays empty).
                c.delete = next(5) == 0 || next(10) == 0;
                for f in names {
                    if c.delete && next(2) == 0 {
                        continue;
                    }
                    match next(5) {
                        0 | 1 => c.set.push((f.to_string(), format!("{f}{m}"))),
                        2 => c.clear.push(f.to_string()),
                        _ => {}
                    }
                }
                let sodt = 202601010000 + next(100) as i64;
                c.sodt = (next(3) == 0).then_some(sodt);
                d.flights.push(c);
            }
            decisions.push((m, d));
        }
        m0 = m0.max(m);
        let round: Vec<(i64, &Decision)> = decisions.iter().map(|(m, d)| (*m, d)).collect();
        let applied = s.apply(&Applying::unnamed_all(&round)).unwrap();
        for ((m, d), applied) in decisions.iter().zip(applied) {
            let want = !d.snapshot || *m > last_snapshot;
            assert_eq!(applied, want, "msg_id={m}: a snapshot applies only when newer");
            if !want {
                continue;
            }
            if d.snapshot {
                last_snapshot = *m;
            }
            for c in &d.flights {
                let (st, index) = model.entry(c.flid.clone()).or_default();
                st.apply(c, *m);
                if !st.exists() {
                    *index = None;
                } else if c.sodt.is_some() {
                    *index = c.sodt;
                }
            }
        }
        // Read back as the pump reads: the flights with their versions, and the whole index.
        let need = RoundNeed {
            msg_ids: Vec::new(),
            flids: flids.iter().map(|f| f.to_string()).collect(),
            window: Some((0, i64::MAX)),
            ..Default::default()
        };
        let p = s.prepare(&need, &[], at(0)).unwrap();
        let got = (p.flights, p.window);
        let mut index: Vec<(i64, &String)> =
            model.iter().filter_map(|(f, (_, i))| Some(((*i)?, f))).collect();
        index.sort();
        let want = (
            model
                .iter()
                .filter(|(_, (st, _))| !st.fields.is_empty() || !st.versions.is_empty() || st.deleted > 0)
                .map(|(f, (st, _))| (f.clone(), std::sync::Arc::new(st.clone())))
                .collect(),
            index.into_iter().map(|(_, f)| f.clone()).collect::<Vec<_>>(),
        );
        assert_eq!(got, want, "after round {r}");
    }
}
/// #56: the fence a new lease holder claims. A claim moves it, and from then on an older
/// epoch applies nothing; the same claim again changes nothing.
pub fn a_claim_fences_every_older_epoch<S: FlightTwin>(mut s: S) {
    assert_eq!(s.epoch_held().unwrap(), 0, "never claimed");
    let mut old = s.fenced_twin(2);
    old.apply(&Applying::unnamed_all(&[(1, &set("F", &[("STND", "OLD")]))])).unwrap();
    s.claim(3).unwrap();
    assert_eq!(s.epoch_held().unwrap(), 3);
    let refused = old.apply(&Applying::unnamed_all(&[(2, &set("F", &[("STND", "STALE")]))])).unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    let mut holder = s.fenced_twin(3);
    holder.apply(&Applying::unnamed_all(&[(3, &set("F", &[("STND", "NEW")]))])).unwrap();
    s.claim(3).unwrap();
    assert_eq!((s.epoch_held().unwrap(), fields(&mut holder, "F")), (3, vec![("STND".into(), "NEW".into())]));
}

/// #56: a claim below the epoch that holds the flights is fenced and moves nothing back.
pub fn a_claim_below_a_seen_epoch_is_fenced_and_moves_nothing<S: FlightTwin>(mut s: S) {
    s.claim(5).unwrap();
    let below = s.claim(4).unwrap_err();
    assert!(below.is_fenced(), "{below}");
    assert_eq!(s.epoch_held().unwrap(), 5);
    s.claim(6).unwrap();
    assert_eq!(s.epoch_held().unwrap(), 6);
}

/// #56: a claim that cannot reach the store is an outage (the daemon gives the lease back and
/// claims again after the pause), never a fence; the fence stays where it was.
pub fn a_claim_that_cannot_reach_the_store_is_an_outage<S: FlightTwin>(mut s: S) {
    s.claim(2).unwrap();
    let away = s.unreachable_twin().claim(3).unwrap_err();
    assert!(away.is_unavailable() && !away.is_fenced(), "{away}");
    assert_eq!(s.epoch_held().unwrap(), 2);
}

/// #65, the fleet's seed 18129: a pass read an empty Redis, and Redis was restored from a dump
/// before the pump's first apply; the pump took the restored history as its own and decided on
/// flights that lacked what was applied after the dump. A handle that saw no history
/// (`NO_HISTORY`) accepts a Redis that still holds none, and refuses one written since as one
/// that forgot — nothing written.
pub fn a_handle_that_saw_no_history_refuses_one_written_since<S: FlightTwin>(s: S) {
    let none = || Some(crate::ports::NO_HISTORY.to_string());
    let mut first = s.expecting_twin(none());
    first.apply(&Applying::unnamed_all(&[(1, &set("F", &[("STND", "A")]))])).unwrap();
    let mut late = s.expecting_twin(none());
    let err = late.apply(&Applying::unnamed_all(&[(2, &set("F", &[("STND", "B")]))])).unwrap_err();
    assert_eq!(err.kind, crate::error::StoreErrorKind::Forgot, "{err}");
    assert_eq!(fields(&mut late, "F"), [("STND".to_string(), "A".to_string())], "nothing written");
}

/// Expands to one `#[test]` per case; `$make` builds a fresh, empty store and a guard.
#[macro_export]
macro_rules! flight_conformance_tests {
    ($make:expr) => {
        $crate::flight_conformance_tests!(@cases $make;
            an_apply_is_read_back_with_versions_and_its_journal,
            a_round_applies_in_order_and_an_older_message_never_overwrites,
            a_clear_keeps_its_version,
            a_restated_value_moves_its_version,
            a_delete_leaves_a_tombstone,
            a_snapshot_applies_once_and_only_if_newer,
            no_snapshot_yet_is_generation_minus_one,
            a_window_reads_the_plan_index,
            forgotten_journal_entries_are_gone,
            a_stale_epoch_applies_nothing,
            a_read_that_asks_for_nothing_gets_nothing,
            journal_entries_stay_for_the_keep_window_and_the_highest_dropped_is_kept,
            an_identity_is_read_back_as_its_journal_entry_holds_it,
            a_store_that_lost_its_applies_refuses_the_next_as_forgot,
            a_restore_writes_flights_generation_and_journal_whole,
            a_restore_by_a_superseded_epoch_writes_nothing,
            a_round_merged_per_flight_ends_as_its_changes_one_by_one,
            regression_a_late_message_does_not_index_a_deleted_flight,
            a_claim_fences_every_older_epoch,
            a_claim_below_a_seen_epoch_is_fenced_and_moves_nothing,
            a_claim_that_cannot_reach_the_store_is_an_outage,
            a_handle_that_saw_no_history_refuses_one_written_since,
        );
    };
    (@cases $make:expr; $($case:ident,)*) => {
        $(
            #[test]
            fn $case() {
                let (store, _guard) = $make;
                $crate::store::conformance::flights::$case(store);
            }
        )*
    };
}
