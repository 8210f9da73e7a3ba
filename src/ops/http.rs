//! The operations listener: `GET /metrics`, `GET /live`, `GET /ready`, and the read-only
//! console (`console`). One thread holds every connection at once, readiness-polled (mio), so
//! no connection can hold another (#54: two idle connections held both workers of the pool
//! before, and `/live` answered 503): each reads its head within [`READ_TIMEOUT`] of its
//! accept and writes its answer within [`WRITE_TIMEOUT`], or is dropped; at most
//! [`MAX_CONNECTIONS`] are held, and one more drops the one idle longest — never the new one,
//! whatever the others are doing.
//! `/live`, `/ready` and `/metrics` are answered on that thread from memory (the store gauges
//! are read by a thread of their own); the console's pages read stores, on the console's own
//! thread (503 at once when it is busy), so a store that hangs never holds `/live`.
//!
//! With `metrics.token` every path but `/live` and `/ready` asks for `Authorization: Bearer
//! TOKEN`; `/ready` says a reason code and a short text, never a host, a pid or a store's
//! error. A `Host` that is a name other than `localhost` or one in `metrics.host-names` is
//! refused (421): a page elsewhere cannot reach the console by DNS rebinding.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpListener as Listening, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use super::console::{Console, Page};
use super::metrics::Metrics;
use super::Ops;
use crate::clock::Mono;
use crate::http::Head;

/// Connections held at once; one more drops the one idle longest.
pub const MAX_CONNECTIONS: usize = 256;
/// A request whose head is not read whole within this of its accept is dropped.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// An answer not written whole within this is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// A console page not answered within this is answered 503.
pub const CONSOLE_TIMEOUT: Duration = Duration::from_secs(30);

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

/// The token `path` asks for, if any: none for `/live` and `/ready`; `metrics.token` for
/// `/metrics`; the console's own (`metrics.console-token`), else `metrics.token`, for every
/// console page — a scraper's token need not open message texts (#68).
pub fn token_for<'t>(path: &str, token: Option<&'t str>, console: Option<&'t str>) -> Option<&'t str> {
    match path {
        "/live" | "/ready" => None,
        "/metrics" => token,
        _ => console.or(token),
    }
}

/// Whether `r` may see `path` (see [`token_for`]).
pub fn authorized(r: &Head, path: &str, token: Option<&str>, console: Option<&str>) -> bool {
    let Some(token) = token_for(path, token, console) else { return true };
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
            Err(why) => text(503, format!("not ready: {} ({})\n", why.code(), why.text())),
        },
    }
}

/// Whether a request's `Host` may reach this endpoint: none given, an IP address (a name a
/// browser was sent to by DNS rebinding is never one), `localhost`, or a name of `names`
/// (`metrics.host-names`); a port after it is not looked at.
pub fn host_allowed(host: Option<&str>, names: &[String]) -> bool {
    let Some(host) = host.map(str::trim) else { return true };
    let name = match host.strip_prefix('[') {
        Some(v6) => return v6.split(']').next().is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()),
        None => {
            host.rsplit_once(':').filter(|(_, port)| port.parse::<u16>().is_ok()).map_or(host, |(n, _)| n)
        }
    };
    name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// The answer to a page the console cannot take now.
fn busy() -> Vec<u8> {
    answer_bytes(&text(503, "the console is busy (or off); try again\n"), false)
}

/// An answer as the bytes written.
fn answer_bytes(a: &Answer, head_only: bool) -> Vec<u8> {
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
    crate::http::response(a.status, a.content_type, &extra, a.body.as_bytes(), head_only)
}

/// What answers a request: the listener's thread now, or the console's.
enum Reply {
    Now(Vec<u8>),
    Console(Head, Page),
}

/// What the listener needs to answer: the instance, the metrics, the token, the host names.
struct Endpoint<'a> {
    ops: &'a Ops,
    metrics: &'a Metrics,
    token: Option<&'a str>,
    console_token: Option<&'a str>,
    names: &'a [String],
}

