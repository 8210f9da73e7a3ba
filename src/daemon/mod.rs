//! The running daemon. [`run`] waits as a hot standby while another instance holds the lease
//! (PRE-5), then [`serve`]s: one OS thread per stage (poll, process, dispatch, outbound,
//! backfill, jobs, sentinel, and the lease keeper), joined by bounded crossbeam channels,
//! supervised. Before the stages start, and again after a store forgot what it acknowledged,
//! the stores are compared and healed (`consistency`, #20).
//!
//! PostgreSQL holds the truth; the channels are doorbells (capacity 1, a full bell is already
//! ringing) so that a stage reacts at once instead of at its next poll. Each stage still polls
//! on its own interval, so a lost ring costs latency, never a message.
//!
//! Every stage runs the same loop ([`spawn`]): check the lease gate, run a round at `now`,
//! sleep as the round says. A store that is away stalls the stage with the outage rules of
//! [`Outages`] (WARN, ERROR after `outage-alert-after`, INFO when it is back); a fenced error
//! (a newer instance holds the lease) stops every stage and the process exits 1.
//!
//! Stopping: dropping the stop sender disconnects every stage's stop receiver; each finishes
//! the round in hand (bounded by its batch size) and returns; then the lease is released so a
//! standby takes over at once. A stage that panics stops the whole process with exit 1.
//!
//! Split by role (#38): [`lifecycle`] says what comes next (a pure step the simulator drives
//! too), [`threads`] runs stages and the lease keeper on threads, [`stores`] is the one place a
//! real adapter is made, [`topology`] builds the stages; this module does the I/O between them.

pub mod stores;
pub mod threads;
pub mod topology;
pub mod watchdog;

use crate::instance::effects::{self, Edges};
use crate::instance::lifecycle::{self, End, Served};
use crate::instance::{holder_line, Effect, Input, Instance, InstancePolicy};
use stores::RealStores;
use threads::{lease_keeper, pause_or_stop, spawn, supervise, Bell, Context, Doorbells, Thread};

use crate::ops::http::{Access, OpsServer};
use crate::ops::metrics::Metrics;
use crate::ops::notify::Notifier;
use crate::ops::NotReady;
use crate::ops::Ops;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{bounded, Receiver, TryRecvError};
use log::{error, info, warn};

