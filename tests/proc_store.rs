//! The own-PostgreSQL conformance suite on a real server: the same cases the in-memory twin
//! passes as unit tests (src/store/conformance.rs), plus what only a real server shows.

mod common;

use common::Services;
use msgx::store::pg::Pg;

fn fresh() -> (Pg, Services) {
    let s = Services::migrated("");
    (Pg::connect(&s.cfg.pg_url).expect("connect"), s)
}

msgx::conformance_tests!(fresh());

#[test]
fn archived_rows_are_whole_in_proc_state_hst() {
    use msgx::ports::{Housekeeping, MarkLedger, Settle};
    use msgx::store::conformance::t0;
    use std::time::Duration;
    let (mut pg, s) = fresh();
    common::enqueue(&mut pg, &[7], t0());
    let mut st = Settle::succeeded(7, "AODB|FLOP|STND|7", vec![]);
    st.type_tag = Some("FLOP-STND".into());
    common::record(&mut pg, &[st], t0());
    pg.backfill_settled(&[7], t0()).unwrap();
    let now = t0() + Duration::from_secs(86_401);
    assert_eq!(pg.archive(t0() + Duration::from_secs(1), 10, now).unwrap().archived, 1);
    let mut c = s.pg();
    let r = c
        .query_one("SELECT state, identity_key, type_tag, backfill_at IS NOT NULL, archived_at FROM proc_state_hst WHERE msg_id = 7", &[])
        .unwrap();
    assert_eq!(r.get::<_, String>(0), "SUCCEEDED", "the history keeps the row as it was");
    assert_eq!(r.get::<_, String>(1), "AODB|FLOP|STND|7");
    assert_eq!(r.get::<_, String>(2), "FLOP-STND");
    assert!(r.get::<_, bool>(3));
    assert_eq!(r.get::<_, std::time::SystemTime>(4), now);
    let shadow = c
        .query_one("SELECT state, type_tag, archived_at IS NOT NULL FROM proc_state WHERE msg_id = 7", &[])
        .unwrap();
    assert_eq!(
        (shadow.get::<_, String>(0), shadow.get::<_, Option<String>>(1), shadow.get::<_, bool>(2)),
        ("ARCHIVED".to_string(), None, true)
    );
}
