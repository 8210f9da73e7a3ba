//! The own-PostgreSQL conformance suite on a real server: the same cases the in-memory twin
//! passes as unit tests (src/store/conformance.rs), plus what only a real server shows.

use crate::common;

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
    let cut = msgx::ports::ArchiveCut { settled_before: t0() + Duration::from_secs(1), dead_before: t0() };
    assert_eq!(pg.archive_candidates(&cut, 10).unwrap(), vec![7]);
    assert_eq!(pg.archive_one(7, &cut, now).unwrap(), Some(msgx::ports::ArchivedAs::Settled));
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

/// 100 000 PENDING rows PROC_STATE's statistics never saw (autovacuum off, no ANALYZE), as
/// after a burst into a new table; `succeeded` of them (the first) SUCCEEDED with an identity.
fn stale_backlog(succeeded: i64) -> (Pg, Services) {
    let (pg, s) = fresh();
    s.pg()
        .batch_execute(&format!(
            "ALTER TABLE proc_state SET (autovacuum_enabled = false);
             INSERT INTO proc_state (msg_id, state, attempts, updated_at, identity_key)
             SELECT g, 'SUCCEEDED', 0, now(), 'A|FLOP|STND|' || g FROM generate_series(1, {succeeded}) g;
             INSERT INTO proc_state (msg_id, state, attempts, updated_at)
             SELECT g, 'PENDING', 0, now() FROM generate_series({succeeded} + 1, 100000) g;"
        ))
        .unwrap();
    (pg, s)
}

#[test]
fn the_head_query_walks_its_index_with_100k_pending_rows_and_stale_statistics() {
    use msgx::ports::Fifo;
    let (mut pg, _s) = stale_backlog(0);
    let plan = pg.explain_head(50).unwrap();
    println!("{plan}");
    assert!(
        plan.contains("Index Scan using idx_proc_head")
            || plan.contains("Index Only Scan using idx_proc_head"),
        "{plan}"
    );
    assert!(!plan.contains("Sort") && !plan.contains("Seq Scan") && !plan.contains("Bitmap"), "{plan}");
    // …and the answer is the head, at once.
    let started = std::time::Instant::now();
    let rows = pg.unfinished(50, &[]).unwrap();
    assert_eq!(rows.first().map(|r| r.msg_id), Some(1));
    assert_eq!(rows.len(), 50);
    println!("head of 100000 pending rows read in {:?}", started.elapsed());
}

#[test]
fn regression_a_batch_recorded_succeeded_reads_its_part_of_the_index_not_the_whole_backlog() {
    let (mut pg, _s) = stale_backlog(0);
    let ids: Vec<i64> = (50_001..=51_000).collect();
    let plan = pg.explain_succeeded(&ids).unwrap();
    println!("{plan}");
    // Before: a bitmap scan of idx_proc_head with no bound, hashing all 100 000 pending rows
    // to update 1000 of them (66 of 83 ms). Now the batch's bounds are the scan's condition.
    let bounded =
        plan.lines().any(|l| l.contains("Index Cond") && l.contains("msg_id >=") && l.contains("msg_id <="));
    assert!(bounded, "the scan of proc_state is not bounded by the batch's ids:\n{plan}");
}

#[test]
fn regression_the_identity_check_reads_its_index_not_the_table_on_stale_statistics() {
    let (mut pg, _s) = stale_backlog(50_000);
    let keys: Vec<String> = (50_001..=51_000).map(|m| format!("A|FLOP|STND|{m}")).collect();
    let plan = pg.explain_identity_holders(&keys).unwrap();
    println!("{plan}");
    // Before: a sequential scan of all 100 000 rows to find none of a round's 1000 keys.
    assert!(!plan.contains("Seq Scan"), "{plan}");
    assert!(plan.contains("uk_proc_identity"), "{plan}");
}

#[test]
fn regression_a_statement_prepared_once_is_still_planned_with_its_values() {
    let (mut pg, _s) = fresh();
    // A plan kept for any values takes an UNNEST of a thousand ids for ten rows and joins the
    // SENT update in a nested loop over the whole batch per row (measured: 286 ms a call).
    let generic = pg.explain_sent_for_any_values().unwrap();
    assert!(
        generic.contains("Nested Loop") && generic.contains("Join Filter"),
        "this server must show the hazard for the test to mean anything:\n{generic}"
    );
    // msgx's sessions prepare each statement once but plan every call with its values.
    assert_eq!(pg.setting("plan_cache_mode").unwrap(), "force_custom_plan");
}

#[test]
fn regression_a_query_priced_up_by_enable_sort_off_is_not_jit_compiled() {
    let (mut pg, s) = fresh();
    let mut admin = s.pg();
    admin
        .batch_execute(
            "INSERT INTO proc_state (msg_id, state, attempts, updated_at)
             SELECT g, 'PENDING', 0, now() FROM generate_series(1, 2000) g;
             SET enable_sort = off",
        )
        .unwrap();
    // The consistency check's newest SUCCEEDED rows: an outer sort the setting prices at ten
    // billion. On a session with the server's JIT defaults it is compiled on every call.
    let plan: Vec<String> = admin
        .query(
            "EXPLAIN (ANALYZE) SELECT msg_id FROM (SELECT msg_id FROM proc_state WHERE state = 'SUCCEEDED'
                 ORDER BY msg_id DESC LIMIT 50) s ORDER BY msg_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("JIT:"), "this server must show the hazard for the test to mean anything:\n{plan}");
    // msgx's own sessions keep sorting off (the FIFO head walks its index) but never compile.
    assert_eq!(pg.setting("enable_sort").unwrap(), "off");
    assert_eq!(pg.setting("jit").unwrap(), "off");
}

