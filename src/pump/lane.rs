//! The commit lane: a round's PostgreSQL commit, run while the pump reads, decodes and decides
//! the next round (issue #13). The next round's head query leaves the committing round out,
//! and nothing of the next round reaches Redis before this commit has landed — so the lane
//! changes when a commit happens, never what is applied in which order (INV-3, I2).
//!
//! One commit is in flight at most; the lane owns its own connection, fenced like the pump's.

use std::collections::HashMap;
use std::thread::JoinHandle;
use std::time::SystemTime;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::domain::ProcRow;
use crate::ports::{Fifo, Outcome, RoundRecord, Settle, StoreResult};

/// A round on its way to PostgreSQL: each message's row as the round read it (for its log
/// line and, if the commit is refused, its charge) and its outcome, in MSG_ID order.
pub struct Committing {
    pub entries: Vec<Entry>,
    pub now: SystemTime,
}

pub struct Entry {
    pub row: ProcRow,
    pub settle: Settle,
}

impl Committing {
    pub fn record(&self) -> RoundRecord<'_> {
        RoundRecord::of_each(self.entries.iter().map(|e| &e.settle))
    }
}

/// Where a round's commit runs when the pump does not wait for it.
pub trait CommitLane: Send {
    /// Starts recording `round`. At most one is in flight.
    fn start(&mut self, round: Committing);
    /// Waits for the commit started last; the round comes back with the result.
    fn finish(&mut self) -> (Committing, StoreResult<()>);
}

/// The pump's side of a lane: the round in flight, and what the next round must leave alone
/// meanwhile — its rows (the head query skips them) and the identities it holds (INV-9).
pub struct Lane {
    way: Box<dyn CommitLane>,
    inflight: Option<Held>,
}

struct Held {
    ids: Vec<i64>,
    identities: HashMap<String, i64>,
}

impl Lane {
    pub fn new(way: Box<dyn CommitLane>) -> Lane {
        Lane { way, inflight: None }
    }

    /// The MSG_IDs of the round in flight (none when nothing is).
    pub fn committing(&self) -> &[i64] {
        self.inflight.as_ref().map(|h| h.ids.as_slice()).unwrap_or_default()
    }

    /// The message of the round in flight that takes `identity`, if one does.
    pub fn holder(&self, identity: &str) -> Option<i64> {
        self.inflight.as_ref().and_then(|h| h.identities.get(identity).copied())
    }

    pub fn start(&mut self, round: Committing) {
        assert!(self.inflight.is_none(), "the last commit landed before this round applied anything");
        let ids = round.entries.iter().map(|e| e.settle.msg_id).collect();
        let identities = round
            .entries
            .iter()
            .filter_map(|e| match &e.settle.outcome {
                Outcome::Succeeded { identity, .. } => Some((identity.clone(), e.settle.msg_id)),
                _ => None,
            })
            .collect();
        self.inflight = Some(Held { ids, identities });
        self.way.start(round);
    }

    /// Waits for the round in flight, if any.
    pub fn finish(&mut self) -> Option<(Committing, StoreResult<()>)> {
        self.inflight.take()?;
        Some(self.way.finish())
    }
}

/// The daemon's lane: a thread of the process stage with its own connection.
pub struct Behind {
    work: Option<Sender<Committing>>,
    done: Receiver<(Committing, StoreResult<()>)>,
    thread: Option<JoinHandle<()>>,
}

impl Behind {
    /// `recorded` runs the moment a commit succeeds (the dispatchers' doorbells: the events
    /// are there before the pump has looked at the result).
    pub fn spawn<P: Fifo + Send + 'static>(
        mut fifo: P,
        recorded: impl Fn() + Send + 'static,
    ) -> std::io::Result<Behind> {
        let (work, inbox) = bounded::<Committing>(1);
        let (outbox, done) = bounded(1);
        let thread = std::thread::Builder::new().name("process-commit".into()).spawn(move || {
            for round in inbox.iter() {
                let result = fifo.commit(&round.record(), round.now);
                if result.is_ok() {
                    recorded();
                }
                if outbox.send((round, result)).is_err() {
                    return;
                }
            }
        })?;
        Ok(Behind { work: Some(work), done, thread: Some(thread) })
    }
}

impl CommitLane for Behind {
    fn start(&mut self, round: Committing) {
        let work = self.work.as_ref().expect("the lane is open until dropped");
        work.send(round).expect("the commit lane thread stopped");
    }

    fn finish(&mut self) -> (Committing, StoreResult<()>) {
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
    started: Option<Committing>,
}

impl<P: Fifo + Send> Deferred<P> {
    pub fn new(fifo: P) -> Deferred<P> {
        Deferred { fifo, started: None }
    }
}

impl<P: Fifo + Send> CommitLane for Deferred<P> {
    fn start(&mut self, round: Committing) {
        assert!(self.started.is_none(), "one commit in flight at most");
        self.started = Some(round);
    }

    fn finish(&mut self) -> (Committing, StoreResult<()>) {
        let round = self.started.take().expect("a commit was started");
        let result = self.fifo.commit(&round.record(), round.now);
        (round, result)
    }
}
