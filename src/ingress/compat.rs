//! The compat write path `POST /cminmsgs/send` (SPEC §4.1): a small synchronous HTTP/1.1
//! server on its own thread with a bounded pool of workers. It inserts the raw message into the
//! mailbox and enqueues it — two stores, not atomic: it answers 200 once the mailbox row is
//! persisted, and a failed enqueue is repaired by the poller (the row is past `high`) or the
//! compensating rescan. Every request is read within `read-timeout` (else 408), so a client
//! that sends a byte a second holds one worker for at most that long and never the others;
//! when every worker is busy a new connection is answered 503 at once.

use crate::error::Store;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use log::{info, warn};

use crate::clock::Clock;
use crate::domain::InboundRow;
use crate::error::StoreError;
use crate::http::Deadline;
use crate::ports::{Intake, MailboxSubmit};

pub const PATH: &str = "/cminmsgs/send";

/// Why a request is refused: the HTTP status and a message for the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub status: u16,
    pub message: String,
}

fn reject(status: u16, message: impl Into<String>) -> Reject {
    Reject { status, message: message.into() }
}

/// Checks the request line and headers before the body is read.
pub fn check_head(
    method: &str,
    path: &str,
    content_type: Option<&str>,
    length: Option<usize>,
    limit: usize,
) -> Result<(), Reject> {
    let path = path.split('?').next().unwrap_or(path);
    if path != PATH {
        return Err(reject(404, format!("no such endpoint {path}; messages go to POST {PATH}")));
    }
    if !method.eq_ignore_ascii_case("POST") {
        return Err(reject(405, format!("{method} is not allowed; use POST {PATH}")));
    }
    let ct = content_type.ok_or_else(|| {
        reject(415, "Content-Type is missing; send application/xml, text/xml or text/plain")
    })?;
    let mut parts = ct.split(';').map(str::trim);
    let mime = parts.next().unwrap_or("").to_ascii_lowercase();
    if !["application/xml", "text/xml", "text/plain"].contains(&mime.as_str()) {
        return Err(reject(
            415,
            format!("Content-Type {mime:?} is not accepted; send application/xml, text/xml or text/plain"),
        ));
    }
    for p in parts {
        if let Some((k, v)) = p.split_once('=') {
            let v = v.trim().trim_matches('"');
            if k.trim().eq_ignore_ascii_case("charset")
                && !v.eq_ignore_ascii_case("utf-8")
                && !v.eq_ignore_ascii_case("utf8")
            {
                return Err(reject(415, format!("charset {v:?} is not accepted; send UTF-8")));
            }
        }
    }
    if let Some(n) = length {
        if n > limit {
            return Err(reject(413, format!("body of {n} bytes is over the limit of {limit} bytes")));
        }
    }
    Ok(())
}

/// Checks the body: not over the limit, not empty, UTF-8. Returns the text.
pub fn check_body(body: Vec<u8>, limit: usize) -> Result<String, Reject> {
    if body.len() > limit {
        return Err(reject(413, format!("body is over the limit of {limit} bytes")));
    }
    let text = String::from_utf8(body).map_err(|e| reject(400, format!("body is not UTF-8: {e}")))?;
    if text.trim().is_empty() {
        return Err(reject(400, "body is empty"));
    }
    Ok(text)
}

/// What was done with an accepted message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub msg_id: i64,
    /// False when the enqueue failed (the poller or the rescan will enqueue it).
    pub enqueued: bool,
}

/// Persists an accepted message: mailbox first (the 200 depends on it), then the queue.
pub fn accept<M: MailboxSubmit, P: Intake>(
    raw: &str,
    mailbox: &mut M,
    procs: &mut P,
    clock: &dyn Clock,
) -> Result<Accepted, StoreError> {
    let now = clock.now();
    let msg_id = mailbox.insert(raw, now)?;
    let enqueued = match procs.enqueue(&[InboundRow { id: msg_id, received_at: Some(now) }], None, now) {
        Ok(_) => true,
        Err(e) => {
            warn!(
                "compat enqueue failed msg_id={msg_id} error={:?}; the poller or the rescan will enqueue it",
                e.to_string()
            );
            false
        }
    };
    info!("compat accepted msg_id={msg_id} bytes={}", raw.len());
    Ok(Accepted { msg_id, enqueued })
}

/// What the server needs from the daemon's settings (`msgx.compat-http.*`).
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
    /// A request not read whole within this is answered 408.
    pub read_timeout: Duration,
    /// Requests served at once; each worker owns its connections.
    pub workers: usize,
}

impl Limits {
    pub fn from_config(c: &crate::config::CompatHttp) -> Limits {
        Limits { max_body_bytes: c.max_body_bytes, read_timeout: c.read_timeout, workers: c.workers }
    }
}

