//! The store factory: every real adapter the daemon opens is made here, from the configuration
//! (#38) — the stages' stores ([`Live`], the real side of `topology::Stores`), the lease
//! sessions, the stores the consistency pass compares, the compat workers' and the metrics'.
//! Whatever else the daemon does, it does through the ports these adapters implement.

use std::time::Duration;

use super::{topology, DaemonError};
use crate::config::Config;
use crate::error::StoreError;
use crate::pump;
use crate::store::flights::RedisFlights;
use crate::store::kafka::KafkaProducer;
use crate::store::mailbox::{MysqlMailbox, MysqlOutbound};
use crate::store::pg::Pg;

/// How long the start waits for the broker to greet the producer (`KafkaProducer::greet`):
/// long enough for a broker on the same network, short beside the lease; a broker that is down
/// costs it once, and the dispatcher reports the outage on its first round.
const KAFKA_GREETING: Duration = Duration::from_secs(1);

/// The real stores `cfg` names, each opened on a connection of its own when asked for.
#[derive(Clone, Copy)]
pub struct RealStores<'a> {
    cfg: &'a Config,
}

impl<'a> RealStores<'a> {
    pub fn new(cfg: &'a Config) -> RealStores<'a> {
        RealStores { cfg }
    }

    /// Own PostgreSQL, connected when first used (a lease session, the metrics' reads).
    pub fn pg(&self) -> Result<Pg, StoreError> {
        Pg::of(self.cfg)
    }

    /// Own PostgreSQL, connected now (the schema check at start).
    pub fn pg_connected(&self) -> Result<Pg, StoreError> {
        Pg::of(self.cfg)?.connected()
    }

    /// Own PostgreSQL, every write fenced by `epoch`.
    pub fn pg_fenced(&self, epoch: i64) -> Result<Pg, StoreError> {
        Ok(self.pg()?.fenced(epoch))
    }

    /// The inbound mailbox (`CMINMSGS`).
    pub fn mailbox(&self) -> Result<MysqlMailbox, StoreError> {
        MysqlMailbox::of(self.cfg)
    }

    /// The outbound mailbox (`COUTMSGS`).
    pub fn outbound(&self) -> Result<MysqlOutbound, StoreError> {
        MysqlOutbound::of(self.cfg)
    }

    /// The flights in Redis, keeping journal entries `redis.journal-keep` (the evidence).
    pub fn redis(&self) -> Result<RedisFlights, StoreError> {
        Ok(RedisFlights::open(&self.cfg.redis, &self.cfg.redis_prefix)?
            .keeping(self.cfg.pipeline.journal_keep))
    }

    /// The idempotent producer, greeted by the broker (or not, within `KAFKA_GREETING`).
    pub fn producer(&self) -> Result<KafkaProducer, StoreError> {
        Ok(KafkaProducer::new(self.cfg)?.greet(KAFKA_GREETING))
    }

    /// The three stores the consistency pass reads, connected now; PostgreSQL and Redis fenced
    /// by `epoch`, so a takeover while they are healed refuses the heal's writes (#38).
    pub fn compared(&self, epoch: i64) -> Result<(Pg, MysqlMailbox, RedisFlights), StoreError> {
        Ok((self.pg_fenced(epoch)?, self.mailbox()?, self.redis()?.fenced(epoch)))
    }

    /// The pump's commit lane on a fenced session of its own; `landed` runs after each commit.
    pub fn commit_lane(
        &self,
        epoch: i64,
        landed: impl Fn() + Send + 'static,
    ) -> Result<pump::lane::Behind, DaemonError> {
        pump::lane::Behind::spawn(self.pg_fenced(epoch)?, landed)
            .map_err(|e| DaemonError::StageFailed(format!("process-commit: {e}")))
    }

    /// The stores of an active instance under `epoch`; the pump's Redis handle starts from
    /// `redis_token`, its commits go through `lane`.
    pub fn live(self, epoch: i64, redis_token: Option<String>, lane: pump::lane::Behind) -> Live<'a> {
        Live { real: self, epoch, redis_token, lane: Some(lane) }
    }
}

/// The real stores of an active instance: every stage on connections of its own, fenced by
/// `epoch` where the store can be fenced.
pub struct Live<'a> {
    real: RealStores<'a>,
    epoch: i64,
    /// The token of Redis's last write the consistency pass read (the pump's handle starts there).
    redis_token: Option<String>,
    /// The pump's commit lane, started before the stages are built (it is a thread).
    lane: Option<pump::lane::Behind>,
}

impl topology::Stores for Live<'_> {
    type Intake = Pg;
    type Scan = MysqlMailbox;
    type Fifo = Pg;
    type Texts = MysqlMailbox;
    type Flights = RedisFlights;
    type Lane = pump::lane::Behind;
    type Outbox = Pg;
    type Producer = KafkaProducer;
    type Outbound = MysqlOutbound;
    type Ledger = Pg;
    type Marks = MysqlMailbox;
    type Housekeeping = Pg;
    type Audit = Pg;
    type MailboxAudit = MysqlMailbox;
    type FlightAudit = RedisFlights;

    fn poll(&mut self) -> Result<(Pg, MysqlMailbox), StoreError> {
        Ok((self.real.pg_fenced(self.epoch)?, self.real.mailbox()?))
    }

    fn process(
        &mut self,
    ) -> Result<(Pg, MysqlMailbox, RedisFlights, Option<pump::lane::Behind>), StoreError> {
        let flights = self.real.redis()?.fenced(self.epoch).expecting(self.redis_token.take());
        Ok((self.real.pg_fenced(self.epoch)?, self.real.mailbox()?, flights, self.lane.take()))
    }

    fn dispatch(&mut self) -> Result<(Pg, KafkaProducer), StoreError> {
        Ok((self.real.pg_fenced(self.epoch)?, self.real.producer()?))
    }

    fn outbound(&mut self) -> Result<(Pg, MysqlOutbound), StoreError> {
        Ok((self.real.pg_fenced(self.epoch)?, self.real.outbound()?))
    }

    fn backfill(&mut self) -> Result<(Pg, MysqlMailbox), StoreError> {
        Ok((self.real.pg_fenced(self.epoch)?, self.real.mailbox()?))
    }

    fn jobs(&mut self) -> Result<Pg, StoreError> {
        self.real.pg_fenced(self.epoch)
    }

    fn sentinel(&mut self) -> Result<(Pg, MysqlMailbox, RedisFlights), StoreError> {
        Ok((self.real.pg_fenced(self.epoch)?, self.real.mailbox()?, self.real.redis()?))
    }
}

/// The console's connections (#40, #56), opened here like every real adapter of the daemon: own
/// PostgreSQL, the mailbox and Redis, each connected now, read only.
pub struct ConsoleStores(pub Config);

impl crate::ops::console::Opener for ConsoleStores {
    fn own(&self) -> Result<Box<dyn crate::ports::OwnReads>, StoreError> {
        Ok(Box::new(Pg::of(&self.0)?.connected()?))
    }

    fn mailbox(&self) -> Result<Box<dyn crate::ports::MailboxEntries + Send>, StoreError> {
        Ok(Box::new(MysqlMailbox::of(&self.0)?.connected()?))
    }

    fn flights(&self) -> Result<Box<dyn crate::ports::FlightAudit + Send>, StoreError> {
        Ok(Box::new(RedisFlights::connect_to(&self.0.redis, &self.0.redis_prefix)?))
    }
}