/// How a request whose head was read is answered.
fn reply(r: Head, e: &Endpoint) -> Reply {
    let head_only = r.method == "HEAD";
    let now = |a: Answer| Reply::Now(answer_bytes(&a, head_only));
    if !host_allowed(r.host.as_deref(), e.names) {
        let why = "this endpoint answers to its address, localhost and metrics.host-names only\n";
        return now(text(421, why));
    }
    let path = r.path.split('?').next().unwrap_or(&r.path).to_string();
    if !authorized(&r, &path, e.token, e.console_token) {
        let key = match (path.as_str(), e.console_token) {
            ("/metrics", _) | (_, None) => "metrics.token",
            _ => "metrics.console-token",
        };
        return now(text(401, format!("a bearer token is needed ({key})\n")));
    }
    match Page::of(&r.path) {
        None => now(answer(&r.method, &r.path, e.ops, e.metrics)),
        Some(_) if !matches!(r.method.as_str(), "GET" | "HEAD") => {
            Reply::Now(answer_bytes(&text(405, format!("{} is not allowed; only GET\n", r.method)), false))
        }
        Some(Err(why)) => now(text(400, format!("{why}\n"))),
        Some(Ok(page)) => Reply::Console(r, page),
    }
}

/// Where a connection is in its one request.
enum Phase {
    /// Reading its head, which must be whole by `by`.
    Reading { buf: Vec<u8>, by: Mono },
    /// Its page is with the console's thread, which must answer by `by`.
    Console { by: Mono },
    /// Writing its answer, which must be written by `by`.
    Writing { out: Vec<u8>, done: usize, by: Mono },
}

struct Conn {
    stream: TcpStream,
    /// Tells this connection's console answer from one for an earlier holder of its slot.
    serial: u64,
    phase: Phase,
    /// When it last sent or took a byte.
    active: Mono,
}

impl Conn {
    fn deadline(&self) -> Mono {
        match &self.phase {
            Phase::Reading { by, .. } | Phase::Console { by } | Phase::Writing { by, .. } => *by,
        }
    }
}

/// The connections held, by slot (a slot is a poll token).
#[derive(Default)]
struct Table {
    slots: Vec<Option<Conn>>,
    free: Vec<usize>,
    held: usize,
    serial: u64,
}

impl Table {
    fn insert(&mut self, stream: TcpStream, now: Mono) -> (usize, &mut Conn) {
        self.serial += 1;
        let phase = Phase::Reading { buf: Vec::new(), by: now.after(READ_TIMEOUT) };
        let conn = Conn { stream, serial: self.serial, phase, active: now };
        let at = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.held += 1;
        (at, self.slots[at].insert(conn))
    }

    fn remove(&mut self, at: usize) -> Option<Conn> {
        let conn = self.slots.get_mut(at)?.take()?;
        self.free.push(at);
        self.held -= 1;
        Some(conn)
    }

    /// The connection to drop for a new one: the one idle longest among those still sending
    /// their head, else among those waiting for the console, else among those whose reader
    /// takes no more of their answer. Never none while one is held, so the new connection is
    /// always taken (#68: 256 console pages nobody read held every slot, and `/live` probes
    /// were reset; an answer from memory is written at once and never waits to be dropped).
    fn idlest(&self) -> Option<usize> {
        let rank = |c: &Conn| match c.phase {
            Phase::Reading { .. } => 0,
            Phase::Console { .. } => 1,
            Phase::Writing { .. } => 2,
        };
        let held = self.slots.iter().enumerate().filter_map(|(i, c)| Some((i, c.as_ref()?)));
        held.min_by_key(|(_, c)| (rank(c), c.active)).map(|(i, _)| i)
    }

    /// The slots whose deadline has passed, and the earliest deadline still ahead.
    fn due(&self, now: Mono) -> (Vec<usize>, Option<Mono>) {
        let mut next: Option<Mono> = None;
        let mut due = Vec::new();
        for (i, c) in self.slots.iter().enumerate().filter_map(|(i, c)| Some((i, c.as_ref()?))) {
            match c.deadline() {
                by if by <= now => due.push(i),
                by => next = Some(next.map_or(by, |n| n.min(by))),
            }
        }
        (due, next)
    }
}

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);

/// A console page handed to the console's thread, and its answer handed back.
type ConsoleJob = (usize, u64, Head, Page);
type ConsoleDone = (usize, u64, Vec<u8>);

