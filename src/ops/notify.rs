//! systemd's service notification protocol (`sd_notify(3)`), spoken directly: one datagram of
//! `KEY=value` lines to the socket named by `NOTIFY_SOCKET` — no libsystemd link. Without that
//! variable (msgx not started by a `Type=notify` unit, or started by hand) every call is a no-op.
//!
//! What msgx says, and when (docs/operations.md, "Under systemd"):
//! - `READY=1` once the instance serves, or stands by with the lease store reached;
//! - `STATUS=…` a one-line state whenever it changes (active/standby, lag, DEAD, a store away);
//! - `WATCHDOG=1` every half `WATCHDOG_USEC` while every watched loop turns (`daemon::watchdog`);
//! - `STOPPING=1` on SIGTERM/SIGINT; `RELOADING=1` then `READY=1` around SIGHUP's log reopen.

use std::ffi::OsStr;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use log::warn;

/// Where the notifications go, if anywhere, and how often the watchdog wants a ping.
pub struct Notifier {
    to: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
    /// A failed send is said once, not at every ping.
    failed: AtomicBool,
}

/// The environment systemd hands a `Type=notify` service, as read at the binary's edge.
#[derive(Debug, Default, Clone)]
pub struct NotifyEnv<'a> {
    pub socket: Option<&'a OsStr>,
    pub watchdog_usec: Option<&'a str>,
    pub watchdog_pid: Option<&'a str>,
}

impl Notifier {
    /// Says nothing (no `NOTIFY_SOCKET`).
    pub fn off() -> Notifier {
        Notifier { to: None, watchdog: None, failed: AtomicBool::new(false) }
    }

    /// The notifier systemd asked for; `pid` is this process's. A socket that cannot be opened
    /// or a malformed variable is an error naming it.
    pub fn new(env: &NotifyEnv, pid: u32) -> Result<Notifier, String> {
        let Some(path) = env.socket.filter(|p| !p.is_empty()) else { return Ok(Notifier::off()) };
        let addr = address(path)?;
        let sock =
            UnixDatagram::unbound().map_err(|e| format!("NOTIFY_SOCKET: cannot open a socket: {e}"))?;
        // WATCHDOG_PID, when set, names the process meant to ping: another pid means the
        // variables were inherited from a parent, and this process keeps quiet about the watchdog.
        let ours = env.watchdog_pid.is_none_or(|p| p.trim() == pid.to_string());
        let watchdog = match env.watchdog_usec.filter(|_| ours) {
            None => None,
            Some(us) => {
                let us: u64 = us
                    .trim()
                    .parse()
                    .map_err(|_| format!("WATCHDOG_USEC: {us:?} is not a number of microseconds"))?;
                (us > 0).then(|| Duration::from_micros(us))
            }
        };
        Ok(Notifier { to: Some((sock, addr)), watchdog, failed: AtomicBool::new(false) })
    }

    /// Whether anything is said at all.
    pub fn on(&self) -> bool {
        self.to.is_some()
    }

    /// How often to ping: half the watchdog's timeout, as sd_watchdog_enabled(3) advises.
    pub fn ping_every(&self) -> Option<Duration> {
        self.watchdog.map(|w| w / 2)
    }

    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }

    pub fn ping(&self) {
        if self.watchdog.is_some() {
            self.send("WATCHDOG=1");
        }
    }

    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=stopping: finishing the rounds in hand");
    }

    pub fn reloading(&self) {
        self.send("RELOADING=1\nSTATUS=reopening the log file");
    }

    /// After a reload: ready again (the watchdog thread says the status at its next look).
    pub fn reloaded(&self) {
        self.send("READY=1");
    }

    fn send(&self, msg: &str) {
        let Some((sock, addr)) = &self.to else { return };
        match sock.send_to_addr(msg.as_bytes(), addr) {
            Ok(_) => {
                self.failed.store(false, Ordering::Relaxed);
            }
            Err(e) => {
                if !self.failed.swap(true, Ordering::Relaxed) {
                    warn!("systemd notification not sent ({e}); the watchdog may restart msgx");
                }
            }
        }
    }
}

/// `NOTIFY_SOCKET`: a path, or `@name` for an abstract socket (Linux).
fn address(path: &OsStr) -> Result<SocketAddr, String> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_bytes();
    let bad = |e: std::io::Error| format!("NOTIFY_SOCKET={}: {e}", path.to_string_lossy());
    match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name).map_err(bad)
        }
        None if bytes.starts_with(b"/") => SocketAddr::from_pathname(path).map_err(bad),
        None => Err(format!("NOTIFY_SOCKET={}: neither a path nor @name", path.to_string_lossy())),
    }
}

/// A status is one line: systemd shows it in `systemctl status`.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen() -> (tempdir::Dir, UnixDatagram, std::path::PathBuf) {
        let dir = tempdir::Dir::new();
        let path = dir.0.join("notify");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (dir, sock, path)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p = std::env::temp_dir().join(format!("msgx-notify-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn without_notify_socket_nothing_is_said() {
        let n = Notifier::new(&NotifyEnv::default(), 1).unwrap();
        assert!(!n.on());
        assert_eq!(n.ping_every(), None);
        n.ready("active"); // no socket, no panic, no error
    }

    #[test]
    fn the_messages_reach_the_socket_in_order_and_the_status_is_one_line() {
        let (_dir, sock, path) = listen();
        let env =
            NotifyEnv { socket: Some(path.as_os_str()), watchdog_usec: Some("4000000"), watchdog_pid: None };
        let n = Notifier::new(&env, 42).unwrap();
        assert_eq!(n.ping_every(), Some(Duration::from_secs(2)));
        n.ready("standby:\nheld by b");
        n.ping();
        n.reloading();
        n.reloaded();
        n.stopping();
        let got: Vec<String> = (0..5).map(|_| recv(&sock)).collect();
        assert_eq!(
            got,
            [
                "READY=1\nSTATUS=standby: held by b",
                "WATCHDOG=1",
                "RELOADING=1\nSTATUS=reopening the log file",
                "READY=1",
                "STOPPING=1\nSTATUS=stopping: finishing the rounds in hand",
            ]
        );
    }

    #[test]
    fn a_watchdog_meant_for_another_process_is_not_pinged() {
        let (_dir, sock, path) = listen();
        let env = NotifyEnv {
            socket: Some(path.as_os_str()),
            watchdog_usec: Some("1000000"),
            watchdog_pid: Some("7"),
        };
        let n = Notifier::new(&env, 8).unwrap();
        assert_eq!(n.ping_every(), None);
        n.ping();
        n.status("x");
        assert_eq!(recv(&sock), "STATUS=x", "the ping was not sent");
    }

    #[test]
    fn a_bad_variable_is_an_error_that_names_it() {
        let bad = NotifyEnv { socket: Some(OsStr::new("relative")), ..Default::default() };
        assert!(Notifier::new(&bad, 1).err().unwrap().starts_with("NOTIFY_SOCKET=relative"));
        let (_dir, _sock, path) = listen();
        let bad =
            NotifyEnv { socket: Some(path.as_os_str()), watchdog_usec: Some("soon"), watchdog_pid: None };
        assert!(Notifier::new(&bad, 1).err().unwrap().starts_with("WATCHDOG_USEC"));
    }

    #[test]
    fn an_abstract_socket_is_reached() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("msgx-notify-test-{}", std::process::id());
        let sock =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let at = format!("@{name}");
        let n = Notifier::new(&NotifyEnv { socket: Some(OsStr::new(&at)), ..Default::default() }, 1).unwrap();
        n.status("abstract");
        assert_eq!(recv(&sock), "STATUS=abstract");
    }
}
