//! The daemon's thread runtime: one OS thread per stage running the shared [`Runner`], the lease
//! keeper, the doorbells between them (bounded crossbeam channels of capacity 1: a full bell is
//! already ringing) and the supervisor that stops and joins them all. Nothing here knows a real
//! store: the threads are handed their stages and stores (`daemon::stores`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{bounded, select, Receiver, Sender};
use log::{error, info};

use super::DaemonError;
use crate::clock::Clock;
use crate::error::{Store, StoreError};
use crate::instance::lifecycle::Served;
use crate::lease::{LeaseGate, LeasePolicy};
use crate::ports::{Claimant, LeaseStore};
use crate::stage::runner::{Keeper, Runner, Turn};
use crate::stage::{OutagePolicy, Pulse, Stage, StageId, StallBoard};
use crate::stats::Stats;

/// A doorbell: ring it without ever blocking.
#[derive(Clone)]
pub struct Bell(Sender<()>);

impl Bell {
    pub fn ring(&self) {
        let _ = self.0.try_send(());
    }
}

pub fn bell() -> (Bell, Receiver<()>) {
    let (tx, rx) = bounded(1);
    (Bell(tx), rx)
}

/// Waits for the stop signal, a doorbell or the timeout; true when stopping. A zero pause
/// only checks for stop.
pub fn pause_or_stop(stop: &Receiver<()>, bell: Option<&Receiver<()>>, pause: Duration) -> bool {
    if pause.is_zero() {
        return !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty));
    }
    let never = crossbeam_channel::never();
    let bell = bell.unwrap_or(&never);
    select! {
        recv(stop) -> _ => true,
        recv(bell) -> _ => false,
        default(pause) => false,
    }
}

/// A thread of the daemon: its loop runs until its stop receiver disconnects.
pub struct Thread {
    name: &'static str,
    body: Box<dyn FnOnce(Receiver<()>) -> Served + Send>,
}

impl Thread {
    pub fn new(name: &'static str, body: impl FnOnce(Receiver<()>) -> Served + Send + 'static) -> Thread {
        Thread { name, body: Box::new(body) }
    }
}

/// What every stage thread shares.
#[derive(Clone)]
pub struct Context {
    pub clock: Arc<dyn Clock>,
    pub gate: Arc<LeaseGate>,
    pub board: StallBoard,
    pub stats: Arc<Stats>,
    pub outage: OutagePolicy,
    /// Where each thread marks the turn it is in, for the watchdog.
    pub pulse: Pulse,
}

/// Where a stage's doorbells come from and go to, and its idle interval.
pub struct Wiring {
    pub bell: Option<Receiver<()>>,
    pub rings: Vec<Bell>,
    pub idle: Duration,
}

/// A stage's thread: the runner's turns, pauses between them, until stop (SPEC §4.9).
pub fn spawn<S: Stage + Send + 'static>(mut stage: S, wiring: Wiring, ctx: Context) -> Thread {
    Thread::new(S::ID.name(), move |stop| {
        let mut runner = Runner::new(S::ID, ctx.outage, wiring.idle);
        loop {
            let turning = ctx.pulse.turning(S::ID.name(), ctx.clock.mono());
            let turn = runner.turn(&mut stage, &*ctx.gate, &ctx.board, &ctx.stats, &*ctx.clock);
            drop(turning);
            let pause = match turn {
                Turn::Again { wake, ring } => {
                    if ring {
                        wiring.rings.iter().for_each(Bell::ring);
                    }
                    wake.duration_since(ctx.clock.now()).unwrap_or_default()
                }
                Turn::Stalled { wake, .. } => wake.duration_since(ctx.clock.now()).unwrap_or_default(),
                Turn::Stop(halt) => return halt.into(),
            };
            if pause_or_stop(&stop, wiring.bell.as_ref(), pause) {
                stage.close();
                return Served::Stopped;
            }
        }
    })
}

