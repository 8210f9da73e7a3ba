//! The commit lane: a round's PostgreSQL commit, run while the pump reads, decodes and decides
//! the next round (issue #13). The next round's head query leaves the committing round out,
//! and nothing of the next round reaches Redis before this commit has landed — so the lane
//! changes when a commit happens, never what is applied in which order (INV-3, I2).
//!
//! One commit is in flight at most; the lane owns its own connection, fenced like the pump's.

use std::thread::JoinHandle;
use std::time::SystemTime;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::ports::{Fifo, RoundRecord, Settle, StoreResult};

/// Where a round's commit runs when the pump does not wait for it.
pub trait CommitLane: Send {
    /// Starts recording `settles` (one round, MSG_ID order). At most one is in flight.
    fn start(&mut self, settles: Vec<Settle>, now: SystemTime);
    /// Waits for the commit started last; its settles come back with the result.
    fn finish(&mut self) -> (Vec<Settle>, StoreResult<()>);
}

/// The daemon's lane: a thread of the process stage with its own connection.
pub struct Behind {
    work: Option<Sender<(Vec<Settle>, SystemTime)>>,
    done: Receiver<(Vec<Settle>, StoreResult<()>)>,
    thread: Option<JoinHandle<()>>,
}

impl Behind {
    /// `recorded` runs the moment a commit succeeds (the dispatchers' doorbells: the events
    /// are there before the pump has looked at the result).
    pub fn spawn<P: Fifo + Send + 'static>(
        mut fifo: P,
        recorded: impl Fn() + Send + 'static,
    ) -> std::io::Result<Behind> {
        let (work, inbox) = bounded::<(Vec<Settle>, SystemTime)>(1);
        let (outbox, done) = bounded(1);
        let thread = std::thread::Builder::new().name("process-commit".into()).spawn(move || {
            for (settles, now) in inbox.iter() {
                let result = fifo.commit(&RoundRecord::of(&settles), now);
                if result.is_ok() {
                    recorded();
                }
                if outbox.send((settles, result)).is_err() {
                    return;
                }
            }
        })?;
        Ok(Behind { work: Some(work), done, thread: Some(thread) })
    }
}

impl CommitLane for Behind {
    fn start(&mut self, settles: Vec<Settle>, now: SystemTime) {
        let work = self.work.as_ref().expect("the lane is open until dropped");
        work.send((settles, now)).expect("the commit lane thread stopped");
    }

    fn finish(&mut self) -> (Vec<Settle>, StoreResult<()>) {
        // A closed channel means the lane's thread panicked: a bug, surfaced as one.
        self.done.recv().expect("the commit lane thread stopped")
    }
}

impl Drop for Behind {
    /// Lets a started commit finish before the thread goes (a clean stop loses nothing).
    fn drop(&mut self) {
        self.work.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A lane without a thread, for the in-memory stores and the simulation: the commit runs
/// when the pump waits for it, so the next round's reads always see it still unrecorded —
/// the interleaving the daemon's lane makes possible at its widest.
pub struct Deferred<P> {
    fifo: P,
    started: Option<(Vec<Settle>, SystemTime)>,
}

impl<P: Fifo + Send> Deferred<P> {
    pub fn new(fifo: P) -> Deferred<P> {
        Deferred { fifo, started: None }
    }
}

impl<P: Fifo + Send> CommitLane for Deferred<P> {
    fn start(&mut self, settles: Vec<Settle>, now: SystemTime) {
        assert!(self.started.is_none(), "one commit in flight at most");
        self.started = Some((settles, now));
    }

    fn finish(&mut self) -> (Vec<Settle>, StoreResult<()>) {
        let (settles, now) = self.started.take().expect("a commit was started");
        let result = self.fifo.commit(&RoundRecord::of(&settles), now);
        (settles, result)
    }
}
