//! Deterministic simulation of the whole pipeline (issue #14), in the manner of TigerBeetle's
//! VOPR and FoundationDB's simulator, scaled to msgx.
//!
//! Every stage of every instance runs on the in-memory twins under one fake clock, in one
//! thread. A seeded PRNG is the only source of choice: at each step it picks one thing to
//! happen — a stage runs one round (if it is due), the upstream writes a row (duplicates,
//! ignored kinds, malformed and unsupported ones, late commits, rollbacks), a store fails
//! (unavailable for a few calls, down for a while, or a write applied and its answer lost), an
//! instance crashes (everything not in a store is gone) or freezes (and a standby takes over),
//! or the clock jumps — or, when nothing is due, the clock moves to the next wake-up. After
//! every step [`check`] verifies the invariants. At the end every fault heals, the pipeline
//! drains, and the stores must equal a reference model that replays the SUCCEEDED messages in
//! MSG_ID order through the pure handlers.
//!
//! A failing seed prints itself and the step log; `SIM_SEED=n cargo test --lib sim::replay`
//! runs it again, step for step. `SIM_SEEDS=n` runs n seeds.

mod check;
mod fleet;
mod mischief;
pub(crate) mod rng;
mod slow;
#[cfg(test)]
mod tests;
mod upstream;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::clock::{Clock, FakeClock};
use crate::codec::Rulebook;
use crate::config::Config;
use crate::consistency::Pass;
use crate::daemon::topology;
use crate::error::StoreError;
use crate::instance::effects::{self, Edges};
use crate::instance::lifecycle::{End, Renewal, Served};
use crate::instance::{Effect, Input, Instance as Machine, InstancePolicy};
use crate::lease::{Gate, LeaseGate};
use crate::planted::{self, Bug};
use crate::policy::retry::retry_policy;
use crate::ports::{Claimant, LeaseStore, MailboxMarks, Mark, Outbound, Producer, Record, StoreResult};
use crate::pump::lane;
use crate::stage::runner::{Halt, Keeper, Runner, Runs, Turn};
use crate::stage::{StageId, StallBoard};
use crate::stats::Stats;
use crate::store::memory::stepped::{Access, At, Stepped};
use crate::store::memory::{
    Fault, FlightsState, MemFlights, MemMailbox, MemOutbound, MemPg, MemProducer, PgState,
};
pub use check::Checker;
use mischief::Mischief;
use rng::Rng;
use upstream::Upstream;

/// A stage of an active instance, with the daemon's runner (`stage::runner`) around it.
struct Slot {
    id: StageId,
    stage: Box<dyn Runs>,
    runner: Runner,
    wake: SystemTime,
}

struct Active {
    epoch: i64,
    gate: Arc<LeaseGate>,
    /// The gate the stages and their runners ask (where a planted bug may keep it open).
    stage_gate: Arc<dyn Gate>,
    board: StallBoard,
    /// The instance's counters: its stages', its runners' and its lease keeper's, as the
    /// daemon shares one set.
    stats: Arc<Stats>,
    /// The lease keeper's session (made at activation: it saw the server as it was then).
    lease: MemPg,
    slots: Vec<Slot>,
    /// The daemon's lease keeper (`stage::runner::Keeper`) and when it renews next.
    keeper: Keeper,
    lease_wake: SystemTime,
}

/// An instance comparing the stores (and healing) before it serves: the pass runs one store
/// call per turn, so a crash, a freeze or a takeover can fall between any two of its calls, and
/// the lease is renewed meanwhile as `daemon::renewing` renews it (#38).
struct Comparing {
    epoch: i64,
    /// The step the pass started at: what it finds, it found about the stores as they were
    /// then (a pass frozen long ends long after) — and the step the stores were last found to
    /// agree at, then.
    started: u64,
    clean_before: u64,
    pass: Stepped<Pass>,
    /// When the pass makes its next call.
    wake: SystemTime,
    /// When the lease is renewed next; `None` once it was taken over (the heal's writes are
    /// fenced from then on).
    lease_wake: Option<SystemTime>,
    /// The daemon's renewer while compared (`lifecycle::CompareRenewer`, the one rule).
    renewer: crate::instance::lifecycle::CompareRenewer,
    /// When the pass last made progress (a store call answered): its watchdog's pulse.
    progressed: SystemTime,
}

/// What an instance does on its turn.
#[derive(Debug, Clone, Copy)]
enum Due {
    /// A standby claims the lease.
    Claim,
    /// The lease keeper renews (while compared, or active).
    Renew,
    /// The pass makes its next call.
    Pass,
    /// A stage runs a round.
    Stage(usize),
}

enum Life {
    /// Waiting for the lease (PRE-5), trying again at `wake`.
    Standby {
        wake: SystemTime,
    },
    Comparing(Box<Comparing>),
    Active(Box<Active>),
    /// Not scheduled until `until` (SIGSTOP, a VM pause): comparing or active before, and after.
    Frozen {
        was: Box<Life>,
        until: SystemTime,
    },
    /// Crashed, fenced or stopped.
    Gone,
}

struct Instance {
    name: String,
    me: Claimant,
    life: Life,
    /// The step of the consistency pass that let it serve: a forget it stops on must have
    /// been injected after it (#37).
    clean_at: u64,
    /// The daemon's instance machine: what it does next, from standing by to its end.
    machine: Machine,
    /// Not started yet: its first turn asks the machine for its first effect.
    fresh: bool,
    /// Its release's rules (#65): what its pump and its pass decode, the version its
    /// decisions carry.
    rules: Arc<Rulebook>,
    /// systemd asked it to stop (SIGTERM): it ends at its next chance (`fleet::stop_now`).
    stopping: bool,
    /// The lease epoch it won last, and the last whose release reached the store (`fleet`).
    held: Option<i64>,
    released: Option<i64>,
}

/// A write only the lease gate guards (Kafka, mailbox marks, COUTMSGS), with the writer's epoch
/// and the lease's epoch at that moment: they must be equal (PRE-5).
#[derive(Debug, Clone)]
pub struct GuardedWrite {
    pub what: String,
    pub writer: i64,
    pub lease: i64,
}

type Audit = Rc<RefCell<Vec<GuardedWrite>>>;

/// A store of the simulation, as faults name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Pg,
    Mailbox,
    Flights,
    Kafka,
    Outbound,
}

const STORES: [Store; 5] = [Store::Pg, Store::Mailbox, Store::Flights, Store::Kafka, Store::Outbound];

