//! Live flight state (Redis), in memory: the same rules as the Redis adapter
//! ([`FlightState::apply`], the generation's compare-and-set, the index), which the
//! FlightStore conformance suite checks case by case on both.

use crate::error::Store;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{fault_controls, Shared};
use crate::error::StoreError;
pub use crate::handlers::FlightState;
use crate::handlers::{Decision, Flight};
use crate::ports::{
    Applying, FlightAudit, FlightMarks, FlightStore, Prepared, Restore, RoundNeed, StoreResult,
};

#[derive(Debug, Clone, Default)]
pub struct FlightsState {
    /// Every flight msgx holds, with versions; a deleted flight keeps its versions (tombstone).
    pub flights: BTreeMap<String, FlightState>,
    pub applied: BTreeMap<i64, Decision>,
    /// Identity → the MSG_ID whose journal entry binds it (`journal:identity`); goes with the
    /// entry.
    pub owners: BTreeMap<String, i64>,
    /// FLID → SODT (`yyyyMMddHHmm`): the daily plan's index for snapshot windows.
    pub sodt: BTreeMap<String, i64>,
    /// The plan's generation and the message that last advanced it.
    pub generation: (i64, i64),
    /// The newest lease epoch that wrote here (the fence, PRE-5).
    pub epoch: i64,
    /// Journal entries whose outcome PostgreSQL holds, with when it was said (`journal:done`).
    pub done: BTreeMap<i64, SystemTime>,
    /// The highest MSG_ID whose journal entry was dropped (`journal:pruned`; `None`: never set).
    pub pruned: Option<i64>,
    /// Applies so far (`applied:seq`) and the highest MSG_ID applied (`applied:max`).
    pub seq: i64,
    pub applied_max: i64,
    /// The highest MSG_ID whose outcome PostgreSQL said it holds (`applied:settled`).
    pub settled_max: i64,
    /// The token of the last write (`applied:token`).
    pub token: Option<String>,
}

/// What one handle on the twin holds of its own, as a Redis connection of the adapter does.
#[derive(Debug, Clone, Default)]
pub struct Handle {
    /// The lease epoch every apply carries.
    fence: Option<i64>,
    /// `redis.journal-keep`.
    keep: Duration,
    /// The tokens this handle accepts as the current one.
    seen: crate::store::Tokens,
}

/// Marks `ids` done at `now` and drops the entries done longer than `keep` (at most 1000), as
/// the FORGET script does.
pub fn forget_entries(s: &mut FlightsState, ids: &[i64], now: SystemTime, keep: Duration) {
    for id in ids {
        // As `ZADD LT`: a message recorded as taken gets its time now; an earlier time stays.
        let at = s.done.entry(*id).or_insert(now);
        *at = (*at).min(now);
        s.settled_max = s.settled_max.max(*id);
    }
    let cutoff = now.checked_sub(keep).unwrap_or(SystemTime::UNIX_EPOCH);
    let mut old: Vec<(SystemTime, i64)> =
        s.done.iter().filter(|(_, t)| **t <= cutoff).map(|(m, t)| (*t, *m)).collect();
    old.sort();
    old.truncate(1000);
    for (_, m) in &old {
        s.done.remove(m);
        s.applied.remove(m);
        s.pruned = Some(s.pruned.unwrap_or(0).max(*m));
    }
    if !old.is_empty() {
        let gone: std::collections::BTreeSet<i64> = old.iter().map(|(_, m)| *m).collect();
        s.owners.retain(|_, m| !gone.contains(m));
    }
}

/// When a message taken by a round, whose outcome PostgreSQL does not hold yet, counts as done
/// (`+inf` in Redis): never, until it is told.
pub fn not_yet() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 40)
}

/// Records `ids` taken by a round (`journal:done` without a time), as the adapter's prepare does.
pub fn take(s: &mut FlightsState, ids: &[i64]) {
    for id in ids {
        s.done.entry(*id).or_insert(not_yet());
    }
}

