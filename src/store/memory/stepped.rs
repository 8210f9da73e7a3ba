//! Work run one store call at a time, for the simulator (#38): a piece of work that calls the
//! twins many times — the consistency pass and its heal — runs on a thread of its own that
//! waits before each call to any twin until its driver lets it go on. The driver (the
//! simulator's one thread) steps it between its other actors, so a crash, a freeze or a
//! takeover can fall between any two of the pass's calls, and the run stays deterministic: the
//! two threads never run at once.
//!
//! A driver that lets go of the work ([`Stepped`] dropped: the process crashed) makes every
//! later call fail as unavailable before anything is applied; the work then ends on its own.

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::error::{Store, StoreError};

/// What a call about to be made does to its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Where stepped work stopped: before a call, or at its end with its result.
#[derive(Debug)]
pub enum At<T> {
    Call(Store, Access),
    Done(T),
}

/// The handshake between the driver and the work: one lock and one condition variable, so the
/// side that waits sleeps at once. A rendezvous channel spins before it sleeps, and with a
/// handshake at every twin call that spinning took four fifths of the simulator's time and the
/// core the other side needed (#66).
#[derive(Default)]
struct Turn {
    state: Mutex<Baton>,
    changed: Condvar,
}

/// Who holds the turn, and who is gone.
#[derive(Default)]
struct Baton {
    /// The driver let the work go on; the work clears it when it stops at its next call.
    work_runs: bool,
    /// Where the work stopped, for the driver to take.
    at: Option<At<()>>,
    /// The driver let go of the work (a simulated crash).
    driver_gone: bool,
    /// The work's thread ended, with its result or by a panic.
    work_gone: bool,
}

impl Turn {
    fn lock(&self) -> MutexGuard<'_, Baton> {
        // A panic on the other side is seen through `work_gone`, never through a poisoned lock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_while<'a>(
        &self,
        guard: MutexGuard<'a, Baton>,
        cond: impl FnMut(&mut Baton) -> bool,
    ) -> MutexGuard<'a, Baton> {
        self.changed.wait_while(guard, cond).unwrap_or_else(|p| p.into_inner())
    }

    /// The work's side: stops at `at` and waits for its next turn; false once the driver is gone.
    fn stop_at(&self, at: At<()>) -> bool {
        let mut b = self.lock();
        b.work_runs = false;
        b.at = Some(at);
        self.changed.notify_all();
        !self.wait_while(b, |b| !b.work_runs && !b.driver_gone).driver_gone
    }
}

/// Marks the work gone when its thread ends, by a return or by a panic.
struct Gone(Arc<Turn>);

impl Drop for Gone {
    fn drop(&mut self) {
        self.0.lock().work_gone = true;
        self.0.changed.notify_all();
    }
}

thread_local! {
    static WORKER: RefCell<Option<Arc<Turn>>> = const { RefCell::new(None) };
}

/// Called by a twin before each call: on a stepped thread, waits for its turn; fails as
/// unavailable once the driver is gone. Elsewhere, returns at once.
pub(crate) fn before_call(store: Store, access: Access) -> Result<(), StoreError> {
    WORKER.with(|w| {
        let w = w.borrow();
        let Some(turn) = w.as_ref() else { return Ok(()) };
        if turn.stop_at(At::Call(store, access)) {
            Ok(())
        } else {
            Err(StoreError::unavailable(store, "the process stopped here (simulated crash)"))
        }
    })
}

/// Work on its own thread, run by [`Stepped::step`] from one twin call to the next.
pub struct Stepped<T: Send + 'static> {
    turn: Arc<Turn>,
    result: Arc<Mutex<Option<T>>>,
    thread: Option<JoinHandle<()>>,
    done: bool,
}

impl<T: Send + 'static> Stepped<T> {
    /// Starts `work` on a thread named `name`; it waits for the first [`Stepped::step`].
    pub fn spawn(name: &str, work: impl FnOnce() -> T + Send + 'static) -> Stepped<T> {
        let turn = Arc::new(Turn::default());
        let result = Arc::new(Mutex::new(None));
        #[cfg(test)]
        let bug = crate::planted::planted();
        let (worker, out) = (turn.clone(), result.clone());
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                #[cfg(test)]
                crate::planted::plant(bug);
                let _gone = Gone(worker.clone());
                if worker.wait_while(worker.lock(), |b| !b.work_runs && !b.driver_gone).driver_gone {
                    return;
                }
                WORKER.with(|w| *w.borrow_mut() = Some(worker.clone()));
                let value = work();
                WORKER.with(|w| *w.borrow_mut() = None);
                *out.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
                worker.stop_at(At::Done(()));
            })
            .expect("a thread for stepped work");
        Stepped { turn, result, thread: Some(thread), done: false }
    }

    /// Lets the work run to its next twin call (`At::Call`, not made yet) or to its end.
    pub fn step(&mut self) -> At<T> {
        assert!(!self.done, "stepped after the end");
        let mut b = self.turn.lock();
        b.work_runs = true;
        self.turn.changed.notify_all();
        let mut b = self.turn.wait_while(b, |b| b.at.is_none() && !b.work_gone);
        match b.at.take() {
            Some(At::Call(store, access)) => At::Call(store, access),
            Some(At::Done(())) => {
                self.done = true;
                let value = self.result.lock().unwrap_or_else(|p| p.into_inner()).take();
                At::Done(value.expect("the result is kept before the end"))
            }
            None => {
                drop(b);
                let thread = self.thread.take().expect("joined once");
                match thread.join() {
                    Err(panic) => std::panic::resume_unwind(panic),
                    Ok(()) => unreachable!("stepped work ended without its result"),
                }
            }
        }
    }
}

impl<T: Send + 'static> Drop for Stepped<T> {
    /// The driver is gone (the process crashed): the work's later calls fail, it ends, and it
    /// is joined here, so no thread outlives the simulation.
    fn drop(&mut self) {
        self.turn.lock().driver_gone = true;
        self.turn.changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::FlightAudit;
    use crate::store::memory::MemFlights;

    #[test]
    fn stepped_work_makes_one_twin_call_per_step_and_ends_with_its_result() {
        let flights = MemFlights::new();
        let mut handle = flights.handle();
        let mut work = Stepped::spawn("stepped-test", move || {
            let a = handle.audit();
            let b = handle.audit();
            (a.is_ok(), b.is_ok())
        });
        assert!(matches!(work.step(), At::Call(Store::Redis, _)));
        let calls = flights.calls();
        assert!(matches!(work.step(), At::Call(Store::Redis, _)));
        assert_eq!(flights.calls(), calls + 1, "the first call was made between the two steps");
        assert!(matches!(work.step(), At::Done((true, true))));
    }

    #[test]
    fn stepped_work_dropped_mid_way_makes_no_call_after() {
        let flights = MemFlights::new();
        let mut handle = flights.handle();
        let mut work = Stepped::spawn("stepped-test", move || (handle.audit(), handle.audit()));
        assert!(matches!(work.step(), At::Call(..)));
        let calls = flights.calls();
        drop(work);
        assert_eq!(flights.calls(), calls, "nothing reached the store after the crash");
    }
}
