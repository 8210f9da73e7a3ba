//! `msgx rules apply --since MSG_ID` (#65, SPEC §4.13): the SUCCEEDED messages from `since` on
//! decided again under the rules of the instance that runs the job, and every difference told
//! as an event — nothing re-interpreted in silence.
//!
//! An operator's command registers the job (`RULES_APPLY`, OPEN) for the rules it carries. The
//! active instance of those rules notices it (the sentinel's round), stops its stages, and runs
//! it in its consistency pass, under its lease, before they start again; an instance of other
//! rules leaves it alone. The job replays the messages from `since` on top of what Redis holds
//! — the heal's replay (`heal::Rebuild::again`), each message decided under today's rules —
//! and compares each flight it changed with Redis. Then, so that a crash between the stores
//! neither loses the announcement nor tells it twice (I2: Redis before the event):
//!
//! 1. own PostgreSQL: the difference staged (each flight before and after), APPLYING;
//! 2. Redis: each flight written as staged after, fenced;
//! 3. own PostgreSQL, one transaction: one event per flight that differs in the outbox (an
//!    UPSERT of each changed field, or a DELETE), told under the flight's last message from
//!    `since` on with its type tag and an ordinal from [`ordinal_base`] (so its `event_key` is
//!    new), the messages' `RULES_VERSION` moved to the job's, DONE.
//!
//! An instance that finds the job APPLYING finishes it from what was staged: a flight Redis
//! holds as staged after is not written again, one it holds as before is; one that holds
//! neither was changed since by someone else (an instance of other rules) and fails the job
//! for a person. A heal after the job decides those messages under the job's rules (their
//! `RULES_VERSION`), and an earlier release's heal lays them on as announced — with the event
//! the job told under each, so both give what a consumer holds.
//!
//! What the job cannot do, it says: a field other rules wrote that today's decision of the
//! same message does not write keeps its value (no earlier value is known here), counted and
//! named in the job's note and a WARN; a text the mailbox no longer holds fails the job.

use std::collections::BTreeMap;
use std::time::SystemTime;

use log::{error, info, warn};
use serde::{Deserialize, Serialize};

use super::heal::{HealError, Rebuild};
use super::Stores;
use crate::domain::NewEvent;
use crate::handlers::{self, FlightState};
use crate::ports::{Restore, RulesDone, RulesJob, RulesJobState};

/// The most flights one job changes: its difference is staged in one row and written in one
/// pass. A larger one fails, naming its size: a later `--since`, in steps.
pub const MAX_FLIGHTS: usize = 10_000;

/// The first ordinal of the events a job of rules `rules` tells under a message: far above
/// any message's own events, so an `event_key` (MSG_ID.ordinal.digest) is never one the
/// message's decision gave.
pub fn ordinal_base(rules: u32) -> i32 {
    1_000_000i32.saturating_mul(i32::try_from(rules % 2_000).unwrap_or(0).max(1))
}

/// One flight of a job's difference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restated {
    pub flid: String,
    pub before: FlightState,
    pub sodt_before: Option<i64>,
    pub after: FlightState,
    pub sodt_after: Option<i64>,
    /// The message the difference is told under (the flight's last one from `since` on) and
    /// its type tag.
    pub msg_id: i64,
    pub tag: String,
}

impl Restated {
    /// What a consumer that holds `before` is told, if any value differs.
    pub fn event(&self) -> Option<NewEvent> {
        handlers::restated(&self.flid, &self.before, &self.after, self.msg_id, &self.tag)
    }
}

/// What deciding the messages from `since` on again changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    pub flights: Vec<Restated>,
    /// Messages decided under other rules until now.
    pub redecided: Vec<i64>,
    /// SUCCEEDED messages read.
    pub messages: usize,
    /// Fields other rules wrote that today's decision does not (`msg_id`, `FLID.field`).
    pub kept: Vec<(i64, String)>,
}

impl Difference {
    /// The events, in MSG_ID order, each with the message it is told under and its ordinal.
    pub fn events(&self, rules: u32) -> Vec<(i64, i32, NewEvent)> {
        let mut told: Vec<(i64, NewEvent)> =
            self.flights.iter().filter_map(|f| f.event().map(|e| (f.msg_id, e))).collect();
        told.sort_by(|a, b| (a.0, &a.1.partition_key).cmp(&(b.0, &b.1.partition_key)));
        let mut next: BTreeMap<i64, i32> = BTreeMap::new();
        told.into_iter()
            .map(|(m, e)| {
                let k = next.entry(m).or_insert(ordinal_base(rules));
                *k += 1;
                (m, *k - 1, e)
            })
            .collect()
    }

    /// One line: what the job does (or did), `events` of [`Difference::events`] told.
    pub fn summary(&self, rules: u32, events: usize) -> String {
        let mut line = format!(
            "{} message(s) from the first decided again under rules {rules} ({} of them decided under other rules before): {} flight(s) differ, {events} event(s) told",
            self.messages,
            self.redecided.len(),
            self.flights.len(),
        );
        if let Some((m, field)) = self.kept.first() {
            line.push_str(&format!(
                "; {} field(s) other rules wrote that rules {rules} do not kept as they are (first: msg_id={m} {field})",
                self.kept.len()
            ));
        }
        line
    }
}

