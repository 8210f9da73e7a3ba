//! #39: a snapshot (SCHD DNLD and RESP, family B's DFOE-DFDL) is one concept, and batched is one
//! by one (SPEC §4.12). Each case sends the same messages to two fresh sets of real stores: one
//! pump takes them in rounds as it does (`process-batch` 1000), the other one message a round;
//! Redis — every flight's fields, versions and tombstone, the plan's index and generation — and
//! the outbox on both targets must be the same.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use msgx::fixtures::{self, dfdl, schd};
use msgx::ports::FlightAudit;
use msgx::store::flights::RedisFlights;

/// What a batch of the day is: messages committed together, or one held in a transaction that
/// commits after the next batch was processed (a late row, PRE-2).
enum Step {
    Together(Vec<String>),
    Late(String),
}

/// One flight as Redis holds it: fields, versions, tombstone, SODT key in the plan's index.
type Held = (Vec<(String, String)>, Vec<(String, i64)>, i64, Option<i64>);

/// Everything a consumer or the next message can see of one side's processing.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    flights: BTreeMap<String, Held>,
    generation: (i64, i64),
    /// KAFKA:msg in EVENT_ID order; KAFKA:schd as the rows stand, by flight.
    msg: Vec<(i64, String, String, String)>,
    schd: Vec<(String, i64, String, String)>,
    states: Vec<(i64, String)>,
}

/// Polls and pumps until `want` messages are settled.
fn drain(
    s: &Services,
    poller: &mut msgx::ingress::Poller<msgx::store::pg::Pg, msgx::store::mailbox::MysqlMailbox>,
    pump: &mut msgx::pump::Pump<msgx::store::pg::Pg, msgx::store::mailbox::MysqlMailbox, RedisFlights>,
    want: usize,
) {
    let mut pg = s.pg();
    let done = eventually(Duration::from_secs(30), || {
        poller.round(now()).unwrap();
        while let msgx::pump::Round::Worked(_) = pump.round(now()).unwrap() {}
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE state IN ('SUCCEEDED', 'SKIPPED', 'DEAD')")
            == want as i64
    });
    assert!(done, "{want} messages settled");
}

/// Runs `steps` on fresh stores with `process-batch` = `batch`.
fn side(steps: &[Step], batch: usize) -> Seen {
    let s = Services::migrated(&format!("process-batch = {batch}\nrescan-interval = \"1s\"\n"));
    let stats = Arc::new(msgx::stats::Stats::default());
    let (mut poller, mut pump) = (s.poller(&stats), s.pump(&stats));
    let mut held: Option<Open> = None;
    let mut settled = 0;
    for step in steps {
        match step {
            Step::Together(raws) => {
                s.insert_inbound(raws);
                settled += raws.len();
                drain(&s, &mut poller, &mut pump, settled);
                if let Some(late) = held.take() {
                    late.commit();
                    settled += 1;
                    drain(&s, &mut poller, &mut pump, settled);
                }
            }
            Step::Late(raw) => held = Some(Open::insert(&s, raw)),
        }
    }
    seen(&s)
}