use crate::clock::Clock;
use crate::clock::Mono;
use crate::codec::Rulebook;
use crate::config::Config;
use crate::consistency::{self, Pass, Stores};
use crate::error::{Store, StoreError};
use crate::ingress::compat::{self, CompatServer};
use crate::lease::LeaseGate;
use crate::ports::{Claim, Claimant, LeaseStore};
use crate::stage::runner::log_notice;
use crate::stage::{human, Beat, Outages, StageId, StallBoard};
use crate::stats::Stats;
use crate::store::pg::{migrate, Pg};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("schema: {0}")]
    Schema(#[from] migrate::SchemaError),
    #[error("cannot start: {0}")]
    Store(#[from] StoreError),
    #[error("stage {0} stopped unexpectedly; the process stops so that it can be restarted")]
    StageFailed(String),
    #[error("this instance is stale: {0}; a newer instance holds the lease, so this one stops without writing anything more (PRE-5)")]
    Fenced(String),
    #[error("{0}; msgx does not write on a store that forgot what it acknowledged: a person must decide (docs/operations.md)")]
    Forgot(String),
}

impl DaemonError {
    /// The instance's end it is: what the machine hears of it (`Input::Failed`).
    pub fn end(&self) -> End {
        match self {
            DaemonError::Schema(e) => End::Schema(e.to_string()),
            DaemonError::Store(e) => End::Away(e.to_string()),
            DaemonError::StageFailed(why) => End::Failed(why.clone()),
            DaemonError::Fenced(why) => End::Fenced(why.clone()),
            DaemonError::Forgot(why) => End::NotHealed(why.clone()),
        }
    }

    /// How the process ends (docs/reference.md): the one table, [`End::exit`].
    pub fn exit(&self) -> crate::exit::Exit {
        self.end().exit()
    }
}

/// Runs msgx until `stop` disconnects (or it is fenced, or a stage fails): the schema is
/// checked first, then the instance waits as a hot standby until it holds the lease, then
/// serves, deciding under `rules` (its release's rulebook, #65).
pub fn run(
    cfg: &Config,
    rules: Arc<Rulebook>,
    clock: Arc<dyn Clock>,
    stop: Receiver<()>,
    notifier: Arc<Notifier>,
) -> Result<(), DaemonError> {
    for line in cfg.describe() {
        info!("config {line}");
    }
    let me = Claimant::this_process(clock.now());
    let ops = Arc::new(Ops::new(Arc::new(Stats::default())));
    // Up from the start: a standby, or an instance waiting for own PostgreSQL, answers /live
    // and says why it is not /ready, and systemd hears from it.
    let (side_stop, side) = side_threads(cfg, &rules, &ops, &clock, notifier)?;
    let result = match schema_checked(cfg, clock.as_ref(), &stop, &ops) {
        Ok(true) => lifetimes(cfg, &rules, &clock, &stop, &me, &ops),
        Ok(false) => Ok(()),
        Err(e) => Err(e),
    };
    ops.starting(NotReady::Stopping, "stopping");
    drop(side_stop);
    side.into_iter().for_each(|t| {
        let _ = t.join();
    });
    result
}

/// The warning for a store reached in plaintext at hosts that are not this machine (#64), as
/// the start-up log and `msgx check` say it; `security` is the store's description.
pub fn plaintext_warning(store: &str, hosts: &[String], security: &str) -> Option<String> {
    if !security.starts_with(crate::store::tls::PLAINTEXT) {
        return None;
    }
    let away: Vec<&str> =
        hosts.iter().map(String::as_str).filter(|h| !crate::store::tls::loopback(h)).collect();
    (!away.is_empty()).then(|| {
        format!(
            "plaintext connection store={store} host={}: not this machine, so its password and every flight's data cross the network readable; ask for TLS (docs/operations.md, \"Securing msgx\")",
            away.join(",")
        )
    })
}

/// How each store is reached, said once at start (#64): own PostgreSQL as its server sees the
/// session, the others as configured (the mailbox as its server sees it when it answers now).
fn say_security(cfg: &Config, pg: &mut crate::store::pg::Pg) {
    let mut lines: Vec<(&str, Vec<String>, String)> = Vec::new();
    if let Ok(s) = pg.security() {
        lines.push(("postgres", pg.hosts(), s));
    }
    if let Ok(mut mb) = crate::store::mailbox::MysqlMailbox::of(cfg) {
        let host = vec![mb.host()];
        let seen = mb.security().unwrap_or_else(|e| format!("not reached now ({})", e.kind.as_str()));
        lines.push(("mailbox", host, seen));
    }
    if let Ok(r) = crate::store::flights::RedisFlights::open(&cfg.redis, &cfg.redis_prefix) {
        lines.push(("redis", r.hosts(), r.security()));
    }
    let brokers = crate::store::kafka::broker_hosts(&cfg.kafka_brokers);
    lines.push(("kafka", brokers, crate::store::kafka::describe(&cfg.kafka_security)));
    for (store, hosts, security) in lines {
        info!("connection store={store} {security}");
        if let Some(w) = plaintext_warning(store, &hosts, &security) {
            warn!("{w}");
        }
    }
}

/// Own PostgreSQL at start: waited for while it is away, as any store is (SPEC §4.9, #54) —
/// systemd hears READY with a status that says so, `/ready` says `store-away`, each try is a
/// watched turn — then its schema and durability checked (a wrong schema still exits 3). A
/// session that drops while the schema or the durability is read is the store away too (#68: it
/// was taken for a schema verdict, exit 3, and the unit never restarted msgx).
/// `false` when stopped while waiting.
fn schema_checked(
    cfg: &Config,
    clock: &dyn Clock,
    stop: &Receiver<()>,
    ops: &Ops,
) -> Result<bool, DaemonError> {
    let mut outages = Outages::new(Store::Postgres.name(), cfg.pipeline.outage);
    let stats = Stats::default();
    let (mut schema_pg, schema, durability) = loop {
        let (sent, turn) = (clock.now(), ops.pulse.turning("start-up", clock.mono()));
        let read = schema_read(cfg);
        drop(turn);
        match read {
            Ok(read) => {
                outages.recovered(sent).iter().for_each(|n| log_notice(n, &stats));
                break read;
            }
            Err(e) => {
                let Some(away) = store_away(&e) else { return Err(e) };
                ops.starting(
                    NotReady::StoreAway(Store::Postgres.name()),
                    format!("waiting for own PostgreSQL at start: {away}"),
                );
                let (notices, pause) = outages.failed(away, sent);
                notices.iter().for_each(|n| log_notice(n, &stats));
                if pause_or_stop(stop, None, pause) {
                    return Ok(false);
                }
            }
        }
    };
    if schema.newer.is_empty() {
        info!("schema {}", schema.line());
    } else {
        warn!("schema {}", schema.line());
    }
    info!("postgres durability {durability}");
    say_security(cfg, &mut schema_pg);
    if cfg.require_sync_standby && durability.synchronous == 0 {
        return Err(DaemonError::Store(StoreError::rejected(
            Store::Postgres,
            format!("datasources.default.require-sync-standby = true and no synchronous standby is attached ({durability})"),
        )));
    }
    Ok(true)
}

/// One try at own PostgreSQL's start-up reads: connected, its schema, its durability.
fn schema_read(
    cfg: &Config,
) -> Result<(crate::store::pg::Pg, migrate::Schema, crate::store::pg::Durability), DaemonError> {
    let mut pg = RealStores::new(cfg).pg_connected()?;
    let schema = migrate::verify(pg.client()?)?;
    let durability = pg.durability()?;
    Ok((pg, schema, durability))
}

/// The store error behind `e` when it is a store away (or untrusted), which is waited out.
fn store_away(e: &DaemonError) -> Option<&StoreError> {
    match e {
        DaemonError::Store(s) | DaemonError::Schema(migrate::SchemaError::Store(s)) if s.is_unavailable() => {
            Some(s)
        }
        _ => None,
    }
}

/// The threads beside the stages, for the process's whole life: the operations endpoint, the
/// store gauges' reader (when the endpoint or systemd shows them) and the watchdog.
fn side_threads(
    cfg: &Config,
    rules: &Arc<Rulebook>,
    ops: &Arc<Ops>,
    clock: &Arc<dyn Clock>,
    notifier: Arc<Notifier>,
) -> Result<(crossbeam_channel::Sender<()>, Vec<thread::JoinHandle<()>>), DaemonError> {
    let (tx, rx) = bounded::<()>(0);
    let failed = |what: &str, e: std::io::Error| DaemonError::StageFailed(format!("{what}: {e}"));
    let metrics = Arc::new(Metrics::new(ops.clone(), clock.clone()));
    let mut threads = Vec::new();
    let endpoint = ops_endpoint(cfg, rules, ops, &metrics, rx.clone())?;
    if endpoint.is_some() || notifier.on() {
        // The store gauges are read on a thread of their own: a PostgreSQL that hangs holds it,
        // never the listener's workers nor the watchdog (#42); one away at start is connected
        // to when it answers (#54).
        let (reader, stop, cfg) = (metrics.clone(), rx.clone(), cfg.clone());
        let gauges = thread::Builder::new().name("metrics-gauges".into()).spawn(move || {
            let mut pg = None;
            loop {
                if pg.is_none() {
                    pg = RealStores::new(&cfg).pg().ok();
                }
                if let Some(pg) = pg.as_mut() {
                    reader.refresh(pg);
                }
                if pause_or_stop(&stop, None, crate::ops::metrics::GAUGES_TTL) {
                    return;
                }
            }
        });
        threads.push(gauges.map_err(|e| failed("metrics-gauges", e))?);
    }
    threads.extend(endpoint);
    let watch = watchdog::Watch {
        notifier,
        ops: ops.clone(),
        metrics,
        clock: clock.clone(),
        stuck_after: cfg.watchdog_stuck_after,
    };
    threads.push(watchdog::spawn(watch, rx).map_err(|e| failed("watchdog", e))?);
    Ok((tx, threads))
}

/// Stands by, takes the lease, checks the stores and serves — and again after a store forgot
/// what it acknowledged (#20) or was away while they were compared. The order is the instance
/// machine's ([`Instance`], which the simulator and `msgx rebuild-flights` drive too); this loop
/// performs its effects on the real stores and threads: the port calls by the one interpreter
/// ([`effects::perform`]), the comparison, the stages, the pauses and the end here.
fn lifetimes(
    cfg: &Config,
    rules: &Arc<Rulebook>,
    clock: &Arc<dyn Clock>,
    stop: &Receiver<()>,
    me: &Claimant,
    ops: &Arc<Ops>,
) -> Result<(), DaemonError> {
    let real = RealStores::new(cfg);
    let (mut lease, mut fence) = (real.pg()?, real.redis()?);
    let mut d = Lifetime { cfg, rules, clock, stop, me, ops, standby: Standby::new(cfg) };
    let mut instance = Instance::new(InstancePolicy::of(cfg, false));
    let mut effect = instance.start();
    // An error met while performing an effect: the machine hears it as its end (the lease
    // given back first), and the process ends with it.
    let mut failure: Option<DaemonError> = None;
    let mut failed = |e: DaemonError| {
        let end = e.end();
        failure.get_or_insert(e);
        Input::Failed(end)
    };
    loop {
        let input = match effect {
            Effect::Exit(end) => return failure.map_or_else(|| ended(end), Err),
            Effect::Compare { epoch } => d.compare(epoch).map_or_else(&mut failed, Input::Compared),
            Effect::Serve { epoch, since, token } => match real.pg() {
                // The lease session goes to the lease keeper; the next holding opens another.
                Ok(next) => {
                    let session = std::mem::replace(&mut lease, next);
                    d.serve(session, epoch, since, token).unwrap_or_else(&mut failed)
                }
                Err(e) => failed(e.into()),
            },
            Effect::StandDown { forgot, pause, why } => d.stand_down(forgot, pause, &why),
            Effect::Wait(pause) if pause_or_stop(stop, None, pause) => {
                info!("stopped while standing by");
                Input::Stop
            }
            Effect::Wait(_) => Input::Done,
            call => {
                let turn = ops.pulse.turning("standby", clock.mono());
                let duration = cfg.lease.duration;
                let mut edges =
                    Edges { lease: &mut lease, fence: &mut fence, me, duration, clock: clock.as_ref() };
                let input =
                    effects::perform(&call, &mut edges).expect("an effect that is one call to a port");
                drop(turn);
                d.standby.heard(&input, ops, clock.now());
                input
            }
        };
        effect = instance.on(input);
    }
}

/// The process's end for the instance's: a tool's ends never come to a daemon, which stands by
/// instead; they keep their exit codes all the same. One the daemon met itself is returned as
/// it met it (`lifetimes`).
fn ended(end: End) -> Result<(), DaemonError> {
    match end {
        End::Stopped => Ok(()),
        End::Fenced(why) | End::Held(why) => Err(DaemonError::Fenced(why)),
        End::NotHealed(why) => Err(DaemonError::Forgot(why)),
        End::Away(why) => Err(DaemonError::Store(StoreError::unavailable(Store::Lease, why))),
        End::Failed(why) => Err(DaemonError::StageFailed(why)),
        End::Schema(why) => unreachable!("the schema is checked before the instance starts: {why}"),
    }
}

/// What one instance of the daemon lives with, from lease to lease.
struct Lifetime<'a> {
    cfg: &'a Config,
    rules: &'a Arc<Rulebook>,
    clock: &'a Arc<dyn Clock>,
    stop: &'a Receiver<()>,
    me: &'a Claimant,
    ops: &'a Arc<Ops>,
    standby: Standby,
}

