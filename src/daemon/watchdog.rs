//! The watchdog (#42): systemd restarts a hung msgx only if msgx stops saying it is alive, so
//! msgx says so only while every loop that must turn does — each stage thread, the lease keeper
//! and the standby loop mark when their current turn began ([`Pulse`]). A turn longer than
//! `msgx.watchdog.stuck-after` (longer than any store call may take: PostgreSQL's statement
//! timeout is 60 s) means a loop is stuck in a driver or a lock: the pings stop, and systemd's
//! `WatchdogSec=` later restarts the process. The same thread keeps systemd's `STATUS=` line
//! current and says `READY=1` once.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::Receiver;
use log::{info, warn};

use super::threads::pause_or_stop;
use crate::clock::Clock;
use crate::ops::metrics::Metrics;
use crate::ops::notify::Notifier;
use crate::ops::Ops;

/// What the watchdog thread needs.
pub struct Watch {
    pub notifier: Arc<Notifier>,
    pub ops: Arc<Ops>,
    pub metrics: Arc<Metrics>,
    pub clock: Arc<dyn Clock>,
    pub stuck_after: Duration,
}

/// How often the status is looked at when systemd asks for no pings.
const STATUS_EVERY: Duration = Duration::from_secs(5);

/// The watchdog thread, until `stop` disconnects.
pub fn spawn(w: Watch, stop: Receiver<()>) -> std::io::Result<thread::JoinHandle<()>> {
    let tick = w.notifier.ping_every().map_or(STATUS_EVERY, |p| p.min(STATUS_EVERY));
    thread::Builder::new().name("watchdog".into()).spawn(move || {
        let (mut ready, mut said, mut stuck) = (false, String::new(), false);
        loop {
            let (serving, mut status) = w.ops.summary(w.metrics.brief().as_deref());
            let stuck_now = w.ops.pulse.stuck(w.clock.mono(), w.stuck_after);
            if let Some((name, took)) = stuck_now {
                if !std::mem::replace(&mut stuck, true) {
                    warn!("watchdog: stage {name} has been in one turn for {}s (msgx.watchdog.stuck-after); systemd's watchdog is no longer pinged", took.as_secs());
                }
                status.push_str(&format!("; STUCK: stage {name} in one turn longer than {}s", w.stuck_after.as_secs()));
            }
            if serving && !ready {
                w.notifier.ready(&status);
                ready = true;
            } else if status != said {
                w.notifier.status(&status);
            }
            said = status;
            if stuck_now.is_none() {
                if std::mem::take(&mut stuck) {
                    info!("watchdog: every stage turns again; systemd's watchdog is pinged again");
                }
                w.notifier.ping();
            }
            if pause_or_stop(&stop, None, tick) {
                return;
            }
        }
    })
}
