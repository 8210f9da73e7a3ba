//! Step 3 of a round: the flights the round names in one Redis read, then each message
//! decided in MSG_ID order against an overlay of the decisions before it (pure handlers).

use std::sync::Arc;
use std::time::SystemTime;

use super::plan::{pure, succeeded, Planned, Step};
use super::rules::Failing;
use super::Pump;
use crate::codec::Message;
use crate::domain::RedisRecord;
use crate::error::ErrorClass;
use crate::handlers::{self, Decision, FlightView, Reject, View};
use crate::ports::{Fifo, FlightStore, MailboxTexts, Outcome, Prepared, RoundNeed, StoreResult};

/// What the round decides against: Redis's flights with the round's decisions laid over them.
struct Overlay {
    /// Shared with the flight store's cache: a state is copied when a decision changes it
    /// while the cache still holds it, and only for a flight a later message reads.
    flights: FlightView,
    window: Vec<String>,
    /// Each FLID the round's messages read, by its hash, with the last message reading it
    /// ([`last_readers`]), in hash order.
    last_read: Vec<(u64, usize)>,
}

impl Overlay {
    /// Whether a message after the `k`-th reads `flid`. A hash that two FLIDs share says yes
    /// for both: the change is laid on, as it always may be.
    fn read_after(&self, flid: &str, k: usize) -> bool {
        let h = flid_hash(flid);
        self.last_read.binary_search_by_key(&h, |(h, _)| *h).is_ok_and(|at| self.last_read[at].1 > k)
    }
}