/// The lease keeper: renews every `renew-interval`, confirms the gate after each renewal,
/// reports the stalled stages with it, and closes the gate for good when a newer instance
/// holds the lease. A lease store that is unreachable is an outage, not a lost lease: the
/// gate closes when the last confirmation runs out, and opens again if a late renewal finds
/// the lease still ours.
pub fn lease_keeper(
    mut store: impl LeaseStore + Send + 'static,
    me: Claimant,
    policy: LeasePolicy,
    ctx: Context,
) -> Thread {
    Thread::new("lease", move |stop| {
        let mut keeper = Keeper::new(policy.duration, ctx.outage);
        let epoch = ctx.gate.epoch();
        let mut stuck_said = false;
        loop {
            let sent = ctx.clock.now();
            let sent_mono = ctx.clock.mono();
            // A loop that made no progress for stuck-after: this instance no longer renews, so
            // its gate closes when the lease runs out and a standby takes over (#54).
            match ctx.pulse.stuck(sent_mono, policy.stuck_after) {
                Some((name, took)) => {
                    if !std::mem::replace(&mut stuck_said, true) {
                        log::warn!("lease epoch={epoch} not renewed: {name} has made no progress for {}s (msgx.watchdog.stuck-after); a standby takes over when the lease runs out", took.as_secs());
                    }
                }
                None => {
                    let turning = ctx.pulse.turning("lease", sent_mono);
                    let renewed = store.renew(&me, epoch, policy.duration, &Keeper::status(&ctx.board));
                    drop(turning);
                    if let Some(halt) = keeper.turn(renewed, sent_mono, &ctx.gate, &ctx.stats, sent) {
                        return halt.into();
                    }
                }
            }
            if pause_or_stop(&stop, None, policy.renew_every) {
                return Served::Stopped;
            }
        }
    })
}

/// Runs the threads until `stop` disconnects or one of them ends on its own (fenced, a store
/// that forgot, or a panic). Either way every thread is then told to stop, finishes its round
/// and is joined; `on_tick` runs every `tick` meanwhile (the stats line). How the holding
/// ended is a [`Served`] — the instance machine's to follow —; a thread that ended otherwise
/// (a panic, an end before stop) fails the run.
pub fn supervise(
    threads: Vec<Thread>,
    stop: &Receiver<()>,
    tick: Duration,
    mut on_tick: impl FnMut(),
) -> Result<Served, DaemonError> {
    let (inner_stop_tx, inner_stop) = bounded::<()>(0);
    let (exit_tx, exit_rx) = crossbeam_channel::unbounded::<(&'static str, Option<Served>)>();
    let mut handles = Vec::new();
    for t in threads {
        let tx = exit_tx.clone();
        let rx = inner_stop.clone();
        let Thread { name, body } = t;
        let h = thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut guard = ExitGuard { name, tx, exit: None };
                guard.exit = Some(body(rx));
            })
            .map_err(|e| {
                StoreError::unavailable(Store::Daemon, format!("cannot start thread {name}: {e}"))
            })?;
        handles.push(h);
    }
    drop(exit_tx);
    let early: Result<Served, DaemonError> = loop {
        select! {
            recv(exit_rx) -> msg => {
                break match msg {
                    Ok((_, Some(halted @ (Served::Fenced(_) | Served::Forgot(_) | Served::Asked(_))))) => Ok(halted),
                    Ok((name, exit)) => {
                        error!("stage {name} ended{} before stop was requested", if exit.is_none() { " by a panic" } else { "" });
                        Err(DaemonError::StageFailed(name.to_string()))
                    }
                    Err(_) => Err(DaemonError::StageFailed("?".into())),
                };
            }
            recv(stop) -> _ => break Ok(Served::Stopped),
            default(tick) => on_tick(),
        }
    };
    info!("stopping: finishing the rounds in hand");
    drop(inner_stop_tx);
    let mut panicked = None;
    for h in handles {
        let name = h.thread().name().unwrap_or("?").to_string();
        if h.join().is_err() {
            panicked.get_or_insert(name);
        }
    }
    match (early, panicked) {
        (Err(e), _) => Err(e),
        (Ok(Served::Stopped), Some(name)) => Err(DaemonError::StageFailed(name)),
        (Ok(served), _) => Ok(served),
    }
}