/// A fenced write transaction left open, as a stage's commit is while PostgreSQL works on it.
fn open_fenced_write(s: &Services, epoch: i64) -> postgres::Client {
    let mut c = s.pg();
    c.batch_execute(&format!("BEGIN; SELECT msgx_fence({epoch}); UPDATE ingress_watermark SET last_id = 42"))
        .unwrap();
    c
}

#[test]
fn regression_a_renewal_does_not_wait_for_writes_in_flight() {
    // The fence held the lease row FOR SHARE, which the renewal's UPDATE waits for: every
    // renewal stalled behind the longest write in flight, and every write behind it (p99
    // spikes once a second, issue #13).
    use msgx::ports::{Claim, Claimant, LeaseStore};
    use std::time::{Duration, Instant};
    let (mut pg, s) = fresh();
    let me = Claimant { id: "a".into(), host: "h".into(), pid: 1 };
    let Claim::Acquired { epoch, .. } = pg.claim(&me, Duration::from_secs(10)).unwrap() else { panic!() };
    let mut writer = open_fenced_write(&s, epoch);
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let url = s.cfg.pg_url.clone();
    std::thread::spawn(move || {
        let mut lease = Pg::connect(&url).unwrap();
        let me = Claimant { id: "a".into(), host: "h".into(), pid: 1 };
        tx.send(lease.renew(&me, epoch, Duration::from_secs(10), "{}").unwrap()).unwrap();
    });
    let renewed = rx.recv_timeout(Duration::from_secs(3));
    writer.batch_execute("COMMIT").unwrap();
    assert_eq!(renewed, Ok(true), "the renewal waited for the open write");
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_takeover_waits_for_the_old_holders_write_in_flight() {
    use msgx::ports::{Claim, Claimant, LeaseStore};
    use std::time::Duration;
    let (mut pg, s) = fresh();
    let old = Claimant { id: "old".into(), host: "h".into(), pid: 1 };
    let Claim::Acquired { epoch, .. } = pg.claim(&old, Duration::from_millis(200)).unwrap() else { panic!() };
    let mut writer = open_fenced_write(&s, epoch);
    std::thread::sleep(Duration::from_millis(300)); // the old lease has expired
    let (tx, rx) = std::sync::mpsc::channel();
    let url = s.cfg.pg_url.clone();
    std::thread::spawn(move || {
        let mut lease = Pg::connect(&url).unwrap();
        let new = Claimant { id: "new".into(), host: "h".into(), pid: 2 };
        tx.send(matches!(lease.claim(&new, Duration::from_secs(10)).unwrap(), Claim::Acquired { .. }))
            .unwrap();
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "the takeover did not wait for the write in flight"
    );
    writer.batch_execute("COMMIT").unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(true), "then it takes the lease");
    let mut stale = s.pg();
    let err = stale.batch_execute(&format!("SELECT msgx_fence({epoch})")).unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("MX001"), "the old epoch writes nothing after it");
}

/// Found by `a_frozen_active_that_wakes_after_the_takeover_writes_nothing_and_exits_1` run
/// alone: an instance frozen (SIGSTOP) inside a fenced write kept the lease row FOR KEY SHARE,
/// and the standby's claim waited for it for ever. The server now ends a session idle inside
/// a transaction after `IDLE_IN_TRANSACTION`, releasing the row.
#[test]
fn regression_a_holder_frozen_inside_a_write_does_not_block_the_takeover_for_ever() {
    use msgx::ports::{Claim, Claimant, LeaseStore};
    use std::time::{Duration, Instant};
    let (mut pg, s) = fresh();
    let old = Claimant { id: "old".into(), host: "h".into(), pid: 1 };
    let Claim::Acquired { epoch, .. } = pg.claim(&old, Duration::from_millis(200)).unwrap() else { panic!() };
    // msgx's own session, frozen between two statements of a fenced write.
    let mut frozen = Pg::connect(&s.cfg.pg_url).unwrap();
    frozen.client().unwrap().batch_execute(&format!("BEGIN; SELECT msgx_fence({epoch})")).unwrap();
    std::thread::sleep(Duration::from_millis(300)); // the old lease has expired
    let start = Instant::now();
    let mut lease = Pg::connect(&s.cfg.pg_url).unwrap();
    let new = Claimant { id: "new".into(), host: "h".into(), pid: 2 };
    let claim = lease.claim(&new, Duration::from_secs(10)).expect("the claim does not wait for ever");
    assert!(matches!(claim, Claim::Acquired { epoch: e, .. } if e == epoch + 1), "{claim:?}");
    let waited = start.elapsed();
    assert!(
        waited <= msgx::store::pg::IDLE_IN_TRANSACTION + Duration::from_secs(3),
        "the takeover waited {waited:?}"
    );
}

/// #21 item 12: PostgreSQL ending a session that idled inside a transaction (25P03, a timeout
/// msgx sets itself) is an outage, never a refusal charged to the round's messages.
#[test]
fn regression_an_idle_in_transaction_timeout_is_unavailable_not_refused() {
    let (_pg, s) = fresh();
    let mut c = s.pg();
    c.batch_execute("SET idle_in_transaction_session_timeout = '200ms'; BEGIN").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let e = c.simple_query("SELECT 1").expect_err("the server ended the session");
    assert_eq!(e.code().map(|c| c.code()), Some("25P03"), "the server's own answer: {e:?}");
    let classified = msgx::store::pg::classify::classify(&e);
    assert!(classified.is_unavailable(), "{classified:?} from {e:?}");
}
