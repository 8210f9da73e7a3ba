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