impl Lifetime<'_> {
    /// The start-up pass under `epoch`, watched like a stage's turn, beaten page by page (#54),
    /// with the lease renewed meanwhile.
    fn compare(&self, epoch: i64) -> Result<Pass, DaemonError> {
        let (cfg, clock, ops) = (self.cfg, self.clock, self.ops);
        ops.standby(
            NotReady::Comparing,
            format!("lease epoch={epoch}: comparing the stores before the stages start (U25)"),
        );
        let turn = ops.pulse.turning(PASS, clock.mono());
        let beat = Beat::of(&ops.pulse, PASS, clock.clone());
        let watch = Watch { pulse: &ops.pulse, clock: clock.as_ref(), stuck_after: cfg.watchdog_stuck_after };
        let pass = renewing(cfg, self.me, epoch, watch, || {
            consistency_pass(cfg, self.rules, clock.as_ref(), epoch, &ops.stats, beat)
        });
        drop(turn);
        pass
    }

    /// Serves under `epoch`, its gate counting from `since` (when the lease claim was sent),
    /// until a stop, a fence or a store that forgot ends it; any other error is the instance's
    /// end, which the machine hears (it gives the lease back first).
    fn serve(&self, lease: Pg, epoch: i64, since: Mono, token: Option<String>) -> Result<Input, DaemonError> {
        let gate = Arc::new(LeaseGate::new(epoch, self.clock.clone(), since, self.cfg.lease.duration));
        let tenure =
            Tenure { lease, gate: gate.clone(), redis_token: token.or_else(|| redis_token(self.cfg)) };
        let served =
            serve(self.cfg, self.rules, self.clock.clone(), self.stop.clone(), self.me, tenure, self.ops)?;
        let stopping = self.stop.try_recv() == Err(TryRecvError::Disconnected);
        Ok(Input::Served { served, stale: gate.is_stale(), stopping })
    }

    /// Not serving any more: said, and a store that forgot is compared from how it is now.
    fn stand_down(&self, forgot: bool, pause: Duration, why: &str) -> Input {
        self.ops.starting(NotReady::Stopped, format!("not serving: {why}"));
        if forgot {
            // The server as it is now is the baseline: it is compared and healed next.
            crate::store::pg::witness::rebase_all();
            warn!("a store forgot what it acknowledged ({why}); every stage stopped: msgx compares the stores and heals before they start again");
        } else {
            warn!("consistency: the stores could not be compared or healed ({why}); an outage, not a heal: tried again in {}", human(pause));
        }
        Input::Done
    }
}

