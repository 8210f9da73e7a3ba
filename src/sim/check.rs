//! The invariants, checked on the stores after every step, and what must hold once the
//! pipeline has drained.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use super::upstream::Kind;
use super::Sim;
use crate::domain::{EventStatus, ProcStatus, Target};
use crate::error::ErrorClass;
use crate::handlers::plan::Replay;
use crate::handlers::{self, FlightState, View};
use crate::requests::ReqState;
use crate::store::memory::{MemProc, PgState};

/// SPEC §4.9's commit race (#69): a row enqueued while a lower one was not yet visible flowed
/// past that gap, which a poller may let it do only once the gap is `commit-grace` old — and a
/// gap is no older than the first read that showed a row above it. So its enqueue time is at
/// least the grace after the first read above every such lower row (a rolled-back one too: the
/// poller cannot tell it from a slow commit).
fn commit_grace_held(sim: &Sim, s: &PgState, new: &[i64]) -> Result<(), String> {
    let grace = sim.cfg.pipeline.commit_grace;
    for b in new {
        let enqueued = s.procs[b].enqueued_at;
        let below = sim
            .upstream
            .rows
            .range(..*b)
            .filter(|(_, r)| r.late && r.visible_at.is_none_or(|v| v > enqueued));
        for (a, _) in below {
            let Some(first) = sim.stalls.first_read_above(*a) else { continue };
            let age = enqueued.duration_since(first).unwrap_or_default();
            if age < grace {
                return Err(format!(
                    "commit grace (SPEC 4.9, #69): msg {b} was enqueued {age:?} after a poller first read a row above msg {a}, which was not visible yet; the grace is {grace:?}"
                ));
            }
        }
    }
    Ok(())
}

/// What the previous checks saw: the invariants are about changes from step to step.
#[derive(Debug, Default)]
pub struct Checker {
    /// MSG_ID → the step it was first seen enqueued.
    enqueued: BTreeMap<i64, u64>,
    /// MSG_ID → its state at the last check.
    states: BTreeMap<i64, ProcStatus>,
    /// Mailbox marks seen so far.
    marks: BTreeMap<i64, SystemTime>,
    /// Records of the message topic checked so far, the identity (`event_key`) of each event
    /// delivered with its payload, the highest EVENT_ID first delivered since own PostgreSQL
    /// last went back (it hands EVENT_IDs out again after: #20), and how often it did.
    delivered: usize,
    event_keys: BTreeMap<String, String>,
    last_event_id: i64,
    pg_rollbacks: u64,
    /// Guarded writes checked so far.
    audited: usize,
    /// MSG_ID → when the pump took the decision that stands (a count of decisions): MSG_ID
    /// order but for a row that became visible late (PRE-2).
    decided: BTreeMap<i64, u64>,
    /// As `decided`, but a heal's rewrite of a journal entry does not move it: the heal writes
    /// back the events the outbox holds, those of the decision first taken (seed 5991).
    said: BTreeMap<i64, u64>,
    /// Messages both stores forgot a decision of, decided anew: consumers may have had the
    /// forgotten decision's events before the standing one's (seed 7527).
    retold: BTreeSet<i64>,
    decisions: u64,
    /// The messages a store remembers a decision of, and those Redis journals, at the last
    /// check.
    known: BTreeSet<i64>,
    journaled: BTreeSet<i64>,
    /// MSG_ID → the rules its standing decision was taken under, as own PostgreSQL recorded
    /// them when it first held it SUCCEEDED: a `msgx rules apply` job moves `RULES_VERSION`
    /// later (#65), and tells the difference in events of its own; the message's own events
    /// stay those of the rules that decided it.
    said_rules: BTreeMap<i64, Option<u32>>,
}

fn unfinished(s: ProcStatus) -> bool {
    matches!(s, ProcStatus::Pending | ProcStatus::Failed)
}

impl Checker {
    pub fn check(&mut self, sim: &Sim) -> Result<(), String> {
        if let Some(alarm) = &sim.false_alarm {
            return Err(alarm.clone());
        }
        if let Some(broken) = &sim.broken {
            return Err(broken.clone());
        }
        sim.pg.inspect(|s| self.check_own(sim, s))?;
        self.marks_only_empty_to_set(sim)?;
        self.delivery_in_order(sim)?;
        self.no_stale_writes(sim)
    }

