//! The running daemon: one OS thread per stage (poll, process, dispatch, backfill), joined by
//! bounded crossbeam channels, plus the lease that keeps a second instance out (PRE-5).
//!
//! PostgreSQL holds the truth; the channels are doorbells (capacity 1, a full bell is
//! already ringing) so that a stage reacts at once instead of at its next poll. Each stage
//! still polls on its own interval, so a lost ring costs latency, never a message.
//!
//! Stopping: dropping the stop sender disconnects every stage's stop receiver; each finishes
//! the round in hand (bounded by its batch size) and returns. A stage that panics is logged
//! and stops the whole process with a non-zero exit, so systemd restarts it.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{bounded, select, Receiver, Sender};
use log::{error, info, warn};

use crate::backfill::{self, Backfill};
use crate::clock::Clock;
use crate::config::Config;
use crate::dispatch::{self, Dispatcher};
use crate::error::StoreError;
use crate::ingress::compat::CompatServer;
use crate::ingress::{self, Poller};
use crate::jobs::Jobs;
use crate::pump::{self, Pump};
use crate::stats::Stats;
use crate::store::flights::RedisFlights;
use crate::store::kafka::KafkaProducer;
use crate::store::mailbox::{MysqlMailbox, MysqlOutbound};
use crate::store::pg::{migrate, Pg};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("schema: {0}")]
    Schema(#[from] migrate::SchemaError),
    #[error("cannot start: {0}")]
    Store(#[from] StoreError),
    #[error("another msgx instance holds the lease on this database (PRE-5: one active instance); this one will not write")]
    AnotherInstance,
    #[error("stage {0} stopped unexpectedly; the process stops so that it can be restarted")]
    StageFailed(String),
    #[error("the single-instance lease was lost (its PostgreSQL session ended); stopping so that no second writer can run beside another instance (PRE-5)")]
    LeaseLost,
}

impl DaemonError {
    /// The process exit code (docs/reference.md).
    pub fn exit_code(&self) -> i32 {
        match self {
            DaemonError::Schema(_) => 3,
            DaemonError::Store(_) => 4,
            DaemonError::AnotherInstance => 5,
            DaemonError::StageFailed(_) | DaemonError::LeaseLost => 1,
        }
    }
}

/// A doorbell: ring it without ever blocking.
#[derive(Clone)]
struct Bell(Sender<()>);

impl Bell {
    fn ring(&self) {
        let _ = self.0.try_send(());
    }
}

fn bell() -> (Bell, Receiver<()>) {
    let (tx, rx) = bounded(1);
    (Bell(tx), rx)
}

/// Waits for the stop signal, a doorbell or the timeout; true when stopping. A zero pause
/// only checks for stop.
fn pause_or_stop(stop: &Receiver<()>, bell: Option<&Receiver<()>>, pause: Duration) -> bool {
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

/// A stage's loop: run a round, pause as it says (a doorbell cuts the pause short), until
/// stop. A store error outside any message backs the stage off 1 s doubling to 30 s.
fn stage_loop(
    name: &str,
    stop: &Receiver<()>,
    bell: Option<&Receiver<()>>,
    mut round: impl FnMut() -> Result<Duration, StoreError>,
) {
    let mut errors = 0;
    loop {
        let pause = match round() {
            Ok(p) => {
                errors = 0;
                p
            }
            Err(e) => {
                errors += 1;
                warn!("{name} error attempts={errors} error={e}");
                error_backoff(errors)
            }
        };
        if pause_or_stop(stop, bell, pause) {
            break;
        }
    }
}

/// A stage thread: its loop runs until its stop receiver disconnects.
pub struct Stage {
    name: &'static str,
    body: Box<dyn FnOnce(Receiver<()>) + Send>,
}

impl Stage {
    pub fn new(name: &'static str, body: impl FnOnce(Receiver<()>) + Send + 'static) -> Stage {
        Stage { name, body: Box::new(body) }
    }
}

/// Runs the stages on their own threads until `stop` disconnects or one of them ends on its
/// own (a stage loop only ends by a panic). Either way every stage is then told to stop,
/// finishes its round and is joined; `on_tick` runs every `tick` meanwhile (the stats line).
pub fn supervise(
    stages: Vec<Stage>,
    stop: &Receiver<()>,
    tick: Duration,
    mut on_tick: impl FnMut() -> Result<(), DaemonError>,
) -> Result<(), DaemonError> {
    let (inner_stop_tx, inner_stop) = bounded::<()>(0);
    let (exit_tx, exit_rx) = crossbeam_channel::unbounded();
    let mut handles = Vec::new();
    for stage in stages {
        let tx = exit_tx.clone();
        let rx = inner_stop.clone();
        let Stage { name, body } = stage;
        let h = thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _guard = ExitGuard { name, tx };
                body(rx)
            })
            .map_err(|e| StoreError::new("daemon", format!("cannot start thread {name}: {e}")))?;
        handles.push(h);
    }
    drop(exit_tx);
    let early: Option<DaemonError> = loop {
        select! {
            recv(exit_rx) -> msg => {
                let (name, panicked) = msg.unwrap_or(("?", false));
                error!("stage {name} ended{} before stop was requested", if panicked { " by a panic" } else { "" });
                break Some(DaemonError::StageFailed(name.to_string()));
            }
            recv(stop) -> _ => break None,
            default(tick) => if let Err(e) = on_tick() {
                error!("{e}");
                break Some(e);
            },
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
        (Some(e), _) => Err(e),
        (None, Some(name)) => Err(DaemonError::StageFailed(name)),
        (None, None) => Ok(()),
    }
}

/// Delay after `n` consecutive store errors of a stage: 1 s doubling to 30 s.
fn error_backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.min(5)).min(Duration::from_secs(30))
}