/// The whole simulated world: the stores, the instances, the upstream and the clock.
pub struct Sim {
    rng: Rng,
    pub clock: FakeClock,
    cfg: Config,
    pub pg: MemPg,
    pub mailbox: MemMailbox,
    pub flights: MemFlights,
    pub kafka: MemProducer,
    pub outbound: MemOutbound,
    instances: Vec<Instance>,
    pub upstream: Upstream,
    /// Store calls of the pollers that take time, and what they were served (#69).
    pub stalls: Rc<slow::Stalls>,
    /// Stores down until then.
    heals: Vec<(SystemTime, Store)>,
    pub audit: Audit,
    pub log: Vec<String>,
    pub step: u64,
    /// Whether this seed's pumps commit on a deferred lane.
    lanes: bool,
    /// Whether only msgx marks mailbox rows (`mailbox.inbound.exclusive-marks`): else another
    /// system marks some, and both own PostgreSQL and Redis never go back together — nothing
    /// could prove what msgx had settled (#37).
    exclusive: bool,
    /// Where marks are not msgx's own: the one store that may forget in this seed (0 own
    /// PostgreSQL, 1 Redis).
    seed_parity: u64,
    /// Rows an operator replayed (DEAD back to PENDING), with the step: they join the FIFO then.
    pub replayed: std::collections::BTreeMap<i64, u64>,
    /// Dumps of own PostgreSQL and Redis taken along the way, which a store that forgets goes
    /// back to (#20): (step, PostgreSQL, Redis).
    backups: std::collections::VecDeque<(u64, PgState, FlightsState)>,
    /// A store forgot and no consistency pass has healed it yet: the checks that compare two
    /// stores step by step wait for the heal.
    pub forgotten: bool,
    /// How many times own PostgreSQL went back (its EVENT_IDs are handed out again after).
    pub pg_rollbacks: u64,
    /// The step of the last forget injected, and of the last consistency pass that left the
    /// stores agreeing: a finding with no forget between is a false alarm (#37).
    last_forget: Option<u64>,
    last_clean_pass: u64,
    /// A false alarm seen: an instance stopped as `forgot`, or a pass found something, with no
    /// forget injected since the stores were last found to agree (#37). Fails the seed.
    pub false_alarm: Option<String>,
    /// The AODB's side of the requests (#41): how many COUTMSGS rows it has read, and the
    /// answers it will write later (when, to which request's text).
    aodb_read: usize,
    aodb_later: Vec<(SystemTime, String)>,
    /// The release systemd starts (#65): this one, or the next after an upgrade.
    deployed: Arc<Rulebook>,
    /// The rules version of the instance that served last: a takeover by another is said.
    serving: Option<u32>,
    /// A broken rule of an instance's life (a stop that kept the lease). Fails the seed.
    pub broken: Option<String>,
    /// A pass ran over messages another release decided (#52, #65), and may have laid them on
    /// as announced: what no event says (a restated value, a field cleared while empty) keeps
    /// the version the heal found.
    pub laid_on_announced: bool,
}

