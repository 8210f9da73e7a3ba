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
use crate::ingress::{self, Poller};
use crate::pump::{self, Pump};
use crate::stats::Stats;
use crate::store::flights::RedisFlights;
use crate::store::kafka::KafkaProducer;
use crate::store::mailbox::MysqlMailbox;
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
}

impl DaemonError {
    /// The process exit code (docs/reference.md).
    pub fn exit_code(&self) -> i32 {
        match self {
            DaemonError::Schema(_) => 3,
            DaemonError::Store(_) => 4,
            DaemonError::AnotherInstance => 5,
            DaemonError::StageFailed(_) => 1,
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

/// Waits for the stop signal, a doorbell or the timeout; true when stopping.
fn wait(stop: &Receiver<()>, bell: Option<&Receiver<()>>, timeout: Duration) -> bool {
    let never = crossbeam_channel::never();
    let bell = bell.unwrap_or(&never);
    select! {
        recv(stop) -> _ => true,
        recv(bell) -> _ => false,
        default(timeout) => false,
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
    _pg: Pg,
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
            Ok(Lease { _pg: pg })
        } else {
            Err(DaemonError::AnotherInstance)
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
    let _lease = Lease::acquire(&cfg.pg_url)?;

    let stats = Arc::new(Stats::default());
    let p = &cfg.pipeline;
    let poller = Poller::new(
        Pg::connect(&cfg.pg_url)?,
        MysqlMailbox::connect(&cfg.mysql_url, &cfg.inbound)?,
        clock.clone(),
        p.poll_batch,
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
        clock.clone(),
        pump::retry_policy(p),
        p.dispatch_batch,
        cfg.topic_msg.clone(),
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

    let (exit_tx, exit_rx) = crossbeam_channel::unbounded();
    let (to_process, process_bell) = bell();
    let (to_dispatch, dispatch_bell) = bell();
    let (to_backfill, backfill_bell) = bell();
    let interval = p.poll_interval;
    let mut handles = Vec::new();

    let spawn = |name: &'static str, body: Box<dyn FnOnce() + Send>| {
        let tx = exit_tx.clone();
        thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _guard = ExitGuard { name, tx };
                body()
            })
            .expect("spawning a stage thread")
    };

    {
        let stop = stop.clone();
        let mut poller = poller;
        handles.push(spawn(
            "poll",
            Box::new(move || {
                let mut errors = 0;
                loop {
                    let pause = match poller.round() {
                        Ok(ingress::Round::Polled { full, new, .. }) => {
                            errors = 0;
                            if new > 0 {
                                to_process.ring();
                            }
                            if full {
                                Duration::ZERO
                            } else {
                                interval
                            }
                        }
                        Ok(ingress::Round::Idle) => {
                            errors = 0;
                            interval
                        }
                        Err(e) => {
                            errors += 1;
                            warn!("poll error attempts={errors} error={e}");
                            error_backoff(errors)
                        }
                    };
                    if wait(&stop, None, pause) {
                        break;
                    }
                }
            }),
        ));
    }
    {
        let stop = stop.clone();
        let clock = clock.clone();
        let mut pump = pump;
        handles.push(spawn(
            "process",
            Box::new(move || {
                let mut errors = 0;
                loop {
                    let pause = match pump.round() {
                        Ok(pump::Round::Worked(_)) => {
                            errors = 0;
                            to_dispatch.ring();
                            to_backfill.ring();
                            Duration::ZERO
                        }
                        Ok(pump::Round::Wait(t)) => {
                            errors = 0;
                            until(clock.as_ref(), t).min(interval)
                        }
                        Ok(pump::Round::Idle) => {
                            errors = 0;
                            interval
                        }
                        Err(e) => {
                            errors += 1;
                            warn!("process error attempts={errors} error={e}");
                            error_backoff(errors)
                        }
                    };
                    if pause.is_zero() {
                        if stop.try_recv() != Err(crossbeam_channel::TryRecvError::Empty) {
                            break;
                        }
                    } else if wait(&stop, Some(&process_bell), pause) {
                        break;
                    }
                }
            }),
        ));
    }
    {
        let stop = stop.clone();
        let clock = clock.clone();
        let mut dispatcher = dispatcher;
        handles.push(spawn(
            "dispatch",
            Box::new(move || {
                let mut errors = 0;
                loop {
                    let pause = match dispatcher.round() {
                        Ok(dispatch::Round::Sent { failed: false, .. }) => {
                            errors = 0;
                            Duration::ZERO
                        }
                        Ok(dispatch::Round::Sent { failed: true, .. }) => Duration::from_millis(100),
                        Ok(dispatch::Round::Wait(t)) => until(clock.as_ref(), t).min(interval),
                        Ok(dispatch::Round::Idle) => {
                            errors = 0;
                            interval
                        }
                        Err(e) => {
                            errors += 1;
                            warn!("dispatch error attempts={errors} error={e}");
                            error_backoff(errors)
                        }
                    };
                    if pause.is_zero() {
                        if stop.try_recv() != Err(crossbeam_channel::TryRecvError::Empty) {
                            break;
                        }
                    } else if wait(&stop, Some(&dispatch_bell), pause) {
                        break;
                    }
                }
            }),
        ));
    }
    {
        let stop = stop.clone();
        let mut backfill = backfill;
        handles.push(spawn(
            "backfill",
            Box::new(move || {
                let mut errors = 0;
                loop {
                    let pause = match backfill.round() {
                        Ok(backfill::Round::Marked { .. }) => {
                            errors = 0;
                            Duration::ZERO
                        }
                        Ok(backfill::Round::Failed { .. }) | Ok(backfill::Round::Idle) => {
                            errors = 0;
                            interval
                        }
                        Err(e) => {
                            errors += 1;
                            warn!("backfill error attempts={errors} error={e}");
                            error_backoff(errors)
                        }
                    };
                    if pause.is_zero() {
                        if stop.try_recv() != Err(crossbeam_channel::TryRecvError::Empty) {
                            break;
                        }
                    } else if wait(&stop, Some(&backfill_bell), pause) {
                        break;
                    }
                }
            }),
        ));
    }
    drop(exit_tx);

    // Supervise: stats line on its interval. A stage that ends before stop was requested
    // (a panic: loops never return on their own) ends the process.
    let stats_every = p.stats_interval;
    loop {
        select! {
            recv(exit_rx) -> msg => {
                let (name, panicked) = msg.unwrap_or(("?", false));
                error!("stage {name} ended{} before stop was requested", if panicked { " by a panic" } else { "" });
                info!("stats {}", stats.line());
                // The other stages are left to the process exit that follows.
                return Err(DaemonError::StageFailed(name.to_string()));
            }
            recv(stop) -> _ => break,
            default(stats_every) => info!("stats {}", stats.line()),
        }
    }
    info!("stopping: finishing the rounds in hand");
    let mut panicked = None;
    for h in handles {
        let name = h.thread().name().unwrap_or("?").to_string();
        if h.join().is_err() {
            panicked.get_or_insert(name);
        }
    }
    info!("stats {}", stats.line());
    if let Some(name) = panicked {
        return Err(DaemonError::StageFailed(name));
    }
    info!("stopped");
    Ok(())
}