/// The bound listener.
pub struct OpsServer {
    listener: TcpListener,
}

/// The listener's thread: the poll, the connections, and the way to the console.
struct Reactor<'a> {
    poll: Poll,
    table: Table,
    endpoint: Endpoint<'a>,
    console: crossbeam_channel::Sender<ConsoleJob>,
    done: crossbeam_channel::Receiver<ConsoleDone>,
    /// A page waiting for the console's thread to be free, until when.
    handover: Option<(ConsoleJob, Mono)>,
}

impl Reactor<'_> {
    /// Accepts, reads and answers until `stopping` is set (the waker wakes the poll for it).
    fn run(&mut self, listening: &Listening, stopping: &std::sync::atomic::AtomicBool) {
        let mut events = Events::with_capacity(256);
        while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
            self.hand_over();
            let mut wait = self.sweep().min(Duration::from_secs(1));
            if self.handover.is_some() {
                wait = wait.min(Duration::from_millis(5));
            }
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    log::warn!("metrics accept error: {e}");
                }
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(listening),
                    WAKER => self.console_done(),
                    Token(at) => self.ready(at),
                }
            }
        }
    }

    fn now(&self) -> Mono {
        self.endpoint.metrics.clock().mono()
    }

    /// Takes every connection waiting; at the bound, the idlest one held makes room.
    fn accept(&mut self, listener: &Listening) {
        loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    // Out of file descriptors, say: the next readiness tries again.
                    log::warn!("metrics accept error: {e}");
                    return;
                }
            };
            if self.table.held >= MAX_CONNECTIONS {
                let at = self.table.idlest().expect("the bound is reached: a connection is held");
                self.drop_conn(at);
            }
            let _ = stream.set_nodelay(true);
            let now = self.now();
            let (at, conn) = self.table.insert(stream, now);
            if self.poll.registry().register(&mut conn.stream, Token(at), Interest::READABLE).is_err() {
                self.drop_conn(at);
            }
        }
    }

    fn drop_conn(&mut self, at: usize) {
        if let Some(mut c) = self.table.remove(at) {
            let _ = self.poll.registry().deregister(&mut c.stream);
        }
    }

    /// A connection is ready: read what arrived, or write what is due.
    fn ready(&mut self, at: usize) {
        let now = self.now();
        let Some(conn) = self.table.slots.get_mut(at).and_then(Option::as_mut) else { return };
        let next = match &mut conn.phase {
            Phase::Reading { buf, .. } => match read_some(&mut conn.stream, buf) {
                Arrived::Nothing => return,
                Arrived::Closed => return self.drop_conn(at),
                Arrived::Bytes => {
                    conn.active = now;
                    match crate::http::parse_head(buf) {
                        Ok(None) => return,
                        Ok(Some(head)) => reply(head, &self.endpoint),
                        Err((status, _)) => Reply::Now(answer_bytes(&text(status, "bad request\n"), false)),
                    }
                }
            },
            Phase::Writing { .. } => return self.write(at),
            Phase::Console { .. } => return,
        };
        self.answer(at, next);
    }

    /// Moves a connection whose head was read on to its answer.
    fn answer(&mut self, at: usize, reply: Reply) {
        let now = self.now();
        let Some(conn) = self.table.slots.get_mut(at).and_then(Option::as_mut) else { return };
        let out = match reply {
            Reply::Now(out) => out,
            Reply::Console(..) if self.handover.is_some() => busy(),
            Reply::Console(head, page) => match self.console.try_send((at, conn.serial, head, page)) {
                Ok(()) => {
                    conn.phase = Phase::Console { by: now.after(CONSOLE_TIMEOUT) };
                    return;
                }
                // The console's thread is between two pages, or busy: this page waits for it
                // for the handover at most, the listener's thread never does.
                Err(crossbeam_channel::TrySendError::Full(job)) => {
                    conn.phase = Phase::Console { by: now.after(CONSOLE_TIMEOUT) };
                    self.handover = Some((job, now.after(crate::listener::HANDOVER)));
                    return;
                }
                Err(crossbeam_channel::TrySendError::Disconnected(_)) => busy(),
            },
        };
        self.writing(at, out);
    }

    /// The page waiting for the console's thread: handed over once it is free, or answered
    /// busy when the handover passed.
    fn hand_over(&mut self) {
        let Some((job, by)) = self.handover.take() else { return };
        match self.console.try_send(job) {
            Ok(()) => {}
            Err(crossbeam_channel::TrySendError::Full(job)) if self.now() < by => {
                self.handover = Some((job, by))
            }
            Err(e) => {
                let (at, serial, _, _) = e.into_inner();
                let waiting =
                    self.table.slots.get(at).and_then(Option::as_ref).is_some_and(|c| c.serial == serial);
                if waiting {
                    self.writing(at, busy());
                }
            }
        }
    }

    fn writing(&mut self, at: usize, out: Vec<u8>) {
        let now = self.now();
        let Some(conn) = self.table.slots.get_mut(at).and_then(Option::as_mut) else { return };
        conn.phase = Phase::Writing { out, done: 0, by: now.after(WRITE_TIMEOUT) };
        let _ = self.poll.registry().reregister(&mut conn.stream, Token(at), Interest::WRITABLE);
        self.write(at);
    }

    /// Writes what the socket takes; a connection whose answer is written is closed.
    fn write(&mut self, at: usize) {
        let now = self.now();
        let Some(conn) = self.table.slots.get_mut(at).and_then(Option::as_mut) else { return };
        let Phase::Writing { out, done, .. } = &mut conn.phase else { return };
        while *done < out.len() {
            match conn.stream.write(&out[*done..]) {
                Ok(0) => return self.drop_conn(at),
                Ok(n) => {
                    *done += n;
                    conn.active = now;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return self.drop_conn(at),
            }
        }
        let _ = conn.stream.shutdown(std::net::Shutdown::Write);
        self.drop_conn(at);
    }

    /// The console's answers: each to its connection, if that is still the one waiting.
    fn console_done(&mut self) {
        while let Ok((at, serial, out)) = self.done.try_recv() {
            let waiting =
                self.table.slots.get(at).and_then(Option::as_ref).is_some_and(|c| c.serial == serial);
            if waiting {
                self.writing(at, out);
            }
        }
    }

    /// Drops what is past its deadline (a console page that took too long is answered 503);
    /// how long until the next deadline.
    fn sweep(&mut self) -> Duration {
        let now = self.now();
        let (due, next) = self.table.due(now);
        for at in due {
            let late_page =
                matches!(self.table.slots[at].as_ref().map(|c| &c.phase), Some(Phase::Console { .. }));
            match late_page {
                true => {
                    self.writing(at, answer_bytes(&text(503, "the console did not answer in time\n"), false))
                }
                false => self.drop_conn(at),
            }
        }
        next.map_or(Duration::from_secs(1), |n| n.as_duration().saturating_sub(now.as_duration()))
    }
}

