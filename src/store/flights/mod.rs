//! Live flight state in Redis (phase A authority). Key layout (docs/reference.md):
//!
//! - `{prefix}flight:{FLID}` — hash, one field per flight element (`STND`, `EOBT`, `GTDT`, …);
//! - `{prefix}sodt` — sorted set, FLID scored by SODT (`yyyyMMddHHmm`): the daily plan's index,
//!   from which a snapshot's window is read;
//! - `{prefix}schd:gen` — hash `gen` (the plan's generation) and `msg_id` (the snapshot that
//!   last advanced it);
//! - `{prefix}applied:{MSG_ID}` — the JSON decision applied for a message, until PostgreSQL
//!   holds its outcome (at most a day), so a retry after "Redis applied, PostgreSQL failed"
//!   writes the same events (I2).
//!
//! Every apply is ONE Lua script, so flights, index, generation and applied record change
//! together or not at all. Only the process thread writes here (I5). The script names its keys
//! from the prefix, so it needs a standalone Redis (not a cluster).

use std::time::Duration;

use redis::{Client, Commands, Connection, Script};

use crate::error::StoreError;
use crate::handlers::{Decision, Flight, Need, View};
use crate::ports::{FlightStore, Prepared, StoreResult};

/// How long an applied decision is kept if PostgreSQL never confirms it (a crashed round that
/// is never retried): far past any retry schedule.
const APPLIED_TTL_SECS: u64 = 86_400;

/// Applies a decision (ARGV: prefix, msg_id, ttl, decision JSON). Returns 1 when applied, 0
/// when a snapshot is not newer than the last one (a replay changes nothing).
const APPLY: &str = r#"
local prefix, msg_id, ttl, doc = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local d = cjson.decode(doc)
local idx, genkey = prefix .. 'sodt', prefix .. 'schd:gen'
if d.snapshot == true then
  local last = tonumber(redis.call('HGET', genkey, 'msg_id') or '-1')
  if last >= msg_id then return 0 end
end
for _, c in ipairs(d.flights) do
  local key = prefix .. 'flight:' .. c.flid
  if c.delete == true then
    redis.call('DEL', key)
    redis.call('ZREM', idx, c.flid)
  end
  if #c.set > 0 then
    local args = {}
    for _, kv in ipairs(c.set) do
      args[#args + 1] = kv[1]
      args[#args + 1] = kv[2]
    end
    redis.call('HSET', key, unpack(args))
  end
  if #c.clear > 0 then redis.call('HDEL', key, unpack(c.clear)) end
  if c.sodt ~= nil and c.sodt ~= cjson.null then redis.call('ZADD', idx, c.sodt, c.flid) end
end
if d.snapshot == true then
  redis.call('HINCRBY', genkey, 'gen', 1)
  redis.call('HSET', genkey, 'msg_id', msg_id)
end
redis.call('SET', prefix .. 'applied:' .. msg_id, doc, 'EX', ttl)
return 1
"#;

pub struct RedisFlights {
    client: Client,
    conn: Option<Connection>,
    prefix: String,
    apply: Script,
}

impl RedisFlights {
    pub fn new(url: &str, prefix: &str) -> StoreResult<RedisFlights> {
        let client =
            Client::open(url).map_err(|e| StoreError::new("redis", format!("bad redis.url: {e}")))?;
        Ok(RedisFlights { client, conn: None, prefix: prefix.to_string(), apply: Script::new(APPLY) })
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

    fn run<R>(
        &mut self,
        f: impl FnOnce(&mut Connection, &Script) -> redis::RedisResult<R>,
    ) -> StoreResult<R> {
        let script = self.apply.clone();
        let r = f(self.conn()?, &script);
        if let Err(e) = &r {
            if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_unrecoverable_error() {
                self.conn = None;
            }
        }
        r.map_err(StoreError::from)
    }

    /// The daily plan's generation and the message that last advanced it.
    pub fn generation(&mut self) -> StoreResult<(i64, i64)> {
        let key = format!("{}schd:gen", self.prefix);
        let (g, m): (Option<i64>, Option<i64>) =
            self.run(|c, _| redis::cmd("HMGET").arg(&key).arg("gen").arg("msg_id").query(c))?;
        Ok((g.unwrap_or(0), m.unwrap_or(0)))
    }
}

impl FlightStore for RedisFlights {
    fn prepare(&mut self, msg_id: i64, need: &Need) -> StoreResult<Prepared> {
        let applied_key = self.applied_key(msg_id);
        let keys: Vec<String> = need.flids.iter().map(|f| self.flight_key(f)).collect();
        let idx = format!("{}sodt", self.prefix);
        // One round trip: the applied record, every flight hash, and the window's FLIDs.
        let (applied, hashes, window): (Option<String>, Vec<Flight>, Vec<String>) = self.run(|c, _| {
            let mut p = redis::pipe();
            p.get(&applied_key);
            for k in &keys {
                p.hgetall(k);
            }
            if let Some((a, b)) = need.window {
                p.zrangebyscore(&idx, a, b);
            }
            let mut values: Vec<redis::Value> = p.query(c)?;
            let window = match need.window {
                Some(_) => redis::from_redis_value(values.pop().expect("one reply per command"))?,
                None => Vec::new(),
            };
            let rest = values.split_off(1);
            let applied: Option<String> = redis::from_redis_value(values.remove(0))?;
            let hashes = rest.into_iter().map(redis::from_redis_value).collect::<Result<Vec<Flight>, _>>()?;
            Ok((applied, hashes, window))
        })?;
        if let Some(text) = applied {
            let d = serde_json::from_str(&text).map_err(|e| {
                StoreError::new("redis", format!("applied decision of msg_id={msg_id} unreadable: {e}"))
            })?;
            return Ok(Prepared::Applied(d));
        }
        let flights = need.flids.iter().cloned().zip(hashes).filter(|(_, h)| !h.is_empty()).collect();
        Ok(Prepared::Fresh(View { flights, window }))
    }

    fn apply(&mut self, msg_id: i64, decision: &Decision) -> StoreResult<()> {
        let doc = serde_json::to_string(decision).map_err(|e| StoreError::new("redis", e))?;
        let prefix = self.prefix.clone();
        let applied: i64 =
            self.run(|c, script| script.arg(&prefix).arg(msg_id).arg(APPLIED_TTL_SECS).arg(&doc).invoke(c))?;
        if applied == 0 {
            log::info!(
                "snapshot msg_id={msg_id} is not newer than the daily plan's generation; nothing changed"
            );
        }
        Ok(())
    }

    fn forget(&mut self, msg_ids: &[i64]) -> StoreResult<()> {
        let keys: Vec<String> = msg_ids.iter().map(|m| self.applied_key(*m)).collect();
        self.run(|c, _| c.del::<_, ()>(keys))
    }
}
