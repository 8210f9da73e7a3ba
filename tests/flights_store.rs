//! The FlightStore conformance suite on a real Redis through the apply script: the same cases
//! the in-memory twin passes as unit tests (src/store/conformance/flights.rs).

use crate::common;

use common::Services;
use msgx::ports::Applying;
use msgx::store::flights::RedisFlights;

fn fresh() -> (RedisFlights, Services) {
    let s = Services::migrated("");
    (RedisFlights::connect(&s.cfg.redis_url, &s.cfg.redis_prefix).expect("connect"), s)
}

msgx::flight_conformance_tests!(fresh());

#[test]
fn regression_an_apply_on_a_server_that_dropped_its_scripts_loads_the_script_again() {
    use msgx::handlers::{Decision, FlightChange};
    use msgx::ports::{FlightStore, RoundNeed};
    let (mut f, s) = fresh();
    let stand = |v: &str| Decision {
        flights: vec![FlightChange {
            flid: "F".into(),
            set: vec![("STND".into(), v.into())],
            ..Default::default()
        }],
        ..Default::default()
    };
    assert_eq!(f.apply(&Applying::unnamed_all(&[(1, &stand("A1"))])).unwrap(), vec![true]);
    // A restarted server, a promoted replica or an operator's SCRIPT FLUSH: the cached
    // script is gone and EVALSHA answers NOSCRIPT. Every other script msgx runs loads itself.
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut s.redis()).unwrap();
    assert_eq!(f.apply(&Applying::unnamed_all(&[(2, &stand("A2"))])).unwrap(), vec![true]);
    let need = RoundNeed { msg_ids: vec![], flids: vec!["F".into()], window: None, ..Default::default() };
    let read = f.prepare(&need, &[], std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert_eq!(read.flights["F"].fields["STND"], "A2");
    assert_eq!(read.flights["F"].versions["STND"], 2);
}

fn change(flid: &str, set: &[(&str, &str)], clear: &[&str], delete: bool) -> msgx::handlers::Decision {
    msgx::handlers::Decision {
        flights: vec![msgx::handlers::FlightChange {
            flid: flid.into(),
            set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            clear: clear.iter().map(|c| c.to_string()).collect(),
            delete,
            sodt: None,
        }],
        ..Default::default()
    }
}