/// What a read of a ready socket found.
enum Arrived {
    Bytes,
    /// A readiness with nothing behind it.
    Nothing,
    /// The client closed, or the socket failed.
    Closed,
}

/// Reads what has arrived (a non-blocking socket), up to a head's bound (a longer one is left
/// for `parse_head` to refuse with 431).
fn read_some(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Arrived {
    let mut chunk = [0u8; 4096];
    let mut got = false;
    loop {
        match stream.read(&mut chunk) {
            Ok(0) if !got => return Arrived::Closed,
            Ok(0) => return Arrived::Bytes,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                got = true;
                if buf.len() > crate::http::MAX_HEAD {
                    return Arrived::Bytes;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return if got { Arrived::Bytes } else { Arrived::Nothing }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Arrived::Closed,
        }
    }
}

impl OpsServer {
    pub fn bind(addr: SocketAddr) -> std::io::Result<OpsServer> {
        Ok(OpsServer { listener: TcpListener::bind(addr)? })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until `stop` disconnects; the console's pages on a thread of its own, with the
    /// connections `console` opens (`None`: no console). `names`: `metrics.host-names`.
    pub fn serve(
        &self,
        ops: Arc<Ops>,
        metrics: Arc<Metrics>,
        console: Option<Console>,
        access: Access,
        stop: crossbeam_channel::Receiver<()>,
    ) -> std::io::Result<()> {
        let poll = Poll::new()?;
        self.listener.set_nonblocking(true)?;
        let mut listening = Listening::from_std(self.listener.try_clone()?);
        poll.registry().register(&mut listening, LISTENER, Interest::READABLE)?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        // No queue: a page is taken only while the console's thread waits for one, so a
        // second page meanwhile is told at once that it is busy.
        let (jobs, job_rx) = crossbeam_channel::bounded::<ConsoleJob>(0);
        let (done_tx, done) = crossbeam_channel::unbounded::<ConsoleDone>();
        let stopping = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _ = stop.recv();
                stopping.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = waker.wake();
            });
            if let Some(mut console) = console {
                let (ops, metrics, waker) = (&ops, &metrics, &waker);
                std::thread::Builder::new()
                    .name("console".into())
                    .spawn_scoped(scope, move || {
                        for (at, serial, head, page) in job_rx.iter() {
                            let a = console.answer(page, ops, metrics);
                            let _ = done_tx.send((at, serial, answer_bytes(&a, head.method == "HEAD")));
                            let _ = waker.wake();
                        }
                    })
                    .expect("the console thread starts");
            } else {
                drop(job_rx);
            }
            let endpoint = Endpoint {
                ops: &ops,
                metrics: &metrics,
                token: access.token.as_deref(),
                console_token: access.console_token.as_deref(),
                names: &access.names,
            };
            let mut reactor =
                Reactor { poll, table: Table::default(), endpoint, console: jobs, done, handover: None };
            reactor.run(&listening, &stopping);
            drop(reactor); // the console's queue closes, and its thread ends
        });
        Ok(())
    }
}

