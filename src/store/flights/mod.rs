//! Live flight state in Redis (phase A authority). Key layout (docs/reference.md):
//!
//! - `{prefix}flight:{FLID}` — hash, one field per flight element (`STND`, `EOBT`, `GTDT`, …);
//! - `{prefix}fver:{FLID}` — hash, the MSG_ID that last wrote each field, and `~del`, the
//!   MSG_ID that last deleted the flight (kept 7 days after the flight is gone): the versions
//!   that make a flight's state its messages' state in MSG_ID order
//!   ([`FlightState`](crate::handlers::FlightState));
//! - `{prefix}sodt` — sorted set, FLID scored by SODT (`yyyyMMddHHmm`): the daily plan's index,
//!   from which a snapshot's window is read;
//! - `{prefix}schd:gen` — hash `gen` (the plan's generation) and `msg_id` (the snapshot that
//!   last advanced it);
//! - `{prefix}journal` — hash, MSG_ID → the events and references of the decision applied for
//!   that message, so a retry after "Redis applied, PostgreSQL failed" writes the same events
//!   (I2), kept `redis.journal-keep` after PostgreSQL holds the outcome;
//! - `{prefix}journal:identity` — hash, identity (INV-9) → the MSG_ID whose journal entry
//!   binds it; goes with the entry. A message PostgreSQL forgot is processed again after a
//!   resend of it became visible: the one whose decision stands keeps the identity (seed 3591);
//! - `{prefix}journal:done`, `{prefix}journal:pruned` — every message whose outcome PostgreSQL
//!   holds (SUCCEEDED, SKIPPED, DEAD; told after its commit) with when it was told, and the
//!   highest MSG_ID whose entry was dropped `redis.journal-keep` later: above it, both are
//!   complete (#20, #37). The four keys share one time to live, a week after the last write to
//!   any of them, and go together (a quiet week leaves no `journal:pruned` that claims entries
//!   the expiry took); the next apply marks the journal complete from its first MSG_ID;
//! - `{prefix}applied:seq`, `applied:max`, `applied:token`, `applied:settled` — writes so far,
//!   the highest MSG_ID applied, the token of the last write (by which a Redis that went back is
//!   told), and the highest MSG_ID whose outcome PostgreSQL said it holds (#20, #37);
//! - `{prefix}lease:epoch` — the newest lease epoch that wrote here (the fence, PRE-5).
//!
//! A round's decisions are applied by ONE Lua script: flights, versions, index, generation and
//! journal change together or not at all, and not at all when a newer instance has written
//! here. The round is played in Rust on the flights the adapter read (`net`), and the script
//! writes the difference only while Redis still holds what was read. Only the process thread
//! writes here (I5). The script names its keys from the prefix, so it needs a standalone Redis
//! (not a cluster).

pub mod classify;
mod net;

use crate::error::Store;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redis::{Client, Connection, Script, Value};

use crate::error::StoreError;
use crate::handlers::{Decision, FlightState, FlightView};
use crate::ports::{
    Applying, FlightAudit, FlightMarks, FlightStore, Prepared, Restore, RoundNeed, StoreResult,
};

/// How long the journal is kept after the last apply (an instance stopped for good).
const JOURNAL_TTL_SECS: u64 = 7 * 86_400;
/// How long the versions of a deleted flight are kept (its tombstone).
const TOMBSTONE_TTL_SECS: u64 = crate::handlers::TOMBSTONE_KEEP.as_secs();