    fn check_own(&mut self, sim: &Sim, s: &PgState) -> Result<(), String> {
        let mut new = Vec::new();
        for id in s.procs.keys() {
            self.enqueued.entry(*id).or_insert_with(|| {
                new.push(*id);
                sim.step
            });
        }
        commit_grace_held(sim, s, &new)?;
        // A row an operator replayed joins the FIFO again at that step.
        for (id, step) in &sim.replayed {
            let at = self.enqueued.entry(*id).or_insert(*step);
            *at = (*at).max(*step);
        }
        self.fifo(s)?;
        for (id, p) in &s.procs {
            intent_owed(*id, p)?;
            no_charge_for_an_outage(*id, p, sim)?;
        }
        one_success_per_identity(s)?;
        requests_hold(sim, s)?;
        if !sim.forgotten {
            // A store that forgot breaks this until the consistency pass heals it.
            redis_first(sim, s)?;
        }
        for (id, e) in &s.events {
            if e.last_error.as_deref().is_some_and(|x| x.contains("injected:"))
                || e.state == EventStatus::Dead
            {
                return Err(format!(
                    "event {id} was charged ({:?}, {:?}): SPEC 4.9 says an outage costs no event",
                    e.state, e.last_error
                ));
            }
        }
        self.states = s.procs.iter().map(|(id, p)| (*id, p.row.state)).collect();
        // A decision is taken when Redis journals it (a round that names flights, or a heal
        // that writes an entry Redis lost) or when the message becomes SUCCEEDED. It stands
        // while either store remembers it: an attempt whose outcome own PostgreSQL lost is
        // reused from the journal when it runs again; one both stores forgot is decided anew,
        // in its new place; one a heal writes again was decided again by the heal, in MSG_ID
        // order. An entry that comes back with an older dump (a forget this step) was decided
        // where it stood.
        let journaled: BTreeSet<i64> = sim.flights.applied_ids().into_iter().collect();
        // Archived rows included: an archived decision is still remembered (seed 2932).
        let succeeded: Vec<i64> = s
            .procs
            .keys()
            .filter(|id| final_row(s, **id).is_some_and(|p| p.row.state == ProcStatus::Succeeded))
            .copied()
            .collect();
        let known: BTreeSet<i64> = journaled.iter().copied().chain(succeeded.iter().copied()).collect();
        let restored = sim.last_forget == Some(sim.step);
        let fresh: BTreeSet<i64> = known.difference(&self.known).copied().collect();
        let mut anew = fresh.clone();
        anew.extend(journaled.difference(&self.journaled));
        if std::env::var("SIM_DEBUG").is_ok() && !anew.is_empty() {
            eprintln!("step {}: decided anew {anew:?}", sim.step);
        }
        for id in anew {
            if restored && self.decided.contains_key(&id) {
                continue;
            }
            self.decided.insert(id, self.decisions);
            let first = !self.said.contains_key(&id);
            if fresh.contains(&id) || first {
                self.said_rules.remove(&id);
                if self.said.insert(id, self.decisions).is_some() {
                    self.retold.insert(id);
                }
            }
            self.decisions += 1;
        }
        for id in succeeded {
            self.said_rules.entry(id).or_insert_with(|| final_row(s, id).and_then(|p| p.rules_version));
        }
        self.known = known;
        self.journaled = journaled;
        Ok(())
    }

    /// INV-3: a message reaches an outcome only when no lower one enqueued before it is still
    /// unfinished (a row that became visible later — a late commit, PRE-2 — may come after).
    fn fifo(&self, s: &PgState) -> Result<(), String> {
        let stuck: Vec<(i64, u64)> = s
            .procs
            .iter()
            .filter(|(id, p)| {
                unfinished(p.row.state) && self.states.get(id).is_some_and(|st| unfinished(*st))
            })
            .map(|(id, _)| (*id, self.enqueued[id]))
            .collect();
        if stuck.is_empty() {
            return Ok(());
        }
        for (x, p) in &s.procs {
            let was = self.states.get(x).copied();
            let finished_now = !unfinished(p.row.state) && was.is_none_or(unfinished);
            if !finished_now {
                continue;
            }
            if let Some((y, _)) = stuck.iter().find(|(y, at)| y < x && *at <= self.enqueued[x]) {
                return Err(format!(
                    "INV-3: msg {x} became {:?} while msg {y}, lower and enqueued no later, is still {:?}",
                    p.row.state, s.procs[y].row.state
                ));
            }
        }
        Ok(())
    }