/// FNV-1a: a FLID is a few bytes, and a collision only lays on a change that need not be
/// (SipHash, in a `HashMap` that hashed the hash again, was a twentieth of the process thread).
fn flid_hash(flid: &str) -> u64 {
    flid.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// For each flight a message of the plan reads (its view: `handlers::flids_of`), the index of
/// the last such message. A change no later message reads is not laid on the overlay: most
/// rounds name most flights once, and their states are then never copied (#23).
fn last_readers(plan: &[Planned]) -> Vec<(u64, usize)> {
    let mut last = Vec::with_capacity(plan.len());
    for (k, p) in plan.iter().enumerate() {
        if let Step::Decide { msg, .. } = &p.step {
            last.extend(handlers::flids_of(msg).map(|f| (flid_hash(f), k)));
        }
    }
    // Each hash once, with its last reader; looked up by binary search.
    last.sort_unstable_by_key(|(h, k)| (*h, std::cmp::Reverse(*k)));
    last.dedup_by_key(|(h, _)| *h);
    last
}

/// What a message answers is the pump's to say, not a handler's, and it travels with every
/// decision of that message — a fresh one, one reused from the journal, a snapshot that changed
/// nothing: the commit closes the request it answers (G-RESP-GUARD, #55).
fn answering(mut d: Decision, msg: &Message) -> Decision {
    d.answer = crate::requests::answer_of(msg);
    d
}

/// Whether a snapshot reused from the journal was one the store found not newer than the plan
/// (stale: it changed nothing): journalled with nothing to emit (the store journals a stale
/// snapshot empty, `FlightStore::apply`), below the snapshot that advanced the plan. Its answer
/// then closes no request (#68): the request waits on, a heal's is asked again. The safe side:
/// an applied snapshot that emitted nothing and was superseded in the same failed round is
/// taken for stale too.
fn stale_snapshot(msg: &Message, journalled: &Decision, msg_id: i64, generation_msg: Option<i64>) -> bool {
    handlers::window_of(msg).is_some()
        && journalled.events.is_empty()
        && generation_msg.is_some_and(|g| g > msg_id)
}

impl<P: Fifo, M: MailboxTexts, F: FlightStore> Pump<P, M, F> {
    /// Rewrites every `Decide` step: a decision an earlier attempt applied is reused from the
    /// journal (I2); a new one that changes flights becomes `Apply`, any other is settled.
    /// The round ends after the first message that will be FAILED.
    pub(super) fn decide(&mut self, plan: &mut Vec<Planned>, now: SystemTime) -> StoreResult<()> {
        let prepared = self.prepare(plan, now)?;
        self.hold_identities(plan, &prepared.owners)?;
        let mut applied_before = prepared.applied;
        let generation_msg = prepared.generation_msg;
        let last_read = last_readers(plan);
        let mut overlay = Overlay { flights: prepared.flights, window: prepared.window, last_read };
        for k in 0..plan.len() {
            let p = &mut plan[k];
            self.report_unknown(p.row.msg_id, p.tag.as_deref(), &p.unknown, now);
            if let Step::Decide { .. } = p.step {
                let Step::Decide { msg, identity } = p.take_step() else { unreachable!() };
                p.step = match applied_before.remove(&p.row.msg_id) {
                    // Its journal entry is there; whether its changes were is not known here.
                    // The journal keeps no answer: it is the message's, said again (#55).
                    Some(d) => {
                        let d = match stale_snapshot(&msg, &d, p.row.msg_id, generation_msg) {
                            true => d,
                            false => answering(d, &msg),
                        };
                        Step::Settled(succeeded(identity, d, Some(RedisRecord::Journal)))
                    }
                    None => self.decide_one(p, k, &msg, identity, &mut overlay, now),
                };
            }
            if p.backs_off() {
                plan.truncate(k + 1);
                break;
            }
        }
        Ok(())
    }

    /// The Redis read for the round (and the journal entries PostgreSQL now makes redundant).
    fn prepare(&mut self, plan: &[Planned], now: SystemTime) -> StoreResult<Prepared> {
        let mut need = RoundNeed::default();
        let mut flids: Vec<&str> = Vec::new();
        for p in plan {
            need.taken.push(p.row.msg_id);
            if let Step::Decide { msg, identity } = &p.step {
                need.msg_ids.push(p.row.msg_id);
                need.identities.push(identity.clone());
                // Sorted and deduplicated once for the round, below; copied once each.
                flids.extend(handlers::flids_of(msg));
                need.window = need.window.or_else(|| handlers::window_of(msg));
            }
        }
        flids.sort_unstable();
        flids.dedup();
        need.flids = flids.into_iter().map(str::to_string).collect();
        if need.taken.is_empty() && self.forget.is_empty() {
            return Ok(Prepared::default());
        }
        let prepared = self.flights.prepare(&need, &self.forget, now)?;
        self.forget.clear();
        Ok(prepared)
    }

    /// One message decided against the overlay, which then carries its changes.
    fn decide_one(
        &self,
        p: &Planned,
        k: usize,
        msg: &Message,
        identity: String,
        overlay: &mut Overlay,
        now: SystemTime,
    ) -> Step {
        let row = p.row;
        // The view borrows the overlay's flights by moving them in and back out: a round
        // decides against them without copying a flight per message.
        let mut view = View { flights: Default::default(), window: std::mem::take(&mut overlay.window) };
        for f in handlers::flids_of(msg) {
            if let Some((f, s)) = overlay.flights.remove_entry(f) {
                view.flights.insert(f, s);
            }
        }
        let decided = pure(|| handlers::decide(&view, msg, row.msg_id));
        // One insert per flight (BTreeMap::append would rebuild the whole overlay).
        overlay.flights.extend(std::mem::take(&mut view.flights));
        overlay.window = view.window;
        let failed = |class: ErrorClass, e: &str| {
            Step::Settled(Outcome::Failed(self.policy.on_failure(
                row.attempts,
                Failing::of(row),
                class,
                e,
                now,
            )))
        };
        let mut d = match decided {
            Ok(Ok(d)) => d,
            Ok(Err(Reject::Unsupported(e))) => {
                return failed(ErrorClass::Unsupported, &format!("no handler for {e}"))
            }
            Ok(Err(Reject::Protocol(e))) => return failed(ErrorClass::Protocol, &e),
            Err(panic) => return failed(ErrorClass::Infra, &panic),
        };
        d = answering(d, msg);
        d.rules = Some(self.rules.version());
        super::report::tolerated(row.msg_id, p.tag.as_deref(), &d.warnings);
        if let Some(why) = self.too_large(&d) {
            return failed(ErrorClass::Protocol, &why);
        }
        for c in &d.flights {
            if !overlay.read_after(&c.flid, k) {
                continue;
            }
            // The key is copied only for a flight the overlay does not hold yet.
            match overlay.flights.get_mut(&c.flid) {
                Some(s) => Arc::make_mut(s).apply(c, row.msg_id),
                None => {
                    Arc::make_mut(overlay.flights.entry(c.flid.clone()).or_default()).apply(c, row.msg_id)
                }
            }
        }
        // A decision that changes no flight has nothing for Redis and needs no journal: a retry
        // decides it the same (reference data, a seasonal plan depend on their message alone;
        // an update a newer message superseded, or one for a flight a newer message deleted,
        // stays superseded, as versions only grow). Its outcome is final now, and it records
        // no Redis write: the consistency check expects no journal entry for it (#37).
        if d.flights.is_empty() && !d.snapshot {
            return Step::Settled(succeeded(identity, d, None));
        }
        Step::Apply { identity, decision: d }
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
            .or_else(|| handlers::keys_too_long(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ProcRow;

    /// A change is laid on the overlay for exactly the flights a later message of the round
    /// reads: message 2 reads what message 0 changed of A, nothing reads B after message 1,
    /// and a message already settled reads nothing.
    #[test]
    fn a_change_is_laid_on_only_for_a_flight_a_later_message_reads() {
        let rows: Vec<ProcRow> = (1..=4).map(|m| ProcRow::pending(m, None)).collect();
        fn decide<'r>(flid: &str, r: &'r ProcRow) -> Planned<'r> {
            let raw = crate::fixtures::flop(r.msg_id as u64, "STND", flid, &[("STND", Some("A1"))]);
            let msg = Box::new(crate::codec::decode(&raw).expect("fixture decodes"));
            Planned::new(r, Step::Decide { msg, identity: r.msg_id.to_string() })
        }
        let settled = Planned::new(
            &rows[3],
            Step::Settled(Outcome::Skipped { reason: crate::domain::SkipReason::Ignored("x".into()) }),
        );
        let plan = vec![decide("A", &rows[0]), decide("B", &rows[1]), decide("A", &rows[2]), settled];
        let overlay =
            Overlay { flights: FlightView::new(), window: Vec::new(), last_read: last_readers(&plan) };
        assert!(overlay.read_after("A", 0), "message 2 reads A");
        assert!(!overlay.read_after("A", 2) && !overlay.read_after("B", 1), "nothing reads them after");
        assert!(!overlay.read_after("C", 0), "no message reads C");
    }
}