/// The name the start-up pass's turn goes by on the pulse.
const PASS: &str = "start-up pass";

/// What a renewer looks at before it renews: the turns on `pulse`, none of which may have made
/// no progress for `stuck_after`.
#[derive(Clone, Copy)]
pub struct Watch<'a> {
    pub pulse: &'a crate::stage::Pulse,
    pub clock: &'a dyn Clock,
    pub stuck_after: Duration,
}

/// Runs `work` (the consistency pass and its heal) while the lease is renewed on a thread of its
/// own: a heal longer than `msgx.lease.duration` never lets a standby take over under it (#38).
/// Should the lease be lost all the same, every write of the heal is fenced by `epoch`. A step
/// of it that makes no progress for `stuck_after` is not covered: the renewals stop, so a
/// standby takes over when the lease runs out (#54); a lease store away is reconnected to.
pub fn renewing<T>(cfg: &Config, me: &Claimant, epoch: i64, watch: Watch<'_>, work: impl FnOnce() -> T) -> T {
    let (done, renewals) = bounded::<()>(0);
    thread::scope(|scope| {
        scope.spawn(move || {
            let mut lease = None;
            let status = serde_json::json!({"stalled": [], "comparing": true}).to_string();
            let mut renewer = lifecycle::CompareRenewer::default();
            while !pause_or_stop(&renewals, None, cfg.lease.renew_every) {
                let stuck = watch.pulse.stuck(watch.clock.mono(), watch.stuck_after);
                if let lifecycle::Renewal::Withhold { say } = renewer.turn(stuck.is_some()) {
                    if let Some((name, took)) = stuck.filter(|_| say) {
                        warn!("lease epoch={epoch} not renewed: {name} has made no progress for {}s (msgx.watchdog.stuck-after); a standby takes over when the lease runs out", took.as_secs());
                    }
                    continue;
                }
                if lease.is_none() {
                    lease = RealStores::new(cfg).pg().ok();
                }
                let Some(store) = lease.as_mut() else { continue };
                let answer = store.renew(me, epoch, cfg.lease.duration, &status);
                if renewer.renewed(&answer) {
                    warn!("lease epoch={epoch} taken over while the stores were compared; the heal's writes are fenced");
                    return;
                }
                // An outage: the heal meets it too; renewal is tried again, on a new connection.
                if answer.is_err() {
                    lease = None;
                }
            }
        });
        let out = work();
        drop(done);
        out
    })
}