fn until(clock: &dyn Clock, t: SystemTime) -> Duration {
    t.duration_since(clock.now()).unwrap_or(Duration::ZERO)
}

/// Tells the supervisor when a stage's thread ends, panicking or not.
struct ExitGuard {
    name: &'static str,
    tx: Sender<(&'static str, bool)>,
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let _ = self.tx.send((self.name, thread::panicking()));
    }
}

/// Holds the single-instance lease for as long as it lives: a session advisory lock on a
/// dedicated connection (released by PostgreSQL if this process dies).
pub struct Lease {
    pg: Pg,
}

const LEASE_KEY: i64 = 0x6d73_6778; // "msgx"

impl Lease {
    pub fn acquire(url: &str) -> Result<Lease, DaemonError> {
        let mut pg = Pg::connect(url)?;
        let got: bool = pg
            .client()?
            .query_one("SELECT pg_try_advisory_lock($1)", &[&LEASE_KEY])
            .map_err(StoreError::from)?
            .get(0);
        if got {
            Ok(Lease { pg })
        } else {
            Err(DaemonError::AnotherInstance)
        }
    }

    /// Whether the lease is still held: the advisory lock lives only as long as its session,
    /// so a dropped connection means another instance may take over (PRE-5).
    pub fn held(&mut self) -> bool {
        match self.pg.client() {
            Ok(c) if !c.is_closed() => c
                .query_one("SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND pid = pg_backend_pid()", &[&(LEASE_KEY as u32)])
                .map(|r| r.get::<_, bool>(0))
                .unwrap_or(false),
            _ => false,
        }
    }
}

