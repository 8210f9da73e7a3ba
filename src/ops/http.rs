//! The operations listener: `GET /metrics`, `GET /live`, `GET /ready`, nothing else. Bounded
//! like the compat server — [`WORKERS`] workers, each request read within [`READ_TIMEOUT`],
//! a new connection answered 503 at once when every worker is busy — so a scraper that hangs or
//! a port scan cannot hold it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::metrics::Metrics;
use super::Ops;

/// Requests served at once.
pub const WORKERS: usize = 2;
/// A request not read whole within this is dropped.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_HEAD: usize = 8 * 1024;

/// An answer: status, content type, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

fn text(status: u16, body: impl Into<String>) -> Answer {
    Answer { status, content_type: "text/plain; charset=utf-8", body: body.into() }
}

/// What a request for `method` `path` is answered (pure, but for the scrape itself).
pub fn answer(method: &str, path: &str, ops: &Ops, metrics: &Metrics) -> Answer {
    let path = path.split('?').next().unwrap_or(path);
    if !matches!(path, "/metrics" | "/live" | "/ready") {
        return text(404, format!("no such endpoint {path}; try /metrics, /live or /ready\n"));
    }
    if method != "GET" && method != "HEAD" {
        return text(405, format!("{method} is not allowed; only GET\n"));
    }
    match path {
        "/metrics" => Answer {
            status: 200,
            content_type: prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            body: metrics.render(),
        },
        "/live" => text(200, "live\n"),
        _ => match ops.ready() {
            Ok(()) => text(200, "ready\n"),
            Err(why) => text(503, format!("not ready: {why}\n")),
        },
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    }
}

fn write_answer(stream: &mut TcpStream, a: &Answer, head_only: bool) {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        a.status,
        reason(a.status),
        a.content_type,
        a.body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(a.body.as_bytes());
    }
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let _ = stream.write_all(&out);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Reads a request head within the deadline: (method, path), or the status to refuse it with.
fn read_head(stream: &mut TcpStream) -> Result<(String, String), u16> {
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 2048];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                return Ok((req.method.unwrap_or("").to_string(), req.path.unwrap_or("").to_string()))
            }
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => return Err(431),
            Ok(httparse::Status::Partial) => {}
            Err(_) => return Err(400),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(0); // too slow: dropped without an answer
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(0),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn serve_one(mut stream: TcpStream, ops: &Ops, metrics: &Metrics) {
    match read_head(&mut stream) {
        Ok((method, path)) => {
            let a = answer(&method, &path, ops, metrics);
            write_answer(&mut stream, &a, method == "HEAD");
        }
        Err(0) => {}
        Err(status) => write_answer(&mut stream, &text(status, "bad request\n"), false),
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

    /// Serves until `stop` disconnects.
    pub fn serve(&self, ops: Arc<Ops>, metrics: Arc<Metrics>, stop: crossbeam_channel::Receiver<()>) {
        crate::listener::serve(
            "metrics",
            &self.listener,
            vec![(); WORKERS],
            &stop,
            |_, s| serve_one(s, &ops, &metrics),
            |mut s| write_answer(&mut s, &text(503, "busy\n"), false),
        );
    }
}