/// The token of Redis's last write now (`None` when it cannot say).
fn redis_token(cfg: &Config) -> Option<String> {
    use crate::ports::FlightAudit;
    RealStores::new(cfg).redis().and_then(|mut r| r.audit()).ok().and_then(|m| m.token)
}

/// The consistency pass before any stage runs (`consistency::pass`, shared with the simulator).
/// A store that cannot be reached is an outage: the pass is tried again, and no stage runs on
/// stores never compared (a Redis emptied while msgx was down would be written over, its
/// evidence gone, #37). Evidence that is not enough to heal, or a heal budget spent, stops msgx
/// (exit 6) with what a person must decide.
fn consistency_pass(
    cfg: &Config,
    rules: &Arc<Rulebook>,
    clock: &dyn Clock,
    epoch: i64,
    stats: &Stats,
    beat: Beat,
) -> Result<Pass, DaemonError> {
    let (mut pg, mut mailbox, mut flights) = match RealStores::new(cfg).compared(epoch) {
        Ok(s) => s,
        Err(e) if e.is_unavailable() => return Ok(Pass::Away(e)),
        Err(e) => return Err(DaemonError::Store(e)),
    };
    let limits = crate::codec::Limits::of(&cfg.pipeline);
    let (pg, mailbox, flights, rules) = (&mut pg, &mut mailbox, &mut flights, rules.clone());
    let mut st = Stores { pg, mailbox, flights, beat, limits, rules };
    let policy = consistency::PassPolicy {
        epoch,
        sample: cfg.pipeline.check_sample_ratio,
        budget: consistency::HealBudget { per_hour: cfg.pipeline.max_heals_per_hour },
        asking: Some(consistency::Asking::of(cfg)),
    };
    let pass = consistency::pass(&mut st, policy, clock.now());
    if let Pass::Agreed { report, healed, .. } = &pass {
        say(report, stats);
        if healed.as_ref().is_some_and(|h| h.changed()) {
            crate::stats::add(&stats.heals, 1);
        }
    }
    Ok(pass)
}

