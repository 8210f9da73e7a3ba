//! The simulator's runs: many seeds, one seed replayed, determinism, and the planted bugs it
//! must find.

use std::time::Instant;

use super::run;
use crate::planted::{self, Bug};
use crate::requests::ReqState;

/// Steps per seed before the heal-and-drain.
const STEPS: u64 = 400;

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn seeds_hold_every_invariant() {
    let seeds = env("SIM_SEEDS").unwrap_or(300);
    let first = env("SIM_FIRST_SEED").unwrap_or(0);
    let per_seed = env("SIM_STEPS").unwrap_or(STEPS);
    let start = Instant::now();
    let mut steps = 0;
    let (mut stalls, mut stalled) = (0u64, 0f64);
    // The lifecycle's own faults (#38), as the step logs name them.
    // The fleet's (#65): stops, upgrades and rollbacks, and takeovers across releases.
    const FAULTS: [&str; 10] = [
        "freezes before a write to Redis in its heal",
        "freezes before a write to Postgres in its heal",
        "crashed before a write to Redis in its heal",
        "crashed before a write to Postgres in its heal",
        "taken over while compared",
        "is sent SIGTERM",
        "stops: stopped",
        "rules 2 deployed",
        "rules 1 deployed",
        "takes over from an instance of rules",
    ];
    let mut faults = [0u64; FAULTS.len()];
    // The upstream's message mix (#39), and how many rows committed late.
    let mut mix: std::collections::BTreeMap<&str, u64> = Default::default();
    // The requests to the AODB (#41): how they ended, and the AODB's answers.
    let mut requests: std::collections::BTreeMap<String, u64> = Default::default();
    let mut jobs: std::collections::BTreeMap<String, u64> = Default::default();
    let mut failed: Vec<String> = Vec::new();
    for seed in first..first + seeds {
        match run(seed, per_seed) {
            Ok(sim) => {
                steps += sim.step;
                stalls += sim.stalls.count.get();
                stalled += sim.stalls.total.get().as_secs_f64();
                for row in sim.upstream.rows.values() {
                    *mix.entry(row.kind.tag()).or_default() += 1;
                    *mix.entry("(of them committed late or rolled back)").or_default() += row.late as u64;
                }
                // `msgx rules apply` (#65): how the jobs ended, and the events they told.
                sim.pg.inspect(|s| {
                    for j in s.rules_jobs.values() {
                        *jobs.entry(format!("jobs {}", j.state.name())).or_default() += 1;
                    }
                    let base = crate::consistency::rules::ordinal_base(1);
                    let told =
                        s.events.values().filter(|e| e.event.ordinal.is_some_and(|o| o >= base)).count();
                    *jobs.entry("events told by a job".into()).or_default() += told as u64;
                });
                sim.pg.inspect(|s| {
                    for r in s.requests.values() {
                        let late = if r.state == ReqState::Expired && r.answer_msg_id.is_some() {
                            ", answered late"
                        } else {
                            ""
                        };
                        *requests.entry(format!("{}{late}", r.state)).or_default() += 1;
                        if r.origin == crate::requests::Origin::Heal.as_str() {
                            *requests
                                .entry(format!("a heal's, try {}, {}", r.tries, r.state))
                                .or_default() += 1;
                        }
                    }
                });
                let lines = |what: &str| sim.log.iter().filter(|l| l.contains(what)).count() as u64;
                for (what, line) in [
                    ("answers the AODB wrote", "AODB answers: upstream"),
                    ("answers for another day than asked", "AODB answers another day: upstream"),
                    ("answers nobody asked for", "AODB answers what nobody asked: upstream"),
                ] {
                    *requests.entry(what.into()).or_default() += lines(line);
                }

                for (n, f) in FAULTS.iter().enumerate() {
                    faults[n] += sim.log.iter().filter(|l| l.contains(f)).count() as u64;
                }
            }
            // SIM_KEEP_GOING: every failing seed of the sweep, not only the first.
            Err(e) if std::env::var("SIM_KEEP_GOING").is_ok() => failed.push(e),
            Err(e) => panic!("{e}"),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("sim: {stalls} store calls of the pollers blocked, {stalled:.0} s in all (#69)");
    eprintln!(
        "sim: {seeds} seeds, {steps} steps in {secs:.1} s: {:.0} seeds/s, {:.0} steps/s",
        seeds as f64 / secs,
        steps as f64 / secs
    );
    let consumer = super::check::CONSUMER_FLIGHTS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("sim: {consumer} flights a consumer of the message topic holds as Redis does (#65)");
    let checked = crate::schema::tests::CHECKED.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("sim: {checked} delivered records valid against their published schemas (#67)");
    FAULTS.iter().zip(faults).for_each(|(f, n)| eprintln!("sim: {n} × {f}"));
    mix.iter().for_each(|(kind, n)| eprintln!("sim: upstream {n} × {kind}"));
    requests.iter().for_each(|(what, n)| eprintln!("sim: requests {n} × {what}"));
    jobs.iter().for_each(|(what, n)| eprintln!("sim: rules apply {n} × {what}"));
    let firsts: Vec<&str> = failed.iter().filter_map(|e| e.lines().next()).collect();
    assert!(failed.is_empty(), "{} seed(s) failed:\n{}", failed.len(), firsts.join("\n"));
}

#[test]
fn replay() {
    let seed = env("SIM_SEED").unwrap_or(1);
    let steps = env("SIM_STEPS").unwrap_or(STEPS);
    match run(seed, steps) {
        Ok(sim) => {
            if std::env::var("SIM_SEED").is_ok() {
                sim.log.iter().for_each(|l| eprintln!("{l}"));
            }
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_seed_replays_step_for_step() {
    for seed in [7, 1234, 99_999] {
        let a = run(seed, STEPS).unwrap_or_else(|e| panic!("{e}"));
        let b = run(seed, STEPS).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.log, b.log, "seed {seed} ran differently twice");
    }
}

/// Runs seeds with `bug` planted until one fails; the failure and the seeds it took.
fn find(bug: Bug, max_seeds: u64) -> (String, u64) {
    planted::plant(Some(bug));
    let found = (0..max_seeds).find_map(|seed| run(seed, STEPS).err().map(|e| (e, seed + 1)));
    planted::plant(None);
    found.unwrap_or_else(|| panic!("{bug:?} not found in {max_seeds} seeds"))
}

macro_rules! planted_bug {
    ($name:ident, $bug:expr, $words:expr) => {
        #[test]
        fn $name() {
            let (failure, seeds) = find($bug, 500);
            eprintln!("{:?} found after {seeds} seed(s): {}", $bug, failure.lines().next().unwrap_or(""));
            assert!(
                $words.iter().any(|w: &&str| failure.contains(w)),
                "{:?} was found, but as something else:\n{failure}",
                $bug
            );
        }
    };
}

planted_bug!(finds_a_head_overtaken, Bug::HeadOvertaken, ["INV-3"]);
planted_bug!(finds_a_mark_overwritten, Bug::MarkOverwritten, ["INV-7"]);
planted_bug!(finds_a_forgotten_backfill_intent, Bug::IntentForgotten, ["INV-8"]);
planted_bug!(finds_an_identity_held_twice, Bug::IdentityUnchecked, ["INV-9"]);
planted_bug!(finds_an_ignored_journal, Bug::JournalIgnored, ["I2", "Redis differs"]);
planted_bug!(finds_a_gate_that_never_closes, Bug::GateNeverCloses, ["PRE-5"]);
planted_bug!(finds_a_delivery_out_of_order, Bug::DeliveryReordered, ["delivered first after"]);
planted_bug!(finds_an_outage_charged_to_an_event, Bug::OutageCharged, ["outage costs no event"]);
planted_bug!(
    finds_a_store_that_forgot_left_unhealed,
    Bug::HealSkipped,
    ["I2", "never enqueued", "Redis differs", "delivered events", "did not drain", "since its pass"]
);
planted_bug!(finds_a_journal_entry_dropped_for_a_no_op, Bug::NoOpJournalDropped, ["false alarm", "journal"]);
planted_bug!(
    finds_a_heal_without_the_fence,
    Bug::HealUnfenced,
    ["Redis differs", "false alarm", "I2", "PRE-5", "delivered events"]
);
planted_bug!(finds_a_round_time_used_after_a_blocking_call, Bug::RoundTimeReused, ["commit grace"]);
planted_bug!(
    finds_a_snapshot_that_shares_its_round,
    Bug::SnapshotSharesRound,
    ["from the model", "the model decides"]
);
planted_bug!(finds_a_stop_that_keeps_the_lease, Bug::StopKeepsLease, ["kept the lease"]);
planted_bug!(finds_a_rules_job_that_tells_nothing, Bug::RulesUntold, ["a consumer"]);

/// #65: the consumer's view is checked, and a Redis that holds what no event announced fails it.
#[test]
fn a_redis_that_holds_what_no_event_announced_differs_from_the_consumers_view() {
    let sim = run(3, STEPS).unwrap_or_else(|e| panic!("{e}"));
    let checker = super::Checker::default();
    super::check::consumer_view_matches(&sim, &checker).expect("as announced");
    let planned: Vec<String> = sim
        .kafka
        .delivered()
        .iter()
        .filter(|r| r.topic == sim.cfg.topic_schd)
        .flat_map(|r| serde_json::from_str::<Vec<serde_json::Value>>(&r.payload).unwrap_or_default())
        .filter_map(|v| v["FLID"].as_str().map(str::to_string))
        .collect();
    let told = sim.flights.inspect(|f| {
        f.flights.iter().find(|(k, st)| st.exists() && !planned.contains(k)).map(|(k, _)| k.clone())
    });
    let flid = told.expect("a flight only the message topic tells of");
    let mut state = sim.flights.state();
    state.flights.get_mut(&flid).unwrap().fields.insert("XSTND".into(), "made up".into());
    sim.flights.replace_state(state);
    let e = super::check::consumer_view_matches(&sim, &checker).unwrap_err();
    assert!(e.contains(&flid) && e.contains("made up"), "{e}");
}