impl Sim {
    pub fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let clock = FakeClock::new();
        let mut cfg = Config::defaults();
        let p = &mut cfg.pipeline;
        // Small batches make many rounds, many interleavings.
        p.poll_batch = rng.range(1, 12) as usize;
        p.process_batch = rng.range(1, 10) as usize;
        p.dispatch_batch = rng.range(1, 10) as usize;
        p.backfill_batch = rng.range(1, 10) as usize;
        p.poll_interval = Duration::from_millis(rng.range(20, 1000));
        p.commit_grace = Duration::from_millis(rng.range(0, 3000));
        p.event_retention = Duration::from_secs(rng.range(30, 600));
        p.archive_after = Duration::from_secs(rng.range(30, 600));
        p.jobs_interval = Duration::from_secs(rng.range(1, 60));
        // SPEC §3a: a quarter of the seeds keep the retry ladder for an unsupported kind, so
        // its head-deadline clock still meets every fault. Taken from the seed, not drawn, so
        // the draws that follow stay where they were.
        p.retry_unsupported = seed % 4 == 3;
        cfg.lease.duration = Duration::from_secs(rng.range(3, 12));
        cfg.lease.renew_every = cfg.lease.duration / 4;
        // Every message sampled for versions: the most evidence, the most chances of a false
        // alarm (#37).
        cfg.pipeline.check_sample_ratio = 1.0;
        // Requests (#41): some expire before the AODB answers them.
        cfg.requests.timeout = Duration::from_secs(rng.range(5, 300));
        if rng.chance(300) {
            cfg.requests.dialect = crate::config::RequestDialect::Platform;
        }
        let pg = MemPg::new();
        pg.set_clock(Arc::new(clock.clone()));
        let lanes = rng.chance(500);
        let exclusive = rng.chance(500);
        cfg.inbound.exclusive_marks = exclusive;
        let mailbox = MemMailbox::new();
        mailbox.tamper(|s| s.exclusive_marks = exclusive);
        let mut sim = Sim {
            rng,
            clock: clock.clone(),
            cfg,
            pg,
            mailbox,
            flights: MemFlights::new(),
            kafka: MemProducer::new(),
            outbound: MemOutbound::new(),
            instances: Vec::new(),
            upstream: Upstream::default(),
            stalls: slow::Stalls::new(seed, clock.clone()),
            heals: Vec::new(),
            audit: Rc::default(),
            log: Vec::new(),
            step: 0,
            lanes,
            exclusive,
            seed_parity: seed % 2,
            replayed: Default::default(),
            backups: Default::default(),
            forgotten: false,
            pg_rollbacks: 0,
            last_forget: None,
            last_clean_pass: 0,
            false_alarm: None,
            aodb_read: 0,
            aodb_later: Vec::new(),
            deployed: Rulebook::this_release(),
            serving: None,
            broken: None,
            laid_on_announced: false,
        };
        sim.spawn_standby(Duration::ZERO);
        sim
    }

    pub fn now(&self) -> SystemTime {
        self.clock.now()
    }

    fn say(&mut self, line: String) {
        let t = self.now().duration_since(FakeClock::new().now()).unwrap_or_default();
        self.log.push(format!("#{} t={:.3}s {line}", self.step, t.as_secs_f64()));
    }

    /// One step: something happens, chosen by the seed.
    pub fn step(&mut self) {
        self.step += 1;
        self.timers();
        // Dumps from before the stores were first found to agree lack the mark that says from
        // where the Redis journal is kept (`journal:pruned`): going back to one is a forget no
        // evidence can prove healable, a person's (tested in `consistency`), not the sim's.
        if self.step % 25 == 0 && self.last_clean_pass > 0 {
            self.backups.push_back((self.step, self.pg.state(), self.flights.state()));
            if self.backups.len() > 4 {
                self.backups.pop_front();
            }
        }
        match self.rng.below(1000) {
            0..=79 => {
                let foreign = !self.exclusive;
                let line = self.upstream.write(&mut self.rng, &self.mailbox, self.clock.now(), foreign);
                self.say(line);
            }
            80..=104 => self.fault(),
            105..=108 => self.crash(),
            109..=111 => self.freeze(),
            112..=113 => self.jump(),
            114..=116 => {
                if self.live() < 2 {
                    self.spawn_standby(Duration::ZERO);
                }
            }
            117..=118 => self.forget(),
            119 => self.replay_dead(),
            120..=121 => self.ask(),
            122..=127 => self.aodb(),
            128..=129 => self.sigterm(),
            130 => self.deploy(),
            131..=132 => self.rules_apply(),
            _ => self.run_something(),
        }
    }

    /// Heals every fault, lets every open transaction end and every frozen instance go on.
    pub fn heal_all(&mut self) {
        for s in STORES {
            self.heal(s);
        }
        self.heals.clear();
        let lines = self.upstream.end_transactions(&self.mailbox, self.clock.now(), true);
        lines.into_iter().for_each(|l| self.say(l));
        for i in &mut self.instances {
            if let Life::Frozen { until, .. } = &mut i.life {
                *until = self.clock.now();
            }
        }
        self.timers();
        if self.live() == 0 {
            self.spawn_standby(Duration::ZERO);
        }
    }

    /// Runs due things (no new input, no faults), the invariants checked after each, until
    /// the pipeline is drained or `max_steps` have passed.
    pub fn drain(&mut self, checker: &mut Checker, max_steps: u64) -> Result<(), String> {
        for _ in 0..max_steps {
            if check::drained(self) && !self.still_forgotten() {
                return Ok(());
            }
            self.step += 1;
            self.timers();
            self.run_something();
            checker.check(self)?;
        }
        match check::what_remains(self) {
            left if left.is_empty() => Ok(()),
            left => Err(format!("did not drain in {max_steps} steps: {left}")),
        }
    }

    /// Whether a store that forgot still differs from the others (read only): the drain goes on
    /// until the sentinel found it and a consistency pass healed it. A forget that lost nothing
    /// is over at once.
    fn still_forgotten(&mut self) -> bool {
        use crate::consistency::{check, Depth, Stores};
        if !self.forgotten {
            return false;
        }
        let (mut pg, mut mb, mut fl) = (self.pg.session(), self.mailbox.clone(), self.flights.handle());
        let mut st = Stores {
            pg: &mut pg,
            mailbox: &mut mb,
            flights: &mut fl,
            beat: Default::default(),
            limits: Default::default(),
            rules: Rulebook::this_release(),
        };
        match check(&mut st, Depth::Full { sample: 1.0 }, self.clock.now()) {
            Ok(r) if r.is_clean() => {
                self.forgotten = false;
                false
            }
            other => {
                if std::env::var("SIM_DEBUG").is_ok() {
                    eprintln!("still forgotten at step {}: {other:?}", self.step);
                }
                true
            }
        }
    }

    fn live(&self) -> usize {
        self.instances.iter().filter(|i| !matches!(i.life, Life::Gone)).count()
    }

    /// Faults that end by themselves, frozen instances waking, open transactions ending.
    fn timers(&mut self) {
        let now = self.clock.now();
        let due: Vec<Store> = self.heals.iter().filter(|(t, _)| *t <= now).map(|(_, s)| *s).collect();
        self.heals.retain(|(t, _)| *t > now);
        for s in due {
            self.heal(s);
            self.say(format!("{s:?} is back"));
        }
        let lines = self.upstream.end_transactions(&self.mailbox, now, false);
        lines.into_iter().for_each(|l| self.say(l));
        let mut thawed = Vec::new();
        for (k, i) in self.instances.iter_mut().enumerate() {
            if matches!(&i.life, Life::Frozen { until, .. } if *until <= now) {
                let Life::Frozen { was, .. } = std::mem::replace(&mut i.life, Life::Gone) else {
                    unreachable!()
                };
                i.life = *was;
                thawed.push(k);
            }
        }
        for k in thawed {
            let name = self.instances[k].name.clone();
            self.say(format!("{name} thawed"));
            // A SIGTERM sent while it was frozen is heard now.
            if self.instances[k].stopping {
                self.stop_now(k);
            }
        }
    }

    fn heal(&mut self, s: Store) {
        match s {
            Store::Pg => self.pg.heal(),
            Store::Mailbox => self.mailbox.heal(),
            Store::Flights => self.flights.heal(),
            Store::Kafka => self.kafka.heal(),
            Store::Outbound => self.outbound.heal(),
        }
    }

    fn fault(&mut self) {
        let store = *self.rng.pick(&STORES);
        let (fault, calls, down) = match self.rng.below(100) {
            0..=44 => (Fault::Unavailable, self.rng.range(1, 3) as u32, None),
            // One or two answers in a row lost (#37: two were taken for a forget).
            45..=69 => (Fault::Lost, self.rng.range(1, 3) as u32, None),
            _ => (Fault::Unavailable, 0, Some(Duration::from_millis(self.rng.range(500, 20_000)))),
        };
        let apply = |inject: &dyn Fn(Fault, u32), set_down: &dyn Fn(bool)| match down {
            Some(_) => set_down(true),
            None => inject(fault, calls),
        };
        match store {
            Store::Pg => apply(&|f, n| self.pg.inject(f, n), &|d| self.pg.set_down(d)),
            Store::Mailbox => apply(&|f, n| self.mailbox.inject(f, n), &|d| self.mailbox.set_down(d)),
            Store::Flights => apply(&|f, n| self.flights.inject(f, n), &|d| self.flights.set_down(d)),
            Store::Kafka => apply(&|f, n| self.kafka.inject(f, n), &|d| self.kafka.set_down(d)),
            Store::Outbound => apply(&|f, n| self.outbound.inject(f, n), &|d| self.outbound.set_down(d)),
        }
        match down {
            Some(d) => {
                self.heals.push((self.clock.now() + d, store));
                self.say(format!("{store:?} down for {d:?}"));
            }
            None => self.say(format!("{store:?} fails the next {calls} call(s): {fault:?}")),
        }
    }

    fn crash(&mut self) {
        let live: Vec<usize> = (0..self.instances.len())
            .filter(|i| {
                matches!(self.instances[*i].life, Life::Active(_) | Life::Comparing(_) | Life::Frozen { .. })
            })
            .collect();
        if live.is_empty() {
            return;
        }
        let i = *self.rng.pick(&live);
        self.instances[i].life = Life::Gone; // SIGKILL: no close, no release
        let name = self.instances[i].name.clone();
        self.say(format!("{name} crashed"));
        let delay = Duration::from_millis(self.rng.range(0, 3000));
        self.spawn_standby(delay);
    }

    fn freeze(&mut self) {
        let active: Vec<usize> = (0..self.instances.len())
            .filter(|i| matches!(self.instances[*i].life, Life::Active(_) | Life::Comparing(_)))
            .collect();
        if active.is_empty() {
            return;
        }
        let i = *self.rng.pick(&active);
        let d = Duration::from_millis(self.rng.range(100, 30_000));
        self.freeze_for(i, d);
    }

    /// Instance `i` stops being scheduled for `d`; a standby is there to take over.
    fn freeze_for(&mut self, i: usize, d: Duration) {
        let until = self.clock.now() + d;
        let was = std::mem::replace(&mut self.instances[i].life, Life::Gone);
        self.instances[i].life = Life::Frozen { was: Box::new(was), until };
        let name = self.instances[i].name.clone();
        self.say(format!(
            "{name} frozen until {:?}",
            until.duration_since(self.clock.now()).unwrap_or_default()
        ));
        if self.live() < 2 {
            self.spawn_standby(Duration::ZERO);
        }
    }

    fn jump(&mut self) {
        let d = Duration::from_secs(self.rng.range(10, 900));
        self.clock.advance(d);
        self.say(format!("clock jumps {d:?}"));
    }

    fn spawn_standby(&mut self, delay: Duration) {
        let n = self.instances.len() as u32 + 1;
        let name = format!("i{n}");
        let me = Claimant { id: format!("sim:{n}"), host: "sim".into(), pid: n };
        let wake = self.clock.now() + delay;
        let machine = Machine::new(InstancePolicy::of(&self.cfg, false));
        self.instances.push(Instance {
            name: name.clone(),
            me,
            life: Life::Standby { wake },
            clean_at: 0,
            machine,
            fresh: true,
            rules: self.deployed.clone(),
            stopping: false,
            held: None,
            released: None,
        });
        let release = fleet::release_name(&self.deployed);
        self.say(format!("{name} starts (standby, {release})"));
    }

    /// The earliest time something wants to run.
    fn next_wake(&self) -> Option<SystemTime> {
        let mut t: Vec<SystemTime> = Vec::new();
        for i in &self.instances {
            match &i.life {
                Life::Standby { wake } => t.push(*wake),
                Life::Active(a) => {
                    t.push(a.lease_wake);
                    t.extend(a.slots.iter().map(|s| s.wake));
                }
                Life::Comparing(c) => {
                    t.push(c.wake);
                    t.extend(c.lease_wake);
                }
                Life::Frozen { until, .. } => t.push(*until),
                Life::Gone => {}
            }
        }
        t.extend(self.heals.iter().map(|(w, _)| *w));
        t.extend(self.upstream.next_end());
        t.into_iter().min()
    }

    /// Runs one due thing picked at random, or moves the clock to the next wake-up.
    fn run_something(&mut self) {
        let now = self.clock.now();
        let mut due: Vec<(usize, Due)> = Vec::new();
        for (k, i) in self.instances.iter().enumerate() {
            match &i.life {
                Life::Standby { wake } if *wake <= now => due.push((k, Due::Claim)),
                Life::Comparing(c) => {
                    if c.lease_wake.is_some_and(|w| w <= now) {
                        due.push((k, Due::Renew));
                    }
                    if c.wake <= now {
                        due.push((k, Due::Pass));
                    }
                }
                Life::Active(a) => {
                    if a.lease_wake <= now {
                        due.push((k, Due::Renew));
                    }
                    due.extend(
                        a.slots
                            .iter()
                            .enumerate()
                            .filter(|(_, s)| s.wake <= now)
                            .map(|(n, _)| (k, Due::Stage(n))),
                    );
                }
                _ => {}
            }
        }
        if due.is_empty() {
            let next =
                self.next_wake().unwrap_or(now + Duration::from_secs(1)).max(now + Duration::from_millis(1));
            self.clock.set(next);
            return;
        }
        let (k, what) = *self.rng.pick(&due);
        match what {
            Due::Claim => self.standby_turn(k),
            Due::Renew => self.renew(k),
            Due::Pass => self.pass_turn(k),
            Due::Stage(n) => self.run_stage(k, n),
        }
    }

    /// A store goes back to a dump taken a few steps ago (#20): own PostgreSQL (a replica
    /// promoted with a lost tail, a restore), Redis (an older dump loaded), or both.
    fn forget(&mut self) {
        if self.backups.is_empty() {
            return;
        }
        let k = self.rng.below(self.backups.len() as u64) as usize;
        let (at, pg, flights) = self.backups[k].clone();
        let before = self.flights.inspect(|f| f.seq);
        // Both back over the same rows only where msgx's marks are its own: else nothing proves
        // what it had settled, and the rows it marked are left alone as someone else's (#37).
        // There, one store of the two forgets, for the whole seed.
        let which = if self.exclusive { self.rng.below(3) } else { self.seed_parity };
        let what = match which {
            0 => {
                self.pg.roll_back_to(pg);
                self.pg_rollbacks += 1;
                "postgres"
            }
            1 => {
                self.flights.replace_state(flights);
                "redis"
            }
            _ => {
                self.pg.roll_back_to(pg);
                self.pg_rollbacks += 1;
                self.flights.replace_state(flights);
                "postgres and redis"
            }
        };
        self.forgotten = true;
        self.last_forget = Some(self.step);
        let seq = self.flights.inspect(|f| f.seq);
        self.say(format!("{what} forgot: back to the dump of step {at} (redis applies {before} -> {seq})"));
    }

    /// An operator replays the DEAD rows an operator may replay (`msgx replay`): back to
    /// PENDING, at the head of the FIFO again.
    fn replay_dead(&mut self) {
        use crate::ports::{Operator, ReplaySelection};
        let dead: Vec<i64> = self.pg.inspect(|s| {
            s.procs
                .values()
                .filter(|p| p.row.state == crate::domain::ProcStatus::Dead)
                .map(|p| p.row.msg_id)
                .collect()
        });
        let Some(&id) = dead.first() else { return };
        let now = self.clock.now();
        if let Ok(done) = self.pg.session().replay(&ReplaySelection::Ids(vec![id]), 10, now) {
            if done.iter().any(|r| r.verdict.is_ok()) {
                self.replayed.insert(id, self.step);
                self.say(format!("operator replays DEAD msg {id}"));
            }
        }
    }

    /// An operator asks the AODB (`msgx request --yes`, #41): a day's flights, or the gates'
    /// list, in the seed's dialect, through the same port the command uses; refused while a
    /// request for the same type and key is open.
    fn ask(&mut self) {
        use crate::config::RequestDialect;
        use crate::ports::Requests;
        use crate::requests::{text, Ask, NewRequest, Origin};
        let policy = self.cfg.requests.clone();
        let ask = match policy.dialect {
            RequestDialect::Sis if self.rng.chance(300) => Ask::reference("GLST"),
            RequestDialect::Sis => {
                let day = *self.rng.pick(&["2026-03-05", "2026-03-06"]);
                Ask::flights(&format!("{day}T00:00"), &format!("{day}T23:59"))
            }
            RequestDialect::Platform => {
                let day = *self.rng.pick(&["2026-03-07", "2026-03-08"]);
                Ask::flights(&format!("{day}T00:00"), &format!("{day}T23:59"))
            }
        }
        .expect("the simulator asks what may be asked");
        let new = NewRequest::first(ask.req_type(policy.dialect), ask.req_key(), Origin::Operator);
        let (zone, now) = (self.cfg.outbound.zone.clone(), self.clock.now());
        let written = |seqn| text(&policy, &zone, &ask, seqn, now);
        let line = match self.pg.session().register(&new, &written, now) {
            Ok(Ok(r)) => format!("operator asks req_id={} {} {}", r.req_id, r.req_type, r.req_key),
            Ok(Err(open)) => format!("operator's ask refused: req_id={} is open", open.req_id),
            Err(e) => format!("operator's ask failed: {e}"),
        };
        self.say(line);
    }

    /// The AODB reads the requests msgx wrote to COUTMSGS and answers each: at once, later
    /// (after the request expired, often), at once and again later (a second answer,
    /// unsolicited), with another day's plan, beside an answer nobody asked for, or never.
    fn aodb(&mut self) {
        let rows = self.outbound.rows();
        let now = self.clock.now();
        for (_, xml) in rows.iter().skip(self.aodb_read) {
            let later = now + Duration::from_millis(self.rng.range(1, 600_000));
            match self.rng.below(100) {
                0..=49 => self.answer(xml),
                50..=64 => {
                    self.answer(xml);
                    self.aodb_later.push((later, xml.clone()));
                }
                65..=79 => self.aodb_later.push((later, xml.clone())),
                80..=84 => {
                    let line = self.upstream.answer_another_day(&mut self.rng, &self.mailbox, now, xml);
                    let line =
                        line.unwrap_or_else(|| "the AODB answers another request than this one".into());
                    self.say(format!("AODB answers another day: {line}"));
                }
                85..=89 => {
                    self.answer(xml);
                    let platform = self.cfg.requests.dialect == crate::config::RequestDialect::Platform;
                    let line = self.upstream.stray(&mut self.rng, &self.mailbox, now, platform);
                    self.say(format!("AODB answers what nobody asked: {line}"));
                }
                _ => self.say("the AODB never answers a request".into()),
            }
        }
        self.aodb_read = rows.len();
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.aodb_later).into_iter().partition(|(t, _)| *t <= now);
        self.aodb_later = later;
        due.iter().for_each(|(_, xml)| self.answer(xml));
    }

    fn answer(&mut self, request: &str) {
        let now = self.clock.now();
        let line = self.upstream.answer(&mut self.rng, &self.mailbox, now, request);
        let line = line.unwrap_or_else(|| format!("the AODB does not know the request {request}"));
        self.say(format!("AODB answers: {line}"));
    }

    /// Starts the daemon's consistency pass (`consistency::pass`, the same function) for
    /// instance `k` under `epoch`, on the stores as `daemon::stores::RealStores::compared` opens
    /// them: one store call per turn from now on.
    fn start_pass(&mut self, k: usize, epoch: i64) {
        use crate::consistency::{check, pass, Depth, HealBudget, PassPolicy, Stores};
        let p = &self.cfg.pipeline;
        let policy = PassPolicy {
            epoch,
            sample: p.check_sample_ratio,
            budget: HealBudget { per_hour: p.max_heals_per_hour },
            asking: Some(crate::consistency::Asking::of(&self.cfg)),
        };
        let mut pg = self.pg.session().fenced(epoch);
        let mut mailbox = self.mailbox.clone();
        let flights = self.flights.handle().keeping(p.journal_keep);
        // The planted bug: the heal writes Redis without the epoch's fence (#38).
        let mut flights = if planted::on(Bug::HealUnfenced) { flights } else { flights.fenced(epoch) };
        let now = self.clock.now();
        let rules = self.instances[k].rules.clone();
        // A pass of one release over messages another decided may lay them on as announced:
        // even one cut short after its first write (#65, seed 807).
        let version = Some(rules.version());
        self.laid_on_announced |= self.pg.inspect(|s| {
            s.procs
                .values()
                .any(|p| p.row.state == crate::domain::ProcStatus::Succeeded && p.rules_version != version)
        });
        let pass = Stepped::spawn("sim-pass", move || {
            let mut st = Stores {
                pg: &mut pg,
                mailbox: &mut mailbox,
                flights: &mut flights,
                beat: Default::default(),
                limits: Default::default(),
                rules,
            };
            if planted::on(Bug::HealSkipped) {
                // The planted bug: a pass that finds a store that forgot and heals nothing.
                return match check(&mut st, Depth::Full { sample: 1.0 }, now) {
                    Ok(r) => Pass::Agreed { token: r.redis.token, report: Default::default(), healed: None },
                    Err(e) => Pass::Away(e),
                };
            }
            pass(&mut st, policy, now)
        });
        let lease_wake = Some(now + self.cfg.lease.renew_every);
        self.instances[k].life = Life::Comparing(Box::new(Comparing {
            epoch,
            started: self.step,
            clean_before: self.last_clean_pass,
            pass,
            wake: now,
            lease_wake,
            renewer: Default::default(),
            progressed: now,
        }));
        let name = self.instances[k].name.clone();
        self.say(format!("{name} compares the stores, epoch {epoch}"));
    }

    /// One turn of instance `k`'s pass: its next store call, or its end. Before a write, the
    /// lifecycle's own faults may fall: a freeze longer than the lease (a standby takes over
    /// mid-heal) or a crash (#38).
    fn pass_turn(&mut self, k: usize) {
        let now = self.clock.now();
        let Life::Comparing(c) = &mut self.instances[k].life else { return };
        c.progressed = now;
        match c.pass.step() {
            At::Call(store, access) => {
                c.wake = now + Duration::from_millis(self.rng.range(1, 50));
                // Most often where it matters most: while a store that forgot is healed.
                let per_mille = if self.forgotten { 20 } else { 3 };
                if access == Access::Write && self.rng.chance(per_mille) {
                    let name = self.instances[k].name.clone();
                    let during = if self.forgotten { "heal" } else { "pass" };
                    if self.rng.chance(300) {
                        self.instances[k].life = Life::Gone;
                        self.say(format!("{name} crashed before a write to {store:?} in its {during}"));
                        let delay = Duration::from_millis(self.rng.range(0, 3000));
                        self.spawn_standby(delay);
                    } else {
                        let lease = self.cfg.lease.duration;
                        let d =
                            lease + Duration::from_millis(self.rng.range(0, 2 * lease.as_millis() as u64));
                        self.say(format!("{name} freezes before a write to {store:?} in its {during}"));
                        self.freeze_for(k, d);
                    }
                }
            }
            At::Done(pass) => {
                let steps = (c.clean_before, c.started);
                self.pass_done(k, steps, pass);
            }
        }
    }

    /// Instance `k`'s pass, started at step `started` (the stores last found to agree at
    /// `clean_before`), ended: the simulator's bookkeeping — a pass that found something with no
    /// forget since `clean_before` is a false alarm (#37) —, then what the lifecycle says.
    fn pass_done(&mut self, k: usize, (clean_before, started): (u64, u64), outcome: Pass) {
        if std::env::var("SIM_DEBUG").is_ok() {
            let seq = self.flights.inspect(|f| f.seq);
            eprintln!("pass at step {} (redis seq {seq}): {outcome:?}", self.step);
        }
        if let Pass::Agreed { report, healed, .. } = &outcome {
            if !report.is_clean() {
                self.say(format!("consistency: {:?}; healed: {healed:?}", report.findings));
                if self.last_forget.is_none_or(|f| f < clean_before) {
                    self.false_alarm.get_or_insert(format!(
                        "false alarm: the pass started at step {started} found {:?} with no forget since the stores last agreed (step {clean_before})",
                        report.findings
                    ));
                }
            }
            if !report.suspicions.is_empty() {
                self.say(format!("consistency suspicions: {:?}", report.suspicions));
            }
            // A forget after its start may be one it never saw.
            if self.last_forget.is_none_or(|f| f < started) {
                self.forgotten = false;
            }
            self.last_clean_pass = self.last_clean_pass.max(started);
            self.instances[k].clean_at = started;
        }
        let next = self.instances[k].machine.on(Input::Compared(outcome));
        self.drive(k, next);
    }

    /// A standby's turn: what its machine asked for after its pause (or, fresh, first).
    fn standby_turn(&mut self, k: usize) {
        let i = &mut self.instances[k];
        let next = match std::mem::replace(&mut i.fresh, false) {
            true => i.machine.start(),
            false => i.machine.on(Input::Done),
        };
        self.drive(k, next);
    }

    /// Performs what instance `k`'s machine asks, from `effect` on — the daemon's order, the
    /// port calls by the daemon's interpreter on the twins — until it asks for what takes time
    /// here: a pass (one store call a turn), the stages, a pause, or the end.
    fn drive(&mut self, k: usize, mut effect: Effect) {
        loop {
            let input = match effect {
                Effect::Compare { epoch } => return self.start_pass(k, epoch),
                // Stopped while it compared: the holding ends as soon as it begins.
                Effect::Serve { .. } if self.instances[k].stopping => {
                    Input::Served { served: Served::Stopped, stale: false, stopping: true }
                }
                Effect::Serve { epoch, since, token } => return self.serve(k, epoch, since, token),
                // A pause ends at once when stop was asked (`daemon::pause_or_stop`).
                Effect::Wait(_) if self.instances[k].stopping => Input::Stop,
                Effect::Wait(pause) => {
                    self.instances[k].life = Life::Standby { wake: self.clock.now() + pause };
                    return;
                }
                Effect::Exit(end) => return self.exit(k, end),
                Effect::StandDown { forgot, pause, why } => self.stand_down(k, forgot, pause, &why),
                call => self.perform(k, &call),
            };
            effect = self.instances[k].machine.on(input);
        }
    }

    /// One call to a port, by the daemon's interpreter, on the twins' ports.
    fn perform(&mut self, k: usize, call: &Effect) -> Input {
        let (me, duration) = (self.instances[k].me.clone(), self.cfg.lease.duration);
        let (mut lease, mut fence) = (self.pg.session(), self.flights.handle());
        let mut edges = Edges { lease: &mut lease, fence: &mut fence, me: &me, duration, clock: &self.clock };
        let calls = self.pg.calls();
        let input = match call {
            // The planted bug: a stop that does not give the lease back (#65).
            Effect::Release { .. } if self.instances[k].stopping && planted::on(Bug::StopKeepsLease) => {
                Input::Done
            }
            call => effects::perform(call, &mut edges).expect("an effect that is one call to a port"),
        };
        let reached = self.pg.calls() > calls;
        self.note_held(k, call, &input, reached);
        if matches!(call, Effect::ClaimFlights { .. }) {
            // Serving without a pass: the stores are taken as agreeing from here (a pass that
            // follows, started at this step, says the same).
            self.instances[k].clean_at = self.step;
        }
        input
    }

    /// Instance `k` serves under `epoch`: its stages start, their gate counting from `since`
    /// (when its lease claim was sent), as the daemon's do.
    fn serve(&mut self, k: usize, epoch: i64, since: crate::clock::Mono, token: Option<String>) {
        let (now, clock) = (self.clock.now(), Arc::new(self.clock.clone()));
        let gate = Arc::new(LeaseGate::new(epoch, clock, since, self.cfg.lease.duration));
        let active = self.activate(gate, &self.instances[k].rules, now, token);
        self.instances[k].life = Life::Active(Box::new(active));
        let name = self.instances[k].name.clone();
        self.say(format!("{name} acquired the lease, epoch {epoch}"));
        self.note_takeover(k);
    }

    /// Instance `k` no longer serves (its stages closed) and stands by again after `pause`.
    fn stand_down(&mut self, k: usize, forgot: bool, pause: Duration, why: &str) -> Input {
        self.close(k);
        let name = self.instances[k].name.clone();
        let what = if forgot { "a store forgot" } else { "the stores could not be compared" };
        self.say(format!("{name} {what} ({why}): lease released, stands by {pause:?}"));
        Input::Done
    }

    /// Instance `k` ends; systemd starts it again.
    fn exit(&mut self, k: usize, end: End) {
        self.close(k);
        self.check_stop(k, &end);
        self.instances[k].life = Life::Gone;
        // The exit code from the one table the daemon's process ends with (`End::exit`).
        let code = end.exit().code();
        let why = match end {
            End::Stopped => "stopped".to_string(),
            End::Fenced(why) => format!("fenced (exit {code}): {why}"),
            End::NotHealed(why) => format!("not healed (exit {code}): {why}"),
            End::Held(why) | End::Away(why) | End::Failed(why) | End::Schema(why) => {
                unreachable!("the simulator's instances stand by, and its stages never fail: {why}")
            }
        };
        let name = self.instances[k].name.clone();
        self.say(format!("{name} stops: {why}"));
        match self.instances[k].stopping {
            true => self.restart(),
            false => self.spawn_standby(Duration::from_secs(1)),
        }
    }

    /// Instance `k`'s stages, if it serves, closed as the daemon's supervisor joins them; its
    /// life is what the machine asks for next (a pause, a pass, the end).
    fn close(&mut self, k: usize) {
        if let Life::Active(mut a) = std::mem::replace(&mut self.instances[k].life, Life::Gone) {
            a.slots.iter_mut().for_each(|s| s.stage.close());
        }
    }

    /// One turn of the daemon's lease keeper for instance `k`.
    fn renew(&mut self, k: usize) {
        let now = self.clock.now();
        let (me, policy) = (self.instances[k].me.clone(), self.cfg.lease);
        let name = self.instances[k].name.clone();
        if let Life::Comparing(c) = &mut self.instances[k].life {
            // As `daemon::renewing`, by its rule: renewed while compared unless the pass is
            // stuck; once taken over, not any more.
            let stuck = now.duration_since(c.progressed).unwrap_or_default() >= self.cfg.watchdog_stuck_after;
            c.lease_wake = Some(now + policy.renew_every);
            let line = match c.renewer.turn(stuck) {
                Renewal::Withhold { say } => {
                    say.then(|| format!("{name} lease epoch={} not renewed: its pass is stuck", c.epoch))
                }
                Renewal::Renew => {
                    let status = serde_json::json!({"stalled": [], "comparing": true}).to_string();
                    let answer = self.pg.session().renew(&me, c.epoch, policy.duration, &status);
                    let taken = c.renewer.renewed(&answer);
                    c.lease_wake = c.lease_wake.filter(|_| !taken);
                    taken.then(|| format!("{name} lease epoch={} taken over while compared", c.epoch))
                }
            };
            line.into_iter().for_each(|l| self.say(l));
            return;
        }
        let Life::Active(a) = &mut self.instances[k].life else { return };
        let mut lease = a.lease.clone();
        a.lease_wake = now + policy.renew_every;
        let renewed = lease.renew(&me, a.epoch, policy.duration, &Keeper::status(&a.board));
        match a.keeper.turn(renewed, self.clock.mono(), &a.gate, &a.stats, now) {
            Some(Halt::Fenced(e)) => self.served(k, Served::Fenced(format!("lost the lease: {e}"))),
            Some(Halt::Forgot(e)) => self.served(k, Served::Forgot(format!("lease keeper: {e}"))),
            Some(Halt::Asked(e)) => self.served(k, Served::Asked(e)),
            None => {}
        }
    }

    /// A holding of instance `k` ended (a stage or its lease keeper stopped): what follows is the
    /// lifecycle's. A stop as `forgot` is a false alarm unless a forget was injected after the
    /// pass that let it serve (#37).
    fn served(&mut self, k: usize, served: Served) {
        let Life::Active(a) = &self.instances[k].life else { return };
        let stale = a.gate.is_stale();
        if let Served::Forgot(why) = &served {
            let clean_at = self.instances[k].clean_at;
            if self.last_forget.is_none_or(|f| f < clean_at) {
                let name = &self.instances[k].name;
                self.false_alarm.get_or_insert(format!(
                    "false alarm: {name} stopped as forgot at step {} with no forget injected since its pass at step {clean_at} found the stores agreeing: {why}",
                    self.step
                ));
            }
        }
        self.close(k);
        let stopping = self.instances[k].stopping;
        let next = self.instances[k].machine.on(Input::Served { served, stale, stopping });
        self.drive(k, next);
    }

    /// One turn of the daemon's runner for slot `n` of instance `k`.
    fn run_stage(&mut self, k: usize, n: usize) {
        let clock = self.clock.clone();
        let name = self.instances[k].name.clone();
        let Life::Active(a) = &mut self.instances[k].life else { return };
        let slot = &mut a.slots[n];
        let stage = slot.id.name();
        let turn = slot.runner.turn(slot.stage.as_mut(), &*a.stage_gate, &a.board, &a.stats, &clock);
        // A store call of the round may have taken time (`slow`): what follows is read after it.
        let now = clock.now();
        match turn {
            Turn::Again { wake, ring } => {
                slot.wake = wake;
                if ring {
                    let rings = slot.id.rings();
                    a.slots.iter_mut().filter(|s| rings.contains(&s.id)).for_each(|s| s.wake = now);
                }
                let wait = wake.duration_since(now).unwrap_or_default();
                self.say(format!("{name} {stage} wait {wait:?}"));
            }
            Turn::Stalled { wake, error } => {
                slot.wake = wake;
                self.say(format!("{name} {stage} error: {error}"));
            }
            Turn::Stop(Halt::Fenced(e)) => self.served(k, Served::Fenced(format!("{stage} fenced: {e}"))),
            Turn::Stop(Halt::Forgot(e)) => self.served(k, Served::Forgot(format!("{stage} forgot: {e}"))),
            Turn::Stop(Halt::Asked(e)) => self.served(k, Served::Asked(e)),
        }
    }

    /// Every stage of an instance holding `epoch`, wired as `daemon::serve` wires them.
    fn activate(
        &self,
        gate: Arc<LeaseGate>,
        rules: &Arc<Rulebook>,
        now: SystemTime,
        seen: Option<String>,
    ) -> Active {
        let p = &self.cfg.pipeline;
        let epoch = gate.epoch();
        let stats = Arc::new(Stats::default());
        let stage_gate: Arc<dyn Gate> = Arc::new(Mischief::new(gate.clone()));
        let mut twins = Twins { sim: self, epoch, seen };
        let stages = topology::stages(
            &mut twins,
            &self.cfg,
            rules,
            stage_gate.clone(),
            &stats,
            Arc::new(self.clock.clone()),
        )
        .expect("the twins are built without I/O")
        .into_list();
        Active {
            epoch,
            gate,
            stage_gate,
            lease: self.pg.session(),
            board: StallBoard::default(),
            stats,
            slots: stages
                .into_iter()
                .map(|(id, stage)| Slot {
                    id,
                    stage,
                    runner: Runner::new(id, p.outage, id.idle(p)),
                    wake: now,
                })
                .collect(),
            keeper: Keeper::new(self.cfg.lease.duration, p.outage),
            lease_wake: now + self.cfg.lease.renew_every,
        }
    }
}

