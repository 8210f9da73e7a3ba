//! The unit tests' world: the in-memory twins of the stores on one fake clock, and the stages
//! built on them as the daemon builds them. Each stage's tests hold a `Twins` and the stage
//! they drive; what every world did alike — a clock, the twins, a message arriving, a stage
//! built from the defaults — is said once, here.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::clock::{Clock, FakeClock};
use crate::config::Pipeline;
use crate::domain::InboundRow;
use crate::ports::Intake;
use crate::pump::Pump;
use crate::stats::Stats;
use crate::store::memory::{MemFlights, MemMailbox, MemPg};

/// The stores' twins on one fake clock (PostgreSQL's too: the lease's expiry reads it).
#[derive(Clone)]
pub struct Twins {
    pub clock: FakeClock,
    pub pg: MemPg,
    pub mailbox: MemMailbox,
    pub flights: MemFlights,
}

impl Twins {
    pub fn new() -> Twins {
        Twins::keeping(Duration::ZERO)
    }

    /// Twins whose Redis keeps journal entries `keep` after PostgreSQL holds their outcome
    /// (`redis.journal-keep`).
    pub fn keeping(keep: Duration) -> Twins {
        let t = Twins {
            clock: FakeClock::new(),
            pg: MemPg::new(),
            mailbox: MemMailbox::new(),
            flights: MemFlights::new().keeping(keep),
        };
        t.pg.set_clock(Arc::new(t.clock.clone()));
        t
    }

    pub fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// Message `id` arrives: its text in the mailbox (`None`: a row without one), its PENDING
    /// row enqueued as the poller does.
    pub fn arrive(&self, id: i64, raw: Option<&str>) {
        self.mailbox.insert(id, raw);
        self.enqueue(&[id]);
    }

    /// PENDING rows for `ids`, the watermark moved to the highest, as the poller does.
    pub fn enqueue(&self, ids: &[i64]) {
        let rows: Vec<InboundRow> = ids.iter().map(|&id| InboundRow { id, received_at: None }).collect();
        let mut pg = self.pg.clone();
        pg.enqueue(&rows, ids.iter().max().copied(), self.now()).expect("the twin enqueues");
    }

    /// A pump on the twins, as the daemon builds one (its own Redis handle).
    pub fn pump(&self, cfg: &Pipeline) -> Pump<MemPg, MemMailbox, MemFlights> {
        Pump::new(
            self.pg.clone(),
            self.mailbox.clone(),
            self.flights.handle(),
            cfg,
            crate::codec::Rulebook::this_release(),
            stats(),
            Arc::new(self.clock.clone()),
        )
    }
}

impl Default for Twins {
    fn default() -> Self {
        Twins::new()
    }
}

/// A stage's counters, new.
pub fn stats() -> Arc<Stats> {
    Arc::new(Stats::default())
}

/// What the outbound stage does with the requests' outbox events: each lands in `COUTMSGS`
/// (its row id the event's id) and the request is SENT — only a sent request is answered (#55).
pub fn deliver_requests(pg: &MemPg, now: SystemTime) {
    use crate::ports::{Landed, Outbox, Sent};
    let mut pg = pg.clone();
    let pending = pg.pending(crate::domain::Target::Coutmsgs, 100).unwrap();
    let sent: Vec<Sent> = pending
        .iter()
        .map(|e| Sent {
            event_id: e.event_id,
            state_version: e.state_version,
            landed: Some(Landed::Outbound { row: e.event_id }),
        })
        .collect();
    pg.mark_sent(&sent, now).unwrap();
}
