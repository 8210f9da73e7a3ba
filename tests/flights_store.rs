//! The FlightStore conformance suite on a real Redis through the apply script: the same cases
//! the in-memory twin passes as unit tests (src/store/conformance/flights.rs).

mod common;

use common::Services;
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
    assert_eq!(f.apply(&[(1, &stand("A1"))]).unwrap(), vec![true]);
    // A restarted server, a promoted replica or an operator's SCRIPT FLUSH: the cached
    // script is gone and EVALSHA answers NOSCRIPT. Every other script msgx runs loads itself.
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut s.redis()).unwrap();
    assert_eq!(f.apply(&[(2, &stand("A2"))]).unwrap(), vec![true]);
    let need = RoundNeed { msg_ids: vec![], flids: vec!["F".into()], window: None };
    let read = f.prepare(&need, &[], std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert_eq!(read.flights["F"].fields["STND"], "A2");
    assert_eq!(read.flights["F"].versions["STND"], 2);
}