/// The twins as one instance's stores (`daemon::topology`): every stage on its own handle,
/// fenced by `epoch`, with the planted bugs wrapped around the ports they concern and the writes
/// only the lease gate guards recorded with their epoch.
struct Twins<'a> {
    sim: &'a Sim,
    epoch: i64,
    /// The token the consistency pass read (the pump's Redis handle starts there).
    seen: Option<String>,
}

impl Twins<'_> {
    fn guarded(&self, inner: Inner) -> Guarded {
        Guarded { inner, epoch: self.epoch, lease: self.sim.pg.clone(), audit: self.sim.audit.clone() }
    }
}

impl topology::Stores for Twins<'_> {
    type Intake = slow::Slow<MemPg>;
    type Scan = slow::Slow<MemMailbox>;
    type Fifo = Mischief<MemPg>;
    type Texts = MemMailbox;
    type Flights = Mischief<MemFlights>;
    type Lane = lane::Deferred<MemPg>;
    type Outbox = MemPg;
    type Producer = Mischief<Guarded>;
    type Outbound = Guarded;
    type Ledger = Mischief<MemPg>;
    type Marks = Guarded;
    type Housekeeping = MemPg;
    type Audit = MemPg;
    type MailboxAudit = MemMailbox;
    type FlightAudit = MemFlights;

    fn poll(&mut self) -> StoreResult<(Self::Intake, Self::Scan)> {
        let stalls = &self.sim.stalls;
        Ok((
            slow::Slow::new(self.sim.pg.fenced(self.epoch), stalls),
            slow::Slow::new(self.sim.mailbox.clone(), stalls),
        ))
    }

    fn process(
        &mut self,
    ) -> StoreResult<(Mischief<MemPg>, MemMailbox, Mischief<MemFlights>, Option<Self::Lane>)> {
        let (sim, epoch) = (self.sim, self.epoch);
        let p = &sim.cfg.pipeline;
        let fifo = Mischief::fifo(sim.pg.fenced(epoch), &sim.clock, retry_policy(p));
        let flights = sim.flights.handle().keeping(p.journal_keep).expecting(self.seen.take()).fenced(epoch);
        let lane = sim.lanes.then(|| lane::Deferred::new(sim.pg.fenced(epoch)));
        Ok((fifo, sim.mailbox.clone(), Mischief::new(flights), lane))
    }

    fn dispatch(&mut self) -> StoreResult<(MemPg, Mischief<Guarded>)> {
        let producer = self.guarded(Inner::Kafka(self.sim.kafka.clone()));
        Ok((self.sim.pg.fenced(self.epoch), Mischief::new(producer)))
    }

    fn outbound(&mut self) -> StoreResult<(MemPg, Guarded)> {
        Ok((self.sim.pg.fenced(self.epoch), self.guarded(Inner::Outbound(self.sim.outbound.clone()))))
    }

    fn backfill(&mut self) -> StoreResult<(Mischief<MemPg>, Guarded)> {
        let ledger = Mischief::new(self.sim.pg.fenced(self.epoch));
        Ok((ledger, self.guarded(Inner::Mailbox(self.sim.mailbox.clone()))))
    }

    fn jobs(&mut self) -> StoreResult<MemPg> {
        Ok(self.sim.pg.fenced(self.epoch))
    }

    fn sentinel(&mut self) -> StoreResult<(MemPg, MemMailbox, MemFlights)> {
        let flights = self.sim.flights.handle().keeping(self.sim.cfg.pipeline.journal_keep);
        Ok((self.sim.pg.fenced(self.epoch), self.sim.mailbox.clone(), flights))
    }
}

