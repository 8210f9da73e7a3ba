//! The read-only console (#40) of the real daemon, in a real browser: headless Chromium (the
//! Debian package; tests/support/services.sh installs it) loads each page as an operator would
//! and the test reads what it shows — the flight's values and the MSG_IDs that set them, the
//! offset a Kafka consumer reads the event at, an upstream `<script>` shown as text, the
//! dead letters. A screenshot of the flight page is kept in `target/test-artefacts/`. The JSON
//! pages answer what the CLI prints; with `metrics.token` every page but `/live` and `/ready`
//! wants it.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use msgx::fixtures;

/// `GET path` with optional headers: (status, head, body).
fn get(addr: &str, path: &str, headers: &str) -> (u16, String, String) {
    let mut c = TcpStream::connect(addr).expect("connect to the operations endpoint");
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    let status = out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (status, head.to_string(), body.to_string())
}

/// Headless Chromium with `args` on `url`, bounded: its standard output.
fn chromium(args: &[&str], url: &str) -> String {
    let profile = tempdir("chromium");
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium (Debian package chromium; tests/support/services.sh installs it)");
    let mut out = String::new();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("chromium did not finish with {url} within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&profile);
    reader.join().unwrap()
}

fn tempdir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("msgx-{what}-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The page as the browser built it (its DOM, serialised).
fn dom(addr: &str, path: &str) -> String {
    let html = chromium(&["--dump-dom"], &format!("http://{addr}{path}"));
    assert!(html.contains("</html>"), "chromium showed no page for {path}: {html}");
    html
}

fn cli_json(s: &Services, args: &[&str]) -> serde_json::Value {
    let o = operator_command(s, &[args, &["--json"]].concat());
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {o:?}"))
}

#[test]
fn the_console_shows_a_flight_its_messages_and_their_offsets_in_a_browser() {
    let s = Services::migrated("");
    let remark = fixtures::other(
        3,
        "FLOP",
        "REMC",
        "<FLOP><FLID>9001</FLID><FFID>MX-9001-D-01JAN260900-D</FFID>\
         <REMC>&lt;script&gt;alert('x')&lt;/script&gt;</REMC></FLOP>",
    );
    let ids = s.insert_inbound(&[
        fixtures::flop_stnd(1, "9001", "A1"),
        fixtures::flop_stnd(2, "9001", "B12"),
        remark,
        "<MSG><META><NOT-SIS".to_string(),
    ]);
    let a = Instance::run(&s, "console", "");
    let addr = endpoint(&a);
    settled(&s, &a, &[(SENT, 3), ("SELECT count(*) FROM proc_state WHERE state = 'DEAD'", 1)]);
    let records = consume_event_keys(&s.cfg.kafka_brokers, s.topic(), 3, Duration::from_secs(30));
    let read =
        |m: i64| records.iter().find(|r| r.header("msg_id") == Some(&m.to_string()[..])).expect("a record");
    let stand = read(ids[1]);

    // The flight: each value, the MSG_ID that set it (a link), the offset its event lies at.
    let page = dom(&addr, "/flight/9001");
    println!("/flight/9001 as Chromium built it:\n{page}");
    assert!(page.contains("<td class=\"mono\">B12</td>"), "{page}");
    assert!(page.contains(&format!("<a href=\"/trace/{0}\">{0}</a>", ids[1])), "the stand's setter: {page}");
    assert!(page.contains(&format!("partition {} offset {}", stand.partition, stand.offset)), "{page}");
    assert!(page.contains("STND: A1 -&gt; B12"), "{page}");
    // An upstream <script> is text on the page, never an element of it.
    assert!(page.contains("&lt;script&gt;alert('x')&lt;/script&gt;"), "{page}");
    assert!(!page.contains("<script"), "{page}");

    // The message: its state, its event_key and where it landed.
    let page = dom(&addr, &format!("/trace/{}", ids[1]));
    assert!(page.contains("SUCCEEDED"), "{page}");
    assert!(page.contains(stand.header("event_key").unwrap()), "{page}");
    assert!(page.contains(&format!("partition {} offset {}", stand.partition, stand.offset)), "{page}");
    assert!(page.contains("<a href=\"/flight/9001\">9001</a>"), "{page}");

    // The dead letters, and the overview.
    let page = dom(&addr, "/dead");
    assert!(
        page.contains(&format!("<a href=\"/trace/{0}\">{0}</a>", ids[3])) && page.contains("MALFORMED"),
        "{page}"
    );
    let page = dom(&addr, "/");
    assert!(page.contains("active epoch=") && page.contains("lag (oldest unfinished"), "{page}");

    // A screenshot, kept.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artefacts");
    std::fs::create_dir_all(&dir).unwrap();
    let shot = dir.join("console-flight.png");
    let _ = std::fs::remove_file(&shot);
    chromium(
        &[&format!("--screenshot={}", shot.display()), "--window-size=1280,1000"],
        &format!("http://{addr}/flight/9001"),
    );
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a real screenshot: {} bytes", png.len());
    println!("screenshot: {}", shot.display());

    // The JSON pages answer what the CLI prints.
    for (path, args) in [
        ("/api/flight/9001".to_string(), vec!["flight".to_string(), "9001".into()]),
        (format!("/api/trace/{}", ids[1]), vec!["trace".to_string(), ids[1].to_string()]),
    ] {
        let (status, _, body) = get(&addr, &path, "");
        assert_eq!(status, 200, "{path}: {body}");
        let api: serde_json::Value = serde_json::from_str(&body).unwrap();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(api, cli_json(&s, &args), "{path} is what msgx {args:?} --json prints");
    }
    let (status, _, _) = get(&addr, "/api/trace/999999", "");
    assert_eq!(status, 404);
    let (status, _, _) = get(&addr, "/trace/x", "");
    assert_eq!(status, 400);

    // No connection string on any page.
    for path in ["/", "/dead", "/flight/9001", &format!("/trace/{}", ids[1])] {
        let (_, head, body) = get(&addr, path, "");
        for secret in ["postgres://", "mysql://", "redis://", s.cfg.pg_url.as_str(), s.cfg.mysql_url.as_str()]
        {
            assert!(!body.contains(secret), "{path} shows {secret}");
        }
        assert!(head.contains("Content-Security-Policy: default-src 'none'"), "{path}: {head}");
    }
}

#[test]
fn with_a_token_every_page_but_live_and_ready_wants_it() {
    let s = Services::migrated("");
    let token = "t0ken-s3cret-4711";
    // From the environment, as a unit's EnvironmentFile gives it.
    let a = Instance::run_with_env(&s, "guarded", "", &[("MSGX_METRICS_TOKEN", token)]);
    let addr = endpoint(&a);
    assert!(a.wait_for_log("lease acquired", Duration::from_secs(30)), "{}", a.log_text());
    let bearer = format!("Authorization: Bearer {token}\r\n");
    for path in ["/", "/metrics", "/dead", "/api/flight/9001"] {
        let (status, head, _) = get(&addr, path, "");
        assert_eq!(status, 401, "{path} without the token");
        assert!(head.contains("WWW-Authenticate: Bearer"), "{head}");
        let (status, _, _) = get(&addr, path, "Authorization: Bearer wrong\r\n");
        assert_eq!(status, 401, "{path} with another token");
        let (status, _, body) = get(&addr, path, &bearer);
        assert!(status == 200 || (path == "/api/flight/9001" && status == 404), "{path}: {status} {body}");
    }
    // Answered without a token (/ready may still say 503 while the stores are compared).
    let (status, _, body) = get(&addr, "/live", "");
    assert_eq!(status, 200, "/live needs no token: {body}");
    let (status, _, body) = get(&addr, "/ready", "");
    assert!(
        status == 200 || (status == 503 && body.starts_with("not ready")),
        "/ready needs no token: {body}"
    );
    assert!(!a.log_text().contains(token), "the token is a secret: {}", a.log_text());
}

/// #68: one token opened `/metrics` and the console's message texts, so a scraper that holds
/// it could read them. With `metrics.console-token` the console asks for its own token, and the
/// scraper's opens `/metrics` only; without it, msgx says at start that the one token opens both.
#[test]
fn regression_the_console_token_is_not_the_scrapers() {
    let s = Services::migrated("");
    let (scrape, console) = ("scr4pe-t0ken-4711", "c0nsole-t0ken-4712");
    let env = [("MSGX_METRICS_TOKEN", scrape), ("MSGX_CONSOLE_TOKEN", console)];
    let a = Instance::run_with_env(&s, "two-tokens", "", &env);
    let addr = endpoint(&a);
    assert!(a.wait_for_log("lease acquired", Duration::from_secs(30)), "{}", a.log_text());
    let bearer = |t: &str| format!("Authorization: Bearer {t}\r\n");
    assert_eq!(get(&addr, "/metrics", &bearer(scrape)).0, 200);
    assert_eq!(get(&addr, "/metrics", &bearer(console)).0, 401, "the console's token is not the scraper's");
    for path in ["/", "/dead", "/trace/1"] {
        let (status, _, body) = get(&addr, path, &bearer(scrape));
        assert_eq!(status, 401, "{path} with the scraper's token: {body}");
        assert!(body.contains("metrics.console-token"), "{path}: {body}");
        let (status, _, body) = get(&addr, path, &bearer(console));
        assert!(status == 200 || (path == "/trace/1" && status == 404), "{path}: {status} {body}");
    }
    let log = a.log_text();
    assert!(!log.contains(scrape) && !log.contains(console), "the tokens are secrets: {log}");
    assert!(!log.contains("metrics.token opens the console too"), "{log}");
    let b = Instance::run_with_env(&s, "one-token", "", &env[..1]);
    assert!(
        b.wait_for_log("metrics.token opens the console too", Duration::from_secs(30)),
        "{}",
        b.log_text()
    );
}

/// A store that hangs holds the console's own thread only: `/live` answers meanwhile, a second
/// page is told at once that the console is busy, and the page waiting names the store and
/// nothing of its address; once the store is back the console reads it again.
#[test]
fn a_store_that_hangs_holds_the_console_never_live() {
    let redis = Private::start("redis");
    let s = Services::migrated_on("", Stores { redis: Some(redis.url()), ..Default::default() });
    s.insert_inbound(&[fixtures::flop_stnd(1, "9001", "B12")]);
    let a = Instance::run(&s, "hung", "");
    let addr = endpoint(&a);
    settled(&s, &a, &[(SENT, 1)]);
    assert_eq!(get(&addr, "/flight/9001", "").0, 200);
    redis.signal("-STOP");
    let page = {
        let addr = addr.clone();
        std::thread::spawn(move || get(&addr, "/flight/9001", ""))
    };
    // The console waits for Redis (3 s, the Redis response timeout): a second page is refused at
    // once, and /live answers meanwhile.
    let mut refused = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            let (status, _, body) = get(&addr, "/dead", "");
            refused = body;
            status == 503
        }),
        "a second page is refused"
    );
    assert_eq!(get(&addr, "/live", "").0, 200, "/live answers while the console waits");
    assert_eq!(refused, "the console is busy (or off); try again\n");
    let (status, _, _) = get(&addr, "/metrics", "");
    assert_eq!(status, 200, "/metrics answers while Redis hangs");
    let (status, _, body) = page.join().unwrap();
    redis.signal("-CONT");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("redis did not answer"), "{body}");
    assert!(!body.contains(&redis.port.to_string()), "no address on the page: {body}");
    assert!(a.wait_for_log("console could not read redis", Duration::from_secs(10)), "{}", a.log_text());
    assert!(eventually(Duration::from_secs(30), || get(&addr, "/flight/9001", "").0 == 200), "read again");
}
