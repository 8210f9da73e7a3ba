//! `msgx verify` and `msgx rebuild-flights`: the consistency sentinel by hand (U25, #20).

use msgx::clock::{Clock, SystemClock};
use msgx::codec::Rulebook;
use msgx::config::Config;
use msgx::consistency::{self, Depth, HealError, Stores};
use msgx::instance::effects::{perform, Edges};
use msgx::instance::lifecycle::{End, Served};
use msgx::instance::{Effect, Input, Instance, InstancePolicy};
use msgx::ports::Claimant;
use msgx::store::flights::RedisFlights;
use msgx::store::mailbox::MysqlMailbox;
use msgx::store::pg::Pg;

use msgx::exit::Exit;

use super::{unreachable, CmdResult};

/// The three stores, connected now; a store that does not answer is exit 4.
pub(super) fn open(cfg: &Config) -> Result<(Pg, MysqlMailbox, RedisFlights), (Exit, anyhow::Error)> {
    let pg = Pg::of(cfg).and_then(Pg::connected).map_err(unreachable)?;
    let mailbox = MysqlMailbox::of(cfg).map_err(unreachable)?;
    Ok((pg, mailbox, open_flights(cfg)?))
}

/// Redis's flights, connected now, keeping journal entries as the daemon keeps them.
fn open_flights(cfg: &Config) -> Result<RedisFlights, (Exit, anyhow::Error)> {
    let flights = RedisFlights::connect_to(&cfg.redis, &cfg.redis_prefix).map_err(unreachable)?;
    Ok(flights.keeping(cfg.pipeline.journal_keep))
}

/// The stores a command compares, decoding under the configured limits and this release's
/// rules; nothing is watched.
pub(super) fn stores<'a>(
    cfg: &Config,
    pg: &'a mut Pg,
    mailbox: &'a mut MysqlMailbox,
    flights: &'a mut RedisFlights,
) -> Stores<'a> {
    let limits = msgx::codec::Limits::of(&cfg.pipeline);
    Stores { pg, mailbox, flights, beat: Default::default(), limits, rules: Rulebook::this_release() }
}

/// `msgx verify [--sample RATIO] [--json]`: exit 0 clean (suspicions are printed, and are no
/// finding), 1 findings, 4 a store unreachable.
pub fn verify(cfg: &Config, sample: Option<f64>, json: bool) -> CmdResult {
    let sample = sample.unwrap_or(cfg.pipeline.check_sample_ratio);
    if !(0.0..=1.0).contains(&sample) {
        return Err((Exit::Usage, anyhow::anyhow!("--sample {sample}: a ratio between 0 and 1")));
    }
    let (mut pg, mut mailbox, mut flights) = open(cfg)?;
    let mut st = stores(cfg, &mut pg, &mut mailbox, &mut flights);
    let r = consistency::check(&mut st, Depth::Full { sample }, SystemClock.now()).map_err(unreachable)?;
    if json {
        let mut v = serde_json::to_value(&r).expect("a report serialises");
        v["redis"] = serde_json::json!({
            "epoch": r.redis.epoch, "journal_pruned": r.redis.pruned,
            "applies": r.redis.seq, "applied_max": r.redis.applied_max,
            "settled_max": r.redis.settled_max,
        });
        v["clean"] = serde_json::json!(r.is_clean());
        out!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        out!(
            "postgres: highest MSG_ID {}, lease epoch {}; redis: epoch {}, {} applies, highest MSG_ID applied {}, journal complete above MSG_ID {}",
            r.pg_known_max,
            r.pg_epoch,
            r.redis.epoch,
            r.redis.seq,
            r.redis.applied_max,
            r.redis.pruned.map_or("- (not kept yet)".to_string(), |p| p.to_string())
        );
        out!(
            "checked: {} SUCCEEDED message(s) against the Redis journal, {} sampled for field versions (ratio {sample})",
            r.journal_checked, r.sampled
        );
        out!(
            "other rules: {} message(s) decided under rules other than this release's (RULES_VERSION {}), not decided again",
            r.other_rules,
            st.rules.version()
        );
        for kind in consistency::FindingKind::ALL {
            match r.finding(kind) {
                Some(f) => out!("FINDING {}: {}", kind.as_str(), f.line()),
                None => out!("ok      {}", kind.as_str()),
            }
        }
        // Not proof that a store forgot: reported, never a reason for exit 1 (#37).
        for s in &r.suspicions {
            out!("SUSPICION {}: {}", s.kind.as_str(), s.line());
        }
    }
    match r.findings.len() {
        0 => Ok(()),
        n => Err((Exit::Failed, anyhow::anyhow!("{n} finding(s): a store is behind what it acknowledged"))),
    }
}