/// What deciding the SUCCEEDED messages from `since` on again under `st.rules` changes: read
/// only (the command's preview, and a job's first step).
pub fn difference(st: &mut Stores<'_>, since: i64) -> Result<Difference, HealError> {
    let replay = Rebuild::again(st, since.max(1))?;
    let again = replay.again.as_ref().expect("a replay from `since` keeps what it found");
    let flights = replay
        .changed()
        .into_iter()
        .map(|(flid, before, sodt_before, after, sodt_after)| {
            let (msg_id, tag) = again.last.get(&flid).cloned().unwrap_or((since, String::new()));
            Restated { flid, before, sodt_before, after, sodt_after, msg_id, tag }
        })
        .collect();
    Ok(Difference {
        flights,
        redecided: again.redecided.clone(),
        messages: again.messages,
        kept: again.kept.clone(),
    })
}

/// How a job of this instance's rules ended, for the pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// Done: whether Redis was written (the pump's handle then starts from its new token).
    Done { job_id: i64, wrote: bool },
    /// Failed for a person (its note says why); nothing more is written for it.
    Failed { job_id: i64 },
}

/// Runs the oldest job of this instance's rules not finished, if there is one (the pass, the
/// stores agreeing). A store away is the pass's outage: the job stays and is run again.
pub fn run_open(st: &mut Stores<'_>, now: SystemTime) -> Result<Option<Ran>, crate::error::StoreError> {
    let Some(job) = st.pg.open_rules_job(st.rules.version())? else { return Ok(None) };
    match run(st, &job, now) {
        Ok(wrote) => Ok(Some(Ran::Done { job_id: job.job_id, wrote })),
        Err(HealError::Store(e)) => Err(e),
        Err(HealError::Person(why)) => {
            error!("rules apply job={} failed: {why}", job.job_id);
            st.pg.fail_rules_apply(job.job_id, &why, now)?;
            Ok(Some(Ran::Failed { job_id: job.job_id }))
        }
    }
}

/// A job to its end (module documentation); whether Redis was written.
fn run(st: &mut Stores<'_>, job: &RulesJob, now: SystemTime) -> Result<bool, HealError> {
    let rules = st.rules.version();
    let diff = match (job.state, job.staged.as_deref()) {
        (RulesJobState::Applying, Some(text)) => {
            info!("rules apply job={}: finishing what was staged", job.job_id);
            serde_json::from_str(text)
                .map_err(|e| HealError::Person(format!("its staged difference does not read: {e}")))?
        }
        _ => {
            info!(
                "rules apply job={}: deciding the SUCCEEDED messages from MSG_ID {} again under rules {rules}",
                job.job_id, job.since
            );
            let diff = difference(st, job.since)?;
            if diff.flights.len() > MAX_FLIGHTS {
                return Err(HealError::Person(format!(
                    "it would change {} flights, more than the {MAX_FLIGHTS} one job writes: ask again with a later --since, in steps",
                    diff.flights.len()
                )));
            }
            let text = serde_json::to_string(&diff).expect("a difference is plain data");
            st.pg.stage_rules_apply(job.job_id, &text, now)?;
            diff
        }
    };
    let wrote = write_flights(st, &diff, now)?;
    let events = diff.events(rules);
    let note = diff.summary(rules, events.len());
    if !diff.kept.is_empty() {
        warn!("rules apply job={}: {}", job.job_id, note);
    }
    st.pg.finish_rules_apply(
        job,
        &RulesDone { events: &events, redecided: &diff.redecided, note: &note },
        now,
    )?;
    info!("rules applied job={} since MSG_ID {}: {note}", job.job_id, job.since);
    Ok(wrote)
}

/// Redis: each flight of the difference as staged after, unless it holds that already; one
/// that holds neither before nor after changed since it was staged: a person's.
fn write_flights(st: &mut Stores<'_>, diff: &Difference, now: SystemTime) -> Result<bool, HealError> {
    let mut held: BTreeMap<String, (FlightState, Option<i64>)> = BTreeMap::new();
    let flids: Vec<String> = diff.flights.iter().map(|f| f.flid.clone()).collect();
    for chunk in flids.chunks(500) {
        st.beat.beat();
        for (flid, f, sodt) in st.flights.flights_of(chunk)? {
            let sodt = sodt.filter(|_| f.exists());
            held.insert(flid, (f, sodt));
        }
    }
    let mut write = Vec::new();
    let mut moved = Vec::new();
    for f in &diff.flights {
        let now_held = held.remove(&f.flid).unwrap_or_default();
        if now_held == (f.after.clone(), f.sodt_after) {
            continue;
        }
        if now_held == (f.before.clone(), f.sodt_before) {
            write.push((f.flid.clone(), f.after.clone(), f.sodt_after));
        } else {
            moved.push(f.flid.as_str());
        }
    }
    if let Some(first) = moved.first() {
        return Err(HealError::Person(format!(
            "{} flight(s) changed since its difference was staged (first FLID {first}), by an instance of other rules: ask again",
            moved.len()
        )));
    }
    if write.is_empty() {
        return Ok(false);
    }
    st.flights.restore(&Restore { flights: write, generation: None, journal: Vec::new() }, now)?;
    Ok(true)
}