/// A request as read off the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// A head as the one HTTP module parses it (`crate::http`).
pub use crate::http::Head;

impl From<crate::http::Unread> for Reject {
    fn from(u: crate::http::Unread) -> Reject {
        match u {
            crate::http::Unread::Refused((status, message)) => Reject { status, message },
            crate::http::Unread::TooSlow => {
                reject(408, "the request was not received within msgx.compat-http.read-timeout")
            }
            crate::http::Unread::Lost(why) => reject(400, why),
        }
    }
}

/// Reads one request within `deadline`: the head, then `Content-Length` bytes of body (checked
/// against `limit` before it is read; a client that asked for `100 Continue` gets it only
/// then). A client that sends too slowly gets 408; nothing it does can hold the worker past
/// the deadline.
pub fn read_request(stream: &mut TcpStream, deadline: Deadline<'_>, limit: usize) -> Result<Request, Reject> {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let head = crate::http::read_head(stream, &mut buf, deadline)?;
    check_head(&head.method, &head.path, head.content_type.as_deref(), head.length, limit)?;
    let want = head.length.unwrap_or(0);
    let mut body = buf.split_off(head.len);
    if head.expects_continue && body.len() < want {
        let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
        stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .map_err(|e| reject(400, format!("cannot answer 100 Continue: {e}")))?;
    }
    while body.len() < want {
        crate::http::read_some(stream, &mut body, deadline)?;
    }
    body.truncate(want);
    Ok(Request { method: head.method, path: head.path, content_type: head.content_type, body })
}

fn respond(stream: &mut TcpStream, status: u16, body: &serde_json::Value) {
    let body = body.to_string();
    if let Err(e) =
        crate::http::write_response(stream, status, "application/json", "", body.as_bytes(), false)
    {
        warn!("compat-http could not answer: {e}");
    }
}

/// How long, and how much, a refused client's unread input is drained before the socket is
/// closed: closing with unread input makes the kernel send a reset, and the client would see
/// that instead of the status (a 413 for a large body sent at once, a 408 for a slow one).
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024 * 1024;

/// Closes a connection answered from the accept thread, dropping what has already arrived of
/// its request (so the close is no reset), without waiting for more.
fn drop_unread(mut stream: TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    if stream.set_nonblocking(true).is_ok() {
        let mut chunk = [0u8; 16 * 1024];
        for _ in 0..4 {
            if !matches!(stream.read(&mut chunk), Ok(n) if n > 0) {
                break;
            }
        }
    }
}

/// Ends a connection whose request was refused: no more writes, then what the client still
/// sends is read and dropped for a bounded time, so it reads the answer.
fn linger(stream: &mut TcpStream, clock: &dyn Clock) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let until = Deadline::after(clock, LINGER);
    let mut chunk = [0u8; 16 * 1024];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        let left = until.left();
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}

/// One worker: reads, checks and persists one request at a time on its own connections.
pub struct Worker<M, P> {
    mailbox: M,
    procs: P,
    clock: Arc<dyn Clock>,
    limits: Limits,
}

impl<M: MailboxSubmit, P: Intake> Worker<M, P> {
    pub fn new(mailbox: M, procs: P, clock: Arc<dyn Clock>, limits: Limits) -> Self {
        Worker { mailbox, procs, clock, limits }
    }

    /// Serves one connection; true when a message was accepted.
    pub fn serve(&mut self, mut stream: TcpStream) -> bool {
        let deadline = Deadline::after(self.clock.as_ref(), self.limits.read_timeout);
        let result = read_request(&mut stream, deadline, self.limits.max_body_bytes)
            .and_then(|req| check_body(req.body, self.limits.max_body_bytes))
            .and_then(|raw| {
                accept(&raw, &mut self.mailbox, &mut self.procs, self.clock.as_ref())
                    .map_err(|e| reject(503, format!("the mailbox did not take the message: {e}")))
            });
        match result {
            Ok(a) => {
                respond(
                    &mut stream,
                    200,
                    &serde_json::json!({ "status": "accepted", "msg_id": a.msg_id, "enqueued": a.enqueued }),
                );
                true
            }
            Err(r) => {
                warn!("compat rejected status={} reason={:?}", r.status, r.message);
                respond(
                    &mut stream,
                    r.status,
                    &serde_json::json!({ "status": "rejected", "error": r.message }),
                );
                linger(&mut stream, self.clock.as_ref());
                false
            }
        }
    }
}

/// The listener: hands connections to a bounded pool of workers; when every worker is busy
/// and the queue is full, answers 503 at once instead of making the client wait.
pub struct CompatServer {
    listener: TcpListener,
}