    /// INV-7: a mark goes from empty to set, never changes after.
    fn marks_only_empty_to_set(&mut self, sim: &Sim) -> Result<(), String> {
        let now: Vec<(i64, SystemTime)> = sim
            .mailbox
            .inspect(|m| m.rows.iter().filter_map(|(id, r)| r.processed_at.map(|t| (*id, t))).collect());
        for (id, t) in now {
            match self.marks.insert(id, t) {
                Some(before) if before != t => {
                    return Err(format!(
                        "INV-7: the mark of mailbox row {id} changed from {before:?} to {t:?}"
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Per target, the first delivery of each event is in EVENT_ID order (so per key too), and
    /// no identity is carried by two different events.
    fn delivery_in_order(&mut self, sim: &Sim) -> Result<(), String> {
        if sim.pg_rollbacks != self.pg_rollbacks {
            self.pg_rollbacks = sim.pg_rollbacks;
            self.last_event_id = 0;
        }
        let delivered = sim.kafka.delivered();
        for r in &delivered[self.delivered..] {
            // Every record as its consumers and a registry-validating broker read it (#67).
            let target = if r.topic == sim.cfg.topic_msg { Target::KafkaMsg } else { Target::KafkaSchd };
            crate::schema::tests::contract().record(target, r).map_err(|e| {
                format!("a {target} record does not match its published schema: {e}: {}", r.payload)
            })?;
            if r.topic != sim.cfg.topic_msg {
                continue;
            }
            let id: i64 = header(r, "event_id").ok_or("a record without event_id")?;
            let key = event_key(r).ok_or("a record without event_key")?;
            match self.event_keys.get(&key) {
                Some(payload) if payload != &r.payload => {
                    return Err(format!(
                        "event_key {key} carried by two different events: {payload} and {}",
                        r.payload
                    ))
                }
                Some(_) => {}
                None => {
                    if id < self.last_event_id {
                        return Err(format!("event {id} delivered first after event {}", self.last_event_id));
                    }
                    self.last_event_id = id;
                    self.event_keys.insert(key, r.payload.to_string());
                }
            }
        }
        self.delivered = delivered.len();
        Ok(())
    }

    /// PRE-5: a write only the lease gate guards is made by the lease's current epoch.
    fn no_stale_writes(&mut self, sim: &Sim) -> Result<(), String> {
        let audit = sim.audit.borrow();
        for w in &audit[self.audited..] {
            // A writer above the lease's epoch is one whose PostgreSQL went back (#20), not a
            // stale one.
            if w.writer < w.lease {
                return Err(format!(
                    "PRE-5: {} written by epoch {} while the lease is at epoch {}",
                    w.what, w.writer, w.lease
                ));
            }
        }
        self.audited = audit.len();
        Ok(())
    }
}

fn event_key(r: &crate::ports::Record) -> Option<String> {
    r.headers.iter().find(|(k, _)| k == "event_key").map(|(_, v)| v.clone())
}

/// Whether the event with `event_key` (`MSG_ID.ORDINAL.DIGEST`) was told by a `msgx rules
/// apply` job (#65): its ordinal is one a message's own events never reach.
fn by_a_job(event_key: &str) -> bool {
    let ordinal = event_key.split('.').nth(1).and_then(|o| o.parse::<i32>().ok());
    ordinal.is_some_and(|o| o >= crate::consistency::rules::ordinal_base(1))
}

fn header(r: &crate::ports::Record, name: &str) -> Option<i64> {
    r.headers.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.parse().ok())
}

/// INV-8: a terminal row owes its mark from the statement that made it terminal.
fn intent_owed(id: i64, p: &MemProc) -> Result<(), String> {
    let terminal = matches!(p.row.state, ProcStatus::Succeeded | ProcStatus::Skipped | ProcStatus::Dead);
    if terminal
        && p.backfill_next_at.is_none()
        && p.backfill_at.is_none()
        && p.backfill_abandoned_at.is_none()
    {
        return Err(format!("INV-8: msg {id} is {:?} and owes no mark", p.row.state));
    }
    Ok(())
}

/// SPEC §4.9: an unavailable store is never a message's failure; a well-formed message never
/// dies.
fn no_charge_for_an_outage(id: i64, p: &MemProc, sim: &Sim) -> Result<(), String> {
    if unfinished(p.row.state) || p.row.state == ProcStatus::Dead {
        if let Some(e) = p.row.last_error.as_deref().filter(|e| e.contains("injected:")) {
            return Err(format!("msg {id} was charged for an outage: {e}"));
        }
    }
    if p.row.state == ProcStatus::Dead {
        let kind = sim.upstream.rows.get(&id).map(|r| &r.kind);
        if !matches!(kind, Some(Kind::Malformed | Kind::Unsupported)) {
            return Err(format!("msg {id} ({kind:?}) is DEAD: {:?}", p.row.last_error));
        }
        // An unsupported row fails on every attempt, and its backoffs add up to seconds: only
        // time it spent waiting out an outage (or a clock jump) can bring it to the head
        // deadline, and that time must not count (#21 item 1).
        let error = p.row.last_error.as_deref().unwrap_or_default();
        if matches!(kind, Some(Kind::Unsupported)) && error.contains("head-deadline") {
            return Err(format!("msg {id} died of a head-deadline clock that ran while it waited: {error}"));
        }
        // SPEC §3a: without the ladder, an unsupported kind is parked at its first attempt.
        let parked = (p.row.error_class, p.row.attempts) == (Some(ErrorClass::Unsupported), 1);
        if matches!(kind, Some(Kind::Unsupported)) && !sim.cfg.pipeline.retry_unsupported && !parked {
            return Err(format!(
                "msg {id} (unsupported) held the head: DEAD {:?} after {} attempts",
                p.row.error_class, p.row.attempts
            ));
        }
    }
    Ok(())
}

/// INV-9: one SUCCEEDED message per identity, archived shadows included.
fn one_success_per_identity(s: &PgState) -> Result<(), String> {
    let mut held: BTreeMap<&str, i64> = BTreeMap::new();
    for (id, p) in &s.procs {
        if let Some(k) = p.row.identity_key.as_deref() {
            if let Some(other) = held.insert(k, *id) {
                return Err(format!("INV-9: identity {k} held by msg {other} and msg {id}"));
            }
        }
    }
    Ok(())
}

/// The flight and field a message writes, resends included, and whether it clears it.
fn writes(sim: &Sim, id: i64) -> Option<(String, String, bool)> {
    match &sim.upstream.original(id)?.kind {
        Kind::Update { flid, field, value, .. } => Some((flid.clone(), field.clone(), value.is_none())),
        _ => None,
    }
}

/// I2: an event in the outbox means its decision is in Redis — the field carries that
/// message's version or a later one.
fn redis_first(sim: &Sim, s: &PgState) -> Result<(), String> {
    for e in s.events.values().filter(|e| e.event.target == Target::KafkaMsg) {
        let Some(m) = e.event.msg_id else { continue };
        let Some((flid, field, clears)) = writes(sim, m) else { continue };
        let (version, held) = sim.flights.inspect(|f| {
            let st = f.flights.get(&flid);
            (
                st.and_then(|st| st.versions.get(&field).copied()),
                st.is_some_and(|st| st.fields.contains_key(&field)),
            )
        });
        // A heal that laid another release's decision on as announced (#52, #65) cannot move the
        // version of a field cleared while already empty: no event says it was cleared.
        let unannounced = sim.laid_on_announced && clears && !held;
        if version.unwrap_or(0) < m && !unannounced {
            return Err(format!(
                "I2: msg {m} has event {} but Redis holds {flid}.{field} at version {version:?}",
                e.event.event_id
            ));
        }
    }
    Ok(())
}

/// The row as it is now, or as it was archived.
/// The requests to the AODB (#41, G-REQ-TRACK, G-RESP-GUARD): at most one open per type and
/// key; a DONE request names the message that answered it; that message SUCCEEDED and is an
/// answer of the request's kind; no message answers two requests; a request whose event went
/// out is no longer REGISTERED.
fn requests_hold(sim: &Sim, s: &PgState) -> Result<(), String> {
    let mut open = BTreeSet::new();
    let mut answered: BTreeMap<i64, i64> = BTreeMap::new();
    for r in s.requests.values() {
        if r.state.is_open() && !open.insert((&r.req_type, &r.req_key)) {
            return Err(format!("two open {} requests for {} (G-REQ-OPEN-UNIQUE)", r.req_type, r.req_key));
        }
        let sent = r.event_id.and_then(|e| s.events.get(&e)).is_some_and(|e| e.state == EventStatus::Sent);
        if sent && r.state == ReqState::Registered {
            return Err(format!("request {} is REGISTERED while its event was SENT", r.req_id));
        }
        let Some(m) = r.answer_msg_id else {
            if r.state == ReqState::Done {
                return Err(format!("request {} is DONE with no answer recorded", r.req_id));
            }
            continue;
        };
        if let Some(other) = answered.insert(m, r.req_id) {
            return Err(format!("msg {m} answered two requests: {other} and {}", r.req_id));
        }
        // A resend that SUCCEEDED (its original rolled back, or late) answers as its original.
        let tag = sim.upstream.original(m).map(|row| row.kind.tag()).unwrap_or("unknown");
        let fits = match r.req_type.as_str() {
            "RQFD" => tag == "SCHD-RESP",
            "RQRD" => tag == format!("{}-RESP", r.req_key),
            _ => tag.starts_with("DFOE-"),
        };
        let state = final_row(s, m).map(|p| p.row.state);
        if !fits || state != Some(ProcStatus::Succeeded) {
            return Err(format!(
                "request {} ({} {}) answered by msg {m}, a {tag} {state:?}: not an answer to it",
                r.req_id, r.req_type, r.req_key
            ));
        }
        let raw = sim.upstream.original(m).map_or("", |row| row.raw.as_str());
        answer_is_its_own(r, m, raw)?;
    }
    Ok(())
}

/// #55: an answer closes only a request it answers — a window answer one whose window holds
/// every flight it carries (and it carries one), a platform answer the request its RMID names.
/// Read from the answer's text here, not by the rule the stores apply.
fn answer_is_its_own(r: &crate::requests::Request, m: i64, raw: &str) -> Result<(), String> {
    let values = |name: &str| -> Vec<String> {
        raw.split(&format!("<{name}>"))
            .skip(1)
            .filter_map(|rest| rest.split_once(&format!("</{name}>")).map(|(v, _)| v.to_string()))
            .collect()
    };
    let holds = match r.req_type.as_str() {
        "RQFD" => {
            let (lo, hi) = r.req_key.split_once('/').unwrap_or_default();
            let times: Vec<String> = values("SODT")
                .iter()
                .filter_map(|t| jiff::civil::DateTime::strptime("%d%b%y%H%M", t).ok())
                .map(|t| t.strftime("%Y-%m-%dT%H:%M").to_string())
                .collect();
            !times.is_empty() && times.iter().all(|t| lo <= t.as_str() && t.as_str() <= hi)
        }
        "RQDF" => r.mgid.as_ref().is_some_and(|g| values("RMID").contains(g)),
        _ => true,
    };
    if holds {
        return Ok(());
    }
    Err(format!(
        "request {} ({} {}) closed by msg {m}, which does not answer it (#55)",
        r.req_id, r.req_type, r.req_key
    ))
}

/// #55, once drained: every window a heal asked the AODB for is healed — a request of it, the
/// heal's or a later one, answered — or still reported as awaited (degraded); never dropped.
pub fn heal_windows_are_healed_or_reported(sim: &Sim) -> Result<(), String> {
    use crate::ports::Requests;
    let awaited: BTreeSet<(String, String)> = sim
        .pg
        .session()
        .awaited(usize::MAX)
        .map_err(|e| format!("awaited: {e}"))?
        .into_iter()
        .map(|r| (r.req_type, r.req_key))
        .collect();
    sim.pg.inspect(|s| {
        let all: Vec<&crate::requests::Request> = s.requests.values().collect();
        for r in all.iter().filter(|r| r.origin == crate::requests::Origin::Heal.as_str()) {
            let window = |l: &&&crate::requests::Request| l.req_type == r.req_type && l.req_key == r.req_key;
            let healed = all.iter().filter(window).any(|l| l.req_id >= r.req_id && l.answer_msg_id.is_some());
            let reported = awaited.contains(&(r.req_type.clone(), r.req_key.clone()));
            if !healed && !reported {
                return Err(format!(
                    "a heal's window {} {} (req_id={}) is neither healed nor reported as awaited (#55)",
                    r.req_type, r.req_key, r.req_id
                ));
            }
        }
        Ok(())
    })
}

fn final_row(s: &PgState, id: i64) -> Option<&MemProc> {
    match s.procs.get(&id) {
        Some(p) if p.row.state == ProcStatus::Archived => s.hst.get(&id),
        other => other,
    }
}

/// Whether everything is done: every committed mailbox row enqueued and marked, every row
/// terminal, no mark owed, no event pending.
pub fn drained(sim: &Sim) -> bool {
    what_remains(sim).is_empty()
}

pub fn what_remains(sim: &Sim) -> String {
    let rows: Vec<(i64, bool)> = sim.mailbox.inspect(|m| {
        m.rows.iter().filter(|(_, r)| !r.uncommitted).map(|(id, r)| (*id, r.processed_at.is_some())).collect()
    });
    let unmarked = rows.iter().filter(|(_, marked)| !marked).count();
    let elsewhere = |id: &i64| sim.upstream.rows.get(id).is_some_and(|r| r.kind == Kind::MarkedElsewhere);
    sim.pg.inspect(|s| {
        let missing = rows.iter().filter(|(id, _)| !s.procs.contains_key(id) && !elsewhere(id)).count();
        let open = s.procs.values().filter(|p| unfinished(p.row.state)).count();
        let owed = s
            .procs
            .values()
            .filter(|p| {
                p.backfill_next_at.is_some() && p.backfill_at.is_none() && p.backfill_abandoned_at.is_none()
            })
            .count();
        let pending = s.events.values().filter(|e| e.state == EventStatus::Pending).count();
        let parts: Vec<String> = [
            ("unmarked mailbox rows", unmarked),
            ("rows never enqueued", missing),
            ("unfinished rows", open),
            ("marks owed", owed),
            ("events pending", pending),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(what, n)| format!("{n} {what}"))
        .collect();
        parts.join(", ")
    })
}

/// After the drain: every row's outcome is the one its kind calls for, Redis equals the
/// reference model, and every message's events were delivered as the model decides them.
pub fn at_the_end(sim: &Sim, checker: &Checker) -> Result<(), String> {
    sim.pg.inspect(|s| {
        outcomes(sim, s)?;
        let mut succeeded: Vec<i64> = checker
            .decided
            .keys()
            .copied()
            .filter(|id| final_row(s, *id).is_some_and(|p| p.row.state == ProcStatus::Succeeded))
            .collect();
        // Each decision where it was taken, and again where a heal took it again (its events
        // are the first one's: the heal writes back those the outbox holds).
        let mut timeline: Vec<(u64, i64, bool)> =
            succeeded.iter().map(|id| (checker.said[id], *id, true)).collect();
        timeline.extend(
            succeeded
                .iter()
                .filter(|id| checker.decided[*id] != checker.said[*id])
                .map(|id| (checker.decided[id], *id, false)),
        );
        timeline.sort_unstable();
        succeeded.sort_by_key(|id| checker.decided[id]);
        if std::env::var("SIM_DEBUG").is_ok() {
            eprintln!("model timeline: {timeline:?}");
        }
        model_matches(sim, s, &timeline, checker)?;
        consumer_view_matches(sim, checker)
    })
}

fn outcomes(sim: &Sim, s: &PgState) -> Result<(), String> {
    let mut by_identity: BTreeMap<u64, Vec<(i64, ProcStatus)>> = BTreeMap::new();
    for (id, row) in sim.upstream.rows.iter().filter(|(_, r)| !r.rolled_back) {
        if row.kind == Kind::MarkedElsewhere {
            // Another system's: msgx never takes it, and never heals it as its own (#37).
            if let Some(p) = final_row(s, *id) {
                return Err(format!(
                    "msg {id}, marked processed by another system, was taken by msgx: {:?}",
                    p.row.state
                ));
            }
            continue;
        }
        let p = final_row(s, *id).ok_or(format!("msg {id} was never enqueued"))?;
        let state = p.row.state;
        let ok = match &row.kind {
            Kind::Update { seqn, .. }
            | Kind::Resend { seqn, .. }
            | Kind::Decided { seqn, .. }
            | Kind::Vendor { seqn, .. } => {
                // One of the identity's rows SUCCEEDED, the others are its duplicates.
                by_identity.entry(*seqn).or_default().push((*id, state));
                matches!(state, ProcStatus::Succeeded | ProcStatus::Skipped)
            }
            Kind::Ignored | Kind::FamilyC => state == ProcStatus::Skipped,
            Kind::Malformed | Kind::Unsupported => state == ProcStatus::Dead,
            Kind::MarkedElsewhere => unreachable!("left out above"),
        };
        if !ok {
            return Err(format!("msg {id} ({:?}) ended {state:?}: {:?}", row.kind, p.row.last_error));
        }
    }
    for (seqn, rows) in by_identity {
        let n = rows.iter().filter(|(_, st)| *st == ProcStatus::Succeeded).count();
        if n != 1 {
            return Err(format!("identity SEQN {seqn}: {n} SUCCEEDED among {rows:?} (INV-9 wants one)"));
        }
    }
    Ok(())
}

/// The reference model: each SUCCEEDED message decided alone, in the order the pump took
/// them, by the same pure handlers on a plan that only ever saw the messages before it — a
/// snapshot reads its own window (SPEC §4.12: batched = one by one). The `timeline` holds each
/// SUCCEEDED message where the decision whose events stand was taken (`true`) and, where a heal
/// of Redis decided it again (in MSG_ID order, writing back the events the outbox holds: seed
/// 5991), there too (`false`: applied, its events not the ones that stand).
fn model_matches(
    sim: &Sim,
    s: &PgState,
    timeline: &[(u64, i64, bool)],
    checker: &Checker,
) -> Result<(), String> {
    let retold = &checker.retold;
    let mut plan = Replay::new((0, 0));
    let mut expected: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (_, id, said) in timeline {
        let raw = &sim.upstream.rows[id].raw;
        // Under the rules of the release that decided it (#65): its PROC_STATE says which.
        let rules = super::fleet::rules_of(final_row(s, *id).and_then(|p| p.rules_version));
        let limits = crate::codec::Limits::DEFAULT;
        let msg = crate::codec::decode_with(raw, &limits, &rules)
            .map_err(|e| format!("model: msg {id} does not decode: {e:?}"))?;
        let need = handlers::need_of(&msg);
        let flights = need
            .flids
            .iter()
            .filter_map(|f| plan.flights.get(f).map(|st| (f.clone(), std::sync::Arc::new(st.clone()))))
            .collect();
        let view = View { flights, window: need.window.map(|w| plan.window(w)).unwrap_or_default() };
        let d = handlers::decide(&view, &msg, *id).map_err(|e| format!("model: msg {id}: {e:?}"))?;
        // Its own events are those of the rules that first decided it; a job that decided it
        // again since told the difference in events of its own (#65).
        let first = checker.said_rules.get(id).copied().flatten();
        let told = match first.is_some() && Some(rules.version()) != first {
            true => {
                let msg = crate::codec::decode_with(raw, &limits, &super::fleet::rules_of(first))
                    .map_err(|e| format!("model: msg {id} does not decode: {e:?}"))?;
                handlers::decide(&view, &msg, *id).map_err(|e| format!("model: msg {id}: {e:?}"))?
            }
            false => d.clone(),
        };
        plan.apply(*id, &d);
        // The message topic's (KAFKA:schd's rows are upserted per flight, not kept per message).
        let msg_events = told.events.iter().filter(|e| e.target == Target::KafkaMsg);
        if *said {
            expected.insert(*id, msg_events.map(|e| e.payload_json.clone()).collect());
        }
    }
    // Fields, their versions and tombstones, and the plan's generation: a rollback of own
    // PostgreSQL may let a resend win an identity a first commit held, and the same text then
    // sets the same fields under its own MSG_ID; only then the versions may differ.
    let held = sim.flights.inspect(|f| (f.flights.clone(), f.generation));
    let redis: BTreeMap<&String, &FlightState> =
        held.0.iter().filter(|(_, f)| f.exists() || f.deleted > 0).collect();
    let model: BTreeMap<&String, &FlightState> =
        plan.flights.iter().filter(|(_, f)| f.exists() || f.deleted > 0).collect();
    let fields = |m: &BTreeMap<&String, &FlightState>| -> BTreeMap<String, crate::handlers::Flight> {
        m.iter().filter(|(_, f)| f.exists()).map(|(k, f)| (k.to_string(), f.fields.clone())).collect()
    };
    if fields(&redis) != fields(&model) {
        return Err(format!(
            "Redis differs from the model\n    redis: {:?}\n    model: {:?}",
            fields(&redis),
            fields(&model)
        ));
    }
    // A job replays its messages in MSG_ID order, as a heal does: the versions it writes with
    // a flight it tells of are those of that order, not of the order the pump took them in.
    let job = s.rules_jobs.values().any(|j| j.state != crate::ports::RulesJobState::Open);
    let (redis, model) = if sim.laid_on_announced || job {
        (announced_versions(&redis), announced_versions(&model))
    } else {
        (
            redis.into_iter().map(|(k, f)| (k, effective(f))).collect(),
            model.into_iter().map(|(k, f)| (k, effective(f))).collect(),
        )
    };
    if sim.pg_rollbacks == 0 && (redis != model || held.1 != plan.generation) {
        // The flights that differ, as compared (the whole states are long).
        let differ: Vec<String> = redis
            .keys()
            .chain(model.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|k| redis.get(*k) != model.get(*k))
            .map(|k| format!("{k}: redis {:?}, model {:?}", redis.get(k), model.get(k)))
            .collect();
        return Err(format!(
            "Redis's versions, tombstones or generation differ from the model: generation {:?} / {:?}\n    {}",
            held.1,
            plan.generation,
            differ.join("\n    ")
        ));
    }
    // Events, by message, as first delivered (a redelivery is the same event again: the same
    // `event_key`).
    let mut got: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for r in sim.kafka.delivered().iter().filter(|r| r.topic == sim.cfg.topic_msg) {
        let (Some(e), Some(m)) = (event_key(r), header(r, "msg_id")) else { continue };
        // A job's events: checked with every other in the consumer's view (#65).
        if by_a_job(&e) {
            continue;
        }
        if seen.insert(e) {
            got.entry(m).or_default().push(r.payload.to_string());
        }
    }
    for (id, want) in &expected {
        let have = got.get(id).cloned().unwrap_or_default();
        // After a job, a message decided before or after it saw the flights as the job left
        // them or not (the only field two releases read differently, `XSTND`, in the `old` of
        // its events): compared without it; the field itself with Redis and the consumer's view.
        let (have, want) = match job {
            true => (without_the_vendor_field(&have), without_the_vendor_field(want)),
            false => (have, want.clone()),
        };
        let want = &want;
        // A decision both stores forgot may have gone out before the one that stands, which
        // then comes last: docs/operations.md ("A store that forgets").
        let retold_after = retold.contains(id) && have.ends_with(want);
        if &have != want && !retold_after {
            return Err(format!("msg {id}: delivered events {have:?}, the model decides {want:?} (I2)"));
        }
    }
    for m in got.keys() {
        if !expected.contains_key(m) && !duplicate_after_a_rollback(sim, s, *m) {
            return Err(format!("msg {m} has delivered events but is not SUCCEEDED"));
        }
    }
    Ok(())
}

/// How many flights [`consumer_view_matches`] compared, over a run of many seeds.
pub static CONSUMER_FLIGHTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// What a consumer that applied every event of the message topic holds is what Redis holds (#52,
/// SPEC §4.13; #65): each record delivered (the first of its `event_key`), in topic order, laid
/// on by the inverse of the events (`handlers::announced`), for the flights the message topic
/// alone tells of — none the daily plan's topic names (its rows are upserted per flight, not kept
/// per message). Not where a store that forgot made a message be retold (the topic then holds
/// both decisions: docs/operations.md, "A store that forgets").
pub(super) fn consumer_view_matches(sim: &Sim, checker: &Checker) -> Result<(), String> {
    if sim.pg_rollbacks > 0 || !checker.retold.is_empty() {
        return Ok(());
    }
    let delivered = sim.kafka.delivered();
    let mut planned: BTreeSet<String> = BTreeSet::new();
    for r in delivered.iter().filter(|r| r.topic == sim.cfg.topic_schd) {
        let rows: Vec<serde_json::Value> = serde_json::from_str(&r.payload).unwrap_or_default();
        planned.extend(rows.iter().filter_map(|v| v["FLID"].as_str().map(str::to_string)));
    }
    let mut consumer: BTreeMap<String, FlightState> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for r in delivered.iter().filter(|r| r.topic == sim.cfg.topic_msg) {
        let (Some(key), Some(m)) = (event_key(r), header(r, "msg_id")) else { continue };
        if !seen.insert(key) {
            continue;
        }
        let event = crate::domain::NewEvent {
            target: Target::KafkaMsg,
            partition_key: r.key.to_string(),
            event_type: "UPSERT".into(),
            state_version: 0,
            payload_json: r.payload.to_string(),
        };
        for c in handlers::announced([&event]).map_err(|e| format!("consumer: {e}"))? {
            consumer.entry(c.flid.clone()).or_default().apply(&c, m);
        }
    }
    let redis = sim.flights.inspect(|f| f.flights.clone());
    for (flid, held) in consumer.iter().filter(|(f, _)| !planned.contains(*f)) {
        CONSUMER_FLIGHTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let fields =
            |f: Option<&FlightState>| f.filter(|f| f.exists()).map(|f| f.fields.clone()).unwrap_or_default();
        let (theirs, ours) = (fields(Some(held)), fields(redis.get(flid)));
        if theirs != ours {
            return Err(format!(
                "{flid}: a consumer that applied every event holds {theirs:?}, Redis holds {ours:?} (SPEC 4.13)"
            ));
        }
    }
    Ok(())
}

/// A flight as the rule reads it: the version of a field it no longer holds, at or below its
/// tombstone, decides nothing (`FlightState::writable` refuses every message up to the delete
/// anyway). A heal's replay in MSG_ID order leaves one where the pump, which took a late row
/// after the delete, left none (seed 10745 of #65's sweep): the same flight.
fn effective(f: &FlightState) -> FlightState {
    let mut f = f.clone();
    let (fields, deleted) = (f.fields.clone(), f.deleted);
    f.versions.retain(|k, v| fields.contains_key(k) || *v > deleted);
    f
}

/// Event payloads without the field only the next release reads (`fixtures::next_release`).
fn without_the_vendor_field(payloads: &[String]) -> Vec<String> {
    payloads
        .iter()
        .map(|p| {
            let mut v: serde_json::Value = serde_json::from_str(p).expect("an event payload is JSON");
            if let Some(old) = v.get_mut("old").and_then(|o| o.as_object_mut()) {
                old.remove("XSTND");
            }
            if let Some(changes) = v.get_mut("changes").and_then(|c| c.as_array_mut()) {
                changes.retain(|c| c["field"] != "XSTND");
            }
            v.to_string()
        })
        .collect()
}

/// The flights as a heal that laid another release's decisions on as their events announced
/// them (#52) can bring them back: fields and tombstones, not versions. No event says that a
/// record restated a value or cleared a field already empty — the decision moved the field's
/// version, and a message that changed nothing announced nothing at all —, so those versions
/// stay where the heal found them. Found by the fleet's cross-release heals (#65, seeds 807,
/// 7810 of the first sweep).
fn announced_versions<'a>(m: &BTreeMap<&'a String, &FlightState>) -> BTreeMap<&'a String, FlightState> {
    m.iter().map(|(k, f)| (*k, FlightState { versions: Default::default(), ..(*f).clone() })).collect()
}

/// The one case where a message that delivered events ends SKIPPED, documented in
/// docs/operations.md ("A store that forgets"): own PostgreSQL forgot both it and a late row
/// (PRE-2) of the same identity that became visible meanwhile, and Redis had dropped its
/// journal entry (else it keeps the identity, seed 3591); processed again in MSG_ID order, the late
/// row wins the identity this time. Consumers saw the message's events under the other
/// MSG_ID (other `event_key`s), never one identity on two different events.
fn duplicate_after_a_rollback(sim: &Sim, s: &PgState, m: i64) -> bool {
    sim.pg_rollbacks > 0
        && final_row(s, m).is_some_and(|p| {
            p.row.state == ProcStatus::Skipped
                && p.row.last_error.as_deref().is_some_and(|e| e.starts_with("duplicate-of:"))
        })
}
