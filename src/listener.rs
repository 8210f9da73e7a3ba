//! A bounded TCP listener shared by the compat endpoint and the operations endpoint: a fixed
//! pool of workers, each owning its state; a connection goes to a worker that is idle (or free
//! within [`HANDOVER`]) or is answered "busy" at once — never queued behind a slow client; an
//! `accept()` error (out of file descriptors) is logged as `<name> accept error` (e.g.
//! `compat-http accept error`, `metrics accept error`) and the listener keeps serving.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use log::warn;

/// How long a new connection waits for a worker to be free before it is answered busy.
pub const HANDOVER: Duration = Duration::from_millis(100);

/// Where to connect to wake a listener bound to `addr` (an unspecified address listens on
/// loopback too).
fn wake_address(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => {
            SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, a.port()))
        }
        SocketAddr::V6(a) if a.ip().is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port()))
        }
        other => other,
    }
}

/// Serves `listener` with `workers` until `stop` disconnects: `handle` runs on a worker for
/// each connection it takes, `busy` on the accepting thread for one no worker took.
pub fn serve<W: Send>(
    name: &'static str,
    listener: &TcpListener,
    workers: Vec<W>,
    stop: &crossbeam_channel::Receiver<()>,
    handle: impl Fn(&mut W, TcpStream) + Sync,
    busy: impl Fn(TcpStream) + Sync,
) {
    let (tx, rx) = crossbeam_channel::bounded::<TcpStream>(0);
    let stopping = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // accept() blocks (a request is taken the moment it arrives); stop wakes it with a
        // connection of its own.
        scope.spawn(|| {
            let _ = stop.recv();
            stopping.store(true, SeqCst);
            if let Ok(addr) = listener.local_addr().map(wake_address) {
                let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
            }
        });
        for mut w in workers {
            let (rx, handle) = (rx.clone(), &handle);
            scope.spawn(move || rx.iter().for_each(|s| handle(&mut w, s)));
        }
        drop(rx);
        loop {
            let accepted = listener.accept();
            if stopping.load(SeqCst) {
                break;
            }
            match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    if let Err(crossbeam_channel::SendTimeoutError::Timeout(s)) =
                        tx.send_timeout(stream, HANDOVER)
                    {
                        busy(s);
                    }
                }
                Err(e) => {
                    // Out of file descriptors, say: keep serving, without spinning.
                    warn!("{name} accept error: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        drop(tx);
    });
}
