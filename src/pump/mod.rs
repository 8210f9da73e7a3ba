//! The pump (process thread): the single writer of message state and of Redis flight state.
//! Each round takes the FIFO head and the ready messages behind it (INV-3), runs `processOne`
//! on each in the spec's order (SPEC §4.2), and records all their outcomes in one PostgreSQL
//! transaction. The rules live in [`rules`]; time is the `now` the round is given.
//!
//! A round, in order:
//! 1. the FIFO's first rows; a head backing off ends the round before anything else is read;
//! 2. the raw texts in one mailbox read, every META and body decoded (pure), the identity
//!    holders in one query;
//! 3. the flights the round names (and the journal of decisions an earlier attempt applied)
//!    in one Redis round trip;
//! 4. each message decided in MSG_ID order against an overlay of the decisions before it, so
//!    message k sees what k−1 decided; a daily-plan snapshot is always a round of its own;
//! 5. every new decision applied in one Redis script (Redis first, I2), journalled per message;
//! 6. every outcome committed in one transaction — on the commit [`lane`] when the daemon
//!    gives the pump one: the next round's steps 1–4 run meanwhile (its head query leaves the
//!    committing round out), and its step 5 waits until this commit has landed, so nothing
//!    reaches Redis ahead of an earlier message's recorded outcome. A round that ends with a
//!    message backing off commits in place: the next round must see that head.
//!
//! Failures (SPEC §4.9): a store that is unavailable aborts the round with nothing charged —
//! the stage stalls and retries, and the journal makes the retry emit the same events. A write
//! the store refuses is charged to the message that caused it: a refused round commit is
//! retried one message at a time to find it, a refused Redis apply one decision at a time.
//! Reads are never a message's fault.

pub mod lane;
pub mod replay;
pub mod rules;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::SystemTime;

use log::{error, info, warn};

use crate::codec::{self, ignore::IgnoreRules, DecodeError, Message, MsgKind, SchdKind};
use crate::config::Pipeline;
use crate::domain::{ProcRow, SkipReason};
use crate::error::{ErrorClass, StoreError};
use crate::handlers::{self, Decision, Reject, View};
use crate::planted::{self, Bug};
use crate::ports::{
    Failure, Fifo, FlightStore, MailboxTexts, Outcome, Raw, RoundNeed, RoundRecord, Settle, StoreResult,
};
use crate::stage::{Next, RoundReport, Stage};
use crate::stats::{self, Stats};
use lane::CommitLane;
use rules::{head_action, Failing, HeadAction, RetryPolicy};

/// What one round of the pump did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Nothing unfinished.
    Idle,
    /// The head is backing off until then.
    Wait(SystemTime),
    /// This many messages reached an outcome (terminal or FAILED), recorded together.
    Worked(usize),
}

impl RoundReport for Round {
    fn next(&self) -> Next {
        match self {
            Round::Idle => Next::Idle,
            Round::Wait(t) => Next::At(*t),
            Round::Worked(_) => Next::Now,
        }
    }

    fn progressed(&self) -> bool {
        matches!(self, Round::Worked(_))
    }
}

/// A message of the round after its text was read and decoded.
enum Step {
    /// Its outcome is known without the flights (DEAD, FAILED, SKIPPED).
    Settled(Outcome),
    /// It needs a decision.
    Decide { msg: Box<Message>, identity: String },
}

/// A message of the round, in MSG_ID order.
struct Item<'r> {
    row: &'r ProcRow,
    tag: Option<String>,
    step: Step,
    /// Unknown element names the tolerant reader skipped (reported once per run).
    unknown: Vec<String>,
}

pub struct Pump<P, M, F> {
    fifo: P,
    texts: M,
    flights: F,
    policy: RetryPolicy,
    ignore: IgnoreRules,
    include_day_boundary: bool,
    batch: usize,
    batch_bytes: u64,
    max_message_bytes: u64,
    max_event_bytes: usize,
    strict: bool,
    stats: Arc<Stats>,
    /// Journal entries to drop at the next Redis read: their outcomes are in PostgreSQL.
    forget: Vec<i64>,
    /// TYPE-STYP/element pairs already reported as unknown in this run.
    unknown_seen: HashSet<String>,
    /// Where a round's commit runs while the next round is read; none: the pump waits.
    lane: Option<Box<dyn CommitLane>>,
    /// The round committing on the lane.
    inflight: Option<InFlight>,
}