impl CompatServer {
    pub fn bind(addr: SocketAddr) -> Result<Self, StoreError> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            StoreError::unavailable(Store::CompatHttp, format!("cannot listen on {addr}: {e}"))
        })?;
        Ok(CompatServer { listener })
    }

    /// The bound address (port 0 picks a free one).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until `stop` disconnects, with `workers` (each owning its connections);
    /// `accepted` runs after each accepted message (the pump's doorbell).
    pub fn serve<M, P>(
        &self,
        workers: Vec<Worker<M, P>>,
        stop: &crossbeam_channel::Receiver<()>,
        accepted: impl Fn() + Sync,
    ) where
        M: MailboxSubmit + Send,
        P: Intake + Send,
    {
        crate::listener::serve(
            "compat-http",
            &self.listener,
            workers,
            stop,
            |w, stream| {
                if w.serve(stream) {
                    accepted();
                }
            },
            |mut s| {
                respond(
                    &mut s,
                    503,
                    &serde_json::json!({ "status": "rejected", "error": "every compat worker is busy; try again" }),
                );
                drop_unread(s);
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::store::memory::{MemMailbox, MemPg};

    const LIMIT: usize = 100;

    #[test]
    fn content_types_and_charsets() {
        for ok in ["application/xml", "text/xml; charset=UTF-8", "text/plain;charset=\"utf-8\"", "TEXT/XML"] {
            assert_eq!(check_head("POST", PATH, Some(ok), Some(10), LIMIT), Ok(()), "{ok}");
        }
        for (ct, words) in [
            ("application/json", "not accepted"),
            ("text/xml; charset=GBK", "charset \"GBK\""),
            ("", "not accepted"),
        ] {
            let r = check_head("POST", PATH, Some(ct), Some(10), LIMIT).unwrap_err();
            assert_eq!(r.status, 415);
            assert!(r.message.contains(words), "{ct}: {}", r.message);
        }
        assert_eq!(check_head("POST", PATH, None, Some(10), LIMIT).unwrap_err().status, 415);
    }

    #[test]
    fn method_path_and_declared_length() {
        assert_eq!(check_head("GET", PATH, Some("text/xml"), None, LIMIT).unwrap_err().status, 405);
        assert_eq!(check_head("POST", "/other", Some("text/xml"), None, LIMIT).unwrap_err().status, 404);
        assert_eq!(check_head("POST", "/cminmsgs/send?x=1", Some("text/xml"), None, LIMIT), Ok(()));
        let r = check_head("POST", PATH, Some("text/xml"), Some(LIMIT + 1), LIMIT).unwrap_err();
        assert_eq!(r.status, 413);
        assert!(r.message.contains("101 bytes"));
        assert_eq!(check_head("POST", PATH, Some("text/xml"), Some(LIMIT), LIMIT), Ok(()));
    }

    #[test]
    fn bodies() {
        assert_eq!(check_body(b"<MSG/>".to_vec(), LIMIT).unwrap(), "<MSG/>");
        assert_eq!(check_body(b"  \n".to_vec(), LIMIT).unwrap_err().status, 400);
        assert_eq!(check_body(vec![], LIMIT).unwrap_err().status, 400);
        assert_eq!(check_body(vec![0xff, 0xfe], LIMIT).unwrap_err().status, 400);
        assert_eq!(check_body(vec![b'x'; LIMIT + 1], LIMIT).unwrap_err().status, 413);
        assert_eq!(check_body("航班".as_bytes().to_vec(), LIMIT).unwrap(), "航班");
    }

    #[test]
    fn accept_persists_then_enqueues_and_survives_a_failed_enqueue() {
        let (mut mb, mut pg) = (MemMailbox::new(), MemPg::new());
        let clock = FakeClock::new();
        let a = accept("<MSG>1</MSG>", &mut mb, &mut pg, &clock).unwrap();
        assert_eq!(a, Accepted { msg_id: 1, enqueued: true });
        assert_eq!(mb.row(1).unwrap().raw.as_deref(), Some(&b"<MSG>1</MSG>"[..]));
        assert!(pg.proc(1).is_some());
        assert_eq!(pg.inspect(|s| s.watermark), 0, "the compat path never moves the watermark");
        pg.fail_next(1);
        let a = accept("<MSG>2</MSG>", &mut mb, &mut pg, &clock).unwrap();
        assert_eq!(a, Accepted { msg_id: 2, enqueued: false });
        assert!(mb.row(2).is_some(), "persisted all the same: the 200 holds");
        mb.fail_next(1);
        assert!(accept("<MSG>3</MSG>", &mut mb, &mut pg, &clock).is_err(), "no row, no 200");
    }
}