/// Applies one decision of message `m` as the Redis adapter does (`handlers::plan`); false when
/// a snapshot is not newer than the plan's generation (then only its empty journal entry is
/// written).
pub fn apply_decision(s: &mut FlightsState, a: &Applying<'_>) -> bool {
    let (m, d) = (a.msg_id, a.decision);
    if !a.identity.is_empty() {
        s.owners.insert(a.identity.to_string(), m);
    }
    // The planted store bug: a decision that changes no value leaves no journal entry.
    let dropped = crate::planted::on(crate::planted::Bug::NoOpJournalDropped)
        && d.flights.iter().all(|c| {
            let st = s.flights.get(&c.flid);
            !c.delete
                && c.clear.is_empty()
                && c.set.iter().all(|(k, v)| st.and_then(|f| f.fields.get(k)) == Some(v))
        });
    if !crate::handlers::plan::apply(&mut s.flights, &mut s.sodt, &mut s.generation, m, d) {
        // As the Redis journal: nothing to emit, the rules that decided it kept.
        s.applied.insert(m, Decision { rules: d.rules, ..Default::default() });
        return false;
    }
    // As the Redis journal: what a retry must emit again, not the flight changes.
    let journal = Decision {
        events: d.events.clone(),
        references: d.references.clone(),
        rules: d.rules,
        ..Default::default()
    };
    if !dropped {
        s.applied.insert(m, journal);
    }
    true
}

/// Refused when a newer epoch than `fence` holds the flights (a heal is fenced like an apply).
fn fenced(s: &FlightsState, fence: Option<i64>) -> StoreResult<()> {
    match fence.filter(|e| s.epoch > *e) {
        Some(e) => Err(StoreError::fenced(
            Store::Redis,
            format!("MSGX_FENCED epoch {} holds the flights, this heal has {e}", s.epoch),
        )),
        None => Ok(()),
    }
}

