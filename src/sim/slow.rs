//! Store calls that take time (#69): a call may block — a PostgreSQL stall, a lock, a slow
//! MariaDB — while the world's clock moves on, as a freeze does. A rule that reads the time
//! before a call and uses it after (a gap dated by when the round began, a backoff counted
//! from before a long call) then breaks a seed. The poller's ports are wrapped here, and every
//! mailbox read it was served is kept with the time it came back, for the commit-grace check.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use super::rng::Rng;
use crate::clock::{Clock, FakeClock};
use crate::domain::{InboundRow, MailboxRow};
use crate::ports::StoreResult;
use crate::ports::{Held, Intake, MailboxScan, MailboxTexts, Raw};

/// One call in this many blocks.
const ONE_IN: u64 = 25;
/// How long a blocked call blocks, at the most (longer than any commit grace the seeds draw).
const LONGEST: Duration = Duration::from_secs(6);

/// The world's stalls: its own choices (so that the faults the seeds already injected stay
/// where they were), the clock they move, and what the pollers were served.
pub struct Stalls {
    rng: RefCell<Rng>,
    clock: FakeClock,
    /// How many calls blocked, and for how long in all.
    pub count: Cell<u64>,
    pub total: Cell<Duration>,
    /// Each mailbox read a poller was served: when it came back and the highest ID in it.
    pub served: RefCell<Vec<(SystemTime, i64)>>,
}

impl Stalls {
    pub fn new(seed: u64, clock: FakeClock) -> Rc<Stalls> {
        Rc::new(Stalls {
            rng: RefCell::new(Rng::new(seed ^ 0x5105_u64)),
            clock,
            count: Cell::new(0),
            total: Cell::new(Duration::ZERO),
            served: RefCell::new(Vec::new()),
        })
    }

    /// A call: it blocks now and then, the clock moving meanwhile.
    fn call(&self) {
        let mut rng = self.rng.borrow_mut();
        if rng.below(ONE_IN) == 0 {
            let d = Duration::from_millis(rng.range(50, LONGEST.as_millis() as u64));
            self.clock.advance(d);
            self.count.set(self.count.get() + 1);
            self.total.set(self.total.get() + d);
        }
    }

    /// When a poller first read a row above `id`, if one did: a gap at `id` cannot have been
    /// noticed earlier.
    pub fn first_read_above(&self, id: i64) -> Option<SystemTime> {
        self.served.borrow().iter().filter(|(_, high)| *high > id).map(|(t, _)| *t).min()
    }
}

/// A port whose calls may block (see [`Stalls`]).
pub struct Slow<T> {
    inner: T,
    stalls: Rc<Stalls>,
}

impl<T> Slow<T> {
    pub fn new(inner: T, stalls: &Rc<Stalls>) -> Slow<T> {
        Slow { inner, stalls: stalls.clone() }
    }
}

impl<P: Intake> Intake for Slow<P> {
    fn enqueue(
        &mut self,
        rows: &[InboundRow],
        watermark: Option<i64>,
        now: SystemTime,
    ) -> StoreResult<Vec<i64>> {
        self.stalls.call();
        self.inner.enqueue(rows, watermark, now)
    }

    fn held(&mut self, ids: &[i64]) -> StoreResult<Vec<Held>> {
        self.stalls.call();
        self.inner.held(ids)
    }

    fn watermark(&mut self) -> StoreResult<i64> {
        self.stalls.call();
        self.inner.watermark()
    }
}

impl<M: MailboxScan> MailboxScan for Slow<M> {
    fn rows(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<MailboxRow>> {
        self.stalls.call();
        let rows = self.inner.rows(from, to, limit)?;
        if let Some(last) = rows.last() {
            self.stalls.served.borrow_mut().push((self.stalls.clock.now(), last.id));
        }
        Ok(rows)
    }

    fn unmarked(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<InboundRow>> {
        self.stalls.call();
        self.inner.unmarked(from, to, limit)
    }

    fn ids_in_use(&mut self) -> StoreResult<(Option<i64>, Option<i64>)> {
        self.stalls.call();
        self.inner.ids_in_use()
    }
}

impl<M: MailboxTexts> MailboxTexts for Slow<M> {
    fn raws(&mut self, ids: &[i64], max_bytes: u64, budget: u64) -> StoreResult<HashMap<i64, Raw>> {
        self.stalls.call();
        self.inner.raws(ids, max_bytes, budget)
    }
}