/// Applies a round's net writes, worked out by the adapter from what it read (`net`, #23).
/// ARGV: prefix, epoch, tombstone ttl, journal ttl, the tokens this handle accepts as Redis's
/// current `applied:token` (comma-separated; empty: none seen yet), the token of this write,
/// the token the writes were worked out under (empty: Redis had none), the snapshots that
/// advance the plan's generation and the last one's MSG_ID, the round's highest MSG_ID, then
/// n and n × (msg_id, journal doc), k and k × (identity, msg_id), then the flights: f and f × (flid, `expire`|`persist`|``,
/// s, s × (field, value), g, g × field gone, v, v × (field, MSG_ID)), then z and z × (sodt,
/// flid) for the plan's index, r and r × flid out of it. The journal docs (the decisions'
/// events and references) are stored as given, never decoded.
///
/// Nothing is written when Redis holds another history than this handle wrote (`MSGX_FORGOT`,
/// #20), when a newer epoch wrote here (`MSGX_FENCED`, PRE-5), or when anything wrote since
/// the read the writes were worked out from (`MSGX_MOVED`: every write of flights moves the
/// token, so the same token means the same flights). Then the writes are done as given: each
/// flight once, the index and the journal in commands of at most 1000 arguments.
const APPLY: &str = r#"
local prefix, epoch, tomb, jttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local saw, token, read = ARGV[5], ARGV[6], ARGV[7]
local seqkey, tkey = prefix .. 'applied:seq', prefix .. 'applied:token'
local cur = redis.call('GET', tkey)
-- Fenced first: a stale instance is told it is stale, not that Redis forgot (#37).
local ekey = prefix .. 'lease:epoch'
local held = tonumber(redis.call('GET', ekey) or '0')
if epoch > 0 and held > epoch then
  return redis.error_reply('MSGX_FENCED epoch ' .. held .. ' holds the flights, this instance has ' .. epoch)
end
if saw ~= '' then
  local ok = false
  for t in string.gmatch(saw, '[^,]+') do
    if t == cur then ok = true end
  end
  if not ok then
    return redis.error_reply('MSGX_FORGOT redis holds another history than this instance wrote (' .. (redis.call('GET', seqkey) or '0') .. ' applies)')
  end
end
if epoch > 0 and held < epoch then redis.call('SET', ekey, epoch) end
if (cur or '') ~= read then
  return redis.error_reply('MSGX_MOVED redis was written since this round read its flights')
end
local gens, last, top = tonumber(ARGV[8]), ARGV[9], ARGV[10]
local jkey, dkey, pkey = prefix .. 'journal', prefix .. 'journal:done', prefix .. 'journal:pruned'
local ikey = prefix .. 'journal:identity'
-- No journal:pruned (a new store, or the journal expired with it after a quiet week): the
-- journal is complete from this round on.
if tonumber(ARGV[11]) > 0 and redis.call('EXISTS', pkey) == 0 then
  redis.call('SET', pkey, tonumber(ARGV[12]) - 1)
end
-- Arguments ARGV[a..b] to `cmd` on `key`, at most 1000 a call.
local function chunked(cmd, key, a, b)
  for k = a, b, 1000 do
    redis.call(cmd, key, unpack(ARGV, k, math.min(k + 999, b)))
  end
end
local i = 11
local n = tonumber(ARGV[i])
chunked('HSET', jkey, i + 1, i + 2 * n)
i = i + 1 + 2 * n
local k = tonumber(ARGV[i])
chunked('HSET', ikey, i + 1, i + 2 * k)
i = i + 1 + 2 * k
local f = tonumber(ARGV[i])
i = i + 1
for _ = 1, f do
  local flid, ttl = ARGV[i], ARGV[i + 1]
  local key, vkey = prefix .. 'flight:' .. flid, prefix .. 'fver:' .. flid
  local s = tonumber(ARGV[i + 2])
  if s > 0 then chunked('HSET', key, i + 3, i + 2 + 2 * s) end
  i = i + 3 + 2 * s
  local g = tonumber(ARGV[i])
  if g > 0 then chunked('HDEL', key, i + 1, i + g) end
  i = i + 1 + g
  local v = tonumber(ARGV[i])
  if v > 0 then chunked('HSET', vkey, i + 1, i + 2 * v) end
  i = i + 1 + 2 * v
  if ttl == 'expire' then redis.call('EXPIRE', vkey, tomb) elseif ttl == 'persist' then redis.call('PERSIST', vkey) end
end
local idx = prefix .. 'sodt'
local z = tonumber(ARGV[i])
chunked('ZADD', idx, i + 1, i + 2 * z)
i = i + 1 + 2 * z
local r = tonumber(ARGV[i])
chunked('ZREM', idx, i + 1, i + r)
if gens > 0 then
  local genkey = prefix .. 'schd:gen'
  redis.call('HINCRBY', genkey, 'gen', gens)
  redis.call('HSET', genkey, 'msg_id', last)
end
if n > 0 then
  for _, key in ipairs({jkey, dkey, pkey, ikey}) do redis.call('EXPIRE', key, jttl) end
end
local maxkey = prefix .. 'applied:max'
if tonumber(top) > tonumber(redis.call('GET', maxkey) or '0') then redis.call('SET', maxkey, top) end
redis.call('SET', tkey, token)
redis.call('INCR', seqkey)
return 1
"#;

/// Messages PostgreSQL now holds the outcome of are done (ARGV: prefix, now ms, keep ms, journal
/// ttl, msg_id…): each is marked in `journal:done` with the time it was told, and
/// `applied:settled` keeps the highest (the evidence that PostgreSQL held it, #37). Those done
/// longer than the keep window go with their journal entries, at most 1000 a call, and
/// `journal:pruned` keeps the highest MSG_ID ever dropped: every entry and mark above it is still
/// there (the evidence the consistency check and the PostgreSQL heal stand on, #20). An entry's
/// identity goes with it, unless a later entry binds it. The four journal keys' time to live is
/// renewed together.
const FORGET: &str = r#"
local prefix, now, keep, jttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local jkey, dkey, pkey = prefix .. 'journal', prefix .. 'journal:done', prefix .. 'journal:pruned'
local ikey = prefix .. 'journal:identity'
local skey = prefix .. 'applied:settled'
-- The score as the text it came as: a Lua number handed to a command is printed again (printf).
local marks = {}
local settled = tonumber(redis.call('GET', skey) or '0')
for i = 5, #ARGV do
  marks[#marks + 1] = ARGV[2]; marks[#marks + 1] = ARGV[i]
  local m = tonumber(ARGV[i])
  if m > settled then settled = m end
end
-- LT: a message recorded as taken (no time yet) gets its time now; an earlier time stays.
for k = 1, #marks, 1000 do
  redis.call('ZADD', dkey, 'LT', unpack(marks, k, math.min(k + 999, #marks)))
end
if #ARGV >= 5 then redis.call('SET', skey, settled) end
local old = redis.call('ZRANGEBYSCORE', dkey, '-inf', now - keep, 'LIMIT', 0, 1000)
if #old > 0 then
  local docs = redis.call('HMGET', jkey, unpack(old))
  for j, doc in ipairs(docs) do
    local ok, entry = pcall(cjson.decode, doc or '')
    local id = ok and type(entry) == 'table' and entry.identity
    if type(id) == 'string' and redis.call('HGET', ikey, id) == old[j] then redis.call('HDEL', ikey, id) end
  end
  redis.call('HDEL', jkey, unpack(old))
  redis.call('ZREM', dkey, unpack(old))
  local top = tonumber(redis.call('GET', pkey) or '0')
  for _, m in ipairs(old) do
    local v = tonumber(m)
    if v > top then top = v end
  end
  redis.call('SET', pkey, top)
end
for _, k in ipairs({jkey, dkey, pkey, ikey}) do redis.call('EXPIRE', k, jttl) end
return #old
"#;

/// What the journal keeps of a decision: what a retry must emit again (I2), and the identity
/// it binds (`journal:identity`, dropped with the entry). The flight changes are in Redis
/// already.
#[derive(serde::Serialize)]
struct Journal<'a> {
    events: &'a [crate::domain::NewEvent],
    references: &'a [crate::handlers::RefChange],
    #[serde(skip_serializing_if = "str::is_empty")]
    identity: &'a str,
}

/// Moves the fence to `epoch` unless a newer one is there (ARGV: prefix, epoch). A new lease
/// holder claims the flights before its stages start, so a stale pump's next apply is refused.
const CLAIM: &str = r#"
local ekey = ARGV[1] .. 'lease:epoch'
local held = tonumber(redis.call('GET', ekey) or '0')
local epoch = tonumber(ARGV[2])
if held > epoch then return redis.error_reply('MSGX_FENCED epoch ' .. held .. ' holds the flights, this instance has ' .. epoch) end
redis.call('SET', ekey, epoch)
return epoch
"#;

/// How long a Redis call may go unanswered before the store counts as unavailable (#21 item
/// 11): a server that hangs (frozen, a paused VM) is an outage from its first seconds. The apply
/// script of a whole round runs in milliseconds; a healthy server never comes near it.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// Sends a pipeline and reads its replies, the first `skip` dropped. A reply that does not come
/// ends it at once: redis-rs's own `Pipeline::query` goes on reading after an I/O error and
/// waits out the read timeout once per command, so a frozen server held a round of 200
/// flights for 400 timeouts (#21 item 11). A server error is returned after every reply was
/// read, so the connection stays in step.
/// The journal entries Redis holds of `msg_ids` (`HMGET`'s reply in their order): decisions an
/// earlier attempt applied.
fn journal_entries(msg_ids: &[i64], texts: Vec<Option<String>>) -> StoreResult<HashMap<i64, Decision>> {
    let mut applied = HashMap::new();
    for (m, text) in msg_ids.iter().zip(texts) {
        if let Some(text) = text {
            let d: Decision = serde_json::from_str(&text).map_err(|e| {
                StoreError::rejected(Store::Redis, format!("journal of msg_id={m} unreadable: {e}"))
            })?;
            applied.insert(*m, d);
        }
    }
    Ok(applied)
}

fn query_bounded(c: &mut Connection, p: &redis::Pipeline, skip: usize) -> redis::RedisResult<Vec<Value>> {
    c.send_packed_command(&p.get_packed_pipeline())?;
    let mut out = Vec::with_capacity(p.len());
    let mut refused = None;
    for i in 0..p.len() {
        match c.recv_response()?.extract_error() {
            Ok(v) if i >= skip => out.push(v),
            Ok(_) => {}
            Err(e) => {
                refused.get_or_insert(e);
            }
        }
    }
    refused.map_or(Ok(out), Err)
}

pub use crate::config::RedisTarget;

/// Redis's replication as `msgx check` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    pub role: String,
    pub connected: i64,
    pub min_replicas_to_write: Option<i64>,
    pub via_sentinels: bool,
}

impl std::fmt::Display for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let min =
            self.min_replicas_to_write.map_or("unknown (CONFIG not allowed)".to_string(), |m| m.to_string());
        let via = if self.via_sentinels { "the master the sentinels name" } else { "redis.url" };
        write!(f, "role={} replicas={} min-replicas-to-write={min} ({via})", self.role, self.connected)
    }
}

/// How long a sentinel may take to connect and answer.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(1);

/// Asks the sentinels, in order, where the master `name` is; the first that answers wins.
fn ask_sentinels(t: &RedisTarget) -> StoreResult<(String, u16)> {
    let mut why = Vec::new();
    for s in &t.sentinels {
        let url = match &t.sentinel_password {
            Some(p) => format!("redis://:{p}@{s}/"),
            None => format!("redis://{s}/"),
        };
        let answer = Client::open(url.as_str()).and_then(|c| {
            let mut conn = c.get_connection_with_timeout(SENTINEL_TIMEOUT)?;
            conn.set_read_timeout(Some(SENTINEL_TIMEOUT))?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&t.master)
                .query::<Option<(String, u16)>>(&mut conn)
        });
        match answer {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => why.push(format!("{s}: no master named {:?}", t.master)),
            Err(e) => why.push(format!("{s}: {e}")),
        }
    }
    Err(StoreError::unavailable(
        Store::Redis,
        format!("no sentinel named the master: {}", crate::secret::redact(&why.join("; "))),
    ))
}

