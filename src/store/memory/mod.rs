//! In-memory twins of every port, for unit tests and the simulator. They keep the same rules as
//! the real adapters (conditional writes, FIFO order, unique identities, the fence), which the
//! conformance suites check by running the same cases on both. Clones share state, so a test
//! hands one to a stage and inspects the other.
//!
//! Each twin can be told to fail in the two ways a real store fails (SPEC §4.9) and in the way
//! that is easiest to forget: [`Fault::Unavailable`] (nothing happens, the call fails as if the
//! connection dropped), [`Fault::Rejected`] (the store refuses the call) and [`Fault::Lost`]
//! (the write is applied, then the answer is lost: the caller sees an unavailable store).

mod flights;
mod kafka;
mod mailbox;
mod pg;
pub mod stepped;

pub use flights::{FlightState as MemFlightState, FlightsState, MemFlights};
pub use kafka::{MemProducer, ProducerState};
pub use mailbox::{MailboxState, MemMailbox, MemOutbound, MemRow};
pub use pg::{MemEvent, MemPg, MemProc, PgState};

use crate::error::Store;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::StoreError;
use crate::ports::StoreResult;

/// How an injected failure behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call fails as unavailable before anything happens.
    Unavailable,
    /// The store refuses the call; nothing happens.
    Rejected,
    /// The call's write is applied, then the answer is lost (unavailable). A read fails as
    /// [`Fault::Unavailable`].
    Lost,
}

/// Shared state plus the injected failures.
#[derive(Debug)]
pub(crate) struct Cell<T> {
    pub state: T,
    /// Calls to let through before `faults` start being used.
    pass_first: u32,
    /// Runs of faults still to come: (fault, calls left).
    faults: VecDeque<(Fault, u32)>,
    /// While set, every call fails as unavailable (a store that is down).
    down: bool,
    calls: u64,
}

#[derive(Debug)]
pub(crate) struct Shared<T>(Arc<Mutex<Cell<T>>>);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T: Default> Default for Shared<T> {
    fn default() -> Self {
        Shared(Arc::new(Mutex::new(Cell {
            state: T::default(),
            pass_first: 0,
            faults: VecDeque::new(),
            down: false,
            calls: 0,
        })))
    }
}

impl<T> Shared<T> {
    pub fn lock(&self) -> MutexGuard<'_, Cell<T>> {
        self.0.lock().expect("memory store poisoned")
    }

    /// The fault due for this call, if any.
    fn due(cell: &mut Cell<T>) -> Option<Fault> {
        cell.calls += 1;
        if cell.down {
            return Some(Fault::Unavailable);
        }
        if cell.pass_first > 0 {
            cell.pass_first -= 1;
            return None;
        }
        let (fault, left) = cell.faults.front_mut()?;
        let f = *fault;
        *left -= 1;
        if *left == 0 {
            cell.faults.pop_front();
        }
        Some(f)
    }

    /// A read: runs `f` unless a failure is due.
    pub fn read<R>(&self, store: Store, f: impl FnOnce(&T) -> StoreResult<R>) -> StoreResult<R> {
        stepped::before_call(store, stepped::Access::Read)?;
        let mut cell = self.lock();
        match Self::due(&mut cell) {
            None => f(&cell.state),
            Some(Fault::Rejected) => Err(StoreError::rejected(store, "injected refusal")),
            Some(_) => Err(StoreError::unavailable(store, "injected: connection refused")),
        }
    }

    /// A write: runs `f` unless a failure is due; a [`Fault::Lost`] runs it and then fails.
    pub fn write<R>(&self, store: Store, f: impl FnOnce(&mut T) -> StoreResult<R>) -> StoreResult<R> {
        stepped::before_call(store, stepped::Access::Write)?;
        let mut cell = self.lock();
        match Self::due(&mut cell) {
            None => f(&mut cell.state),
            Some(Fault::Rejected) => Err(StoreError::rejected(store, "injected refusal")),
            Some(Fault::Unavailable) => Err(StoreError::unavailable(store, "injected: connection refused")),
            Some(Fault::Lost) => {
                f(&mut cell.state)?;
                Err(StoreError::unavailable(store, "injected: connection lost after the write was applied"))
            }
        }
    }

    /// The next `n` calls fail with `fault`.
    pub fn inject(&self, fault: Fault, n: u32) {
        if n > 0 {
            self.lock().faults.push_back((fault, n));
        }
    }

    /// Lets `pass` calls through, then the `n` after them fail with `fault`.
    pub fn inject_later(&self, pass: u32, fault: Fault, n: u32) {
        let mut c = self.lock();
        c.pass_first = pass;
        if n > 0 {
            c.faults.push_back((fault, n));
        }
    }

    /// A store that is down (every call fails as unavailable) or up again.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// No pending faults, not down.
    pub fn heal(&self) {
        let mut c = self.lock();
        c.down = false;
        c.faults.clear();
        c.pass_first = 0;
    }

    /// How many calls reached the twin (for round-trip counting in tests).
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }
}

/// The fault controls every twin offers.
macro_rules! fault_controls {
    ($t:ty) => {
        impl $t {
            /// The next `n` calls fail as unavailable.
            pub fn fail_next(&self, n: u32) {
                self.0.inject($crate::store::memory::Fault::Unavailable, n);
            }
            /// The next `n` calls fail with `fault`.
            pub fn inject(&self, fault: $crate::store::memory::Fault, n: u32) {
                self.0.inject(fault, n);
            }
            /// Lets `pass` calls through, then the next `n` fail with `fault`.
            pub fn inject_later(&self, pass: u32, fault: $crate::store::memory::Fault, n: u32) {
                self.0.inject_later(pass, fault, n);
            }
            /// Down (every call unavailable) or up.
            pub fn set_down(&self, down: bool) {
                self.0.set_down(down);
            }
            /// Up, with no failure pending.
            pub fn heal(&self) {
                self.0.heal();
            }
            /// Calls that reached the twin so far.
            pub fn calls(&self) -> u64 {
                self.0.calls()
            }
        }
    };
}
pub(crate) use fault_controls;
