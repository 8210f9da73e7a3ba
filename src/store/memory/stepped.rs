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
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

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

/// The work's side of the handshake, held by its thread.
struct Worker {
    at: Sender<At<()>>,
    go: Receiver<()>,
}

thread_local! {
    static WORKER: RefCell<Option<Worker>> = const { RefCell::new(None) };
}

/// Called by a twin before each call: on a stepped thread, waits for its turn; fails as
/// unavailable once the driver is gone. Elsewhere, returns at once.
pub(crate) fn before_call(store: Store, access: Access) -> Result<(), StoreError> {
    WORKER.with(|w| {
        let w = w.borrow();
        let Some(w) = w.as_ref() else { return Ok(()) };
        let turn = w.at.send(At::Call(store, access)).ok().and_then(|()| w.go.recv().ok());
        turn.ok_or_else(|| StoreError::unavailable(store, "the process stopped here (simulated crash)"))
    })
}

/// Work on its own thread, run by [`Stepped::step`] from one twin call to the next.
pub struct Stepped<T: Send + 'static> {
    go: Option<Sender<()>>,
    at: Receiver<At<()>>,
    result: Receiver<T>,
    thread: Option<JoinHandle<()>>,
}

impl<T: Send + 'static> Stepped<T> {
    /// Starts `work` on a thread named `name`; it waits for the first [`Stepped::step`].
    pub fn spawn(name: &str, work: impl FnOnce() -> T + Send + 'static) -> Stepped<T> {
        let (go_tx, go) = bounded::<()>(0);
        let (at, at_rx) = bounded::<At<()>>(0);
        let (result_tx, result) = bounded::<T>(1);
        #[cfg(test)]
        let bug = crate::planted::planted();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                #[cfg(test)]
                crate::planted::plant(bug);
                if go.recv().is_err() {
                    return;
                }
                WORKER.with(|w| *w.borrow_mut() = Some(Worker { at: at.clone(), go }));
                let out = work();
                WORKER.with(|w| *w.borrow_mut() = None);
                let _ = result_tx.send(out);
                let _ = at.send(At::Done(()));
            })
            .expect("a thread for stepped work");
        Stepped { go: Some(go_tx), at: at_rx, result, thread: Some(thread) }
    }

    /// Lets the work run to its next twin call (`At::Call`, not made yet) or to its end.
    pub fn step(&mut self) -> At<T> {
        let go = self.go.as_ref().expect("stepped after the end");
        go.send(()).expect("the stepped work waits for its turn");
        match self.at.recv() {
            Ok(At::Call(store, access)) => At::Call(store, access),
            Ok(At::Done(())) => {
                self.go = None;
                At::Done(self.result.recv().expect("the result is sent before the end"))
            }
            Err(_) => {
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
        self.go = None;
        while self.at.recv().is_ok() {}
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