/// The stores only the lease gate guards, recording each write they take with its epoch.
enum Inner {
    Kafka(MemProducer),
    Mailbox(MemMailbox),
    Outbound(MemOutbound),
}

struct Guarded {
    inner: Inner,
    epoch: i64,
    lease: MemPg,
    audit: Audit,
}

impl Guarded {
    fn record(&self, what: String) {
        let lease = self.lease.inspect(|s| s.lease.epoch);
        self.audit.borrow_mut().push(GuardedWrite { what, writer: self.epoch, lease });
    }
}

impl Producer for Guarded {
    fn send(&mut self, records: &[Record]) -> Vec<Result<crate::ports::Position, StoreError>> {
        let Inner::Kafka(k) = &mut self.inner else { unreachable!("wired as a producer") };
        let before = k.delivered().len();
        let out = k.send(records);
        let after = k.delivered().len();
        if after > before {
            self.record(format!("kafka: {} record(s)", after - before));
        }
        out
    }
}

impl MailboxMarks for Guarded {
    fn mark(
        &mut self,
        ids: &[i64],
        at: SystemTime,
        still_ours: &dyn Fn() -> StoreResult<()>,
    ) -> StoreResult<Vec<Mark>> {
        let Inner::Mailbox(m) = &mut self.inner else { unreachable!("wired as the mailbox") };
        let before = m.inspect(|s| s.rows.values().filter(|r| r.processed_at.is_some()).count());
        let out = m.mark(ids, at, still_ours);
        let after = m.inspect(|s| s.rows.values().filter(|r| r.processed_at.is_some()).count());
        if after != before || matches!(&out, Ok(marks) if marks.contains(&Mark::Written)) {
            self.record(format!("mailbox marks {ids:?}"));
        }
        out
    }
}