/// `msgx rebuild-flights [--flid F…] [--yes]`: the flights rebuilt from the mailbox texts of every
/// SUCCEEDED message held, on top of what Redis holds; without `--yes`, what would change. With
/// `--yes` it takes the lease as an instance does — the instance machine's order, as a tool that
/// never stands by (refused while an instance holds the lease: its pump writes the flights) —,
/// keeps it renewed, writes fenced by its epoch, and gives it back (#38, #56).
pub fn rebuild_flights(cfg: &Config, flids: &[String], yes: bool) -> CmdResult {
    let (mut pg, mut mailbox, mut flights) = open(cfg)?;
    let only = (!flids.is_empty()).then_some(flids);
    let rebuilt = match yes {
        false => consistency::rebuild_flights(
            &mut stores(cfg, &mut pg, &mut mailbox, &mut flights),
            only,
            SystemClock.now(),
            false,
        ),
        true => holding_the_lease(cfg, (&mut pg, &mut flights), |epoch, pg, me| {
            let mut fenced = open_flights(cfg)?.fenced(epoch);
            let mut st = stores(cfg, pg, &mut mailbox, &mut fenced);
            // A person runs this and watches it: no turn of it is watched for stuck.
            let pulse = msgx::stage::Pulse::default();
            let watch = msgx::daemon::Watch {
                pulse: &pulse,
                clock: &SystemClock,
                stuck_after: cfg.watchdog_stuck_after,
            };
            Ok(msgx::daemon::renewing(cfg, me, epoch, watch, || {
                consistency::rebuild_flights(&mut st, only, SystemClock.now(), true)
            }))
        })?,
    };
    let (changed, messages) = rebuilt.map_err(|e| match e {
        HealError::Store(e) => unreachable(e),
        HealError::Person(why) => (Exit::Failed, anyhow::anyhow!(why)),
    })?;
    if !yes {
        out!(
            "would rewrite {changed} flight(s) that differ from a rebuild of {messages} SUCCEEDED message(s); run again with --yes"
        );
        return Err((Exit::Usage, anyhow::anyhow!("nothing done without --yes")));
    }
    out!("rewrote {changed} flight(s) from {messages} SUCCEEDED message(s)");
    Ok(())
}

/// Runs `work` under a lease taken as the instance machine takes it, as a tool: the floor Redis
/// saw, the lease above it, the flights claimed for the epoch, then `work(epoch, …)`, then the
/// lease given back — the port calls by the daemon's interpreter. A lease an instance holds, or
/// a store away, ends it with the exit code the machine's end names.
fn holding_the_lease<T>(
    cfg: &Config,
    (pg, flights): (&mut Pg, &mut RedisFlights),
    work: impl FnOnce(i64, &mut Pg, &Claimant) -> Result<T, (Exit, anyhow::Error)>,
) -> Result<T, (Exit, anyhow::Error)> {
    let me = Claimant::this_process(SystemClock.now());
    let mut machine = Instance::new(InstancePolicy::of(cfg, true));
    let (mut effect, mut work, mut done) = (machine.start(), Some(work), None);
    let end = loop {
        let input = match effect {
            Effect::Exit(end) => break end,
            Effect::Serve { epoch, .. } => {
                let work = work.take().expect("a tool serves once");
                done = Some(work(epoch, pg, &me));
                Input::Served { served: Served::Stopped, stale: false, stopping: false }
            }
            call => {
                let duration = cfg.lease.duration;
                let mut edges =
                    Edges { lease: &mut *pg, fence: &mut *flights, me: &me, duration, clock: &SystemClock };
                perform(&call, &mut edges).unwrap_or_else(|| panic!("a tool is asked for no {call:?}"))
            }
        };
        effect = machine.on(input);
    };
    match (end, done) {
        (End::Stopped, Some(done)) => done,
        (end, _) => Err((end.exit(), anyhow::anyhow!("{}", end.why()))),
    }
}

/// The first finding of the cheap check, for `status --check`; `None` when clean or when a
/// store cannot be reached (then the plugin says so without alarm).
pub fn finding(cfg: &Config) -> Option<String> {
    let (mut pg, mut mailbox, mut flights) = open(cfg).ok()?;
    let mut st = stores(cfg, &mut pg, &mut mailbox, &mut flights);
    let r = consistency::check(&mut st, Depth::Recent(consistency::stage::RECENT), SystemClock.now()).ok()?;
    r.findings.first().map(|f| f.line())
}