pub struct RedisFlights {
    client: Client,
    target: RedisTarget,
    conn: Option<Connection>,
    prefix: String,
    apply: Script,
    /// The lease epoch every apply carries (0: unfenced, for tools and tests).
    epoch: i64,
    /// How long a journal entry stays after PostgreSQL holds its outcome (`redis.journal-keep`).
    keep: Duration,
    /// The `applied:token`s this handle accepts as Redis's current one (#20).
    seen: crate::store::Tokens,
    /// What the last read found, as this handle's applies since left it: what a round's net
    /// writes are worked out from (`None`: read it first).
    known: Option<net::Known>,
}

impl RedisFlights {
    pub fn new(url: &str, prefix: &str) -> StoreResult<RedisFlights> {
        RedisFlights::open(&RedisTarget::single(url), prefix)
    }

    /// On `target`: one server, or the master its sentinels name (resolved at every connect).
    pub fn open(target: &RedisTarget, prefix: &str) -> StoreResult<RedisFlights> {
        let client = Client::open(target.url.as_str())
            .map_err(|e| StoreError::rejected(Store::Redis, format!("bad redis.url: {e}")))?;
        Ok(RedisFlights {
            client,
            target: target.clone(),
            conn: None,
            prefix: prefix.to_string(),
            apply: Script::new(APPLY),
            epoch: 0,
            keep: Duration::ZERO,
            seen: Default::default(),
            known: None,
        })
    }

    pub fn connect(url: &str, prefix: &str) -> StoreResult<RedisFlights> {
        RedisFlights::connect_to(&RedisTarget::single(url), prefix)
    }

    /// `open`, connected now.
    pub fn connect_to(target: &RedisTarget, prefix: &str) -> StoreResult<RedisFlights> {
        let mut r = RedisFlights::open(target, prefix)?;
        r.conn()?;
        Ok(r)
    }

    /// Another handle on the same Redis and prefix (its own connection, unfenced).
    pub fn twin(&self) -> RedisFlights {
        RedisFlights {
            client: self.client.clone(),
            target: self.target.clone(),
            conn: None,
            prefix: self.prefix.clone(),
            apply: Script::new(APPLY),
            epoch: 0,
            keep: self.keep,
            seen: Default::default(),
            known: None,
        }
    }

    /// This handle saw Redis at `token` (what the consistency pass read before the stages
    /// started): another one at its first apply means Redis went back in between (#20).
    pub fn expecting(mut self, token: Option<String>) -> RedisFlights {
        self.seen = crate::store::Tokens::of(token);
        self
    }

    /// Journal entries stay `keep` after PostgreSQL holds their outcome (`redis.journal-keep`):
    /// the evidence that heals a PostgreSQL that lost commits (#20).
    pub fn keeping(mut self, keep: Duration) -> RedisFlights {
        self.keep = keep;
        self
    }

    /// Every apply carries `epoch`; Redis refuses it once a newer epoch wrote there.
    pub fn fenced(mut self, epoch: i64) -> RedisFlights {
        self.epoch = epoch;
        self
    }

    /// Claims the flights for `epoch` (a new lease holder, before its stages start).
    pub fn claim(&mut self, epoch: i64) -> StoreResult<()> {
        let prefix = self.prefix.clone();
        self.run(|c, _| Script::new(CLAIM).arg(&prefix).arg(epoch).invoke::<i64>(c)).map(|_| ())?;
        self.durable()
    }

