//! The operations endpoint of the real daemon (#22): `/metrics` scraped while messages flow and
//! checked by an independent parser (`promtool check metrics`, from the Debian `prometheus`
//! package), its values following what happens; `/ready` through a Redis outage; a standby.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use msgx::fixtures;

fn promtool(body: &str) -> (bool, String) {
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; tests/support/services.sh installs it)");
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[test]
fn the_metrics_follow_the_pipeline_and_ready_follows_a_redis_outage() {
    let redis = Private::start("redis");
    let s = Services::migrated_on("", Stores { redis: Some(redis.url()), ..Default::default() });
    let a = Instance::run(&s, "active", "");
    let addr = endpoint(&a);
    assert!(a.wait_for_log("lease acquired", Duration::from_secs(30)));
    let raws: Vec<String> =
        (1..=20).map(|i| fixtures::flop_stnd(i, &format!("M{}", i % 4), &format!("S{i}"))).collect();
    s.insert_inbound(&raws);
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(60), || count(
        &mut pg,
        "SELECT count(*) FROM msg_event WHERE state = 'SENT'"
    ) == 20));
    // A counter moves just after the commit it counts: a scrape between sees the database
    // ahead (found once in CI: 20 SENT rows, `msgx_events_sent_total` 0).
    let sent = r#"msgx_events_sent_total{target="KAFKA:msg"}"#;
    let mut body = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            let (status, b) = http_get(&addr, "/metrics");
            body = b;
            // The queue's gauges are read with the stats, a moment after the counters move
            // (#66: a loaded run scraped between the two).
            status == 200
                && sample(&body, sent) == Some(20.0)
                && sample(&body, r#"msgx_queue_messages{state="PENDING"}"#) == Some(0.0)
        }),
        "{body}"
    );
    let (ok, verdict) = promtool(&body);
    assert!(ok, "promtool check metrics: {verdict}\n{body}");
    println!(
        "promtool check metrics: {}",
        if verdict.trim().is_empty() { "no problems" } else { verdict.trim() }
    );
    assert_eq!(sample(&body, r#"msgx_messages_total{outcome="succeeded"}"#), Some(20.0), "{body}");
    assert_eq!(sample(&body, r#"msgx_events_sent_total{target="KAFKA:msg"}"#), Some(20.0), "{body}");
    assert_eq!(sample(&body, "msgx_processing_latency_seconds_count"), Some(20.0), "{body}");
    assert_eq!(sample(&body, "msgx_delivery_latency_seconds_count"), Some(20.0), "{body}");
    assert_eq!(sample(&body, r#"msgx_store_up{store="redis"}"#), Some(1.0));
    assert_eq!(sample(&body, "msgx_lease_held"), Some(1.0));
    assert_eq!(sample(&body, "msgx_lease_epoch"), Some(1.0));
    assert_eq!(sample(&body, r#"msgx_queue_messages{state="PENDING"}"#), Some(0.0));
    assert!(!body.contains("msg_id=") && !body.contains("flid"), "no message or flight ids as labels");
    assert_eq!(http_get(&addr, "/ready"), (200, "ready\n".to_string()));
    assert_eq!(http_get(&addr, "/live").0, 200);
    println!(
        "scrape after 20 messages (trimmed):\n{}",
        body.lines().filter(|l| !l.starts_with('#')).take(40).collect::<Vec<_>>().join("\n")
    );

    // Redis away while a message waits: the store goes down, /ready says why, and back.
    redis.stop();
    s.insert_inbound(&[fixtures::flop_stnd(21, "M1", "S21")]);
    let down = eventually(Duration::from_secs(30), || http_get(&addr, "/ready").0 == 503);
    let (_, why) = http_get(&addr, "/ready");
    let (_, body) = http_get(&addr, "/metrics");
    println!("during the outage: /ready {why:?}, {:?}", sample(&body, r#"msgx_store_up{store="redis"}"#));
    assert!(down && why.contains("redis"), "{why}");
    assert_eq!(sample(&body, r#"msgx_store_up{store="redis"}"#), Some(0.0), "{body}");
    assert_eq!(sample(&body, r#"msgx_stage_stalled{stage="process",store="redis"}"#), Some(1.0), "{body}");
    assert_eq!(http_get(&addr, "/live").0, 200, "live all the same");
    redis.restart();
    assert!(eventually(Duration::from_secs(30), || http_get(&addr, "/ready").0 == 200), "ready again");
    let (_, body) = http_get(&addr, "/metrics");
    assert_eq!(sample(&body, r#"msgx_store_up{store="redis"}"#), Some(1.0));
    assert!(sample(&body, "msgx_outage_seconds_total").unwrap_or(0.0) > 0.0, "{body}");

    // A standby is live, not ready, and says who holds the lease.
    let b = Instance::run(&s, "standby", "");
    let standby = endpoint(&b);
    assert!(b.wait_for_log("standby: lease held by", Duration::from_secs(30)));
    assert_eq!(http_get(&standby, "/live").0, 200);
    let (status, why) = http_get(&standby, "/ready");
    println!("standby /ready: {status} {why:?}");
    assert_eq!(status, 503);
    // A reason code and a short text: who holds the lease is behind the token (#54).
    assert_eq!(why, "not ready: standby (another instance holds the lease)\n");
    let (_, body) = http_get(&standby, "/metrics");
    assert_eq!(sample(&body, "msgx_lease_held"), Some(0.0));
    assert_eq!(http_get(&standby, "/nope").0, 404);
    let mut c = TcpStream::connect(&standby).unwrap();
    write!(c, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 405 "), "{out}");
}

/// #42: `/live` touches no store and no request waits for one. With own PostgreSQL frozen (every
/// process stopped: connections accepted, nothing answered), `/live` answers 200 within a second
/// and `/metrics` still answers, with the last gauges read, their age, and `msgx_gauges_up` 0.
#[test]
fn live_answers_within_a_second_while_postgres_is_frozen() {
    let pg = Private::start("pg");
    let s = Services::migrated_on("", Stores { pg: Some(pg.url()), ..Default::default() });
    let a = Instance::run(&s, "active", "");
    let addr = endpoint(&a);
    assert!(a.wait_for_log("lease acquired", Duration::from_secs(30)), "{}", a.log_text());
    assert!(
        eventually(Duration::from_secs(20), || sample(&http_get(&addr, "/metrics").1, "msgx_gauges_up")
            == Some(1.0)),
        "the gauges are read"
    );
    pg.signal("-STOP");
    struct Thaw<'a>(&'a Private);
    impl Drop for Thaw<'_> {
        fn drop(&mut self) {
            self.0.signal("-CONT");
        }
    }
    let _thaw = Thaw(&pg);
    let frozen = std::time::Instant::now();
    let mut slowest = Duration::ZERO;
    let mut up_fell = None;
    while frozen.elapsed() < Duration::from_secs(25) {
        // Two scrapes under way: were they to wait for PostgreSQL, they would hold both workers
        // and /live would be answered 503 busy.
        let scrapes: Vec<_> = (0..2)
            .map(|_| {
                let addr = addr.clone();
                std::thread::spawn(move || http_get(&addr, "/metrics"))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        let asked = std::time::Instant::now();
        let (status, body) = http_get(&addr, "/live");
        slowest = slowest.max(asked.elapsed());
        let mut scraped = scrapes.into_iter().map(|t| t.join().unwrap());
        let (m1, m2) = (scraped.next().unwrap(), scraped.next().unwrap());
        assert_eq!((status, body.as_str()), (200, "live\n"), "at {:?}", frozen.elapsed());
        assert_eq!((m1.0, m2.0), (200, 200), "/metrics answers while PostgreSQL is frozen");
        if up_fell.is_none() && sample(&m2.1, "msgx_gauges_up") == Some(0.0) {
            assert!(sample(&m2.1, "msgx_gauges_age_seconds").is_some_and(|a| a >= 10.0), "{}", m2.1);
            up_fell = Some(frozen.elapsed());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    println!("PostgreSQL frozen 25 s: slowest /live {slowest:?}; msgx_gauges_up 0 after {up_fell:?}");
    assert!(slowest < Duration::from_secs(1), "slowest /live {slowest:?}");
    assert!(up_fell.is_some(), "msgx_gauges_up fell to 0 while PostgreSQL was frozen");
    drop(_thaw);
    assert!(
        eventually(Duration::from_secs(60), || sample(&http_get(&addr, "/metrics").1, "msgx_gauges_up")
            == Some(1.0)),
        "the gauges are read again once PostgreSQL thaws"
    );
}
