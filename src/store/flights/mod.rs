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
//!
//! Files: [`scripts`] (the Lua scripts, each beside its typed argument encoder), [`cache`] (the
//! flights known between rounds, and a round's one read), [`audit`] (what the sentinel reads,
//! and a heal's fenced restore), `net` (a round played on the flights last read), [`classify`]
//! (every refusal a script or the server answers, typed).

mod audit;
mod cache;
pub mod classify;
mod connect;
mod net;
mod scripts;

use scripts::{journal_entries, Journal, APPLY, CLAIM};

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

/// How long a Redis call may go unanswered before the store counts as unavailable (#21 item
/// 11): a server that hangs (frozen, a paused VM) is an outage from its first seconds. The apply
/// script of a whole round runs in milliseconds; a healthy server never comes near it.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

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
    /// the sentinels name for the master now; the password file and TLS files read now (#64).
    fn client_now(&self) -> StoreResult<Client> {
        let tls_on = connect::tls_on(&self.target);
        let mut info = self.client.get_connection_info().clone();
        if !self.target.sentinels.is_empty() {
            let (host, port) = connect::ask_sentinels(&self.target)?;
            info = info.set_addr(connect::addr(host, port, tls_on));
        }
        connect::client(info, &self.target, tls_on)
    }

    /// How connections to this Redis are secured (#64).
    pub fn security(&self) -> String {
        connect::describe(&self.target)
    }

    /// The host of `redis.url` (or the sentinels'), for the plaintext-off-loopback warning.
    pub fn hosts(&self) -> Vec<String> {
        if self.target.sentinels.is_empty() {
            return match self.client.get_connection_info().addr() {
                redis::ConnectionAddr::Tcp(h, _) | redis::ConnectionAddr::TcpTls { host: h, .. } => {
                    vec![h.clone()]
                }
                _ => vec!["localhost".into()],
            };
        }
        self.target
            .sentinels
            .iter()
            .map(|s| s.rsplit_once(':').map_or(s.clone(), |(h, _)| h.to_string()))
            .collect()
    }

    fn conn(&mut self) -> StoreResult<&mut Connection> {
        if self.conn.is_none() {
            // A certificate refused will not pass by itself: untrusted, an ERROR at once (#64).
            let unavailable = connect::failed;
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

/// Milliseconds since the epoch (the journal's done times).
fn unix_millis(t: SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
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

/// Whose decision Redis journals under each identity (`HMGET journal:identity`'s reply in
/// their order); an identity none holds is left out.
fn owners_of(identities: &[String], held: Vec<Option<i64>>) -> HashMap<String, i64> {
    identities.iter().cloned().zip(held).filter_map(|(i, m)| Some((i, m?))).collect()
}

/// A flight as its two hashes' `HGETALL` replies give it.
fn flight_of(fields: Value, versions: Value) -> StoreResult<FlightState> {
    let fields: crate::handlers::Flight = parse(fields)?;
    let mut versions: std::collections::BTreeMap<String, i64> = parse(versions)?;
    let deleted = versions.remove(net::TOMBSTONE).unwrap_or(0);
    Ok(FlightState { fields, versions, deleted })
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
            false => owners_of(&need.identities, parse(next()?)?),
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
        let generation_msg = need.window.and(known.generation_msg);
        let flights = self.hand_flights(known, token, need.window.is_some(), cached, read)?;
        if !applied.is_empty() {
            // Decisions an earlier attempt applied are reused, not applied again: they must be
            // on the replicas too before their messages are recorded SUCCEEDED.
            self.durable()?;
        }
        Ok(Prepared { applied, flights, window, generation_msg, owners })
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
        let pairs = Applying::pairs(decisions);
        for _ in 0..2 {
            self.know(&pairs)?;
            if let Some(flags) = self.apply_known(decisions, &pairs)? {
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

/// The fence is the `lease:epoch` key the apply script checks (#20).
impl crate::ports::FlightsFence for RedisFlights {
    fn claim(&mut self, epoch: i64) -> StoreResult<()> {
        let prefix = self.prefix.clone();
        self.run(|c, _| Script::new(CLAIM).arg(&prefix).arg(epoch).invoke::<i64>(c)).map(|_| ())?;
        self.durable()
    }

    fn epoch_held(&mut self) -> StoreResult<i64> {
        let key = format!("{}lease:epoch", self.prefix);
        self.run(|c, _| redis::cmd("GET").arg(&key).query::<Option<i64>>(c)).map(|e| e.unwrap_or(0))
    }
}
