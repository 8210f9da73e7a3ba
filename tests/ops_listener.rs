//! The operations listener cannot be held (#54): two idle connections held both workers of the
//! pool before, and `/live` answered 503 for as long as they stayed. Here 200 idle, 20 slow (a
//! byte a second) and half-open connections are held while `/live`, `/ready` and `/metrics`
//! are scraped; then more connections than the bound, and the newest is still answered; a
//! `Host` that is a foreign name is refused. Real sockets on loopback; no store is needed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use msgx::clock::{Clock, SystemClock};
use msgx::ops::http::{Access, OpsServer, MAX_CONNECTIONS};
use msgx::ops::metrics::Metrics;
use msgx::ops::Ops;
use msgx::stats::Stats;

struct Running {
    addr: SocketAddr,
    stop: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

fn start(access: Access) -> Running {
    let server = OpsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.local_addr().unwrap();
    let ops = Arc::new(Ops::new(Arc::new(Stats::default())));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let metrics = Arc::new(Metrics::new(ops.clone(), clock));
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    let thread = std::thread::spawn(move || server.serve(ops, metrics, None, access, rx).unwrap());
    Running { addr, stop: Some(tx), thread: Some(thread) }
}

/// `GET path` with `host`: the status, the body, and how long the answer took.
fn get(addr: SocketAddr, path: &str, host: &str) -> (u16, String, Duration) {
    let start = Instant::now();
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    let status = out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default();
    (status, body, start.elapsed())
}

/// Whether the server closed `c` (end of file, or a reset), waiting two seconds at most.
fn closed_by_the_server(c: &mut TcpStream) -> bool {
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut b = [0u8; 64];
    match c.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

#[test]
fn idle_slow_and_half_open_connections_never_keep_live_ready_or_metrics_from_answering() {
    let r = start(Access::default());
    let host = r.addr.to_string();
    let idle: Vec<TcpStream> = (0..200).map(|_| TcpStream::connect(r.addr).unwrap()).collect();
    let mut half: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(r.addr).unwrap()).collect();
    for c in &mut half {
        c.write_all(b"GET /li").unwrap();
    }
    // Twenty clients sending their request a byte a second, for as long as the scrapes go on.
    let slow_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow: Vec<_> = (0..20)
        .map(|_| {
            let (addr, stop) = (r.addr, slow_stop.clone());
            std::thread::spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) || c.write_all(&[*b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut longest = Duration::ZERO;
    for round in 0..10 {
        for (path, want) in [("/live", 200), ("/ready", 503), ("/metrics", 200)] {
            let (status, body, took) = get(r.addr, path, &host);
            assert_eq!(status, want, "round {round}: {path} answered {status} {body:?}");
            longest = longest.max(took);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    slow_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    slow.into_iter().for_each(|t| t.join().unwrap());
    println!(
        "30 scrapes with 200 idle, 20 slow and 10 half-open connections held: the longest answer took {longest:?}"
    );
    // An answer from memory, with every other connection waiting: far under the 5 s a held
    // worker cost before.
    assert!(longest < Duration::from_secs(1), "the longest scrape took {longest:?}");
    drop(idle);
}

#[test]
fn past_the_bound_the_idlest_connection_is_dropped_never_the_new_one() {
    let r = start(Access::default());
    let mut first = TcpStream::connect(r.addr).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let rest: Vec<TcpStream> =
        (0..MAX_CONNECTIONS + 20).map(|_| TcpStream::connect(r.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let (status, body, took) = get(r.addr, "/live", "localhost");
    assert_eq!((status, body.as_str()), (200, "live\n"), "the newest connection is answered");
    println!("/live with {} connections held: {took:?}", rest.len() + 1);
    assert!(closed_by_the_server(&mut first), "the connection idle longest made room");
    drop(rest);
}

#[test]
fn ready_says_a_code_and_a_short_text_and_a_foreign_host_name_is_refused() {
    let r = start(Access { names: vec!["msgx.ops.example".into()], ..Access::default() });
    let (status, body, _) = get(r.addr, "/ready", "localhost");
    assert_eq!((status, body.as_str()), (503, "not ready: starting (the lease is not claimed yet)\n"));
    // DNS rebinding: a page on another site whose name now resolves to this address.
    let (status, body, _) = get(r.addr, "/metrics", "evil.example:9722");
    assert_eq!(status, 421, "{body}");
    for host in [r.addr.to_string(), "localhost:9722".into(), "[::1]:9722".into(), "MSGX.ops.example".into()]
    {
        assert_eq!(get(r.addr, "/live", &host).0, 200, "Host {host}");
    }
}