    /// With `redis.wait-replicas`, waits until that many replicas acknowledged every write of
    /// this connection (a marker written first makes that true of writes a retry found already
    /// applied, too); fewer within `wait-timeout` is an outage: nothing is recorded SUCCEEDED and
    /// the same idempotent apply is tried again (#19).
    fn durable(&mut self) -> StoreResult<()> {
        let want = self.target.wait_replicas;
        if want == 0 {
            return Ok(());
        }
        let marker = format!("{}wait", self.prefix);
        let ms = self.target.wait_timeout.as_millis() as u64;
        let got: Vec<Value> = self.run(|c, _| {
            let mut p = redis::pipe();
            p.cmd("INCR").arg(&marker);
            p.cmd("WAIT").arg(want).arg(ms);
            query_bounded(c, &p, 1)
        })?;
        let acked: i64 = parse(got.into_iter().next().unwrap_or(Value::Nil))?;
        if acked < i64::from(want) {
            self.conn = None; // re-resolve: the master may have changed
            return Err(StoreError::unavailable(
                Store::Redis,
                format!(
                    "WAIT: {acked} of {want} replica(s) acknowledged within {ms}ms (redis.wait-replicas)"
                ),
            ));
        }
        Ok(())
    }

    /// What `msgx check` says of Redis's replication: the server's role, its connected replicas,
    /// and `min-replicas-to-write` (when `CONFIG GET` is allowed).
    pub fn replication(&mut self) -> StoreResult<Replication> {
        let info: String = self.run(|c, _| redis::cmd("INFO").arg("replication").query(c))?;
        let field = |k: &str| {
            info.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix(':')).map(|v| v.trim().to_string())
        };
        let min: Option<i64> = self
            .run(|c, _| redis::cmd("CONFIG").arg("GET").arg("min-replicas-to-write").query::<Vec<String>>(c))
            .ok()
            .and_then(|v| v.get(1)?.parse().ok());
        Ok(Replication {
            role: field("role").unwrap_or_else(|| "?".into()),
            connected: field("connected_slaves").and_then(|v| v.parse().ok()).unwrap_or(0),
            min_replicas_to_write: min,
            via_sentinels: !self.target.sentinels.is_empty(),
        })
    }

    /// The epoch that holds the flights (the last claim or apply; 0: none yet).
    pub fn epoch_held(&mut self) -> StoreResult<i64> {
        let key = format!("{}lease:epoch", self.prefix);
        self.run(|c, _| redis::cmd("GET").arg(&key).query::<Option<i64>>(c)).map(|e| e.unwrap_or(0))
    }

    pub fn flight_key(&self, flid: &str) -> String {
        format!("{}flight:{flid}", self.prefix)
    }

    /// The journal's four keys, which share one time to live (module documentation).
    fn journal_keys(&self) -> [String; 4] {
        ["journal", "journal:done", "journal:pruned", "journal:identity"]
            .map(|k| format!("{}{k}", self.prefix))
    }

    fn key(&self, what: &str, id: impl std::fmt::Display) -> String {
        format!("{}{what}:{id}", self.prefix)
    }

    /// The client to connect with: `redis.url`, or its user, password and db at the address
    /// the sentinels name for the master now.
    fn client_now(&self) -> StoreResult<Client> {
        if self.target.sentinels.is_empty() {
            return Ok(self.client.clone());
        }
        let (host, port) = ask_sentinels(&self.target)?;
        let info = self.client.get_connection_info().clone().set_addr(redis::ConnectionAddr::Tcp(host, port));
        Client::open(info).map_err(|e| StoreError::rejected(Store::Redis, format!("bad master address: {e}")))
    }

    fn conn(&mut self) -> StoreResult<&mut Connection> {
        if self.conn.is_none() {
            let unavailable =
                |e: redis::RedisError| StoreError::unavailable(Store::Redis, classify::classify(&e).detail);
            let client = self.client_now()?;
            let mut c = client.get_connection_with_timeout(Duration::from_secs(5)).map_err(unavailable)?;
            if !self.target.sentinels.is_empty() {
                // A sentinel's answer may be stale (a demoted master resumed): write only where
                // the server itself says it is the master.
                c.set_read_timeout(Some(RESPONSE_TIMEOUT)).map_err(unavailable)?;
                let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut c).map_err(unavailable)?;
                let is_master = matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master");
                if !is_master {
                    return Err(StoreError::unavailable(
                        Store::Redis,
                        "the address the sentinels named is not the master (yet)",
                    ));
                }
            }
            c.set_read_timeout(Some(RESPONSE_TIMEOUT)).map_err(unavailable)?;
            c.set_write_timeout(Some(RESPONSE_TIMEOUT)).map_err(unavailable)?;
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
        r.map_err(|e| {
            let err = classify::classify(&e);
            if err.is_unavailable() || e.is_unrecoverable_error() {
                self.conn = None;
            }
            err
        })
    }

    /// The daily plan's generation and the message that last advanced it.
    pub fn generation(&mut self) -> StoreResult<(i64, i64)> {
        let key = format!("{}schd:gen", self.prefix);
        let (g, m): (Option<i64>, Option<i64>) =
            self.run(|c, _| redis::cmd("HMGET").arg(&key).arg("gen").arg("msg_id").query(c))?;
        Ok((g.unwrap_or(0), m.unwrap_or(0)))
    }
}

impl FlightAudit for RedisFlights {
    fn audit(&mut self) -> StoreResult<FlightMarks> {
        let keys = [
            "lease:epoch",
            "journal:pruned",
            "applied:seq",
            "applied:max",
            "applied:token",
            "applied:settled",
        ]
        .map(|k| format!("{}{k}", self.prefix));
        let got: Vec<Option<String>> = self.run(|c, _| redis::cmd("MGET").arg(&keys).query(c))?;
        let v = |k: usize| got.get(k).cloned().flatten().and_then(|x| x.parse::<i64>().ok());
        Ok(FlightMarks {
            epoch: v(0).unwrap_or(0),
            pruned: v(1),
            seq: v(2).unwrap_or(0),
            applied_max: v(3).unwrap_or(0),
            token: got.get(4).cloned().flatten(),
            settled_max: v(5).unwrap_or(0),
        })
    }

    fn journal_has(&mut self, ids: &[i64]) -> StoreResult<Vec<bool>> {
        let journal = format!("{}journal", self.prefix);
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(1000) {
            let got: Vec<Value> = self.run(|c, _| {
                let mut p = redis::pipe();
                chunk.iter().for_each(|m| {
                    p.hexists(&journal, *m);
                });
                query_bounded(c, &p, 0)
            })?;
            for v in got {
                out.push(parse::<bool>(v)?);
            }
        }
        Ok(out)
    }

