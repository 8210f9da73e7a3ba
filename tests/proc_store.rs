//! The ProcStore/Outbox conformance suite on real PostgreSQL: the same cases the in-memory
//! adapter passes as unit tests (src/store/conformance.rs).

mod common;

use common::Services;
use msgx::store::pg::Pg;

fn fresh() -> (Pg, Services) {
    let s = Services::migrated("");
    (Pg::connect(&s.cfg.pg_url).expect("connect"), s)
}

msgx::conformance_tests!(fresh());
