//! The operations listener: `GET /metrics`, `GET /live`, `GET /ready`, and the read-only
//! console (`console`). Bounded like the compat server — [`WORKERS`] workers, each request read
//! within [`READ_TIMEOUT`], a new connection answered 503 at once when every worker is busy — so
//! a scraper that hangs or a port scan cannot hold it. The console's pages read stores: a
//! worker hands them to the console's own thread (503 at once when it is busy), so a store
//! that hangs never holds `/live`. With `metrics.token` every path but `/live` and `/ready`
//! asks for `Authorization: Bearer TOKEN`.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use super::console::{Console, Page};
use super::metrics::Metrics;
use super::Ops;
use crate::http::{Head, Unread};

/// Requests served at once.
pub const WORKERS: usize = 2;
/// A request not read whole within this is dropped.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// An answer: status, content type, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// Where a 303 sends the browser.
    pub location: Option<String>,
}

fn text(status: u16, body: impl Into<String>) -> Answer {
    Answer { status, content_type: "text/plain; charset=utf-8", body: body.into(), location: None }
}

/// Whether `r` may see `path`: always `/live` and `/ready`; the rest with the token, if one
/// is configured.
pub fn authorized(r: &Head, path: &str, token: Option<&str>) -> bool {
    let Some(token) = token else { return true };
    if matches!(path, "/live" | "/ready") {
        return true;
    }
    let given = r.authorization.as_deref().and_then(|a| a.strip_prefix("Bearer ")).map(str::trim);
    // Compared whole, byte by byte, so the time taken does not tell how much of it matched.
    given.is_some_and(|g| {
        g.len() == token.len() && g.bytes().zip(token.bytes()).fold(0, |d, (a, b)| d | (a ^ b)) == 0
    })
}

/// What a request for `method` `path` is answered (pure, but for the scrape itself).
pub fn answer(method: &str, path: &str, ops: &Ops, metrics: &Metrics) -> Answer {
    let path = path.split('?').next().unwrap_or(path);
    if !matches!(path, "/metrics" | "/live" | "/ready") {
        return text(404, format!("no such endpoint {path}; try /, /metrics, /live or /ready\n"));
    }
    if method != "GET" && method != "HEAD" {
        return text(405, format!("{method} is not allowed; only GET\n"));
    }
    match path {
        "/metrics" => Answer {
            status: 200,
            content_type: prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            body: metrics.render(),
            location: None,
        },
        "/live" => text(200, "live\n"),
        _ => match ops.ready().map(|()| metrics.awaiting_answers()) {
            Ok(0) => text(200, "ready\n"),
            // Serving, with flights a heal could not rebuild until the AODB answers (#41).
            Ok(n) => text(
                200,
                format!(
                    "ready, degraded: {n} window(s) of flights await the AODB's answer after a heal (msgx requests --open)\n"
                ),
            ),
            Err(why) => text(503, format!("not ready: {why}\n")),
        },
    }
}

fn write_answer(stream: &mut TcpStream, a: &Answer, head_only: bool) {
    let mut extra = String::new();
    if let Some(to) = &a.location {
        extra.push_str(&format!("Location: {to}\r\n"));
    }
    if a.status == 401 {
        extra.push_str("WWW-Authenticate: Bearer realm=\"msgx\"\r\n");
    }
    if a.content_type.starts_with("text/html") {
        // Nothing but the page itself: no script, no frame, no other origin.
        extra.push_str("Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; form-action 'self'\r\nX-Frame-Options: DENY\r\n");
    }
    let _ =
        crate::http::write_response(stream, a.status, a.content_type, &extra, a.body.as_bytes(), head_only);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// A console request handed to the console's thread.
type ConsoleJob = (TcpStream, Head, Page);

/// What a worker needs: the instance, the metrics, the token, the console's queue.
struct Endpoint<'a> {
    ops: &'a Ops,
    metrics: &'a Metrics,
    token: Option<&'a str>,
    console: &'a crossbeam_channel::Sender<ConsoleJob>,
}

fn serve_one(mut stream: TcpStream, e: &Endpoint) {
    let mut buf = Vec::with_capacity(512);
    let deadline = crate::http::Deadline::after(e.metrics.clock().as_ref(), READ_TIMEOUT);
    let r = match crate::http::read_head(&mut stream, &mut buf, deadline) {
        Ok(r) => r,
        Err(Unread::TooSlow | Unread::Lost(_)) => return, // dropped without an answer
        Err(Unread::Refused((status, _))) => {
            return write_answer(&mut stream, &text(status, "bad request\n"), false)
        }
    };
    let path = r.path.split('?').next().unwrap_or(&r.path).to_string();
    let head_only = r.method == "HEAD";
    if !authorized(&r, &path, e.token) {
        return write_answer(
            &mut stream,
            &text(401, "a bearer token is needed (metrics.token)\n"),
            head_only,
        );
    }
    match Page::of(&r.path) {
        None => write_answer(&mut stream, &answer(&r.method, &r.path, e.ops, e.metrics), head_only),
        Some(_) if !matches!(r.method.as_str(), "GET" | "HEAD") => {
            write_answer(&mut stream, &text(405, format!("{} is not allowed; only GET\n", r.method)), false)
        }
        Some(Err(why)) => write_answer(&mut stream, &text(400, format!("{why}\n")), head_only),
        Some(Ok(page)) => {
            if let Err(e) = e.console.send_timeout((stream, r, page), crate::listener::HANDOVER) {
                let (mut stream, _, _) = e.into_inner();
                write_answer(&mut stream, &text(503, "the console is busy (or off); try again\n"), false);
            }
        }
    }
}

/// The bound listener.
pub struct OpsServer {
    listener: TcpListener,
}

impl OpsServer {
    pub fn bind(addr: SocketAddr) -> std::io::Result<OpsServer> {
        Ok(OpsServer { listener: TcpListener::bind(addr)? })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until `stop` disconnects; the console's pages on a thread of its own, with the
    /// connections `console` opens (`None`: no console).
    pub fn serve(
        &self,
        ops: Arc<Ops>,
        metrics: Arc<Metrics>,
        console: Option<Console>,
        token: Option<String>,
        stop: crossbeam_channel::Receiver<()>,
    ) {
        let (tx, rx) = crossbeam_channel::bounded::<ConsoleJob>(0);
        std::thread::scope(|scope| {
            if let Some(mut console) = console {
                let (ops, metrics) = (&ops, &metrics);
                std::thread::Builder::new()
                    .name("console".into())
                    .spawn_scoped(scope, move || {
                        for (mut stream, r, page) in rx.iter() {
                            let a = console.answer(page, ops, metrics);
                            write_answer(&mut stream, &a, r.method == "HEAD");
                        }
                    })
                    .expect("the console thread starts");
            } else {
                drop(rx);
            }
            let e = Endpoint { ops: &ops, metrics: &metrics, token: token.as_deref(), console: &tx };
            crate::listener::serve(
                "metrics",
                &self.listener,
                vec![(); WORKERS],
                &stop,
                |_, s| serve_one(s, &e),
                |mut s| write_answer(&mut s, &text(503, "busy\n"), false),
            );
            drop(tx);
        });
    }
}