    fn journal_ids(&mut self) -> StoreResult<Vec<i64>> {
        let journal = format!("{}journal", self.prefix);
        let keys: Vec<i64> = self.run(|c, _| redis::cmd("HKEYS").arg(&journal).query(c))?;
        let mut keys = keys;
        keys.sort_unstable();
        Ok(keys)
    }

    fn recorded(&mut self, ids: &[i64]) -> StoreResult<Vec<bool>> {
        let (journal, done) = (format!("{}journal", self.prefix), format!("{}journal:done", self.prefix));
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let got: Vec<Value> = self.run(|c, _| {
                let mut p = redis::pipe();
                chunk.iter().for_each(|m| {
                    p.hexists(&journal, *m);
                    p.zscore(&done, *m);
                });
                query_bounded(c, &p, 0)
            })?;
            let mut got = got.into_iter();
            while let (Some(entry), Some(mark)) = (got.next(), got.next()) {
                out.push(parse::<bool>(entry)? || parse::<Option<f64>>(mark)?.is_some());
            }
        }
        Ok(out)
    }

    fn settled_ids(&mut self) -> StoreResult<Vec<i64>> {
        let done = format!("{}journal:done", self.prefix);
        let mut ids: Vec<i64> = self.run(|c, _| redis::cmd("ZRANGE").arg(&done).arg(0).arg(-1).query(c))?;
        ids.sort_unstable();
        Ok(ids)
    }

    fn set_pruned(&mut self, id: i64) -> StoreResult<()> {
        let key = format!("{}journal:pruned", self.prefix);
        let mut cmds = vec![redis::Cmd::set(&key, id)];
        cmds.extend(self.journal_keys().iter().map(|k| redis::Cmd::expire(k, JOURNAL_TTL_SECS as i64)));
        self.fenced_write(&cmds)
    }

    /// Each transaction of the restore is fenced like an apply (#38): written only while no
    /// newer epoch than this handle's holds the flights, so a heal cut short by a takeover
    /// never writes over what the new holder's pump wrote since.
    fn restore(&mut self, r: &Restore, now: SystemTime) -> StoreResult<()> {
        self.known = None;
        let idx = format!("{}sodt", self.prefix);
        for chunk in r.flights.chunks(200).filter(|c| !c.is_empty()) {
            let cmds: Vec<redis::Cmd> =
                chunk.iter().flat_map(|(flid, f, sodt)| self.restore_flight(&idx, flid, f, *sodt)).collect();
            self.fenced_write(&cmds)?;
        }
        let (jkey, dkey) = (format!("{}journal", self.prefix), format!("{}journal:done", self.prefix));
        let top = r.journal.iter().map(|(m, _)| *m).max();
        let keys = self.journal_keys();
        for chunk in r.journal.chunks(500) {
            let mut cmds = Vec::with_capacity(2 * chunk.len() + keys.len());
            for (m, d) in chunk {
                let doc = serde_json::to_string(&Journal {
                    events: &d.events,
                    references: &d.references,
                    identity: "",
                })
                .map_err(|e| StoreError::rejected(Store::Redis, format!("decision not serialisable: {e}")))?;
                cmds.push(redis::Cmd::hset(&jkey, *m, doc));
                cmds.push(redis::Cmd::zadd(&dkey, *m, unix_millis(now)));
            }
            cmds.extend(keys.iter().map(|k| redis::Cmd::expire(k, JOURNAL_TTL_SECS as i64)));
            self.fenced_write(&cmds)?;
        }
        let gen = format!("{}schd:gen", self.prefix);
        let max = format!("{}applied:max", self.prefix);
        let seq = format!("{}applied:seq", self.prefix);
        let tkey = format!("{}applied:token", self.prefix);
        // A restore is a write a later rollback can lose, as an apply is.
        let mut cmds = vec![redis::Cmd::incr(&seq, 1), redis::Cmd::set(&tkey, crate::store::write_token())];
        if let Some((g, m)) = r.generation {
            cmds.push(redis::Cmd::hset_multiple(&gen, &[("gen", g), ("msg_id", m)]));
        }
        if let Some(top) = top {
            cmds.push(redis::Cmd::set(&max, top));
        }
        self.fenced_write(&cmds)?;
        self.durable()
    }

    fn generation_of(&mut self) -> StoreResult<(i64, i64)> {
        self.generation()
    }

    fn all_flights(&mut self) -> StoreResult<Vec<(String, FlightState, Option<i64>)>> {
        let mut flids = std::collections::BTreeSet::new();
        for what in ["flight", "fver"] {
            let pattern = format!("{}{what}:*", self.prefix);
            let skip = pattern.len() - 1;
            let keys: Vec<String> = self.run(|c, _| {
                redis::Commands::scan_match::<_, String>(c, &pattern)?.collect::<Result<Vec<String>, _>>()
            })?;
            flids.extend(keys.into_iter().map(|k| k[skip..].to_string()));
        }
        let flids: Vec<String> = flids.into_iter().collect();
        let mut out = Vec::with_capacity(flids.len());
        for chunk in flids.chunks(500) {
            out.extend(self.flights_of(chunk)?);
        }
        Ok(out)
    }

    fn flights_of(&mut self, flids: &[String]) -> StoreResult<Vec<(String, FlightState, Option<i64>)>> {
        if flids.is_empty() {
            return Ok(Vec::new());
        }
        let idx = format!("{}sodt", self.prefix);
        let need = RoundNeed { flids: flids.to_vec(), ..Default::default() };
        let got = self.prepare(&need, &[], SystemTime::UNIX_EPOCH)?.flights;
        let scores: Vec<Option<i64>> = self.run(|c, _| {
            let mut p = redis::pipe();
            flids.iter().for_each(|f| {
                p.zscore(&idx, f);
            });
            p.query(c)
        })?;
        Ok(flids
            .iter()
            .zip(scores)
            .filter_map(|(flid, sodt)| got.get(flid).map(|f| (flid.clone(), FlightState::clone(f), sodt)))
            .collect())
    }
}