/// What the pass found, counted; one INFO line when the stores agreed at once (the pass logged
/// its findings and suspicions).
fn say(report: &consistency::Report, stats: &Stats) {
    let suspected: usize = report.suspicions.iter().map(|x| x.count).sum();
    crate::stats::add(&stats.consistency_suspicions, suspected as u64);
    if report.is_clean() {
        info!(
            "consistency: postgres (highest MSG_ID {}, epoch {}), the mailbox marks and Redis (epoch {}, journal complete above MSG_ID {}) agree",
            report.pg_known_max,
            report.pg_epoch,
            report.redis.epoch,
            report.redis.pruned.map_or("-".to_string(), |p| p.to_string())
        );
    } else {
        crate::stats::add(&stats.consistency_findings, report.findings.len() as u64);
    }
}

/// The operations endpoint (`metrics.listen`) on its own thread, until the sender is dropped.
/// An address it cannot bind is an ERROR, never a reason not to run: msgx goes on without it.
#[allow(clippy::type_complexity)]
fn ops_endpoint(
    cfg: &Config,
    rules: &Arc<Rulebook>,
    ops: &Arc<Ops>,
    metrics: &Arc<Metrics>,
    stop: Receiver<()>,
) -> Result<Option<thread::JoinHandle<()>>, DaemonError> {
    let Some(addr) = cfg.metrics_listen else { return Ok(None) };
    let server = match OpsServer::bind(addr) {
        Ok(s) => s,
        Err(e) => {
            error!(
                "metrics cannot listen on {addr} ({e}); /metrics, /live and /ready are off (metrics.listen)"
            );
            return Ok(None);
        }
    };
    let bound = server.local_addr().unwrap_or(addr);
    let (ops, metrics) = (ops.clone(), metrics.clone());
    let console = crate::ops::console::Console::new(
        cfg.clone(),
        rules.clone(),
        Box::new(stores::ConsoleStores(cfg.clone())),
    );
    let access = Access {
        token: cfg.metrics_token.clone(),
        console_token: cfg.console_token.clone(),
        names: cfg.metrics_host_names.clone(),
    };
    let guarded = (access.token.is_some(), access.console_token.is_some());
    for why in crate::ops::http::token_warnings(Some(bound), guarded.0, guarded.1) {
        warn!("{why}");
    }
    let h = thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            if let Err(e) = server.serve(ops, metrics, Some(console), access, stop) {
                error!("metrics cannot serve on {bound} ({e}); /metrics, /live and /ready are off");
            }
        })
        .map_err(|e| DaemonError::StageFailed(format!("metrics: {e}")))?;
    info!("metrics listening on {bound} (GET /metrics, /live, /ready, the console at /)");
    Ok(Some(h))
}