/// Applies a round as the Redis adapter does: refused when the twin holds another history than
/// this handle wrote (it forgot) or a newer epoch holds it; otherwise `token` is the current one.
fn apply_round(
    s: &mut FlightsState,
    h: &Handle,
    token: &str,
    decisions: &[Applying<'_>],
) -> StoreResult<Vec<bool>> {
    // Fenced first, as the script: a stale instance is told it is stale (#37).
    if let Some(e) = h.fence.filter(|e| s.epoch > *e) {
        return Err(StoreError::fenced(
            Store::Redis,
            format!("MSGX_FENCED: epoch {} holds the flights, this instance has {e}", s.epoch),
        ));
    }
    if !h.seen.accepts(s.token.as_deref()) {
        return Err(StoreError::forgot(
            Store::Redis,
            format!("MSGX_FORGOT redis holds another history than this instance wrote ({} applies)", s.seq),
        ));
    }
    if let Some(e) = h.fence {
        s.epoch = e;
    }
    if s.pruned.is_none() {
        // As the script: the journal is complete from this round on.
        s.pruned = decisions.first().map(|a| a.msg_id - 1);
    }
    let flags = decisions.iter().map(|a| apply_decision(s, a)).collect();
    if let Some(top) = decisions.iter().map(|a| a.msg_id).max() {
        s.applied_max = s.applied_max.max(top);
    }
    s.seq += 1;
    s.token = Some(token.to_string());
    Ok(flags)
}

#[derive(Debug, Clone, Default)]
pub struct MemFlights(pub(crate) Shared<FlightsState>, Handle);

fault_controls!(MemFlights);

impl MemFlights {
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle whose applies carry the lease epoch, as the Redis adapter's do.
    pub fn fenced(&self, epoch: i64) -> MemFlights {
        MemFlights(self.0.clone(), Handle { fence: Some(epoch), ..self.1.clone() })
    }

    /// Journal entries stay `keep` after PostgreSQL holds their outcome (`redis.journal-keep`).
    pub fn keeping(mut self, keep: Duration) -> MemFlights {
        self.1.keep = keep;
        self
    }

    /// This handle saw the store at `token` (what the consistency pass read): another one at
    /// its first apply means it went back in between.
    pub fn expecting(mut self, token: Option<String>) -> MemFlights {
        self.1.seen = crate::store::Tokens::of(token);
        self
    }

    /// Another handle on the same twin, as a new connection: unfenced, no apply count seen.
    pub fn handle(&self) -> MemFlights {
        MemFlights(self.0.clone(), Handle { keep: self.1.keep, ..Handle::default() })
    }

    /// A flight's fields (`None` when msgx holds nothing for it).
    pub fn flight(&self, flid: &str) -> Option<Flight> {
        self.0.lock().state.flights.get(flid).filter(|f| f.exists()).map(|f| f.fields.clone())
    }

    /// (generation, message id that last advanced it).
    pub fn generation(&self) -> (i64, i64) {
        self.0.lock().state.generation
    }

    pub fn applied_ids(&self) -> Vec<i64> {
        self.0.lock().state.applied.keys().copied().collect()
    }

    /// A copy of the state, for assertions.
    pub fn inspect<R>(&self, f: impl FnOnce(&FlightsState) -> R) -> R {
        f(&self.0.lock().state)
    }

    /// Every flight that holds something: FLID → fields.
    pub fn all(&self) -> BTreeMap<String, Flight> {
        self.inspect(|s| {
            s.flights.iter().filter(|(_, f)| f.exists()).map(|(k, f)| (k.clone(), f.fields.clone())).collect()
        })
    }
}

impl MemFlights {
    /// The whole state, as a restore of an older dump would bring back (the simulator's "Redis
    /// forgets", #20).
    pub fn state(&self) -> FlightsState {
        self.inspect(Clone::clone)
    }

    /// Puts `s` in place of the state: an older dump restored, or an empty store.
    pub fn replace_state(&self, s: FlightsState) {
        self.0.lock().state = s;
    }
}

impl FlightAudit for MemFlights {
    fn audit(&mut self) -> StoreResult<FlightMarks> {
        self.0.write(Store::Redis, |s| {
            Ok(FlightMarks {
                epoch: s.epoch,
                pruned: s.pruned,
                seq: s.seq,
                applied_max: s.applied_max,
                token: s.token.clone(),
                settled_max: s.settled_max,
            })
        })
    }

    fn journal_has(&mut self, ids: &[i64]) -> StoreResult<Vec<bool>> {
        self.0.write(Store::Redis, |s| Ok(ids.iter().map(|m| s.applied.contains_key(m)).collect()))
    }

    fn journal_ids(&mut self) -> StoreResult<Vec<i64>> {
        self.0.write(Store::Redis, |s| Ok(s.applied.keys().copied().collect()))
    }

    fn recorded(&mut self, ids: &[i64]) -> StoreResult<Vec<bool>> {
        self.0.write(Store::Redis, |s| {
            Ok(ids.iter().map(|m| s.applied.contains_key(m) || s.done.contains_key(m)).collect())
        })
    }

    fn settled_ids(&mut self) -> StoreResult<Vec<i64>> {
        self.0.write(Store::Redis, |s| Ok(s.done.keys().copied().collect()))
    }

    fn set_pruned(&mut self, id: i64) -> StoreResult<()> {
        let fence = self.1.fence;
        self.0.write(Store::Redis, |s| {
            fenced(s, fence)?;
            s.pruned = Some(id);
            Ok(())
        })
    }

    fn restore(&mut self, r: &Restore, now: SystemTime) -> StoreResult<()> {
        let fence = self.1.fence;
        self.0.write(Store::Redis, |s| {
            // All or nothing here; the adapter writes transaction by transaction, each fenced.
            fenced(s, fence)?;
            for (flid, f, sodt) in &r.flights {
                s.flights.insert(flid.clone(), f.clone());
                match sodt.filter(|_| f.exists()) {
                    Some(k) => s.sodt.insert(flid.clone(), k),
                    None => s.sodt.remove(flid),
                };
            }
            if let Some(g) = r.generation {
                s.generation = g;
            }
            for (m, d) in &r.journal {
                let entry = Decision {
                    events: d.events.clone(),
                    references: d.references.clone(),
                    ..Default::default()
                };
                s.applied.insert(*m, entry);
                s.done.insert(*m, now);
                s.applied_max = s.applied_max.max(*m);
            }
            // A restore is a write a later rollback can lose, as an apply is.
            s.seq += 1;
            s.token = Some(crate::store::write_token());
            Ok(())
        })
    }

    fn generation_of(&mut self) -> StoreResult<(i64, i64)> {
        Ok(self.generation())
    }

    fn flights_of(&mut self, flids: &[String]) -> StoreResult<Vec<(String, FlightState, Option<i64>)>> {
        self.0.write(Store::Redis, |s| {
            Ok(flids
                .iter()
                .filter_map(|k| s.flights.get(k).map(|f| (k.clone(), f.clone(), s.sodt.get(k).copied())))
                .collect())
        })
    }

    fn all_flights(&mut self) -> StoreResult<Vec<(String, FlightState, Option<i64>)>> {
        self.0.write(Store::Redis, |s| {
            Ok(s.flights.iter().map(|(k, f)| (k.clone(), f.clone(), s.sodt.get(k).copied())).collect())
        })
    }
}

impl FlightStore for MemFlights {
    fn prepare(&mut self, need: &RoundNeed, forget: &[i64], now: SystemTime) -> StoreResult<Prepared> {
        // One round trip: `forget` rides along with the reads.
        let keep = self.1.keep;
        let seen = &mut self.1.seen;
        self.0.write(Store::Redis, |s| {
            if !forget.is_empty() {
                forget_entries(s, forget, now, keep);
            }
            take(s, &need.taken);
            // As the adapter's read of the token, in the same round trip.
            if !need.msg_ids.is_empty() || !need.flids.is_empty() || need.window.is_some() {
                seen.observe(s.token.as_deref());
            }
            let applied =
                need.msg_ids.iter().filter_map(|m| s.applied.get(m).map(|d| (*m, d.clone()))).collect();
            let flights = need
                .flids
                .iter()
                .filter_map(|f| s.flights.get(f).map(|v| (f.clone(), Arc::new(v.clone()))))
                .collect();
            let window = need.window.map(|w| crate::handlers::plan::window(&s.sodt, w)).unwrap_or_default();
            let owners =
                need.identities.iter().filter_map(|i| s.owners.get(i).map(|m| (i.clone(), *m))).collect();
            // As Redis says it: -1 before any snapshot advanced the plan.
            let generation_msg = need.window.map(|_| if s.generation.0 == 0 { -1 } else { s.generation.1 });
            Ok(Prepared { applied, flights, window, generation_msg, owners })
        })
    }

    fn apply(&mut self, decisions: &[Applying<'_>]) -> StoreResult<Vec<bool>> {
        if decisions.is_empty() {
            return Ok(Vec::new());
        }
        let (h, token) = (self.1.clone(), crate::store::write_token());
        let result = self.0.write(Store::Redis, |s| apply_round(s, &h, &token, decisions));
        match &result {
            Ok(_) => self.1.seen.after(token, true),
            Err(e) if e.is_unavailable() => self.1.seen.after(token, false),
            Err(_) => {}
        }
        result
    }

    fn forget(&mut self, msg_ids: &[i64], now: SystemTime) -> StoreResult<()> {
        let keep = self.1.keep;
        self.0.write(Store::Redis, |s| {
            forget_entries(s, msg_ids, now, keep);
            Ok(())
        })
    }
}

#[cfg(test)]
mod conformance {
    crate::flight_conformance_tests!((super::MemFlights::new(), ()));
}

/// The fence as the claim script keeps it: moved to an epoch unless a newer one is there.
impl crate::ports::FlightsFence for MemFlights {
    fn claim(&mut self, epoch: i64) -> StoreResult<()> {
        self.0.write(Store::Redis, |s| {
            if s.epoch > epoch {
                return Err(StoreError::fenced(
                    Store::Redis,
                    format!("MSGX_FENCED: epoch {} holds the flights", s.epoch),
                ));
            }
            s.epoch = epoch;
            Ok(())
        })
    }

    fn epoch_held(&mut self) -> StoreResult<i64> {
        self.0.read(Store::Redis, |s| Ok(s.epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::FlightChange;

    fn set(flid: &str, v: &str) -> Decision {
        let c =
            FlightChange { flid: flid.into(), set: vec![("STND".into(), v.into())], ..Default::default() };
        Decision { flights: vec![c], ..Default::default() }
    }

    #[test]
    fn regression_another_history_with_the_same_count_of_applies_is_forgot() {
        let root = MemFlights::new();
        let mut a = root.handle();
        a.apply(&Applying::unnamed_all(&[(1, &set("F", "A"))])).unwrap();
        let one = root.state();
        a.apply(&Applying::unnamed_all(&[(2, &set("F", "B"))])).unwrap();
        let two = root.state();
        root.replace_state(one);
        let mut b = root.handle();
        b.apply(&Applying::unnamed_all(&[(3, &set("F", "C"))])).unwrap(); // two applies again, another history
        assert_eq!(root.state().seq, two.seq);
        root.replace_state(two);
        let err = b.apply(&Applying::unnamed_all(&[(4, &set("F", "D"))])).unwrap_err();
        assert_eq!(err.kind, crate::error::StoreErrorKind::Forgot, "found by the simulator, seed 804");
    }

    #[test]
    fn an_apply_whose_answer_was_lost_is_no_forgetting() {
        let root = MemFlights::new();
        let mut a = root.handle();
        a.apply(&Applying::unnamed_all(&[(1, &set("F", "A"))])).unwrap();
        root.inject(crate::store::memory::Fault::Lost, 1);
        assert!(a.apply(&Applying::unnamed_all(&[(2, &set("F", "B"))])).unwrap_err().is_unavailable());
        a.apply(&Applying::unnamed_all(&[(3, &set("F", "C"))]))
            .expect("the lost answer's write is this handle's own");
    }
}