/// Runs msgx until `stop` disconnects (or a stage fails). Connections are opened and the
/// schema checked before any thread starts, so a bad setting fails fast.
pub fn run(cfg: &Config, clock: Arc<dyn Clock>, stop: Receiver<()>) -> Result<(), DaemonError> {
    for line in cfg.describe() {
        info!("config {line}");
    }
    let mut schema_pg = Pg::connect(&cfg.pg_url)?;
    migrate::verify(schema_pg.client()?)?;
    drop(schema_pg);
    let mut lease = Lease::acquire(&cfg.pg_url)?;

    let stats = Arc::new(Stats::default());
    let p = &cfg.pipeline;
    let poller = Poller::new(
        Pg::connect(&cfg.pg_url)?,
        MysqlMailbox::connect(&cfg.mysql_url, &cfg.inbound)?,
        clock.clone(),
        p,
        stats.clone(),
    );
    let pump = Pump::new(
        Pg::connect(&cfg.pg_url)?,
        MysqlMailbox::connect(&cfg.mysql_url, &cfg.inbound)?,
        RedisFlights::connect(&cfg.redis_url, &cfg.redis_prefix)?,
        clock.clone(),
        p,
        stats.clone(),
    );
    let dispatcher = Dispatcher::new(
        Pg::connect(&cfg.pg_url)?,
        KafkaProducer::new(cfg)?,
        MysqlOutbound::connect(&cfg.mysql_url, &cfg.outbound)?,
        clock.clone(),
        pump::retry_policy(p),
        dispatch::Settings::from_config(cfg),
        stats.clone(),
    );
    let backfill = Backfill::new(
        Pg::connect(&cfg.pg_url)?,
        MysqlMailbox::connect(&cfg.mysql_url, &cfg.inbound)?,
        clock.clone(),
        p,
        stats.clone(),
    );
    info!("started poll_interval={:?} max_attempts={}", p.poll_interval, p.max_attempts);

    let (to_process, process_bell) = bell();
    let compat_bell = to_process.clone();
    let (to_dispatch, dispatch_bell) = bell();
    let (to_backfill, backfill_bell) = bell();
    let interval = p.poll_interval;
    let mut stages: Vec<Stage> = Vec::new();

    let mut poller = poller;
    stages.push(Stage::new("poll", move |stop| {
        stage_loop("poll", &stop, None, || {
            Ok(match poller.round()? {
                ingress::Round::Polled { full, new, .. } => {
                    if new > 0 {
                        to_process.ring();
                    }
                    // Poll again at once while batches come back full.
                    if full {
                        Duration::ZERO
                    } else {
                        interval
                    }
                }
                ingress::Round::Idle => interval,
            })
        })
    }));

    let mut pump = pump;
    let pump_clock = clock.clone();
    stages.push(Stage::new("process", move |stop| {
        stage_loop("process", &stop, Some(&process_bell), || {
            Ok(match pump.round()? {
                pump::Round::Worked(_) => {
                    to_dispatch.ring();
                    to_backfill.ring();
                    Duration::ZERO
                }
                // Capped, so a replay by another process is noticed within one interval.
                pump::Round::Wait(t) => until(pump_clock.as_ref(), t).min(interval),
                pump::Round::Idle => interval,
            })
        })
    }));

    let mut dispatcher = dispatcher;
    let dispatch_clock = clock.clone();
    stages.push(Stage::new("dispatch", move |stop| {
        stage_loop("dispatch", &stop, Some(&dispatch_bell), || {
            Ok(match dispatcher.round()? {
                dispatch::Round::Sent { failed: false, .. } => Duration::ZERO,
                dispatch::Round::Sent { failed: true, .. } => Duration::from_millis(100),
                dispatch::Round::Wait(t) => until(dispatch_clock.as_ref(), t).min(interval),
                dispatch::Round::Idle => interval,
            })
        })
    }));

    if cfg.compat.enabled {
        if !cfg.compat.listen.ip().is_loopback() {
            warn!(
                "compat-http listens on {} — not loopback: keep it behind a proxy or firewall",
                cfg.compat.listen
            );
        }
        let mut server = CompatServer::bind(
            cfg.compat.listen,
            MysqlMailbox::connect(&cfg.mysql_url, &cfg.inbound)?,
            Pg::connect(&cfg.pg_url)?,
            clock.clone(),
            cfg.compat.max_body_bytes,
        )?;
        info!("compat-http listening on {}", cfg.compat.listen);
        let to_process = compat_bell;
        stages.push(Stage::new("compat-http", move |stop| loop {
            if server.serve_one(Duration::from_millis(200)) {
                to_process.ring();
            }
            if !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty)) {
                break;
            }
        }));
    }

    let mut jobs = Jobs::new(Pg::connect(&cfg.pg_url)?, clock.clone(), p, stats.clone());
    let jobs_every = p.jobs_interval;
    stages.push(Stage::new("jobs", move |stop| {
        stage_loop("jobs", &stop, None, || Ok(if jobs.round()?.more { Duration::ZERO } else { jobs_every }))
    }));

    let mut backfill = backfill;
    stages.push(Stage::new("backfill", move |stop| {
        stage_loop("backfill", &stop, Some(&backfill_bell), || {
            Ok(match backfill.round()? {
                backfill::Round::Marked { .. } => Duration::ZERO,
                backfill::Round::Failed { .. } | backfill::Round::Idle => interval,
            })
        })
    }));

    // Every few seconds: the lease must still be held; the stats line on its own interval.
    let tick = Duration::from_secs(5).min(p.stats_interval);
    let per_stats = (p.stats_interval.as_secs() / tick.as_secs().max(1)).max(1);
    let mut ticks = 0u64;
    let result = supervise(stages, &stop, tick, || {
        ticks += 1;
        if ticks % per_stats == 0 {
            info!("stats {}", stats.line());
        }
        if lease.held() {
            Ok(())
        } else {
            Err(DaemonError::LeaseLost)
        }
    });
    info!("stats {}", stats.line());
    result?;
    info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn until_stopped(flag: Arc<AtomicBool>) -> impl FnOnce(Receiver<()>) + Send + 'static {
        move |stop: Receiver<()>| {
            let _ = stop.recv(); // blocks until the supervisor disconnects it
            flag.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn stop_request_ends_every_stage_cleanly() {
        let (tx, rx) = bounded::<()>(0);
        let (a, b) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let stages =
            vec![Stage::new("a", until_stopped(a.clone())), Stage::new("b", until_stopped(b.clone()))];
        drop(tx);
        supervise(stages, &rx, Duration::from_secs(3600), || Ok(())).expect("clean stop");
        assert!(a.load(Ordering::SeqCst) && b.load(Ordering::SeqCst), "both stages saw stop");
    }

    #[test]
    fn a_failing_tick_stops_every_stage() {
        let (_tx, rx) = bounded::<()>(0);
        let other = Arc::new(AtomicBool::new(false));
        let stages = vec![Stage::new("steady", until_stopped(other.clone()))];
        let err =
            supervise(stages, &rx, Duration::from_millis(1), || Err(DaemonError::LeaseLost)).unwrap_err();
        assert!(matches!(err, DaemonError::LeaseLost));
        assert!(other.load(Ordering::SeqCst));
    }

    #[test]
    fn a_panicking_stage_stops_the_others_and_fails_the_run() {
        let (_tx, rx) = bounded::<()>(0); // nobody asks to stop
        let other = Arc::new(AtomicBool::new(false));
        let stages = vec![
            Stage::new("steady", until_stopped(other.clone())),
            Stage::new("broken", |_stop| panic!("boom (expected by this test)")),
        ];
        let err = supervise(stages, &rx, Duration::from_secs(3600), || Ok(())).unwrap_err();
        assert!(matches!(&err, DaemonError::StageFailed(n) if n == "broken"), "{err}");
        assert_eq!(err.exit_code(), 1);
        assert!(other.load(Ordering::SeqCst), "the steady stage was stopped and joined");
    }
}
