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
//!   (I2), kept `redis.journal-keep` after PostgreSQL holds the outcome; the whole hash expires
//!   a week after the last apply;
//! - `{prefix}journal:done`, `{prefix}journal:pruned` — when PostgreSQL held each journalled
//!   outcome, and the highest MSG_ID whose entry was dropped `redis.journal-keep` later (#20);
//! - `{prefix}applied:seq`, `applied:max`, `applied:token` — writes so far, the highest MSG_ID
//!   applied, and the token of the last write, by which a Redis that went back is told (#20);
//! - `{prefix}lease:epoch` — the newest lease epoch that wrote here (the fence, PRE-5).
//!
//! A round's decisions are applied by ONE Lua script: flights, versions, index, generation and
//! journal change together or not at all, and not at all when a newer instance has written
//! here. Only the process thread writes here (I5). The script names its keys from the prefix,
//! so it needs a standalone Redis (not a cluster).

pub mod classify;

use crate::error::Store;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use redis::{Client, Connection, Script, Value};

use crate::error::StoreError;
use crate::handlers::{Decision, FlightState};
use crate::ports::{FlightAudit, FlightMarks, FlightStore, Prepared, Restore, RoundNeed, StoreResult};

/// How long the journal is kept after the last apply (an instance stopped for good).
const JOURNAL_TTL_SECS: u64 = 7 * 86_400;
/// How long the versions of a deleted flight are kept (its tombstone).
const TOMBSTONE_TTL_SECS: u64 = 7 * 86_400;

/// Applies a round (ARGV: prefix, epoch, tombstone ttl, journal ttl, the tokens this handle
/// accepts as Redis's current `applied:token` (comma-separated; empty: none seen yet), the token
/// of this write, n, then n × (msg_id, snapshot 1/0, journal doc), then the round's flight
/// changes grouped by flight (#23): `[[flid, [[decision index, delete 1/0, sodt|null, [field,
/// value, …], [cleared field, …]], …]], …]`, each flight's changes in MSG_ID order. The journal
/// doc (the decision's events and references) is stored as given, never decoded. Returns one
/// 1/0 per decision — 0 for a snapshot not newer than the plan's generation, which changes
/// nothing and is journalled as the empty decision. A current token this handle did not write
/// means Redis went back to another history (#20): nothing is written.
///
/// Each flight is read once and written once per round, whatever the number of its messages:
/// its changes are played in order on a copy in the script (the rules are
/// `FlightState::apply`'s, field by field, as when each change was written on its own), then
/// the net fields, versions, tombstone and time to live are written; the daily plan's index
/// is written for the whole round in one command. What is read of a flight is what its
/// changes name (their fields' versions and whether they exist, the tombstone, the field
/// count), all of it only when one of them deletes the flight.
const APPLY: &str = r#"
local prefix, epoch, tomb, jttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local saw, token, n = ARGV[5], ARGV[6], tonumber(ARGV[7])
local seqkey, tkey = prefix .. 'applied:seq', prefix .. 'applied:token'
if saw ~= '' then
  local cur, ok = redis.call('GET', tkey), false
  for t in string.gmatch(saw, '[^,]+') do
    if t == cur then ok = true end
  end
  if not ok then
    return redis.error_reply('MSGX_FORGOT redis holds another history than this instance wrote (' .. (redis.call('GET', seqkey) or '0') .. ' applies)')
  end
end
if epoch > 0 then
  local ekey = prefix .. 'lease:epoch'
  local held = tonumber(redis.call('GET', ekey) or '0')
  if held > epoch then
    return redis.error_reply('MSGX_FENCED epoch ' .. held .. ' holds the flights, this instance has ' .. epoch)
  end
  if held < epoch then redis.call('SET', ekey, epoch) end