impl RedisFlights {
    /// Runs `cmds` as one transaction while no newer epoch than this handle's holds the flights
    /// (`WATCH lease:epoch`, read it, `MULTI` … `EXEC`, again when the epoch moved meanwhile);
    /// `MSGX_FENCED` otherwise, nothing written. An unfenced handle (epoch 0) writes as it is.
    fn fenced_write(&mut self, cmds: &[redis::Cmd]) -> StoreResult<()> {
        let (ekey, epoch) = (format!("{}lease:epoch", self.prefix), self.epoch);
        let held = self.run(|c, _| {
            redis::transaction(c, &[&ekey], |c, p| {
                let held: i64 = redis::cmd("GET").arg(&ekey).query::<Option<i64>>(c)?.unwrap_or(0);
                if epoch > 0 && held > epoch {
                    return Ok(Some(Some(held)));
                }
                cmds.iter().for_each(|cmd| {
                    p.add_command(cmd.clone()).ignore();
                });
                Ok(p.query::<Option<()>>(c)?.map(|()| None))
            })
        })?;
        match held {
            Some(held) => Err(StoreError::fenced(
                Store::Redis,
                format!("MSGX_FENCED epoch {held} holds the flights, this heal has {epoch}; nothing more of it is written"),
            )),
            None => Ok(()),
        }
    }

    /// The commands that put one flight in place whole.
    fn restore_flight(&self, idx: &str, flid: &str, f: &FlightState, sodt: Option<i64>) -> Vec<redis::Cmd> {
        let (key, vkey) = (self.key("flight", flid), self.key("fver", flid));
        let mut cmds = vec![redis::Cmd::del(&key), redis::Cmd::del(&vkey)];
        if !f.fields.is_empty() {
            let kv: Vec<(&String, &String)> = f.fields.iter().collect();
            cmds.push(redis::Cmd::hset_multiple(&key, &kv));
        }
        let mut versions: Vec<(String, i64)> = f.versions.iter().map(|(k, v)| (k.clone(), *v)).collect();
        if f.deleted > 0 {
            versions.push(("~del".into(), f.deleted));
        }
        if !versions.is_empty() {
            cmds.push(redis::Cmd::hset_multiple(&vkey, &versions));
        }
        match sodt.filter(|_| f.exists()) {
            Some(k) => cmds.push(redis::Cmd::zadd(idx, flid, k)),
            None => cmds.push(redis::Cmd::zrem(idx, flid)),
        }
        if !f.exists() && !versions.is_empty() {
            cmds.push(redis::Cmd::expire(&vkey, TOMBSTONE_TTL_SECS as i64));
        }
        cmds
    }

    /// Deletes every key under the prefix: what a FLUSHALL does to msgx (tests, drills).
    pub fn drop_everything(&mut self) -> StoreResult<()> {
        self.known = None;
        let pattern = format!("{}*", self.prefix);
        let keys: Vec<String> = self.run(|c, _| redis::cmd("KEYS").arg(&pattern).query(c))?;
        if keys.is_empty() {
            return Ok(());
        }
        self.run(|c, _| redis::cmd("DEL").arg(&keys).query::<()>(c))
    }
}

/// Milliseconds since the epoch (the journal's done times).
fn unix_millis(t: SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl RedisFlights {
    /// The commands that record `ids` taken (`journal:done`, no time yet: `+inf`), and keep the
    /// journal's four keys' common time to live.
    fn taken_cmds(&self, ids: &[i64]) -> Vec<redis::Cmd> {
        let keys = self.journal_keys();
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(&keys[1]).arg("NX");
        for id in ids {
            zadd.arg("+inf").arg(*id);
        }
        let mut cmds = vec![zadd];
        cmds.extend(keys.iter().map(|k| redis::Cmd::expire(k, JOURNAL_TTL_SECS as i64)));
        cmds
    }

    /// The FORGET script for `msg_ids` at `now`.
    fn forget_cmd(&self, msg_ids: &[i64], now: SystemTime) -> redis::Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FORGET).arg(0).arg(&self.prefix).arg(unix_millis(now));
        cmd.arg(self.keep.as_millis() as i64).arg(JOURNAL_TTL_SECS).arg(msg_ids);
        cmd
    }
}

/// Runs an `EVALSHA` of `script`; a server that does not hold the script (restarted, a
/// replica promoted, `SCRIPT FLUSH`) is given it and asked again, as `Script::invoke` does.
fn evalsha<T: redis::FromRedisValue>(
    c: &mut Connection,
    script: &Script,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    match cmd.query(c) {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load(c)?;
            cmd.query(c)
        }
        r => r,
    }
}

fn parse<T: redis::FromRedisValue>(v: Value) -> StoreResult<T> {
    redis::from_redis_value(v)
        .map_err(|e| StoreError::rejected(Store::Redis, format!("unexpected reply: {e}")))
}

/// A flight as its two hashes' `HGETALL` replies give it.
fn flight_of(fields: Value, versions: Value) -> StoreResult<FlightState> {
    let fields: crate::handlers::Flight = parse(fields)?;
    let mut versions: std::collections::BTreeMap<String, i64> = parse(versions)?;
    let deleted = versions.remove(net::TOMBSTONE).unwrap_or(0);
    Ok(FlightState { fields, versions, deleted })
}

impl RedisFlights {
    /// Reads what a round needs that `known` lacks: the token (nothing known yet), the plan's
    /// generation (a snapshot), the flights the decisions change that were not read.
    fn know(&mut self, decisions: &[(i64, &Decision)]) -> StoreResult<()> {
        let fresh = self.known.is_none();
        let known = self.known.get_or_insert_with(Default::default);
        let missing: Vec<String> =
            net::unknown_flids(known, decisions).into_iter().map(str::to_string).collect();
        let generation = known.generation_msg.is_none() && decisions.iter().any(|(_, d)| d.snapshot);
        if fresh || generation {
            let (tkey, genkey) =
                (format!("{}applied:token", self.prefix), format!("{}schd:gen", self.prefix));
            let got: StoreResult<Vec<Value>> = self.run(|c, _| {
                let mut p = redis::pipe();
                p.get(&tkey);
                p.hget(&genkey, "msg_id");
                query_bounded(c, &p, 0)
            });
            let got = got.inspect_err(|_| self.known = None)?;
            let mut got = got.into_iter();
            let known = self.known.as_mut().expect("inserted above");
            if fresh {
                known.token = parse(got.next().unwrap_or(Value::Nil))?;
                self.seen.observe(known.token.as_deref());
            } else {
                got.next();
            }
            known.generation_msg =
                Some(parse::<Option<i64>>(got.next().unwrap_or(Value::Nil))?.unwrap_or(-1));
        }
        if !missing.is_empty() {
            let read = self.read_flights(&missing)?;
            let known = self.known.as_mut().expect("inserted above");
            known.flights.extend(missing.into_iter().zip(read.into_iter().map(Arc::new)));
        }
        Ok(())
    }

