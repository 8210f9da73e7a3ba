//! Ingress latency on the real stores: time from a mailbox row's commit to its PENDING row in
//! own PostgreSQL (`enqueued_at`), with the daemon running at two poll intervals, one run.
//! Run with the services up: `cargo bench --bench ingress`.

#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, SystemTime};

use mysql::prelude::Queryable;

use msgx::fixtures;

const N: u64 = 200;

fn run(interval: &str) -> (Vec<f64>, f64) {
    let s = common::Services::migrated(&format!("poll-interval = \"{interval}\"\n"));
    let (stop, daemon) = common::start_daemon(&s.cfg);
    let mut my = s.mysql();
    let mut inserted = Vec::new();
    for i in 1..=N {
        my.exec_drop(
            "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')",
            (fixtures::flop_stnd(i, "L", &format!("S{i}")),),
        )
        .unwrap();
        inserted.push((my.last_insert_id() as i64, SystemTime::now()));
        std::thread::sleep(Duration::from_millis(7)); // ~140 messages/s, spread over the poll phase
    }
    let mut pg = s.pg();
    assert!(common::eventually(Duration::from_secs(60), || common::count(
        &mut pg,
        "SELECT count(*) FROM proc_state"
    ) == N as i64));
    drop(stop);
    daemon.join().unwrap().unwrap();
    let mut ms: Vec<f64> = inserted
        .iter()
        .map(|(id, at)| {
            let enq: SystemTime =
                pg.query_one("SELECT enqueued_at FROM proc_state WHERE msg_id = $1", &[id]).unwrap().get(0);
            enq.duration_since(*at).unwrap_or_default().as_secs_f64() * 1000.0
        })
        .collect();
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let polls = common::count(&mut pg, "SELECT count(DISTINCT enqueued_at) FROM proc_state") as f64;
    (ms, N as f64 / polls)
}

fn main() {
    let _ = env_logger::Builder::new().filter_level(log::LevelFilter::Warn).try_init();
    println!(
        "ingress latency, mailbox commit -> PENDING, {N} rows at ~140/s, real MariaDB + PostgreSQL, one run:"
    );
    for interval in ["50ms", "1s"] {
        let (ms, per_poll) = run(interval);
        let p = |q: f64| ms[((ms.len() - 1) as f64 * q) as usize];
        println!(
            "  poll-interval {interval:>5}: p50 {:7.1} ms  p95 {:7.1} ms  max {:7.1} ms  rows/poll {per_poll:5.1}",
            p(0.5),
            p(0.95),
            ms[ms.len() - 1]
        );
    }
}