/// A round whose commit is on the lane: what it takes to log it, to find the cause if it is
/// refused, and to keep the next round off its rows and identities.
struct InFlight {
    rows: BTreeMap<i64, ProcRow>,
    /// Events per settle, in the lane's order.
    events: Vec<usize>,
    identities: HashMap<String, i64>,
    now: SystemTime,
}

/// What waiting for the lane found.
enum Landing {
    Nothing,
    /// The round is recorded.
    Recorded,
    /// The round was refused and recorded message by message up to the cause (this many).
    Refused(usize),
}

impl<P: Fifo, M: MailboxTexts, F: FlightStore> Stage for Pump<P, M, F> {
    type Round = Round;
    const NAME: &'static str = "process";

    fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        Pump::round(self, now)
    }

    fn close(&mut self) {
        if let Err(e) = self.land() {
            warn!("stage=process the last round's commit did not land ({e}); it is read again at the next start");
        }
    }
}

impl<P: Fifo, M: MailboxTexts, F: FlightStore> Pump<P, M, F> {
    pub fn new(fifo: P, texts: M, flights: F, cfg: &Pipeline, stats: Arc<Stats>) -> Self {
        Pump {
            fifo,
            texts,
            flights,
            policy: retry_policy(cfg),
            ignore: IgnoreRules::new(&cfg.ignore_rules),
            include_day_boundary: cfg.include_day_boundary,
            batch: cfg.process_batch,
            batch_bytes: cfg.process_batch_bytes,
            max_message_bytes: cfg.max_message_bytes,
            max_event_bytes: cfg.max_event_bytes,
            strict: cfg.strict_codec,
            stats,
            forget: Vec::new(),
            unknown_seen: HashSet::new(),
            lane: None,
            inflight: None,
        }
    }

    /// Commits on `lane` while the next round is read and decided (the daemon's pump).
    pub fn with_lane(mut self, lane: impl CommitLane + 'static) -> Self {
        self.lane = Some(Box::new(lane));
        self
    }

