//! Live flight state in Redis (phase A authority). Key layout (docs/reference.md):
//!
//! - `{prefix}flight:{FLID}` — hash, one field per flight element (`STND`, `EOBT`, …);
//! - `{prefix}applied:{MSG_ID}` — the JSON decision applied for a message, kept 7 days, so a
//!   retry after "Redis applied, PostgreSQL failed" re-emits the same events (I2).
//!
//! Only the process thread writes here (I5).

use std::time::Duration;

use redis::{Client, Commands, Connection};

use crate::error::StoreError;
use crate::handlers::{Decision, Flight, FlightChange};
use crate::ports::{FlightStore, Prepared, StoreResult};

/// How long an applied decision is remembered: far longer than any retry schedule.
const APPLIED_TTL_SECS: u64 = 7 * 86_400;

pub struct RedisFlights {
    client: Client,
    conn: Option<Connection>,
    prefix: String,
}

impl RedisFlights {
    pub fn new(url: &str, prefix: &str) -> StoreResult<RedisFlights> {
        let client =
            Client::open(url).map_err(|e| StoreError::new("redis", format!("bad redis.url: {e}")))?;
        Ok(RedisFlights { client, conn: None, prefix: prefix.to_string() })
    }

    pub fn connect(url: &str, prefix: &str) -> StoreResult<RedisFlights> {
        let mut r = RedisFlights::new(url, prefix)?;
        r.conn()?;
        Ok(r)
    }

    pub fn flight_key(&self, flid: &str) -> String {
        format!("{}flight:{flid}", self.prefix)
    }

    fn applied_key(&self, msg_id: i64) -> String {
        format!("{}applied:{msg_id}", self.prefix)
    }

    fn conn(&mut self) -> StoreResult<&mut Connection> {
        if self.conn.is_none() {
            let c = self.client.get_connection_with_timeout(Duration::from_secs(5))?;
            c.set_read_timeout(Some(Duration::from_secs(30)))?;
            c.set_write_timeout(Some(Duration::from_secs(30)))?;
            self.conn = Some(c);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    fn run<R>(&mut self, f: impl FnOnce(&mut Connection) -> redis::RedisResult<R>) -> StoreResult<R> {
        let r = f(self.conn()?);
        if let Err(e) = &r {
            if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_unrecoverable_error() {
                self.conn = None;
            }
        }
        r.map_err(StoreError::from)
    }

    /// One flight as stored (for `msgx status`, the demo and tests).
    pub fn flight(&mut self, flid: &str) -> StoreResult<Flight> {
        let key = self.flight_key(flid);
        self.run(|c| c.hgetall(key))
    }
}

impl FlightStore for RedisFlights {
    fn prepare(&mut self, msg_id: i64, flids: &[String]) -> StoreResult<Prepared> {
        let applied_key = self.applied_key(msg_id);
        let keys: Vec<String> = flids.iter().map(|f| self.flight_key(f)).collect();
        // One round trip: the applied record and every flight hash.
        let (applied, hashes): (Option<String>, Vec<Flight>) = self.run(|c| {
            let mut p = redis::pipe();
            p.get(&applied_key);
            for k in &keys {
                p.hgetall(k);
            }
            let mut values: Vec<redis::Value> = p.query(c)?;
            let rest = values.split_off(1);
            let applied: Option<String> = redis::from_redis_value(values.remove(0))?;
            let hashes = rest.into_iter().map(redis::from_redis_value).collect::<Result<Vec<Flight>, _>>()?;
            Ok((applied, hashes))
        })?;
        if let Some(text) = applied {
            let d = serde_json::from_str(&text).map_err(|e| {
                StoreError::new("redis", format!("applied decision of msg_id={msg_id} unreadable: {e}"))
            })?;
            return Ok(Prepared::Applied(d));
        }
        Ok(Prepared::Fresh(flids.iter().cloned().zip(hashes).filter(|(_, h)| !h.is_empty()).collect()))
    }

    fn apply(&mut self, msg_id: i64, changes: &[FlightChange], decision: &Decision) -> StoreResult<()> {
        let json = serde_json::to_string(decision).map_err(|e| StoreError::new("redis", e))?;
        let applied_key = self.applied_key(msg_id);
        let ops: Vec<(String, &FlightChange)> =
            changes.iter().map(|c| (self.flight_key(&c.flid), c)).collect();
        self.run(|c| {
            // MULTI/EXEC: the flight changes and the applied record land together or not at all.
            let mut p = redis::pipe();
            p.atomic();
            for (key, ch) in &ops {
                if ch.delete {
                    p.del(key).ignore();
                }
                if !ch.set.is_empty() {
                    p.hset_multiple(key, &ch.set).ignore();
                }
                if !ch.clear.is_empty() {
                    p.hdel(key, &ch.clear).ignore();
                }
            }
            p.set_ex(&applied_key, json, APPLIED_TTL_SECS).ignore();
            p.query::<()>(c)
        })
    }
}