/// What a standby says while it looks for the lease (INFO lines, never ERROR, while another
/// instance is active): who holds it, once a minute; the lease store's outages; the lease won.
struct Standby {
    outages: Outages,
    said: Option<SystemTime>,
    stats: Stats,
}

impl Standby {
    fn new(cfg: &Config) -> Standby {
        Standby {
            outages: Outages::new(Store::Lease.name(), cfg.pipeline.outage),
            said: None,
            stats: Stats::default(),
        }
    }

    /// Says what came of a claim of the lease (other answers say nothing here).
    fn heard(&mut self, input: &Input, ops: &Ops, now: SystemTime) {
        let Input::Lease { claim, .. } = input else { return };
        match claim {
            Ok(Claim::Acquired { epoch, previous }) => {
                self.outages.recovered(now).iter().for_each(|n| log_notice(n, &self.stats));
                match previous {
                    Some(p) => info!("lease acquired epoch={epoch}: took over from {}", holder_line(p)),
                    None => info!("lease acquired epoch={epoch}"),
                }
            }
            Ok(Claim::HeldBy(h)) => {
                self.outages.recovered(now).iter().for_each(|n| log_notice(n, &self.stats));
                ops.standby(NotReady::Standby, format!("standby: the lease is held by {}", holder_line(h)));
                self.said_standing_by(h, now);
            }
            // The machine ends the instance: a person decides.
            Err(e) if e.stops() => {}
            Err(e) => {
                ops.starting(NotReady::LeaseUnreachable, format!("the lease cannot be claimed: {e}"));
                self.outages.failed(e, now).0.iter().for_each(|n| log_notice(n, &self.stats))
            }
        }
    }

    /// Says who holds the lease, once a minute: a standby is normal, not an alarm.
    fn said_standing_by(&mut self, h: &crate::ports::LeaseHolder, now: SystemTime) {
        if self.said.is_some_and(|t| now.duration_since(t).unwrap_or_default() < Duration::from_secs(60)) {
            return;
        }
        let since = h.since.and_then(|s| now.duration_since(s).ok()).map(human).unwrap_or_else(|| "?".into());
        info!(
            "standby: lease held by host={} pid={} since={since} ago epoch={}; this instance takes over when it expires or is released",
            h.host.as_deref().unwrap_or("?"),
            h.pid.unwrap_or(0),
            h.epoch
        );
        self.said = Some(now);
    }
}

/// What one holding of the lease starts from: the lease session, its gate, and the apply token
/// Redis held when the stores were last found to agree (`None`: not known).
pub struct Tenure {
    pub lease: Pg,
    pub gate: Arc<LeaseGate>,
    pub redis_token: Option<String>,
}

