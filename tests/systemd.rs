//! msgx under systemd (#42): the real binary started with `NOTIFY_SOCKET` and `WATCHDOG_USEC` as
//! a `Type=notify` unit would start it, and a datagram socket of the test's own in systemd's
//! place: what it hears, in order — start, standby, active, the watchdog's pings, the pings
//! stopping while a stage is stuck in a driver (own PostgreSQL frozen), again once it thaws, and
//! the stop.

use crate::common;

use std::os::unix::net::UnixDatagram;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use msgx::ports::{Claim, Claimant, LeaseStore};
use msgx::store::pg::Pg;

type Heard = Arc<Mutex<Vec<(Duration, String)>>>;

/// systemd's side of the socket: every datagram, with when it came.
fn listen(path: &std::path::Path, t0: Instant) -> Heard {
    let sock = UnixDatagram::bind(path).unwrap();
    let heard: Heard = Arc::default();
    let keep = heard.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = sock.recv(&mut buf) {
            keep.lock().unwrap().push((t0.elapsed(), String::from_utf8_lossy(&buf[..n]).into_owned()));
        }
    });
    heard
}

/// msgx started as a `Type=notify` unit with `WatchdogSec=2` starts it: when, what systemd's
/// side of the socket hears, the instance, and the socket's folder.
fn notified(s: &Services, name: &str, extra: &str) -> (Instant, Heard, Instance, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("msgx-systemd-{name}-{}", s.name));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify");
    let _ = std::fs::remove_file(&path);
    let t0 = Instant::now();
    let heard = listen(&path, t0);
    let env = [("NOTIFY_SOCKET", path.to_str().unwrap()), ("WATCHDOG_USEC", "2000000")];
    let a = Instance::run_with_env(s, name, extra, &env);
    (t0, heard, a, dir)
}

fn said(heard: &Heard, what: &str) -> Option<usize> {
    heard.lock().unwrap().iter().position(|(_, m)| m.contains(what))
}

/// The pings heard between two moments, and the longest silence between them.
fn pings(heard: &Heard, from: Duration, to: Duration) -> (usize, Duration) {
    let at: Vec<Duration> = heard
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, m)| *t >= from && *t <= to && m == "WATCHDOG=1")
        .map(|(t, _)| *t)
        .collect();
    let mut edges = vec![from];
    edges.extend(&at);
    edges.push(to);
    (at.len(), edges.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default())
}

