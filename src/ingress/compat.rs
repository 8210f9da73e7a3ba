//! The compat write path `POST /cminmsgs/send` (SPEC §4.1): a small synchronous HTTP server
//! on its own thread. It inserts the raw message into the mailbox and enqueues it — two
//! stores, not atomic: it answers 200 once the mailbox row is persisted, and a failed enqueue
//! is repaired by the poller (the row is past `high`) or the compensating rescan.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use log::{info, warn};

use crate::clock::Clock;
use crate::domain::InboundRow;
use crate::error::StoreError;
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
                "compat enqueue failed msg_id={msg_id} error={e}; the poller or the rescan will enqueue it"
            );
            false
        }
    };
    info!("compat accepted msg_id={msg_id} bytes={}", raw.len());
    Ok(Accepted { msg_id, enqueued })
}

pub struct CompatServer<M, P> {
    server: tiny_http::Server,
    mailbox: M,
    procs: P,
    clock: Arc<dyn Clock>,
    limit: usize,
}

impl<M: MailboxSubmit, P: Intake> CompatServer<M, P> {
    pub fn bind(
        addr: SocketAddr,
        mailbox: M,
        procs: P,
        clock: Arc<dyn Clock>,
        limit: usize,
    ) -> Result<Self, StoreError> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| StoreError::unavailable("compat-http", format!("cannot listen on {addr}: {e}")))?;
        Ok(CompatServer { server, mailbox, procs, clock, limit })
    }

    /// The bound address (port 0 picks a free one).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.server.server_addr().to_ip()
    }

    /// Serves at most one request, waiting up to `timeout`; true when one was served.
    pub fn serve_one(&mut self, timeout: Duration) -> bool {
        let mut req = match self.server.recv_timeout(timeout) {
            Ok(Some(r)) => r,
            Ok(None) => return false,
            Err(e) => {
                warn!("compat-http accept error: {e}");
                return false;
            }
        };
        let content_type = req
            .headers()
            .iter()
            .find(|h| h.field.equiv("Content-Type"))
            .map(|h| h.value.as_str().to_string());
        let result = check_head(
            req.method().as_str(),
            req.url(),
            content_type.as_deref(),
            req.body_length(),
            self.limit,
        )
        .and_then(|()| {
            let mut body = Vec::new();
            // Read one byte past the limit to tell "at the limit" from "over it".
            req.as_reader()
                .take(self.limit as u64 + 1)
                .read_to_end(&mut body)
                .map_err(|e| reject(400, format!("cannot read the body: {e}")))?;
            check_body(body, self.limit)
        })
        .and_then(|raw| {
            accept(&raw, &mut self.mailbox, &mut self.procs, self.clock.as_ref())
                .map_err(|e| reject(503, format!("the mailbox did not take the message: {e}")))
        });
        let (status, body) = match result {
            Ok(a) => {
                (200, serde_json::json!({ "status": "accepted", "msg_id": a.msg_id, "enqueued": a.enqueued }))
            }
            Err(r) => {
                warn!("compat rejected status={} reason={:?}", r.status, r.message);
                (r.status, serde_json::json!({ "status": "rejected", "error": r.message }))
            }
        };
        let header =
            tiny_http::Header::from_bytes("Content-Type", "application/json").expect("static header");
        let response =
            tiny_http::Response::from_string(body.to_string()).with_status_code(status).with_header(header);
        if let Err(e) = req.respond(response) {
            warn!("compat-http could not answer: {e}");
        }
        true
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