impl Outbound for Guarded {
    fn insert(&mut self, routing_id: &str, xml: &str, at: SystemTime) -> StoreResult<i64> {
        let Inner::Outbound(o) = &mut self.inner else { unreachable!("wired as COUTMSGS") };
        let before = o.rows().len();
        let out = o.insert(routing_id, xml, at);
        if o.rows().len() > before {
            self.record(format!("coutmsgs {routing_id}"));
        }
        out
    }

    fn find(&mut self, routing_id: &str, xml: &str, since: SystemTime) -> StoreResult<Option<i64>> {
        let Inner::Outbound(o) = &mut self.inner else { unreachable!("wired as COUTMSGS") };
        o.find(routing_id, xml, since)
    }
}

/// Runs one seed: `steps` random steps with the invariants checked after each, then heal and
/// drain and the final checks. The error is the first broken invariant and the step log.
pub fn run(seed: u64, steps: u64) -> Result<Sim, String> {
    let mut sim = Sim::new(seed);
    let mut checker = Checker::default();
    let fail = |sim: &Sim, what: String| {
        if std::env::var("SIM_DEBUG").is_ok() {
            // The stores as the failure left them, for a replay.
            sim.pg
                .inspect(|s| s.procs.values().for_each(|p| eprintln!("pg {:?} {:?}", p.row, p.redis_record)));
            sim.flights.inspect(|f| eprintln!("redis {f:?}"));
        }
        // A replay (SIM_SEED set) shows the whole log, a run of many seeds its end.
        let keep = if std::env::var("SIM_SEED").is_ok() { usize::MAX } else { 60 };
        let tail: Vec<&String> =
            sim.log.iter().rev().take(keep).collect::<Vec<_>>().into_iter().rev().collect();
        let log = tail.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n");
        format!(
            "seed {seed} failed at step {}: {what}\n  replay: SIM_SEED={seed} cargo test --lib sim::tests::replay -- --nocapture\n  last steps:\n{log}",
            sim.step
        )
    };
    for _ in 0..steps {
        sim.step();
        if let Err(e) = checker.check(&sim) {
            return Err(fail(&sim, e));
        }
    }
    sim.heal_all();
    sim.drain(&mut checker, 200_000).map_err(|e| fail(&sim, e))?;
    check::at_the_end(&sim, &checker).map_err(|e| fail(&sim, e))?;
    check::heal_windows_are_healed_or_reported(&sim).map_err(|e| fail(&sim, e))?;
    Ok(sim)
}
