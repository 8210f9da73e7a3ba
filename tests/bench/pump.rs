//! Pump throughput on the real stores, one round size against another, in one run:
//! `process-batch = 1` (one transaction per message) versus the default 50 (one per round).
//! Run with the services up: `cargo bench --bench pump` (see tests/run.sh for the services).

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Instant;

use msgx::fixtures;
use msgx::ingress;
use msgx::pump::Round;
use msgx::stats::Stats;

const N: u64 = 2000;

fn run(batch: usize) -> f64 {
    let s = common::Services::migrated(&format!("process-batch = {batch}\npoll-batch = 1000\n"));
    let raws: Vec<String> =
        (1..=N).map(|i| fixtures::flop_stnd(i, &format!("F{}", i % 100), &format!("S{i}"))).collect();
    s.insert_inbound(&raws);
    let stats = Arc::new(Stats::default());
    let mut poller = s.poller(&stats);
    while poller.round(common::now()).unwrap() != ingress::Round::Idle {}
    let mut pump = s.pump(&stats);
    let start = Instant::now();
    loop {
        match pump.round(common::now()).unwrap() {
            Round::Idle => break,
            Round::Worked(_) => {}
            Round::Wait(_) => panic!("nothing should fail in the benchmark"),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(stats.succeeded.load(std::sync::atomic::Ordering::Relaxed), N);
    N as f64 / secs
}

fn main() {
    // Quiet: the benchmark's own lines only.
    let _ = env_logger::Builder::new().filter_level(log::LevelFilter::Warn).try_init();
    let one = run(1);
    let fifty = run(50);
    println!("pump, {N} FLOP messages, real PostgreSQL + MariaDB + Redis, one run:");
    println!("  process-batch = 1   {one:8.0} messages/s");
    println!("  process-batch = 50  {fifty:8.0} messages/s");
    println!("  ratio               {:8.2}x", fifty / one);
}