    /// `flids` read whole, in one round trip (an error forgets what was known).
    fn read_flights(&mut self, flids: &[String]) -> StoreResult<Vec<FlightState>> {
        if flids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<(String, String)> =
            flids.iter().map(|f| (self.key("flight", f), self.key("fver", f))).collect();
        let got: StoreResult<Vec<Value>> = self.run(|c, _| {
            let mut p = redis::pipe();
            for (f, v) in &keys {
                p.hgetall(f);
                p.hgetall(v);
            }
            query_bounded(c, &p, 0)
        });
        let got = got.inspect_err(|_| self.known = None)?;
        let mut got = got.into_iter();
        let mut out = Vec::with_capacity(flids.len());
        while let (Some(fields), Some(versions)) = (got.next(), got.next()) {
            out.push(flight_of(fields, versions)?);
        }
        if out.len() != flids.len() {
            self.known = None;
            return Err(StoreError::rejected(Store::Redis, "short pipeline reply"));
        }
        Ok(out)
    }

    /// The apply script's command for `round`, which left `known` as Redis will hold it (see
    /// [`APPLY`]).
    fn apply_cmd(
        &self,
        known: &net::Known,
        round: &net::Round,
        decisions: &[Applying<'_>],
        token: &str,
    ) -> StoreResult<redis::Cmd> {
        // The journal is most of the command: an event's payload, escaped, and its envelope.
        let events: usize =
            decisions.iter().flat_map(|a| &a.decision.events).map(|e| e.payload_json.len()).sum();
        let bytes = events * 5 / 4 + 160 * decisions.len() + 64 * round.flights.len() + 256;
        let mut cmd = redis::Cmd::with_capacity(16 + 2 * decisions.len() + 8 * round.flights.len(), bytes);
        cmd.arg("EVALSHA").arg(self.apply.get_hash()).arg(0);
        cmd.arg(&self.prefix).arg(self.epoch).arg(TOMBSTONE_TTL_SECS).arg(JOURNAL_TTL_SECS);
        cmd.arg(self.seen.list()).arg(token).arg(known.token.as_deref().unwrap_or(""));
        cmd.arg(round.generations).arg(round.generation_msg);
        cmd.arg(decisions.last().map_or(0, |a| a.msg_id)).arg(decisions.len());
        // Each document is written into one buffer, reused, and copied into the command.
        let mut doc = Vec::with_capacity(2048);
        for (a, applied) in decisions.iter().zip(&round.applied) {
            doc.clear();
            // A snapshot not newer than the plan's generation journals the empty decision.
            let (events, references) = match applied {
                true => (a.decision.events.as_slice(), a.decision.references.as_slice()),
                false => (&[][..], &[][..]),
            };
            serde_json::to_writer(&mut doc, &Journal { events, references, identity: a.identity })
                .map_err(|e| StoreError::rejected(Store::Redis, format!("decision not serialisable: {e}")))?;
            cmd.arg(a.msg_id).arg(doc.as_slice());
        }
        let named: Vec<&Applying<'_>> = decisions.iter().filter(|a| !a.identity.is_empty()).collect();
        cmd.arg(named.len());
        for a in named {
            cmd.arg(a.identity).arg(a.msg_id);
        }
        cmd.arg(round.flights.len());
        let mut w = net::Writes::default();
        for (flid, before) in &round.flights {
            net::diff(before, &known.flights[flid], &mut w);
            cmd.arg(flid.as_str()).arg(w.ttl.word());
            cmd.arg(w.set.len());
            for (f, v) in &w.set {
                cmd.arg(*f).arg(*v);
            }
            cmd.arg(w.gone.len());
            for f in &w.gone {
                cmd.arg(*f);
            }
            cmd.arg(w.versions.len());
            for (f, m) in &w.versions {
                cmd.arg(*f).arg(*m);
            }
        }
        cmd.arg(round.index_add.len());
        for (sodt, flid) in &round.index_add {
            cmd.arg(*sodt).arg(flid.as_str());
        }
        cmd.arg(round.index_remove.len());
        for flid in &round.index_remove {
            cmd.arg(flid.as_str());
        }
        Ok(cmd)
    }

    /// One try at the round on what is known: `None` when Redis was written since it was read
    /// (`MSGX_MOVED`, nothing written).
    fn apply_known(&mut self, decisions: &[Applying<'_>]) -> StoreResult<Option<Vec<bool>>> {
        // Played in place: what is known is put back only once Redis took the writes.
        let mut known = self.known.take().expect("known before a round is played");
        let round = net::play(&mut known, &Applying::pairs(decisions));
        let token = crate::store::write_token();
        let cmd = self.apply_cmd(&known, &round, decisions, &token)?;
        let result = self.run(|c, script| match evalsha::<i64>(c, script, &cmd) {
            Err(e) if classify::Refusal::of(&e.to_string()) == Some(classify::Refusal::Moved) => Ok(None),
            r => r.map(Some),
        });
        match &result {
            Ok(Some(_)) => self.seen.after(token.clone(), true),
            // Unavailable: it may have been written, or not. Refused or moved: it was not.
            Err(e) if e.is_unavailable() => self.seen.after(token.clone(), false),
            _ => {}
        }
        if let Ok(Some(_)) = result {
            known.token = Some(token);
            if round.generations > 0 {
                known.generation_msg = Some(round.generation_msg);
            }
            self.known = Some(known);
        }
        Ok(result?.map(|_| round.applied))
    }
}

/// The parts of a round's read (`FlightStore::prepare`).
impl RedisFlights {
    /// A round's one pipeline: what PostgreSQL now holds (`told`: replies skipped), then, when
    /// the round asks (`reads`: its need and the flights not known), the token, the journal,
    /// each flight and its versions, and a snapshot's generation and window.
    fn round_reads(&self, told: &[redis::Cmd], reads: Option<(&RoundNeed, &[&String])>) -> redis::Pipeline {
        let mut p = redis::pipe();
        for cmd in told {
            p.add_command(cmd.clone());
        }
        let Some((need, unread)) = reads else { return p };
        p.get(format!("{}applied:token", self.prefix));
        if !need.msg_ids.is_empty() {
            p.cmd("HMGET").arg(format!("{}journal", self.prefix)).arg(&need.msg_ids);
        }
        if !need.identities.is_empty() {
            p.cmd("HMGET").arg(format!("{}journal:identity", self.prefix)).arg(&need.identities);
        }
        for f in unread {
            p.hgetall(self.key("flight", f));
            p.hgetall(self.key("fver", f));
        }
        if let Some((a, b)) = need.window {
            p.hget(format!("{}schd:gen", self.prefix), "msg_id");
            p.zrangebyscore(format!("{}sodt", self.prefix), a, b);
        }
        p
    }

    /// The round's flights — those it read, and those known from the last round while Redis
    /// still holds the token they stand under (else read again) — each that holds something,
    /// shared with what is kept as known (a state is copied only where the round changes one
    /// that is still shared).
    fn hand_flights(
        &mut self,
        mut known: net::Known,
        token: Option<String>,
        window: bool,
        cached: Vec<&String>,
        mut read: Vec<(String, Arc<FlightState>)>,
    ) -> StoreResult<FlightView> {
        let mut flights = FlightView::new();
        let mut hand = |flid: &String, f: &Arc<FlightState>| {
            if !f.fields.is_empty() || !f.versions.is_empty() || f.deleted > 0 {
                flights.insert(flid.clone(), Arc::clone(f));
            }
        };
        if token != known.token {
            // Written since: what was known is not what Redis holds.
            let generation_msg = known.generation_msg.filter(|_| window);
            known = net::Known { token, generation_msg, flights: HashMap::new() };
            let cached: Vec<String> = cached.into_iter().cloned().collect();
            let again = self.read_flights(&cached)?;
            read.extend(cached.into_iter().zip(again.into_iter().map(Arc::new)));
        } else {
            for flid in cached {
                hand(flid, known.flights.get(flid).expect("partitioned above"));
            }
        }
        for (flid, f) in read {
            hand(&flid, &f);
            known.flights.insert(flid, f);
        }
        self.known = Some(known);
        Ok(flights)
    }
}

impl FlightStore for RedisFlights {
    /// Flights the last read or apply left known are not read again while Redis still holds
    /// the token they stand under (`net::lasting`); the token is read first in the same round
    /// trip, and when it moved they are read in a second one.
    fn prepare(&mut self, need: &RoundNeed, forget: &[i64], now: SystemTime) -> StoreResult<Prepared> {
        let asks = !need.msg_ids.is_empty() || !need.flids.is_empty() || need.window.is_some();
        if !asks && forget.is_empty() && need.taken.is_empty() {
            return Ok(Prepared::default()); // nothing to ask: an empty pipeline is refused
        }
        let mut known = self.known.take().unwrap_or_default();
        if known.flights.len() > net::KNOWN_FLIGHTS_MAX {
            known.flights.clear(); // bounded: this round reads its flights whole
        }
        let (unread, cached): (Vec<&String>, Vec<&String>) =
            need.flids.iter().partition(|f| !known.flights.get(*f).is_some_and(|f| net::lasting(f)));
        // One round trip: the journal entries PostgreSQL now holds marked done, then the token
        // the flights stand under (read first: a write after it moves it), the round's journal,
        // the flights not known with their versions, and a snapshot's generation and window.
        let told = [
            (!forget.is_empty()).then(|| vec![self.forget_cmd(forget, now)]),
            (!need.taken.is_empty()).then(|| self.taken_cmds(&need.taken)),
        ];
        let told: Vec<redis::Cmd> = told.into_iter().flatten().flatten().collect();
        let p = self.round_reads(&told, asks.then_some((need, unread.as_slice())));
        let values: Vec<Value> = self.run(|c, _| query_bounded(c, &p, told.len()))?;
        if !asks {
            self.known = Some(known);
            return Ok(Prepared::default()); // only told of what PostgreSQL holds
        }
        let mut values = values.into_iter();
        let mut next =
            || values.next().ok_or_else(|| StoreError::rejected(Store::Redis, "short pipeline reply"));
        let token: Option<String> = parse(next()?)?;
        self.seen.observe(token.as_deref());
        let applied = match need.msg_ids.is_empty() {
            true => HashMap::new(),
            false => journal_entries(&need.msg_ids, parse(next()?)?)?,
        };
        let owners = match need.identities.is_empty() {
            true => HashMap::new(),
            false => {
                let held: Vec<Option<i64>> = parse(next()?)?;
                need.identities.iter().cloned().zip(held).filter_map(|(i, m)| Some((i, m?))).collect()
            }
        };
        let mut read = Vec::with_capacity(unread.len());
        for flid in &unread {
            let (fields, versions) = (next()?, next()?);
            read.push(((*flid).clone(), Arc::new(flight_of(fields, versions)?)));
        }
        let window = match need.window {
            Some(_) => {
                known.generation_msg = Some(parse::<Option<i64>>(next()?)?.unwrap_or(-1));
                parse(next()?)?
            }
            None => Vec::new(),
        };
        let flights = self.hand_flights(known, token, need.window.is_some(), cached, read)?;
        if !applied.is_empty() {
            // Decisions an earlier attempt applied are reused, not applied again: they must be
            // on the replicas too before their messages are recorded SUCCEEDED.
            self.durable()?;
        }
        Ok(Prepared { applied, flights, window, owners })
    }

    /// The round is played on what the last read found (`net`), read first where it lacks a
    /// flight; the script writes only the difference. Written since that read (`MSGX_MOVED`),
    /// it is read again and tried once more.
    fn apply(&mut self, decisions: &[Applying<'_>]) -> StoreResult<Vec<bool>> {
        if decisions.is_empty() {
            return Ok(Vec::new());
        }
        debug_assert!(
            decisions.windows(2).all(|w| w[0].msg_id < w[1].msg_id),
            "a round is applied in MSG_ID order"
        );
        for _ in 0..2 {
            self.know(&Applying::pairs(decisions))?;
            if let Some(flags) = self.apply_known(decisions)? {
                self.durable()?;
                return Ok(flags);
            }
            // Nothing was written: what was known is not what Redis holds.
            self.known = None;
        }
        Err(StoreError::unavailable(
            Store::Redis,
            "MSGX_MOVED redis was written since each of two reads of the round's flights; the round is tried again",
        ))
    }

    fn forget(&mut self, msg_ids: &[i64], now: SystemTime) -> StoreResult<()> {
        let cmd = self.forget_cmd(msg_ids, now);
        self.run(|c, _| cmd.query::<i64>(c)).map(|_| ())
    }
}
