//! The HTTP both listeners speak (#43: the compat server and the operations endpoint each had
//! a head reader, a response writer and a reason table): one head parser over `httparse`, one
//! response writer, one reason table. HTTP/1.1, one request per connection, `Connection:
//! close`; bodies only by `Content-Length`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::clock::{Clock, Mono};

/// The largest request head (request line and headers) read before refusing.
pub const MAX_HEAD: usize = 16 * 1024;

/// The most headers a request may carry.
const MAX_HEADERS: usize = 64;

/// What the head of a request says, parsed by `httparse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    pub path: String,
    pub content_type: Option<String>,
    pub length: Option<usize>,
    /// `Expect: 100-continue`: the client waits for a `100 Continue` before its body.
    pub expects_continue: bool,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The `Host` header, if any.
    pub host: Option<String>,
    /// Bytes the head took, terminator included.
    pub len: usize,
}

/// Why a head is refused: the status and a message for the client.
pub type Refusal = (u16, String);

/// Parses a complete head from `buf`; `Ok(None)` while more bytes are needed. Refuses a head
/// over [`MAX_HEAD`] (431), a malformed one (400), `Content-Length` given twice with different
/// values or not a number (400), a chunked body (411) and an `Expect` other than
/// `100-continue` (417).
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, Refusal> {
    let refuse = |status: u16, m: String| Err((status, m));
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return refuse(431, "request head larger than 16 KiB".into())
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return refuse(431, format!("more than {MAX_HEADERS} request headers"))
        }
        Err(e) => return refuse(400, format!("malformed request head: {e}")),
    };
    if len > MAX_HEAD {
        return refuse(431, "request head larger than 16 KiB".into());
    }
    let mut head = Head {
        method: req.method.unwrap_or("").to_string(),
        path: req.path.unwrap_or("").to_string(),
        content_type: None,
        length: None,
        expects_continue: false,
        authorization: None,
        host: None,
        len,
    };
    for h in req.headers.iter() {
        let v = String::from_utf8_lossy(h.value).trim().to_string();
        if h.name.eq_ignore_ascii_case("content-type") {
            head.content_type = Some(v);
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let Ok(n) = v.parse::<usize>() else {
                return refuse(400, format!("Content-Length {v:?} is not a number"));
            };
            if head.length.is_some_and(|m| m != n) {
                return refuse(400, "Content-Length given twice with different values".into());
            }
            head.length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") && !v.eq_ignore_ascii_case("identity") {
            return refuse(411, "chunked bodies are not accepted; send Content-Length".into());
        } else if h.name.eq_ignore_ascii_case("expect") {
            if !v.eq_ignore_ascii_case("100-continue") {
                return refuse(417, format!("Expect {v:?} is not understood"));
            }
            head.expects_continue = true;
        } else if h.name.eq_ignore_ascii_case("authorization") {
            head.authorization = Some(v);
        } else if h.name.eq_ignore_ascii_case("host") {
            head.host = Some(v);
        }
    }
    Ok(Some(head))
}

/// Why a request could not be read off the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unread {
    /// Its head is refused (`parse_head`).
    Refused(Refusal),
    /// Not received by the deadline.
    TooSlow,
    /// The connection closed or failed first: why.
    Lost(String),
}

/// When a read must be done, on the injected clock's monotonic time.
#[derive(Clone, Copy)]
pub struct Deadline<'c> {
    clock: &'c dyn Clock,
    at: Mono,
}

impl<'c> Deadline<'c> {
    /// `d` from now.
    pub fn after(clock: &'c dyn Clock, d: Duration) -> Deadline<'c> {
        Deadline { clock, at: clock.mono().after(d) }
    }

    /// What is left of it (zero once passed).
    pub fn left(&self) -> Duration {
        self.at.as_duration().saturating_sub(self.clock.mono().as_duration())
    }
}

/// Reads into `buf` until it holds a whole head, by `deadline`; what follows the head stays in
/// `buf` (from `Head::len`).
pub fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>, deadline: Deadline<'_>) -> Result<Head, Unread> {
    loop {
        if let Some(h) = parse_head(buf).map_err(Unread::Refused)? {
            return Ok(h);
        }
        read_some(stream, buf, deadline)?;
    }
}

/// Reads what has arrived into `buf`, waiting until `deadline` at most.
pub fn read_some(stream: &mut TcpStream, buf: &mut Vec<u8>, deadline: Deadline<'_>) -> Result<(), Unread> {
    let left = deadline.left();
    if left.is_zero() {
        return Err(Unread::TooSlow);
    }
    stream.set_read_timeout(Some(left)).map_err(|e| Unread::Lost(format!("socket: {e}")))?;
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk) {
        Ok(0) => Err(Unread::Lost("the client closed the connection before the request was complete".into())),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            Err(Unread::TooSlow)
        }
        Err(e) => Err(Unread::Lost(format!("cannot read the request: {e}"))),
    }
}

/// The reason phrase of every status msgx answers with.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    }
}

/// A whole response (`Connection: close`): the status line, `Content-Type`, `Content-Length`,
/// `extra` header lines (each ending in CRLF), and the body unless `head_only` (a HEAD
/// request).
pub fn response(status: u16, content_type: &str, extra: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// Writes a whole [`response`] within 5 s.
pub fn write_response(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    extra: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(&response(status, content_type, extra, body, head_only))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_read_whole_or_refused_with_its_status() {
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None), "not complete yet");
        let h = parse_head(b"GET /live HTTP/1.1\r\nAuthorization: Bearer t\r\n\r\n").unwrap().unwrap();
        assert_eq!(
            (h.method.as_str(), h.path.as_str(), h.authorization.as_deref()),
            ("GET", "/live", Some("Bearer t"))
        );
        let status = |b: &[u8]| parse_head(b).unwrap_err().0;
        assert_eq!(status(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), 411);
        assert_eq!(status(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nExpect: nothing\r\n\r\n"), 417);
        assert_eq!(status(b"GET / HTTP/1.1\r\nno colon here\r\n\r\n"), 400);
        let mut long = b"GET / HTTP/1.1\r\nX: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', MAX_HEAD));
        assert_eq!(status(&long), 431);
    }
}
