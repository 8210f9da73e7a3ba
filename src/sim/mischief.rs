//! Bugs planted on purpose around the ports, so that a test can prove the simulator finds each
//! kind (issue #14) without a switch in any stage or in the lease code (#24): a port wrapper
//! that misbehaves the way the buggy code would. Which bug is planted is `planted::on`'s
//! (a thread-local switch of test builds).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use crate::clock::{Clock, FakeClock};
use crate::domain::ProcRow;
use crate::error::{StoreError, StoreErrorKind};
use crate::lease::{Gate, LeaseGate};
use crate::planted::{self, Bug};
use crate::policy::retry::RetryPolicy;
use crate::ports::Applying;
use crate::ports::{Fifo, FlightStore, Prepared, Producer, Record, RoundNeed, RoundRecord, StoreResult};
use crate::pump::rules::{head_action, HeadAction};

/// A port with the planted bug of this thread, if it concerns this port.
pub struct Mischief<T> {
    inner: T,
    bug: Option<Bug>,
    /// What the FIFO needs to tell a head backing off: the time and the retry policy.
    head: Option<(FakeClock, RetryPolicy)>,
}

impl<T> Mischief<T> {
    /// The FIFO, which needs to know what backing off means now.
    pub fn fifo(inner: T, clock: &FakeClock, policy: RetryPolicy) -> Mischief<T> {
        Mischief { head: Some((clock.clone(), policy)), ..Mischief::new(inner) }
    }

    pub fn new(inner: T) -> Mischief<T> {
        Mischief { inner, bug: planted::planted(), head: None }
    }

    fn planted(&self, bug: Bug) -> bool {
        self.bug == Some(bug)
    }
}

/// The FIFO as an overtaking pump would read it: a FAILED head backing off is passed over and
/// the rows behind it are processed (INV-3); and one that holds no identities (INV-9).
impl<P: Fifo> Fifo for Mischief<P> {
    fn unfinished(&mut self, limit: usize, skip: &[i64]) -> StoreResult<Vec<ProcRow>> {
        let mut rows = self.inner.unfinished(limit, skip)?;
        if let (true, Some((clock, policy))) = (self.planted(Bug::HeadOvertaken), &self.head) {
            let now = clock.now();
            rows.retain(|r| !matches!(head_action(Some(r), now, policy), HeadAction::Wait(_)));
        }
        Ok(rows)
    }

    fn identity_holders(&mut self, keys: &[String]) -> StoreResult<HashMap<String, i64>> {
        if self.planted(Bug::IdentityUnchecked) {
            return Ok(HashMap::new());
        }
        self.inner.identity_holders(keys)
    }

    fn commit(&mut self, round: &RoundRecord<'_>, now: SystemTime) -> StoreResult<()> {
        self.inner.commit(round, now)
    }

    fn answered(&mut self, msg_ids: &[i64]) -> StoreResult<Vec<crate::requests::Request>> {
        self.inner.answered(msg_ids)
    }
}

/// A flight store that forgets the journal of decisions an earlier attempt applied (I2).
impl<F: FlightStore> FlightStore for Mischief<F> {
    fn prepare(&mut self, need: &RoundNeed, forget: &[i64], now: SystemTime) -> StoreResult<Prepared> {
        let mut prepared = self.inner.prepare(need, forget, now)?;
        if self.planted(Bug::JournalIgnored) {
            prepared.applied.clear();
        }
        Ok(prepared)
    }

    fn apply(&mut self, decisions: &[Applying<'_>]) -> StoreResult<Vec<bool>> {
        self.inner.apply(decisions)
    }

    fn forget(&mut self, msg_ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.inner.forget(msg_ids, now)
    }
}

/// A producer that sends a batch in reverse order (EVENT_ID order), or reports a broker that
/// is away as a refusal of the event (SPEC §4.9: an outage is charged to no event).
impl<K: Producer> Producer for Mischief<K> {
    fn send(&mut self, records: &[Record]) -> Vec<Result<crate::ports::Position, StoreError>> {
        if self.planted(Bug::DeliveryReordered) {
            let reversed: Vec<Record> = records.iter().rev().cloned().collect();
            return self.inner.send(&reversed);
        }
        let mut results = self.inner.send(records);
        if self.planted(Bug::OutageCharged) {
            for r in &mut results {
                if let Err(e) = r {
                    if e.kind == StoreErrorKind::Unavailable {
                        e.kind = StoreErrorKind::Rejected;
                    }
                }
            }
        }
        results
    }
}

/// The backfill's ledger, whose check that this instance still holds the lease passes with the
/// gate that never closes: the mark transaction's two guards broken together (PRE-5, #56).
impl<L: crate::ports::MarkLedger> crate::ports::MarkLedger for Mischief<L> {
    fn still_holds(&mut self) -> StoreResult<()> {
        if self.planted(Bug::GateNeverCloses) {
            return Ok(());
        }
        self.inner.still_holds()
    }
    fn due_backfills(&mut self, now: SystemTime, limit: usize) -> StoreResult<Vec<crate::ports::OwedMark>> {
        self.inner.due_backfills(now, limit)
    }
    fn backfill_settled(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.inner.backfill_settled(ids, now)
    }
    fn backfill_retry(&mut self, ids: &[i64], error: &str, next_at: &[SystemTime]) -> StoreResult<()> {
        self.inner.backfill_retry(ids, error, next_at)
    }
    fn backfill_abandon(&mut self, ids: &[i64], reason: &str, now: SystemTime) -> StoreResult<()> {
        self.inner.backfill_abandon(ids, reason, now)
    }
    fn backfill_overdue(&mut self, owed_before: SystemTime, limit: usize) -> StoreResult<Vec<i64>> {
        self.inner.backfill_overdue(owed_before, limit)
    }
}

/// A gate that stays open after a newer instance took over (PRE-5).
impl Gate for Mischief<Arc<LeaseGate>> {
    fn check(&self) -> Result<(), StoreError> {
        if self.planted(Bug::GateNeverCloses) {
            return Ok(());
        }
        self.inner.check()
    }

    fn stale(&self) {
        self.inner.stale()
    }

    fn forgot(&self) {
        self.inner.forgot()
    }
}