    /// One round at `now` (see the module documentation for its steps).
    pub fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        let round = self.try_round(now);
        if round.is_err() {
            // Another store failed, not the lane's: what was committing lands now, not after
            // the outage.
            self.land()?;
        }
        round
    }

    fn try_round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        let committing: Vec<i64> =
            self.inflight.as_ref().map(|f| f.rows.keys().copied().collect()).unwrap_or_default();
        let mut rows = self.fifo.unfinished(self.batch, &committing)?;
        if planted::on(Bug::HeadOvertaken) {
            rows.retain(|r| !matches!(head_action(Some(r), now, &self.policy), HeadAction::Wait(_)));
        }
        // The ready prefix: the head and the rows behind it up to the first one backing off.
        let mut ready = 0;
        for row in &rows {
            match head_action(Some(row), now, &self.policy) {
                HeadAction::Wait(t) if ready == 0 => return self.quiet(Round::Wait(t), now),
                HeadAction::Wait(_) | HeadAction::Idle => break,
                HeadAction::Process | HeadAction::Poison(_) => ready += 1,
            }
        }
        if ready == 0 {
            return self.quiet(Round::Idle, now);
        }
        let rows = &rows[..ready];
        let items = self.read_and_decode(rows, now)?;
        let (mut settles, fresh) = self.decide(items, now)?;
        if let Landing::Refused(n) = self.land()? {
            // A message of the last round was charged: the FIFO head moved under this round,
            // which has applied nothing yet and is simply read again.
            return Ok(Round::Worked(n));
        }
        self.apply(&mut settles, fresh, now)?;
        self.commit(settles, rows, now)
    }

    /// Nothing to read: the commit on its way lands first, then the journal is tidied.
    fn quiet(&mut self, round: Round, now: SystemTime) -> Result<Round, StoreError> {
        match self.land()? {
            Landing::Nothing => {
                self.forget_idle(now)?;
                Ok(round)
            }
            Landing::Recorded => Ok(Round::Worked(0)),
            Landing::Refused(n) => Ok(Round::Worked(n)),
        }
    }

    /// Step 2: texts, decoding, identities. The round ends after the first message that will
    /// be FAILED (it becomes the head in backoff), and before a snapshot (a round of its own).
    fn read_and_decode<'r>(&mut self, rows: &'r [ProcRow], now: SystemTime) -> StoreResult<Vec<Item<'r>>> {
        let ids: Vec<i64> = rows.iter().map(|r| r.msg_id).collect();
        let mut raws = self.read_texts(&ids)?;
        let mut items: Vec<Item<'r>> = Vec::with_capacity(rows.len());
        for row in rows {
            if matches!(raws.get(&row.msg_id), Some(Raw::Later)) {
                break; // past the round's byte budget: the next round starts here
            }
            let item = match head_action(Some(row), now, &self.policy) {
                HeadAction::Poison(p) => {
                    let reason = format!(
                        "{}; last {}: {}",
                        p.describe(),
                        row.error_class.map(|c| c.as_str()).unwrap_or("-"),
                        row.last_error.as_deref().unwrap_or("-")
                    );
                    let dead = Failure::Dead { class: ErrorClass::Exhausted, error: reason };
                    Item { row, tag: None, step: Step::Settled(Outcome::Failed(dead)), unknown: Vec::new() }
                }
                _ => self.decode(row, raws.remove(&row.msg_id), now),
            };
            let snapshot = matches!(&item.step, Step::Decide { msg, .. } if is_snapshot(msg));
            if snapshot && !items.is_empty() {
                break; // the snapshot comes next round, alone
            }
            let stop = snapshot || matches!(item.step, Step::Settled(Outcome::Failed(Failure::Retry { .. })));
            items.push(item);
            if stop {
                break;
            }
        }
        // Identities (INV-9): held by an earlier message, or by one earlier in this round.
        let keys: Vec<String> = items
            .iter()
            .filter_map(|i| match &i.step {
                Step::Decide { identity, .. } => Some(identity.clone()),
                _ => None,
            })
            .collect();
        let holders = if keys.is_empty() || planted::on(Bug::IdentityUnchecked) {
            HashMap::new()
        } else {
            self.fifo.identity_holders(&keys)?
        };
        // The round still committing holds its identities already.
        let mut taken: HashMap<String, i64> =
            self.inflight.as_ref().map(|f| f.identities.clone()).unwrap_or_default();
        for item in &mut items {
            if let Step::Decide { identity, .. } = &item.step {
                let holder = taken.get(identity).or_else(|| holders.get(identity)).copied();
                let holder = holder.filter(|_| !planted::on(Bug::IdentityUnchecked));
                match holder.filter(|h| *h != item.row.msg_id) {
                    Some(other) => {
                        item.step = Step::Settled(Outcome::Skipped {
                            reason: SkipReason::DuplicateOf(other).render(),
                        })
                    }
                    None => {
                        taken.insert(identity.clone(), item.row.msg_id);
                    }
                }
            }
        }
        Ok(items)
    }

    /// The round's texts in one read. A read the mailbox refuses is tried row by row: a row it
    /// refuses alone while it reads others is that row's failure (`Raw::Refused`); when it
    /// refuses every row, the store refuses the read and the stage stalls (SPEC §4.9) — a lone
    /// unreadable head is charged as soon as another row arrives behind it.
    fn read_texts(&mut self, ids: &[i64]) -> StoreResult<HashMap<i64, Raw>> {
        let whole = match self.texts.raws(ids, self.max_message_bytes, self.batch_bytes) {
            Err(e) if e.is_rejected() && ids.len() > 1 => e,
            other => return other,
        };
        warn!("mailbox refused reading {} texts ({whole}); reading them one at a time", ids.len());
        let mut out = HashMap::with_capacity(ids.len());
        let mut refused = Vec::new();
        let mut budget = self.batch_bytes;
        for (k, id) in ids.iter().enumerate() {
            match self.texts.raws(&[*id], self.max_message_bytes, budget) {
                Ok(mut one) => {
                    if let Some(raw) = one.remove(id) {
                        if let Raw::Body(b) = &raw {
                            budget = budget.saturating_sub(b.len() as u64);
                        }
                        out.insert(*id, raw);
                    }
                    if budget == 0 {
                        out.extend(ids[k + 1..].iter().map(|i| (*i, Raw::Later)));
                        break;
                    }
                }
                Err(e) if e.is_rejected() => refused.push((*id, e.to_string())),
                Err(e) => return Err(e),
            }
        }
        if refused.len() == ids.len() {
            return Err(whole);
        }
        out.extend(refused.into_iter().map(|(id, e)| (id, Raw::Refused(e))));
        Ok(out)
    }

    /// `processOne` steps 1–4 for one message (pure): text, META, ignore rules, body.
    fn decode<'r>(&mut self, row: &'r ProcRow, raw: Option<Raw>, now: SystemTime) -> Item<'r> {
        let mut item = Item {
            row,
            tag: row.type_tag.clone(),
            step: Step::Settled(Outcome::Skipped { reason: String::new() }),
            unknown: Vec::new(),
        };
        let fail = |class: ErrorClass, e: &str| {
            Step::Settled(Outcome::Failed(self.policy.on_failure(
                row.attempts,
                Failing::of(row),
                class,
                e,
                now,
            )))
        };
        let body = match raw {
            None => {
                item.step = fail(ErrorClass::Malformed, "raw text missing in the mailbox");
                return item;
            }
            Some(Raw::TooLarge { bytes }) => {
                item.step = fail(
                    ErrorClass::Protocol,
                    &format!(
                        "message of {bytes} bytes exceeds msgx.codec.max-message-bytes ({}); not decoded",
                        self.max_message_bytes
                    ),
                );
                return item;
            }
            Some(Raw::Refused(e)) => {
                item.step =
                    fail(ErrorClass::Infra, &format!("the mailbox refused reading this row's text: {e}"));
                return item;
            }
            Some(Raw::Body(b)) => b,
            Some(Raw::Later) => unreachable!("a round ends before a text it did not read"),
        };
        let strict = self.strict;
        let decoded = pure(|| -> Result<Result<(codec::Meta, Option<Message>), DecodeError>, DecodeError> {
            let text = codec::text_of(&body)?;
            let env = codec::decode_meta(text)?;
            let meta = env.meta.clone();
            if self.ignore.matching(&meta).is_some() {
                return Ok(Ok((meta, None)));
            }
            Ok(codec::decode_body_with(env, strict).map(|m| (meta, Some(m))))
        });
        let (meta, msg) = match decoded {
            Err(panic) => {
                item.step = fail(ErrorClass::Infra, &panic);
                return item;
            }
            Ok(Err(e)) => {
                item.step = fail(e.class, &e.detail);
                return item;
            }
            Ok(Ok(Err(e))) => {
                // META was read: the tag is known even though the body failed.
                item.step = fail(e.class, &e.detail);
                return item;
            }
            Ok(Ok(Ok(m))) => m,
        };
        item.tag = Some(MsgKind::of(&meta).type_tag());
        let Some(msg) = msg else {
            let rule = self.ignore.matching(&meta).unwrap_or("?").to_string();
            item.step = Step::Settled(Outcome::Skipped { reason: SkipReason::Ignored(rule).render() });
            return item;
        };
        item.unknown = msg.unknown.clone();
        if let Some(why) = msg.kind.not_for_us() {
            item.step =
                Step::Settled(Outcome::Skipped { reason: SkipReason::NotForMsgx(why.to_string()).render() });
            return item;
        }
        let identity = codec::identity(&msg.meta, self.include_day_boundary);
        item.step = Step::Decide { msg: Box::new(msg), identity };
        item
    }

    /// Steps 3–4: one Redis read, decisions in order on an overlay. Returns the round's
    /// outcomes in MSG_ID order and the new decisions still to apply.
    #[allow(clippy::type_complexity)]
    fn decide<'r>(
        &mut self,
        items: Vec<Item<'r>>,
        now: SystemTime,
    ) -> StoreResult<(Vec<(Settle, usize)>, Vec<(usize, &'r ProcRow, Decision)>)> {
        let mut need = RoundNeed::default();
        for item in &items {
            if let Step::Decide { msg, .. } = &item.step {
                need.msg_ids.push(item.row.msg_id);
                let n = handlers::need_of(msg);
                need.flids.extend(n.flids);
                need.window = need.window.or(n.window);
            }
        }
        need.flids.sort();
        need.flids.dedup();
        let prepared = if need.msg_ids.is_empty() && self.forget.is_empty() {
            Default::default()
        } else {
            let p = self.flights.prepare(&need, &self.forget, now)?;
            self.forget.clear();
            p
        };
        let mut overlay = prepared.flights;
        let mut window = prepared.window;
        let mut applied_before = prepared.applied;
        if planted::on(Bug::JournalIgnored) {
            applied_before.clear();
        }
        let mut settles: Vec<(Settle, usize)> = Vec::with_capacity(items.len());
        let mut fresh: Vec<(usize, &ProcRow, Decision)> = Vec::new(); // (index in settles, row, decision)
        for item in items {
            let row = item.row;
            self.report_unknown(item.tag.as_deref(), &item.unknown);
            let (msg, identity) = match item.step {
                Step::Settled(outcome) => {
                    let stop = matches!(outcome, Outcome::Failed(Failure::Retry { .. }));
                    settles.push((Settle { msg_id: row.msg_id, type_tag: item.tag, outcome }, 0));
                    if stop {
                        break;
                    }
                    continue;
                }
                Step::Decide { msg, identity } => (msg, identity),
            };
            // An earlier attempt applied this decision: reuse it, never decide again (I2).
            if let Some(d) = applied_before.remove(&row.msg_id) {
                let n = d.events.len();
                let outcome = Outcome::Succeeded { identity, events: d.events, references: d.references };
                settles.push((Settle { msg_id: row.msg_id, type_tag: item.tag, outcome }, n));
                continue;
            }
            // The view borrows the overlay's flights by moving them in and back out: a round
            // decides against them without copying a flight per message.
            let mut view = View { flights: Default::default(), window: std::mem::take(&mut window) };
            for f in handlers::need_of(&msg).flids {
                if let Some(s) = overlay.remove(&f) {
                    view.flights.insert(f, s);
                }
            }
            let decided = pure(|| handlers::decide(&view, &msg, row.msg_id));
            // One insert per flight (BTreeMap::append would rebuild the whole overlay).
            overlay.extend(std::mem::take(&mut view.flights));
            window = view.window;
            let failure = |class: ErrorClass, e: &str| {
                Outcome::Failed(self.policy.on_failure(row.attempts, Failing::of(row), class, e, now))
            };
            if let Ok(Ok(d)) = &decided {
                for w in &d.warnings {
                    warn!("tolerated msg_id={} type={}: {w}", row.msg_id, item.tag.as_deref().unwrap_or("-"));
                }
            }
            let outcome = match decided {
                Ok(Ok(d)) => match self.too_large(&d) {
                    Some(why) => failure(ErrorClass::Protocol, &why),
                    None => {
                        for c in &d.flights {
                            overlay.entry(c.flid.clone()).or_default().apply(c, row.msg_id);
                        }
                        fresh.push((settles.len(), row, d));
                        Outcome::Succeeded { identity, events: Vec::new(), references: Vec::new() }
                    }
                },
                Ok(Err(Reject::Unsupported(e))) => {
                    failure(ErrorClass::Unsupported, &format!("no handler for {e}"))
                }
                Ok(Err(Reject::Protocol(e))) => failure(ErrorClass::Protocol, &e),
                Err(panic) => failure(ErrorClass::Infra, &panic),
            };
            let stop = matches!(outcome, Outcome::Failed(Failure::Retry { .. }));
            settles.push((Settle { msg_id: row.msg_id, type_tag: item.tag, outcome }, 0));
            if stop {
                break;
            }
        }
        Ok((settles, fresh))
    }

    /// Step 5: Redis first (I2), all new decisions in one script. A refused apply is retried
    /// one decision at a time; the decision Redis refuses is charged to its message and the
    /// round ends there.
    fn apply(
        &mut self,
        settles: &mut Vec<(Settle, usize)>,
        fresh: Vec<(usize, &ProcRow, Decision)>,
        now: SystemTime,
    ) -> StoreResult<()> {
        // A decision that changes no flight has nothing for Redis and needs no journal: it
        // depends on its message alone (reference data, a seasonal plan), so a retry decides
        // it the same. Its outcome is final now.
        let (fresh, direct): (Vec<_>, Vec<_>) =
            fresh.into_iter().partition(|(_, _, d)| !d.flights.is_empty() || d.snapshot);
        for (i, _, d) in direct {
            let (settle, n) = &mut settles[i];
            if let Outcome::Succeeded { events, references, .. } = &mut settle.outcome {
                *n = d.events.len();
                *events = d.events;
                *references = d.references;
            }
        }
        if fresh.is_empty() {
            return Ok(());
        }
        let batch: Vec<(i64, &Decision)> = fresh.iter().map(|(_, r, d)| (r.msg_id, d)).collect();
        let (flags, refused) = match self.flights.apply(&batch) {
            Ok(flags) => (flags, None),
            Err(e) if e.is_rejected() => {
                let mut flags = Vec::new();
                let mut refused = Some(e);
                if batch.len() > 1 {
                    for (m, d) in &batch {
                        match self.flights.apply(&[(*m, d)]) {
                            Ok(f) => flags.extend(f),
                            Err(e) if e.is_rejected() => {
                                refused = Some(e);
                                break;
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
                (flags, refused)
            }
            Err(e) => return Err(e),
        };
        for (k, (i, row, d)) in fresh.into_iter().enumerate() {
            let (settle, n) = &mut settles[i];
            if k < flags.len() {
                // A snapshot Redis refused as not newer than the plan changed nothing, so it
                // says nothing either (its journal holds the empty decision).
                let d = if flags[k] { d } else { Decision::default() };
                if !flags[k] {
                    info!(
                        "snapshot msg_id={} is not newer than the daily plan's generation; nothing changed, nothing published",
                        row.msg_id
                    );
                }
                if let Outcome::Succeeded { events, references, .. } = &mut settle.outcome {
                    *n = d.events.len();
                    *events = d.events;
                    *references = d.references;
                }
            } else {
                let e = refused.as_ref().map(|e| e.to_string()).unwrap_or_default();
                let error = format!("redis refused the decision: {e}");
                settle.outcome = Outcome::Failed(self.policy.on_failure(
                    row.attempts,
                    Failing::of(row),
                    ErrorClass::Infra,
                    &error,
                    now,
                ));
                settles.truncate(i + 1);
                break;
            }
        }
        Ok(())
    }

    /// Step 6: one transaction; a refused commit is retried one message at a time, and only
    /// the message whose outcome PostgreSQL refuses is charged.
    fn commit(
        &mut self,
        settles: Vec<(Settle, usize)>,
        rows: &[ProcRow],
        now: SystemTime,
    ) -> Result<Round, StoreError> {
        if settles.is_empty() {
            return Ok(Round::Idle);
        }
        let n = settles.len();
        let backing_off = matches!(settles.last(), Some((s, _)) if matches!(s.outcome, Outcome::Failed(Failure::Retry { .. })));
        let by_id: BTreeMap<i64, &ProcRow> = rows.iter().map(|r| (r.msg_id, r)).collect();
        let (plain, events): (Vec<Settle>, Vec<usize>) = settles.into_iter().unzip();
        if let Some(lane) = self.lane.as_mut().filter(|_| !backing_off) {
            assert!(self.inflight.is_none(), "the last commit landed before this round applied anything");
            self.inflight = Some(InFlight {
                rows: plain.iter().map(|s| (s.msg_id, by_id[&s.msg_id].clone())).collect(),
                events,
                identities: plain
                    .iter()
                    .filter_map(|s| match &s.outcome {
                        Outcome::Succeeded { identity, .. } => Some((identity.clone(), s.msg_id)),
                        _ => None,
                    })
                    .collect(),
                now,
            });
            lane.start(plain, now);
            return Ok(Round::Worked(n));
        }
        let result = self.fifo.commit(&RoundRecord::of(&plain), now);
        let settles: Vec<(Settle, usize)> = plain.into_iter().zip(events).collect();
        Ok(Round::Worked(self.landed(settles, &by_id, result, now)?))
    }

    /// Waits for the round on the lane, if any, and logs it.
    fn land(&mut self) -> StoreResult<Landing> {
        let Some(f) = self.inflight.take() else { return Ok(Landing::Nothing) };
        let (plain, result) = self.lane.as_mut().expect("a round in flight has a lane").finish();
        let refused = matches!(&result, Err(e) if e.is_rejected());
        let by_id: BTreeMap<i64, &ProcRow> = f.rows.iter().map(|(id, r)| (*id, r)).collect();
        let settles: Vec<(Settle, usize)> = plain.into_iter().zip(f.events).collect();
        let n = self.landed(settles, &by_id, result, f.now)?;
        Ok(if refused { Landing::Refused(n) } else { Landing::Recorded })
    }

    /// A round's commit result: logged when recorded, found out message by message when
    /// refused; the number of messages recorded.
    fn landed(
        &mut self,
        settles: Vec<(Settle, usize)>,
        by_id: &BTreeMap<i64, &ProcRow>,
        result: StoreResult<()>,
        now: SystemTime,
    ) -> StoreResult<usize> {
        match result {
            Ok(()) => {
                for (s, n) in &settles {
                    self.log(by_id[&s.msg_id], s, *n, now);
                }
                let n = settles.len();
                self.done(settles.iter().map(|(s, _)| s));
                Ok(n)
            }
            Err(e) if e.is_rejected() => self.commit_one_by_one(settles, by_id, e, now),
            Err(e) => Err(e),
        }
    }

    fn commit_one_by_one(
        &mut self,
        settles: Vec<(Settle, usize)>,
        by_id: &BTreeMap<i64, &ProcRow>,
        round_error: StoreError,
        now: SystemTime,
    ) -> StoreResult<usize> {
        warn!("round commit refused ({round_error}); committing its {} messages one at a time to find the cause", settles.len());
        let mut worked = 0;
        for (s, n) in settles {
            let row = by_id[&s.msg_id];
            match self.fifo.commit(&RoundRecord::of(std::slice::from_ref(&s)), now) {
                Ok(()) => {
                    self.log(row, &s, n, now);
                    self.done(std::iter::once(&s));
                    worked += 1;
                }
                Err(e) if e.is_rejected() => {
                    let failure = self.policy.on_failure(
                        row.attempts,
                        Failing::of(row),
                        ErrorClass::Infra,
                        &format!("the outcome was refused: {e}"),
                        now,
                    );
                    let charged = Settle {
                        msg_id: s.msg_id,
                        type_tag: s.type_tag.clone(),
                        outcome: Outcome::Failed(failure),
                    };
                    // If even the failure cannot be recorded, the store refuses everything:
                    // that is no message's fault, the stage stalls.
                    self.fifo.commit(&RoundRecord::of(std::slice::from_ref(&charged)), now)?;
                    self.log(row, &charged, 0, now);
                    return Ok(worked + 1);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(worked)
    }

    /// PostgreSQL holds these outcomes: their journal entries can go at the next Redis read.
    fn done<'s>(&mut self, settles: impl Iterator<Item = &'s Settle>) {
        self.forget
            .extend(settles.filter(|s| matches!(s.outcome, Outcome::Succeeded { .. })).map(|s| s.msg_id));
    }

    /// Drops journal entries while there is nothing else to do.
    fn forget_idle(&mut self, now: SystemTime) -> StoreResult<()> {
        if !self.forget.is_empty() {
            self.flights.forget(&self.forget, now)?;
            self.forget.clear();
        }
        Ok(())
    }

    /// An event payload larger than `max-event-bytes` would never be accepted by the broker:
    /// the message is refused before anything of it is applied.
    /// So is a decision with a key longer than own PostgreSQL keeps.
    fn too_large(&self, d: &Decision) -> Option<String> {
        d.events
            .iter()
            .find(|e| e.payload_json.len() > self.max_event_bytes)
            .map(|e| {
                format!(
                    "event of {} bytes for {} exceeds msgx.codec.max-event-bytes ({}); nothing applied",
                    e.payload_json.len(),
                    e.partition_key,
                    self.max_event_bytes
                )
            })
            .or_else(|| crate::handlers::keys_too_long(d))
    }

    /// Unknown element names: one WARN per new TYPE-STYP/element pair per run, and a counter.
    fn report_unknown(&mut self, tag: Option<&str>, unknown: &[String]) {
        let tag = tag.unwrap_or("-");
        for name in unknown {
            stats::inc(&self.stats.unknown_elements);
            if self.unknown_seen.insert(format!("{tag}/{name}")) {
                warn!("unknown element type={tag} element={name}: skipped, the known fields are applied (msgx.codec.strict = false)");
            }
        }
    }

    fn log(&self, row: &ProcRow, settle: &Settle, events: usize, now: SystemTime) {
        let id = row.msg_id;
        let tag = settle.type_tag.as_deref().or(row.type_tag.as_deref()).unwrap_or("-");
        match &settle.outcome {
            Outcome::Succeeded { .. } => {
                stats::inc(&self.stats.succeeded);
                stats::Latencies::observe(&self.stats.latency.processing, row.received_at, now);
                info!("succeeded msg_id={id} type={tag} events={events}");
            }
            Outcome::Skipped { reason } => {
                let counter = match SkipReason::parse(reason) {
                    Some(SkipReason::DuplicateOf(_)) => &self.stats.skipped_duplicate,
                    Some(SkipReason::NotForMsgx(_)) => &self.stats.skipped_not_for_msgx,
                    _ => &self.stats.skipped_ignored,
                };
                stats::inc(counter);
                info!("skipped msg_id={id} type={tag} reason={reason}");
            }
            Outcome::Failed(Failure::Retry { class, error, .. }) => {
                stats::inc(&self.stats.failed);
                warn!(
                    "failed msg_id={id} type={tag} class={class} attempts={} error={error:?}",
                    row.attempts + 1
                );
            }
            Outcome::Failed(Failure::Dead { class, error }) => {
                stats::inc(&self.stats.dead);
                if error.starts_with("poison:") || *class == ErrorClass::Exhausted {
                    error!(
                        "poison msg_id={id} type={tag} class={class} attempts={} error={error:?}",
                        row.attempts + 1
                    );
                } else {
                    error!("dead msg_id={id} type={tag} class={class} error={error:?}");
                }
            }
        }
    }
}

/// A daily-plan snapshot (SCHD DNLD/RESP): always a round of its own.
fn is_snapshot(msg: &Message) -> bool {
    matches!(msg.kind, MsgKind::Schd(SchdKind::Dnld | SchdKind::Resp))
}

/// Runs pure code, turning a panic into an error text (logged by the panic hook).
fn pure<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        format!("panic in decoder or handler: {what}")
    })
}

pub fn retry_policy(cfg: &Pipeline) -> RetryPolicy {
    RetryPolicy {
        max_attempts: cfg.max_attempts,
        backoff: cfg.backoff.clone(),
        cap: cfg.backoff_cap,
        head_deadline: cfg.head_deadline,
    }
}

#[cfg(test)]
mod tests;