/// The adapter works a round's writes out from what its last read found (#23). Another writer
/// between that read and the apply moves the token: the apply reads again and the version rule
/// still holds — the older message does not put its value over the newer one's.
#[test]
fn a_write_between_the_read_and_the_apply_is_read_again_not_overwritten() {
    use msgx::ports::{FlightStore, RoundNeed};
    let (mut a, s) = fresh();
    let mut b = a.twin();
    let need = RoundNeed { msg_ids: vec![10], flids: vec!["F".into()], window: None, ..Default::default() };
    let read = a.prepare(&need, &[], std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert!(read.flights.is_empty(), "nothing there yet");
    b.apply(&Applying::unnamed_all(&[(20, &change("F", &[("STND", "NEWER")], &[], false))])).unwrap();
    a.apply(&Applying::unnamed_all(&[(10, &change("F", &[("STND", "OLDER"), ("GATE", "G1")], &[], false))]))
        .unwrap();
    let f = common::redis_flights(&s);
    assert_eq!(f["F"]["STND"], "NEWER", "20 wrote STND after 10");
    assert_eq!(f["F"]["GATE"], "G1", "nobody newer wrote GATE");
}

/// The versions of a flight that holds nothing expire a week later (its tombstone); once it
/// holds fields again they stay. The script before #23 kept them only after a delete: versions
/// left by a clear on an empty flight expired under the fields a later message set.
#[test]
fn regression_versions_left_by_a_clear_stay_once_the_flight_holds_fields_again() {
    use msgx::ports::FlightStore;
    let (mut f, s) = fresh();
    let mut r = s.redis();
    let ttl = |r: &mut redis::Connection, flid: &str| -> i64 {
        redis::cmd("TTL").arg(format!("{}fver:{flid}", s.cfg.redis_prefix)).query(r).unwrap()
    };
    f.apply(&Applying::unnamed_all(&[(1, &change("C", &[], &["GATE"], false))])).unwrap();
    assert!(ttl(&mut r, "C") > 0, "a flight that holds nothing: its versions expire");
    f.apply(&Applying::unnamed_all(&[(2, &change("C", &[("STND", "A")], &[], false))])).unwrap();
    assert_eq!(ttl(&mut r, "C"), -1, "it holds a field again: its versions stay");
    f.apply(&Applying::unnamed_all(&[
        (3, &change("D", &[("STND", "A")], &[], false)),
        (4, &change("D", &[], &[], true)),
    ]))
    .unwrap();
    assert!(ttl(&mut r, "D") > 0, "deleted: the tombstone expires");
    f.apply(&Applying::unnamed_all(&[(5, &change("D", &[("STND", "B")], &[], false))])).unwrap();
    assert_eq!(ttl(&mut r, "D"), -1, "back: its versions stay");
    f.apply(&Applying::unnamed_all(&[(6, &change("D", &[("GATE", "G")], &[], false))])).unwrap();
    assert_eq!(ttl(&mut r, "D"), -1);
}

/// A flight the last round left known is not read again while Redis holds the token it
/// stands under (#23); another writer moves the token, and the next read reads it again.
#[test]
fn a_flight_known_from_the_last_round_is_read_again_once_another_handle_wrote() {
    use msgx::ports::{FlightStore, RoundNeed};
    let (mut a, _s) = fresh();
    let mut b = a.twin();
    let need = RoundNeed { msg_ids: vec![], flids: vec!["F".into()], window: None, ..Default::default() };
    let at = std::time::SystemTime::UNIX_EPOCH;
    a.apply(&Applying::unnamed_all(&[(1, &change("F", &[("STND", "A")], &[], false))])).unwrap();
    assert_eq!(a.prepare(&need, &[], at).unwrap().flights["F"].fields["STND"], "A");
    b.apply(&Applying::unnamed_all(&[(2, &change("F", &[("STND", "B")], &[], false))])).unwrap();
    let f = &a.prepare(&need, &[], at).unwrap().flights["F"];
    assert_eq!((f.fields["STND"].as_str(), f.versions["STND"]), ("B", 2), "the other handle's write is read");
}

/// The versions of a flight that holds nothing expire on their own, which moves no token: such
/// a flight is read again every round, never taken from what an earlier round found.
#[test]
fn a_tombstone_that_expired_is_not_taken_from_an_earlier_read() {
    use msgx::ports::{FlightStore, RoundNeed};
    let (mut a, s) = fresh();
    let need = RoundNeed { msg_ids: vec![], flids: vec!["F".into()], window: None, ..Default::default() };
    let at = std::time::SystemTime::UNIX_EPOCH;
    a.apply(&Applying::unnamed_all(&[
        (1, &change("F", &[("STND", "A")], &[], false)),
        (2, &change("F", &[], &[], true)),
    ]))
    .unwrap();
    assert_eq!(a.prepare(&need, &[], at).unwrap().flights["F"].deleted, 2, "a tombstone");
    let _: () = redis::cmd("PEXPIRE")
        .arg(format!("{}fver:F", s.cfg.redis_prefix))
        .arg(1)
        .query(&mut s.redis())
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!a.prepare(&need, &[], at).unwrap().flights.contains_key("F"), "expired: nothing is left of F");
    a.apply(&Applying::unnamed_all(&[(1, &change("F", &[("STND", "LATE")], &[], false))])).unwrap();
    let f = &a.prepare(&need, &[], at).unwrap().flights["F"];
    assert_eq!(f.fields["STND"], "LATE", "no tombstone refuses it any more, as Redis holds none");
}