#[test]
fn systemd_hears_start_standby_active_pings_a_stuck_stage_and_stop_in_order() {
    let pg = Private::start("pg");
    let s = Services::migrated_on("", Stores { pg: Some(pg.url()), ..Default::default() });
    // Another instance holds the lease: msgx starts as a standby.
    let other = Claimant { id: "test-other".into(), host: "other-vm".into(), pid: 4242 };
    let mut lease = Pg::connect(&s.cfg.pg_url).unwrap();
    let Claim::Acquired { epoch, .. } = lease.claim(&other, Duration::from_secs(600)).unwrap() else {
        panic!("the lease is free in a fresh database")
    };

    let (t0, heard, mut a, dir) = notified(&s, "notified", "[msgx.watchdog]\nstuck-after = \"2s\"");
    assert!(eventually(Duration::from_secs(30), || said(&heard, "READY=1").is_some()), "{}", a.log_text());
    let ready = said(&heard, "READY=1").unwrap();
    assert!(heard.lock().unwrap()[ready]
        .1
        .contains("STATUS=standby: the lease is held by host=other-vm pid=4242"));

    // The holder lets go: msgx takes over and says it is active.
    lease.release(&other, epoch).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || said(&heard, "STATUS=active epoch=").is_some()),
        "{}",
        a.log_text()
    );
    let active = said(&heard, "STATUS=active epoch=").unwrap();
    assert!(active > ready);
    std::thread::sleep(Duration::from_secs(5));
    let served = t0.elapsed();
    let (n, gap) = pings(&heard, served - Duration::from_secs(5), served);
    assert!(
        n >= 4 && gap < Duration::from_millis(1500),
        "every second while serving: {n} pings, gap {gap:?}"
    );

    // Own PostgreSQL frozen: the poll stage and the lease keeper hang in the driver (a frozen
    // server's kernel still acknowledges, so no socket timeout ends the call). The pings stop.
    pg.signal("-STOP");
    let frozen = t0.elapsed();
    assert!(a.wait_for_log("watchdog: stage ", Duration::from_secs(20)), "{}", a.log_text());
    std::thread::sleep(Duration::from_secs(6));
    let stuck_until = t0.elapsed();
    let (n, gap) = pings(&heard, frozen + Duration::from_secs(4), stuck_until);
    pg.signal("-CONT");
    assert_eq!(n, 0, "no ping while a stage is stuck (gap {gap:?})");
    assert!(
        said(&heard, "; STUCK: stage ").is_some_and(|i| i > active),
        "systemctl status says which stage is stuck"
    );
    assert!(a.wait_for_log("watchdog: every stage turns again", Duration::from_secs(60)), "{}", a.log_text());
    std::thread::sleep(Duration::from_secs(3));
    let (n, _) = pings(&heard, t0.elapsed() - Duration::from_secs(3), t0.elapsed());
    assert!(n >= 2, "the pings come back: {n}");

    a.signal("-TERM");
    assert_eq!(a.wait(Duration::from_secs(60)), Some(0), "{}", a.log_text());
    let stopping = said(&heard, "STOPPING=1").expect("STOPPING=1");
    assert!(stopping > active);
    let all = heard.lock().unwrap().clone();
    println!("systemd heard ({} datagrams):", all.len());
    // A run of pings a second apart is shown by its first and last, so the order and the
    // silences read at a glance.
    let mut run: Option<(Duration, Duration)> = None;
    let end_run = |run: &mut Option<(Duration, Duration)>| {
        if let Some((first, last)) = run.take() {
            if last > first {
                println!(
                    "  {:>6.1}s WATCHDOG=1 (the last of a run from {:.1}s)",
                    last.as_secs_f64(),
                    first.as_secs_f64()
                );
            }
        }
    };
    for (t, m) in &all {
        if m == "WATCHDOG=1" {
            match run {
                Some((first, last)) if *t - last < Duration::from_millis(1500) => run = Some((first, *t)),
                _ => {
                    end_run(&mut run);
                    println!("  {:>6.1}s WATCHDOG=1", t.as_secs_f64());
                    run = Some((*t, *t));
                }
            }
            continue;
        }
        end_run(&mut run);
        println!("  {:>6.1}s {}", t.as_secs_f64(), m.replace('\n', " | "));
    }
    println!(
        "  PostgreSQL frozen at {:.1}s, thawed at {:.1}s",
        frozen.as_secs_f64(),
        stuck_until.as_secs_f64()
    );
    let first = &all[0].1;
    assert!(first.starts_with("STATUS=starting"), "the first word is the start: {first}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// #54: own PostgreSQL away when msgx starts under `Type=notify`. Before, msgx exited 4 (or,
/// with another store away, sent no READY) and systemd started it again and again, a new epoch
/// each time a claim got through. Now it waits the outage out as SPEC §4.9 asks: READY at once
/// with a status that says what it waits for, `/ready` `store-away`, the watchdog's pings all
/// along; when PostgreSQL answers, the same process takes the lease — one epoch — and serves.
#[test]
fn a_store_away_at_boot_is_waited_out_with_ready_and_a_status_one_process_one_epoch() {
    let pg = Private::start("pg");
    let s = Services::migrated_on("", Stores { pg: Some(pg.url()), ..Default::default() });
    pg.stop();
    let (t0, heard, mut a, dir) = notified(&s, "boot", "");
    assert!(eventually(Duration::from_secs(20), || said(&heard, "READY=1").is_some()), "{}", a.log_text());
    let ready = said(&heard, "READY=1").unwrap();
    let status = heard.lock().unwrap()[ready].1.clone();
    assert!(status.contains("waiting for own PostgreSQL at start"), "{status}");
    std::thread::sleep(Duration::from_secs(12));
    let away = t0.elapsed();
    let (n, gap) = pings(&heard, Duration::from_secs(3), away);
    assert!(n >= 5 && gap < Duration::from_millis(1500), "pings while waiting: {n}, gap {gap:?}");
    assert!(a.alive(), "still the first process: {}", a.log_text());
    pg.restart();
    assert!(
        eventually(Duration::from_secs(60), || said(&heard, "STATUS=active epoch=").is_some()),
        "{}",
        a.log_text()
    );
    let epoch: i64 = s.pg().query_one("SELECT epoch FROM msgx_lease", &[]).unwrap().get(0);
    assert_eq!(epoch, 1, "one claim: {}", a.log_text());
    assert!(a.alive(), "no restart");
    let pid = a.pid();
    a.signal("-TERM");
    assert_eq!(a.wait(Duration::from_secs(60)), Some(0), "{}", a.log_text());
    println!(
        "msgx (pid {pid}) started with its PostgreSQL away for {:.0}s; systemd heard:",
        away.as_secs_f64()
    );
    for (t, m) in heard.lock().unwrap().iter().filter(|(_, m)| m != "WATCHDOG=1") {
        println!("  {:>6.1}s {}", t.as_secs_f64(), m.replace('\n', " | "));
    }
    println!("  (and WATCHDOG=1 every second throughout: {n} while waiting)");
    let _ = std::fs::remove_dir_all(&dir);
}

/// #68: under the hardened unit (`ProcSubset=pid`: a procfs of the processes only) msgx read
/// its host name from /proc/sys/kernel/hostname, found nothing, and every instance was
/// `unknown-host` — the lease and `/ready` could no longer tell the hosts apart. Run here under
/// the same procfs (a mount namespace of its own, `proc -o subset=pid`), msgx holds the lease
/// under this machine's name.
#[test]
fn regression_the_host_name_is_known_under_the_units_proc_subset() {
    let s = Services::migrated("");
    let dir = std::env::temp_dir().join(format!("msgx-instances-{}", s.name));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("subset.toml");
    std::fs::write(&config, &s.toml).unwrap();
    let log = dir.join("subset.log");
    let out = std::fs::File::create(&log).unwrap();
    let bin = env!("CARGO_BIN_EXE_msgx");
    // The unit's view of /proc, and proof that it hides what msgx used to read.
    let script = format!(
        "mount -t proc -o subset=pid proc /proc && test ! -e /proc/sys/kernel/hostname && exec {bin} --config {} run",
        config.display()
    );
    let mut child = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("MSGX_PG_URL", &s.cfg.pg_url)
        .env("MSGX_MYSQL_URL", &s.cfg.mysql_url)
        .env("MSGX_REDIS_URL", &s.cfg.redis_url)
        .env("MSGX_KAFKA_BROKERS", &s.cfg.kafka_brokers)
        .env("RUST_LOG", "info")
        .env_remove("HOSTNAME")
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("unshare");
    let acquired = eventually(Duration::from_secs(30), || {
        std::fs::read_to_string(&log).unwrap_or_default().contains("lease acquired epoch=1")
    });
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    assert!(acquired, "msgx under a pid-only procfs did not take the lease:\n{text}");
    let uname = std::process::Command::new("uname").arg("-n").output().unwrap();
    let host = String::from_utf8_lossy(&uname.stdout).trim().to_string();
    let mut pg = s.pg();
    let held: String = pg.query_one("SELECT host FROM msgx_lease", &[]).unwrap().get(0);
    println!("host under ProcSubset=pid: {held:?} (uname -n: {host:?})");
    assert_eq!(held, host, "the lease names this machine, not unknown-host");
}