/// Tells the supervisor when a thread ends: with its exit, or `None` when it panicked.
struct ExitGuard {
    name: &'static str,
    tx: Sender<(&'static str, Option<Served>)>,
    exit: Option<Served>,
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let exit = if thread::panicking() { None } else { self.exit.take() };
        let _ = self.tx.send((self.name, exit));
    }
}

/// The doorbells between the stages, as the topology says (`StageId::rings`).
#[derive(Default)]
pub struct Doorbells {
    doors: BTreeMap<StageId, Bell>,
    bells: BTreeMap<StageId, Receiver<()>>,
}

impl Doorbells {
    pub fn new() -> Doorbells {
        let (mut doors, mut bells): (BTreeMap<_, _>, BTreeMap<_, _>) = Default::default();
        for id in StageId::ALL.into_iter().filter(|s| s.has_bell()) {
            let (door, bell) = bell();
            doors.insert(id, door);
            bells.insert(id, bell);
        }
        Doorbells { doors, bells }
    }

    /// Rings `id`'s bell.
    pub fn door(&self, id: StageId) -> Bell {
        self.doors[&id].clone()
    }

    /// The bells `id` rings when it made progress.
    pub fn rings(&self, id: StageId) -> Vec<Bell> {
        id.rings().iter().map(|r| self.door(*r)).collect()
    }

    /// `id`'s own bell (taken once), the bells it rings, its idle interval.
    pub fn wire(&mut self, id: StageId, p: &crate::config::Pipeline) -> Wiring {
        Wiring { bell: self.bells.remove(&id), rings: self.rings(id), idle: id.idle(p) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn until_stopped(flag: Arc<AtomicBool>) -> impl FnOnce(Receiver<()>) -> Served + Send + 'static {
        move |stop: Receiver<()>| {
            let _ = stop.recv(); // blocks until the supervisor disconnects it
            flag.store(true, Ordering::SeqCst);
            Served::Stopped
        }
    }

    #[test]
    fn stop_request_ends_every_thread_cleanly() {
        let (tx, rx) = bounded::<()>(0);
        let (a, b) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let threads =
            vec![Thread::new("a", until_stopped(a.clone())), Thread::new("b", until_stopped(b.clone()))];
        drop(tx);
        supervise(threads, &rx, Duration::from_secs(3600), || {}).expect("clean stop");
        assert!(a.load(Ordering::SeqCst) && b.load(Ordering::SeqCst), "both saw stop");
    }

    #[test]
    fn a_fenced_thread_stops_every_thread_and_the_holding_ends_fenced() {
        let (_tx, rx) = bounded::<()>(0);
        let other = Arc::new(AtomicBool::new(false));
        let threads = vec![
            Thread::new("steady", until_stopped(other.clone())),
            Thread::new("lease", |_stop| Served::Fenced("lease epoch 3 taken over".into())),
        ];
        let served = supervise(threads, &rx, Duration::from_secs(3600), || {}).unwrap();
        assert!(matches!(&served, Served::Fenced(w) if w.contains("epoch 3")), "{served:?}");
        assert!(other.load(Ordering::SeqCst));
    }

    #[test]
    fn a_panicking_thread_stops_the_others_and_fails_the_run() {
        let (_tx, rx) = bounded::<()>(0); // nobody asks to stop
        let other = Arc::new(AtomicBool::new(false));
        let threads = vec![
            Thread::new("steady", until_stopped(other.clone())),
            Thread::new("broken", |_stop| panic!("boom (expected by this test)")),
        ];
        let err = supervise(threads, &rx, Duration::from_secs(3600), || {}).unwrap_err();
        assert!(matches!(&err, DaemonError::StageFailed(n) if n == "broken"), "{err}");
        assert_eq!(err.exit(), crate::exit::Exit::Failed);
        assert!(other.load(Ordering::SeqCst), "the steady thread was stopped and joined");
    }
}