/// The active instance: every stage on its own thread, fenced by `gate`'s epoch, until stop,
/// a fence or a store that forgot ends the holding — how, as the threads said it.
pub fn serve(
    cfg: &Config,
    rules: &Arc<Rulebook>,
    clock: Arc<dyn Clock>,
    stop: Receiver<()>,
    me: &Claimant,
    tenure: Tenure,
    ops: &Ops,
) -> Result<Served, DaemonError> {
    let Tenure { lease, gate, redis_token } = tenure;
    let epoch = gate.epoch();
    let p = &cfg.pipeline;
    let ctx = Context {
        clock: clock.clone(),
        gate,
        board: StallBoard::default(),
        stats: ops.stats.clone(),
        outage: p.outage,
        pulse: ops.pulse.clone(),
    };
    ops.active(ctx.gate.clone(), ctx.board.clone());
    let stats = ctx.stats.clone();
    let mut bells = Doorbells::new();
    let to_process = bells.door(StageId::Process);
    let mut threads = stages(cfg, rules, epoch, redis_token, &ctx, &mut bells)?;
    threads.push(lease_keeper(lease, me.clone(), cfg.lease, ctx.clone()));
    if cfg.compat.enabled {
        threads.push(compat_server(cfg, epoch, to_process, ctx.clone())?);
    }
    info!("started epoch={epoch} poll_interval={:?} max_attempts={}", p.poll_interval, p.max_attempts);
    let board = ctx.board.clone();
    let line = move || {
        let stalled = board.describe();
        info!("stats {} stalled={}", stats.line(), if stalled.is_empty() { "-" } else { &stalled });
    };
    let served = supervise(threads, &stop, p.stats_interval, line.clone());
    line();
    if served.as_ref().is_ok_and(|s| *s == Served::Stopped) {
        info!("stopped");
    }
    served
}

/// Every stage of the active instance on its own thread, in `StageId::ALL`'s order (the
/// topology shared with the simulator), with the doorbells the topology names.
fn stages(
    cfg: &Config,
    rules: &Arc<Rulebook>,
    epoch: i64,
    redis_token: Option<String>,
    ctx: &Context,
    bells: &mut Doorbells,
) -> Result<Vec<Thread>, DaemonError> {
    // The lane rings the stages behind the pump the moment a round's commit landed.
    let rings = bells.rings(StageId::Process);
    let real = RealStores::new(cfg);
    let lane = real.commit_lane(epoch, move || rings.iter().for_each(Bell::ring))?;
    let mut live = real.live(epoch, redis_token, lane);
    let s = topology::stages(&mut live, cfg, rules, ctx.gate.clone(), &ctx.stats, ctx.clock.clone())?;
    let p = &cfg.pipeline;
    let mut wire = |id: StageId| bells.wire(id, p);
    Ok(vec![
        spawn(s.poll, wire(StageId::Poll), ctx.clone()),
        spawn(s.process, wire(StageId::Process), ctx.clone()),
        spawn(s.dispatch, wire(StageId::Dispatch), ctx.clone()),
        spawn(s.outbound, wire(StageId::Outbound), ctx.clone()),
        spawn(s.backfill, wire(StageId::Backfill), ctx.clone()),
        spawn(s.jobs, wire(StageId::Jobs), ctx.clone()),
        spawn(
            s.sentinel.with_beat(Beat::of(&ctx.pulse, StageId::Sentinel.name(), ctx.clock.clone())),
            wire(StageId::Sentinel),
            ctx.clone(),
        ),
    ])
}

/// The compat write path `POST /cminmsgs/send`, on its own thread with its workers.
fn compat_server(cfg: &Config, epoch: i64, to_process: Bell, ctx: Context) -> Result<Thread, DaemonError> {
    if !cfg.compat.listen.ip().is_loopback() {
        warn!(
            "compat-http listens on {} — not loopback: keep it behind a proxy or firewall",
            cfg.compat.listen
        );
    }
    let server = CompatServer::bind(cfg.compat.listen)?;
    let limits = compat::Limits::from_config(&cfg.compat);
    let workers = (0..limits.workers)
        .map(|_| -> Result<_, StoreError> {
            let real = RealStores::new(cfg);
            Ok(compat::Worker::new(
                real.mailbox()?,
                real.pg_fenced(epoch)?,
                ctx.clock.clone(),
                limits.clone(),
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    info!("compat-http listening on {} workers={}", cfg.compat.listen, limits.workers);
    Ok(Thread::new("compat-http", move |stop| {
        server.serve(workers, &stop, || to_process.ring());
        Served::Stopped
    }))
}