/// Why listening on `addr` exposes what the endpoint serves, if it does: off loopback without
/// `metrics.token`, the console (message texts, flight data, dead letters' errors) is open to
/// the network (#54). Said at start and by `msgx check`.
pub fn exposed(addr: SocketAddr, token: bool) -> Option<String> {
    (!addr.ip().is_loopback() && !token).then(|| {
        format!(
            "metrics listens on {addr}, not loopback, without metrics.token: the console (message texts, flight data, dead letters' errors) is open to whoever reaches it — set metrics.token or listen on 127.0.0.1"
        )
    })
}

/// What the operator should hear about the endpoint's tokens, said at start and by `msgx check`:
/// off loopback with no token, or the scraper's token opening the console too (#68).
pub fn token_warnings(addr: Option<SocketAddr>, token: bool, console: bool) -> Vec<String> {
    let mut said: Vec<String> = addr.and_then(|a| exposed(a, token || console)).into_iter().collect();
    if token && !console {
        said.push("metrics.token opens the console too (message texts, flight data): set metrics.console-token so that a scraper's token does not".into());
    }
    said
}

/// Who may see what: `metrics.token` and `metrics.host-names`.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub token: Option<String>,
    pub console_token: Option<String>,
    pub names: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A held connection in `phase`, last active at `active` (a real loopback socket).
    fn conn(listener: &TcpListener, phase: Phase, active: Mono) -> Conn {
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        Conn { stream: TcpStream::from_std(stream), serial: 0, phase, active }
    }

    /// #68: with every slot writing an answer its reader does not take (console pages opened
    /// and never read), no slot was given up and a new `/live` probe was reset. The writer idle
    /// longest makes room; a connection still sending its head goes first.
    #[test]
    fn regression_writers_nobody_reads_give_up_their_slot_to_a_new_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let t0 = Mono::from_duration(Duration::ZERO);
        let writing =
            |s: u64| Phase::Writing { out: vec![0; 8], done: 0, by: t0.after(Duration::from_secs(s)) };
        let mut table = Table::default();
        for (i, at) in [3u64, 1, 2].into_iter().enumerate() {
            let c = conn(&listener, writing(9), t0.after(Duration::from_secs(at)));
            table.slots.push(Some(c));
            table.held = i + 1;
        }
        assert_eq!(table.idlest(), Some(1), "the writer idle longest");
        let reading = Phase::Reading { buf: Vec::new(), by: t0.after(Duration::from_secs(5)) };
        table.slots.push(Some(conn(&listener, reading, t0.after(Duration::from_secs(7)))));
        assert_eq!(table.idlest(), Some(3), "one still sending its head goes first");
    }
}