fn seen(s: &Services) -> Seen {
    let mut r = RedisFlights::connect_to(&s.cfg.redis, &s.cfg.redis_prefix).unwrap();
    let flights = r
        .all_flights()
        .unwrap()
        .into_iter()
        .map(|(flid, f, sodt)| {
            let fields = f.fields.into_iter().collect();
            (flid, (fields, f.versions.into_iter().collect(), f.deleted, sodt))
        })
        .collect();
    let generation = r.generation().unwrap();
    let mut pg = s.pg();
    let rows = |pg: &mut postgres::Client, target: &str| {
        pg.query(
            "SELECT msg_id, partition_key, event_type, payload_json FROM msg_event WHERE target = $1 ORDER BY event_id",
            &[&target],
        )
        .unwrap()
    };
    let msg = rows(&mut pg, "KAFKA:msg").iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    let mut schd: Vec<(String, i64, String, String)> =
        rows(&mut pg, "KAFKA:schd").iter().map(|r| (r.get(1), r.get(0), r.get(2), r.get(3))).collect();
    schd.sort();
    let states = pg
        .query("SELECT msg_id, state FROM proc_state ORDER BY msg_id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    Seen { flights, generation, msg, schd, states }
}

/// Batched and one by one, the same; returns the batched side.
fn batched_is_one_by_one(steps: &[Step]) -> Seen {
    let batched = side(steps, 1000);
    let alone = side(steps, 1);
    assert_eq!(batched.states, alone.states, "every message's outcome");
    assert_eq!(batched.flights, alone.flights, "Redis: fields, versions, tombstones, index");
    assert_eq!(batched.generation, alone.generation, "the plan's generation");
    assert_eq!(batched.msg, alone.msg, "KAFKA:msg");
    assert_eq!(batched.schd, alone.schd, "KAFKA:schd");
    batched
}

fn holds(seen: &Seen, flid: &str) -> bool {
    seen.flights.get(flid).is_some_and(|(fields, ..)| !fields.is_empty())
}

/// The case found on the real services: table A for 5 March (71, 72; 75 omitted) and table B for
/// 6 March (73, 74; 76 omitted), committed together after earlier tables created all six. In
/// one round B was decided against A's window: 71 and 72, which A had just kept, were deleted
/// and their deletion published; 76, which B omits, was kept. (A window is a table's [min SODT,
/// max SODT]: the omitted flights lie inside it.)
#[test]
fn regression_two_full_tables_of_different_days_in_one_round() {
    let steps = [
        Step::Together(vec![dfdl(1, "20260305", &[("71", "0900"), ("75", "1000"), ("72", "1100")])]),
        Step::Together(vec![dfdl(2, "20260306", &[("73", "0900"), ("76", "1000"), ("74", "1100")])]),
        Step::Together(vec![
            dfdl(3, "20260305", &[("71", "0900"), ("72", "1100")]),
            dfdl(4, "20260306", &[("73", "0900"), ("74", "1100")]),
        ]),
    ];
    let seen = batched_is_one_by_one(&steps);
    for kept in ["71", "72", "73", "74"] {
        assert!(holds(&seen, kept), "{kept} is carried by its day's table");
    }
    for gone in ["75", "76"] {
        assert!(!holds(&seen, gone), "{gone} is absent from its day's table");
    }
    let deletes: Vec<&str> =
        seen.schd.iter().filter(|(_, _, t, _)| t == "DELETE").map(|(k, ..)| k.as_str()).collect();
    assert_eq!(deletes, ["75", "76"], "only the omitted flights' deletion is published");
    println!("two DFDL tables in one round: kept 71 72 73 74, deleted 75 76, as one by one");
}

/// Two SCHD-DNLD of different days committed together.
#[test]
fn two_daily_plans_of_different_days_in_one_round_are_one_by_one() {
    let (a, b) = (("A1", "05MAR260900"), ("B1", "06MAR260900"));
    let steps = [
        Step::Together(vec![schd(1, "DNLD", &[a, ("A3", "05MAR261000"), ("A2", "05MAR261100")])]),
        Step::Together(vec![schd(2, "DNLD", &[b, ("B3", "06MAR261000"), ("B2", "06MAR261100")])]),
        Step::Together(vec![
            schd(3, "DNLD", &[a, ("A2", "05MAR261100")]),
            schd(4, "DNLD", &[b, ("B2", "06MAR261100")]),
        ]),
    ];
    let seen = batched_is_one_by_one(&steps);
    assert!(holds(&seen, "A1") && holds(&seen, "B2") && !holds(&seen, "A3") && !holds(&seen, "B3"));
}

/// A DNLD and a RESP whose windows overlap, committed together.
#[test]
fn a_download_and_an_answer_of_overlapping_windows_in_one_round_are_one_by_one() {
    let steps = [
        Step::Together(vec![schd(
            1,
            "DNLD",
            &[("C1", "05MAR260800"), ("C3", "05MAR261000"), ("C2", "05MAR261200"), ("C5", "05MAR261300")],
        )]),
        Step::Together(vec![
            schd(2, "DNLD", &[("C1", "05MAR260800"), ("C2", "05MAR261200")]),
            schd(3, "RESP", &[("C2", "05MAR261200"), ("C4", "05MAR261400")]),
        ]),
    ];
    let seen = batched_is_one_by_one(&steps);
    assert!(!holds(&seen, "C3"), "C3 lies in the DNLD's window and is absent from it");
    assert!(!holds(&seen, "C5"), "C5 lies in the RESP's window and is absent from it");
    assert!(holds(&seen, "C1") && holds(&seen, "C2") && holds(&seen, "C4"));
}

/// A snapshot followed in the same batch by a FLOP and an FDEL for flights of its window.
#[test]
fn a_snapshot_then_an_update_and_a_delete_of_its_window_are_one_by_one() {
    let steps = [
        Step::Together(vec![schd(
            1,
            "DNLD",
            &[("D1", "05MAR260900"), ("D3", "05MAR261000"), ("D2", "05MAR261100")],
        )]),
        Step::Together(vec![
            schd(2, "DNLD", &[("D1", "05MAR260900"), ("D2", "05MAR261100")]),
            fixtures::flop_stnd(3, "D1", "B12"),
            fixtures::flop(4, "FDEL", "D2", &[]),
        ]),
    ];
    let seen = batched_is_one_by_one(&steps);
    assert!(holds(&seen, "D1") && !holds(&seen, "D2") && !holds(&seen, "D3"));
    let d1 = &seen.flights["D1"].0;
    assert!(d1.contains(&("STND".to_string(), "B12".to_string())), "{d1:?}");
}

/// A stale snapshot — an older MSG_ID than the one that set the generation, committed late —
/// between two updates of flights of its window.
#[test]
fn a_stale_snapshot_between_two_updates_is_one_by_one() {
    let steps = [
        Step::Together(vec![schd(1, "DNLD", &[("E1", "05MAR260900"), ("E2", "05MAR261000")])]),
        Step::Late(schd(2, "DNLD", &[("E1", "05MAR260900"), ("E3", "05MAR261100")])),
        Step::Together(vec![
            fixtures::flop_stnd(3, "E1", "U1"),
            schd(4, "DNLD", &[("E1", "05MAR260900"), ("E2", "05MAR261000")]),
            fixtures::flop_stnd(5, "E2", "U2"),
        ]),
    ];
    let seen = batched_is_one_by_one(&steps);
    assert!(!holds(&seen, "E3"), "the stale snapshot changed nothing");
    assert_eq!(seen.generation, (2, 4), "advanced by MSG_IDs 1 and 4, not by the stale 2");
    assert_eq!(seen.states.iter().find(|(m, _)| *m == 2).map(|(_, st)| st.as_str()), Some("SUCCEEDED"));
}