end
local idx, genkey, jkey = prefix .. 'sodt', prefix .. 'schd:gen', prefix .. 'journal'
-- The decisions: a snapshot applies only when newer than the plan's generation.
local out, journal, live, ms, mtext = {}, {}, {}, {}, {}
local top = tonumber(redis.call('GET', prefix .. 'applied:max') or '0')
local last = tonumber(redis.call('HGET', genkey, 'msg_id') or '-1')
local gens = 0
for i = 1, n do
  local b = 7 + (i - 1) * 3
  local m, snap, doc = tonumber(ARGV[b + 1]), ARGV[b + 2] == '1', ARGV[b + 3]
  local applied = 1
  if snap then
    if last >= m then applied = 0 else last, gens = m, gens + 1 end
  end
  if applied == 0 then doc = '{"events":[],"references":[]}' end
  -- The MSG_ID as a number to compare and as the text it came as to write: a Lua number
  -- handed to a command is formatted with printf again.
  live[i], ms[i], mtext[i], out[i] = applied == 1, m, ARGV[b + 1], applied
  journal[#journal + 1] = m
  journal[#journal + 1] = doc
  if m > top then top = m end
end
-- The flights, each played on a copy (`ver` its versions, `have` its fields, `nhave` how
-- many it has), then the net writes. Only the fields the changes name are read, unless one
-- deletes the flight: a delete weighs every field's version.
local zadd, zrem = {}, {}
for _, g in ipairs(cjson.decode(ARGV[8 + n * 3])) do
  local flid, ops = g[1], g[2]
  local key, vkey = prefix .. 'flight:' .. flid, prefix .. 'fver:' .. flid
  local whole, named, names = false, {}, {}
  for _, o in ipairs(ops) do
    if live[o[1]] then
      if o[2] == 1 then whole = true end
      local sets = o[4]
      for j = 1, #sets, 2 do
        if not named[sets[j]] then named[sets[j]] = true; names[#names + 1] = sets[j] end
      end
      for _, f in ipairs(o[5]) do
        if not named[f] then named[f] = true; names[#names + 1] = f end
      end
    end
  end
  local ver, have, nhave, deleted = {}, {}, 0, 0
  if whole then
    local vv = redis.call('HGETALL', vkey)
    for k = 1, #vv, 2 do ver[vv[k]] = tonumber(vv[k + 1]) end
    deleted = ver['~del'] or 0
    ver['~del'] = nil
    for _, f in ipairs(redis.call('HKEYS', key)) do have[f] = true; nhave = nhave + 1 end
  else
    local vv = redis.call('HMGET', vkey, '~del', unpack(names))
    deleted = tonumber(vv[1]) or 0
    nhave = redis.call('HLEN', key)
    if #names > 0 then
      local hv = redis.call('HMGET', key, unpack(names))
      for k, f in ipairs(names) do
        if vv[k + 1] then ver[f] = tonumber(vv[k + 1]) end
        if hv[k] then have[f] = true end
      end
    end
  end
  local fset, vset, delmark, ttl, index = {}, {}, nil, nil, nil
  for _, o in ipairs(ops) do
    if live[o[1]] then
      local m, mt, del, sodt, sets, clears = ms[o[1]], mtext[o[1]], o[2], o[3], o[4], o[5]
      local removed, wrote = del == 1, false
      if del == 1 then
        for f in pairs(have) do
          if (ver[f] or 0) <= m then have[f] = nil; nhave = nhave - 1; fset[f] = false end
        end
        if m > deleted then deleted, delmark = m, mt end
      end
      if deleted <= m then
        for j = 1, #sets, 2 do
          local f = sets[j]
          if (ver[f] or 0) <= m then
            fset[f], ver[f], vset[f], wrote = sets[j + 1], m, mt, true
            if not have[f] then have[f] = true; nhave = nhave + 1 end
          end
        end
        for _, f in ipairs(clears) do
          if (ver[f] or 0) <= m then
            fset[f], ver[f], vset[f], removed = false, m, mt, true
            if have[f] then have[f] = nil; nhave = nhave - 1 end
          end
        end
      end
      -- The daily plan's index holds the flights that exist (a late message for a deleted
      -- flight does not bring it back there); only a change that removed something can leave
      -- the flight empty, and only a flight that was deleted before has versions with a time
      -- to live.
      if nhave == 0 then
        index = false
        if removed then ttl = 'expire' end
      else
        if deleted > 0 and wrote then ttl = 'persist' end
        if sodt ~= cjson.null and sodt ~= false then index = sodt end
      end
    end
  end
  local hs, hd, vs = {}, {}, {}
  for f, v in pairs(fset) do
    if v == false then hd[#hd + 1] = f else hs[#hs + 1] = f; hs[#hs + 1] = v end
  end
  for f, m in pairs(vset) do vs[#vs + 1] = f; vs[#vs + 1] = m end
  if delmark ~= nil then vs[#vs + 1] = '~del'; vs[#vs + 1] = delmark end
  if #hs > 0 then redis.call('HSET', key, unpack(hs)) end
  if #hd > 0 then redis.call('HDEL', key, unpack(hd)) end
  if #vs > 0 then redis.call('HSET', vkey, unpack(vs)) end
  if ttl == 'expire' then redis.call('EXPIRE', vkey, tomb) elseif ttl == 'persist' then redis.call('PERSIST', vkey) end
  if index == false then
    zrem[#zrem + 1] = flid
  elseif index ~= nil then
    zadd[#zadd + 1] = index
    zadd[#zadd + 1] = flid
  end
end
for k = 1, #zadd, 1000 do
  redis.call('ZADD', idx, unpack(zadd, k, math.min(k + 999, #zadd)))
end
for k = 1, #zrem, 1000 do
  redis.call('ZREM', idx, unpack(zrem, k, math.min(k + 999, #zrem)))
end
if gens > 0 then
  redis.call('HINCRBY', genkey, 'gen', gens)
  redis.call('HSET', genkey, 'msg_id', last)
end
for k = 1, #journal, 1000 do
  redis.call('HSET', jkey, unpack(journal, k, math.min(k + 999, #journal)))
end
redis.call('EXPIRE', jkey, jttl)
redis.call('SET', prefix .. 'applied:max', top)
redis.call('SET', tkey, token)
redis.call('INCR', seqkey)
return out
"#;

/// Journal entries PostgreSQL now holds the outcome of are done (ARGV: prefix, now ms, keep ms,
/// journal ttl, msg_id…); those done longer than the keep window go, at most 1000 a call, and
/// `journal:pruned` keeps the highest MSG_ID ever dropped: every entry above it is still there
/// (the evidence the consistency check and the PostgreSQL heal stand on, #20).
const FORGET: &str = r#"
local prefix, now, keep, jttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local jkey, dkey, pkey = prefix .. 'journal', prefix .. 'journal:done', prefix .. 'journal:pruned'
local marks = {}
for i = 5, #ARGV do marks[#marks + 1] = now; marks[#marks + 1] = ARGV[i] end
for k = 1, #marks, 1000 do
  redis.call('ZADD', dkey, 'NX', unpack(marks, k, math.min(k + 999, #marks)))
end
local old = redis.call('ZRANGEBYSCORE', dkey, '-inf', now - keep, 'LIMIT', 0, 1000)
if #old > 0 then
  redis.call('HDEL', jkey, unpack(old))
  redis.call('ZREM', dkey, unpack(old))
  local top = tonumber(redis.call('GET', pkey) or '0')
  for _, m in ipairs(old) do
    local v = tonumber(m)
    if v > top then top = v end
  end
  redis.call('SET', pkey, top)
end
if redis.call('EXISTS', dkey) == 1 then redis.call('EXPIRE', dkey, jttl) end
return #old
"#;

/// What the journal keeps of a decision: what a retry must emit again (I2). The flight
/// changes are in Redis already.
#[derive(serde::Serialize)]
struct Journal<'a> {
    events: &'a [crate::domain::NewEvent],
    references: &'a [crate::handlers::RefChange],
}

/// One flight change in the script's form: the decision's index (1-based), delete 1/0, sodt,
/// `[field, value, …]`, `[cleared field, …]`.
type ScriptChange<'a> = (usize, u8, Option<i64>, Vec<&'a str>, &'a [String]);

/// The round's flight changes grouped by flight, each flight's in decision (MSG_ID) order: the
/// script reads and writes each flight once (#23). Serialised from borrowed tuples, not through
/// a `serde_json::Value` tree.
fn flight_groups(decisions: &[(i64, &Decision)]) -> Result<String, serde_json::Error> {
    let mut groups: Vec<(&str, Vec<ScriptChange<'_>>)> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for (i, (_, d)) in decisions.iter().enumerate() {
        for c in &d.flights {
            let sets: Vec<&str> = c.set.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]).collect();
            let g = *at.entry(c.flid.as_str()).or_insert_with(|| {
                groups.push((c.flid.as_str(), Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push((i + 1, u8::from(c.delete), c.sodt, sets, &c.clear));
        }
    }
    serde_json::to_string(&groups)
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
        let keys = ["lease:epoch", "journal:pruned", "applied:seq", "applied:max", "applied:token"]
            .map(|k| format!("{}{k}", self.prefix));
        let got: Vec<Option<String>> = self.run(|c, _| redis::cmd("MGET").arg(&keys).query(c))?;
        let v = |k: usize| got.get(k).cloned().flatten().and_then(|x| x.parse::<i64>().ok());
        Ok(FlightMarks {
            epoch: v(0).unwrap_or(0),
            pruned: v(1),
            seq: v(2).unwrap_or(0),
            applied_max: v(3).unwrap_or(0),
            token: got.get(4).cloned().flatten(),
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

    fn set_pruned(&mut self, id: i64) -> StoreResult<()> {
        let key = format!("{}journal:pruned", self.prefix);
        self.run(|c, _| redis::cmd("SET").arg(&key).arg(id).query::<()>(c))
    }

    fn restore(&mut self, r: &Restore, now: SystemTime) -> StoreResult<()> {
        let idx = format!("{}sodt", self.prefix);
        for chunk in r.flights.chunks(200).filter(|c| !c.is_empty()) {
            let cmds: Vec<redis::Cmd> =
                chunk.iter().flat_map(|(flid, f, sodt)| self.restore_flight(&idx, flid, f, *sodt)).collect();
            self.run(|c, _| {
                let mut p = redis::pipe();
                p.atomic();
                cmds.iter().for_each(|cmd| {
                    p.add_command(cmd.clone()).ignore();
                });
                p.query::<()>(c)
            })?;
        }
        let (jkey, dkey) = (format!("{}journal", self.prefix), format!("{}journal:done", self.prefix));
        let top = r.journal.iter().map(|(m, _)| *m).max();
        for chunk in r.journal.chunks(500) {
            let mut docs = Vec::with_capacity(chunk.len());
            for (m, d) in chunk {
                let doc = serde_json::to_string(&Journal { events: &d.events, references: &d.references })
                    .map_err(|e| {
                        StoreError::rejected(Store::Redis, format!("decision not serialisable: {e}"))
                    })?;
                docs.push((*m, doc));
            }
            self.run(|c, _| {
                let mut p = redis::pipe();
                for (m, doc) in &docs {
                    p.hset(&jkey, *m, doc).ignore();
                    p.zadd(&dkey, *m, unix_millis(now)).ignore();
                }
                p.expire(&jkey, JOURNAL_TTL_SECS as i64).ignore();
                p.expire(&dkey, JOURNAL_TTL_SECS as i64).ignore();
                p.query::<()>(c)
            })?;
        }
        let gen = format!("{}schd:gen", self.prefix);
        let max = format!("{}applied:max", self.prefix);
        let seq = format!("{}applied:seq", self.prefix);
        let tkey = format!("{}applied:token", self.prefix);
        self.run(|c, _| {
            let mut p = redis::pipe();
            // A restore is a write a later rollback can lose, as an apply is.
            p.cmd("INCR").arg(&seq).ignore();
            p.cmd("SET").arg(&tkey).arg(crate::store::write_token()).ignore();
            if let Some((g, m)) = r.generation {
                p.hset_multiple(&gen, &[("gen", g), ("msg_id", m)]).ignore();
            }
            if let Some(top) = top {
                p.cmd("SET").arg(&max).arg(top).ignore();
            }
            p.query::<()>(c)
        })?;
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
        let idx = format!("{}sodt", self.prefix);
        let mut out = Vec::with_capacity(flids.len());
        for chunk in flids.chunks(500) {
            let need = RoundNeed { msg_ids: Vec::new(), flids: chunk.to_vec(), window: None };
            let got = self.prepare(&need, &[], SystemTime::UNIX_EPOCH)?.flights;
            let scores: Vec<Option<i64>> = self.run(|c, _| {
                let mut p = redis::pipe();
                chunk.iter().for_each(|f| {
                    p.zscore(&idx, f);
                });
                p.query(c)
            })?;
            for (flid, sodt) in chunk.iter().zip(scores) {
                if let Some(f) = got.get(flid) {
                    out.push((flid.clone(), f.clone(), sodt));
                }
            }
        }
        Ok(out)
    }
}

impl RedisFlights {
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

impl FlightStore for RedisFlights {
    fn prepare(&mut self, need: &RoundNeed, forget: &[i64], now: SystemTime) -> StoreResult<Prepared> {
        if need.msg_ids.is_empty() && need.flids.is_empty() && need.window.is_none() && forget.is_empty() {
            return Ok(Prepared::default()); // nothing to ask: an empty pipeline is refused
        }
        let journal = format!("{}journal", self.prefix);
        let flight_keys: Vec<(String, String)> =
            need.flids.iter().map(|f| (self.key("flight", f), self.key("fver", f))).collect();
        let idx = format!("{}sodt", self.prefix);
        // One round trip: the journal entries PostgreSQL now holds marked done, then the round's
        // journal, every flight with its versions, and a snapshot's window.
        let forgetting = (!forget.is_empty()).then(|| self.forget_cmd(forget, now));
        let mut values: Vec<Value> = self.run(|c, _| {
            let mut p = redis::pipe();
            if let Some(cmd) = &forgetting {
                p.add_command(cmd.clone());
            }
            if !need.msg_ids.is_empty() {
                p.cmd("HMGET").arg(&journal).arg(&need.msg_ids);
            }
            for (f, v) in &flight_keys {
                p.hgetall(f);
                p.hgetall(v);
            }
            if let Some((a, b)) = need.window {
                p.zrangebyscore(&idx, a, b);
            }
            query_bounded(c, &p, usize::from(!forget.is_empty()))
        })?;
        let window: Vec<String> = match need.window {
            Some(_) => parse(
                values.pop().ok_or_else(|| StoreError::rejected(Store::Redis, "short pipeline reply"))?,
            )?,
            None => Vec::new(),
        };
        let mut values = values.into_iter();
        let mut applied = HashMap::new();
        if !need.msg_ids.is_empty() {
            let texts: Vec<Option<String>> = parse(values.next().unwrap_or(Value::Nil))?;
            for (m, text) in need.msg_ids.iter().zip(texts) {
                if let Some(text) = text {
                    let d: Decision = serde_json::from_str(&text).map_err(|e| {
                        StoreError::rejected(Store::Redis, format!("journal of msg_id={m} unreadable: {e}"))
                    })?;
                    applied.insert(*m, d);
                }
            }
        }
        let mut flights = std::collections::BTreeMap::new();
        for flid in &need.flids {
            let fields: crate::handlers::Flight = parse(values.next().unwrap_or(Value::Nil))?;
            let mut versions: std::collections::BTreeMap<String, i64> =
                parse(values.next().unwrap_or(Value::Nil))?;
            let deleted = versions.remove("~del").unwrap_or(0);
            if !fields.is_empty() || !versions.is_empty() || deleted > 0 {
                flights.insert(flid.clone(), FlightState { fields, versions, deleted });
            }
        }
        if !applied.is_empty() {
            // Decisions an earlier attempt applied are reused, not applied again: they must be
            // on the replicas too before their messages are recorded SUCCEEDED.
            self.durable()?;
        }
        Ok(Prepared { applied, flights, window })
    }

    fn apply(&mut self, decisions: &[(i64, &Decision)]) -> StoreResult<Vec<bool>> {
        if decisions.is_empty() {
            return Ok(Vec::new());
        }
        debug_assert!(decisions.windows(2).all(|w| w[0].0 < w[1].0), "a round is applied in MSG_ID order");
        let unserialisable = |e: serde_json::Error| {
            StoreError::rejected(Store::Redis, format!("decision not serialisable: {e}"))
        };
        let docs: Vec<(i64, bool, String)> = decisions
            .iter()
            .map(|(m, d)| {
                serde_json::to_string(&Journal { events: &d.events, references: &d.references })
                    .map(|j| (*m, d.snapshot, j))
            })
            .collect::<Result<_, _>>()
            .map_err(unserialisable)?;
        let flights = flight_groups(decisions).map_err(unserialisable)?;
        let prefix = self.prefix.clone();
        let (epoch, saw, token) = (self.epoch, self.seen.0.join(","), crate::store::write_token());
        // The command is built once, straight from the documents: a `ScriptInvocation` would
        // copy every argument into a vector of its own and then again into the command.
        let bytes = docs.iter().map(|(_, _, j)| j.len() + 24).sum::<usize>() + flights.len() + 256;
        let result: StoreResult<Vec<i64>> = self.run(|c, script| {
            let mut cmd = redis::Cmd::with_capacity(10 + 3 * docs.len(), bytes);
            cmd.arg("EVALSHA").arg(script.get_hash()).arg(0);
            cmd.arg(&prefix).arg(epoch).arg(TOMBSTONE_TTL_SECS).arg(JOURNAL_TTL_SECS);
            cmd.arg(&saw).arg(&token).arg(docs.len());
            for (m, snapshot, journal) in &docs {
                cmd.arg(*m).arg(if *snapshot { "1" } else { "0" }).arg(journal.as_str());
            }
            cmd.arg(&flights);
            evalsha(c, script, &cmd)
        });
        // Refused: nothing written. Unavailable: it may have been, or not.
        match &result {
            Ok(_) => self.seen.after(token, true),
            Err(e) if e.is_unavailable() => self.seen.after(token, false),
            Err(_) => {}
        }
        let flags = result?;
        self.durable()?;
        Ok(flags.into_iter().map(|f| f == 1).collect())
    }

    fn forget(&mut self, msg_ids: &[i64], now: SystemTime) -> StoreResult<()> {
        let cmd = self.forget_cmd(msg_ids, now);
        self.run(|c, _| cmd.query::<i64>(c)).map(|_| ())
    }
}
