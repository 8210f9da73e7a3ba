//! Runs for weeks (#42): msgx (the real binary, every stage and the sentinel at their defaults)
//! fed valid traffic at a steady rate for a long time, its resident memory and CPU — and each
//! store's CPU — sampled every `--sample` seconds. Printed: one row per sample (RSS, msgx's CPU
//! per second, the stores', messages done, the backlog), then whether the RSS flattened (its
//! spread over the last third of the run, and its slope there) and the cost per second and per
//! message at that rate.
//!
//!     eval "$(tests/support/services.sh start)"
//!     cargo bench --bench soak                              # 10 minutes at 20 msg/s
//!     cargo bench --bench soak -- --minutes 120 --rate 150  # two hours
//!
//! Nothing is lost: at the end every message fed is SUCCEEDED and no event is pending.

#[path = "../common/mod.rs"]
mod common;
#[path = "traffic.rs"]
mod traffic;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

use common::*;
use traffic::{message, status_kib, Cpu};

/// The binary's allocator, as in the e2e bench (the feeder runs in this process).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

struct Args {
    minutes: f64,
    rate: u64,
    sample: u64,
}

fn args() -> Args {
    let mut a = Args { minutes: 10.0, rate: 20, sample: 30 };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().expect("a value");
        match x.as_str() {
            "--minutes" => a.minutes = val().parse().unwrap(),
            "--rate" => a.rate = val().parse().unwrap(),
            "--sample" => a.sample = val().parse().unwrap(),
            _ => {} // cargo bench passes --bench
        }
    }
    a
}

/// Feeds `rate` messages a second, in ten inserts a second, until `stop`; `fed` counts them.
fn feed(mut my: mysql::Conn, rate: u64, stop: Arc<AtomicBool>, fed: Arc<AtomicU64>) {
    let start = Instant::now();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        if due > i {
            let chunk: Vec<String> = (i + 1..=due).map(message).collect();
            let values = vec!["(?, UTC_TIMESTAMP(), 'VALID')"; chunk.len()].join(",");
            my.exec_drop(
                format!("INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES {values}"),
                chunk,
            )
            .unwrap();
            i = due;
            fed.store(i, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// (SUCCEEDED, unfinished) messages in own PostgreSQL.
fn progress(pg: &mut postgres::Client) -> (i64, i64) {
    let r = pg
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'SUCCEEDED'), count(*) FILTER (WHERE state IN ('PENDING', 'FAILED')) FROM proc_state",
            &[],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

struct Sample {
    at: f64,
    rss_mib: f64,
}

fn main() {
    let a = args();
    let s = Services::migrated("");
    let mut msgx = Instance::run(&s, "soak", "");
    assert!(msgx.wait_for_log("started epoch", Duration::from_secs(60)), "{}", msgx.log_text());
    let pid = msgx.pid();
    let (stop, fed) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let feeder = {
        let (my, stop, fed) = (s.mysql(), stop.clone(), fed.clone());
        std::thread::spawn(move || feed(my, a.rate, stop, fed))
    };
    let mut pg = s.pg();
    let run = Duration::from_secs_f64(a.minutes * 60.0);
    let every = Duration::from_secs(a.sample);
    println!(
        "soak: {} min at {} msg/s, msgx pid {pid}, a sample every {} s (defaults for every stage)",
        a.minutes, a.rate, a.sample
    );
    println!("   time   RSS MiB   msgx ms/s   postgres  mariadb  redis  broker   done     backlog");
    let start = Instant::now();
    let (mut cpu_before, mut samples) = (Cpu::now(pid), Vec::new());
    let cpu_start = cpu_before.clone();
    let mut next = every;
    while start.elapsed() < run {
        std::thread::sleep(next.saturating_sub(start.elapsed()));
        next += every;
        let cpu = Cpu::now(pid);
        let d = cpu.since(&cpu_before);
        cpu_before = cpu;
        let per_s = |g: &str| d.0.get(g).copied().unwrap_or(0.0) / every.as_secs_f64();
        let (done, backlog) = progress(&mut pg);
        let at = start.elapsed().as_secs_f64();
        let rss_mib = status_kib(pid, "VmRSS") as f64 / 1024.0;
        println!(
            "  {:5.1}m  {rss_mib:7.1}   {:9.1}   {:8.1} {:8.1} {:6.1} {:7.1}  {done:8} {backlog:8}",
            at / 60.0,
            per_s("program"),
            per_s("postgres"),
            per_s("mariadb"),
            per_s("redis"),
            per_s("broker"),
        );
        samples.push(Sample { at, rss_mib });
    }
    stop.store(true, Ordering::Relaxed);
    feeder.join().unwrap();
    let total = Cpu::now(pid).since(&cpu_start);
    let secs = start.elapsed().as_secs_f64();
    let n = fed.load(Ordering::Relaxed);
    // Drained: every message fed is SUCCEEDED (the FLOPs all change or repeat a flight).
    let drained = eventually(Duration::from_secs(300), || progress(&mut pg) == (n as i64, 0));
    msgx.signal("-TERM");
    assert_eq!(msgx.wait(Duration::from_secs(90)), Some(0), "{}", msgx.log_text());

    summary(&samples, &total, secs, n);
    assert!(drained, "not every message fed ({n}) ended SUCCEEDED: {:?}", progress(&mut pg));
}

/// Whether the RSS flattened, and the cost at this rate.
fn summary(samples: &[Sample], total: &Cpu, secs: f64, n: u64) {
    let Some(first) = samples.first() else { return };
    let last = samples.last().unwrap();
    let tail: Vec<&Sample> = samples.iter().filter(|s| s.at >= last.at * 2.0 / 3.0).collect();
    let (lo, hi) = tail.iter().fold((f64::MAX, 0.0f64), |(lo, hi), s| (lo.min(s.rss_mib), hi.max(s.rss_mib)));
    // Least squares over the last third: MiB per minute.
    let k = tail.len() as f64;
    let (mx, my) =
        (tail.iter().map(|s| s.at).sum::<f64>() / k, tail.iter().map(|s| s.rss_mib).sum::<f64>() / k);
    let sxx: f64 = tail.iter().map(|s| (s.at - mx).powi(2)).sum();
    let sxy: f64 = tail.iter().map(|s| (s.at - mx) * (s.rss_mib - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx * 60.0 } else { 0.0 };
    println!(
        "RSS: {:.1} MiB at {:.1} min, {:.1} MiB at the end; over the last third ({} samples) {lo:.1}-{hi:.1} MiB (spread {:.1}), slope {slope:+.3} MiB/min",
        first.rss_mib,
        first.at / 60.0,
        last.rss_mib,
        tail.len(),
        hi - lo
    );
    let per_s: Vec<String> = total.0.iter().map(|(g, v)| format!("{g} {:.1}", v / secs)).collect();
    println!("CPU ms per second over {:.0} s: {}", secs, per_s.join(", "));
    println!("CPU per 1000 messages ({n} fed): {}", total.per_thousand(n));
}
