//! The Lua scripts the adapter runs — APPLY, FORGET, CLAIM — each beside the encoder of its
//! arguments, and the journal's documents they store.

use super::*;

/// Applies a round's net writes, worked out by the adapter from what it read (`net`, #23).
/// ARGV: the header ([`ApplyHeader`], named in the script's first line in its order), then
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
pub(super) const APPLY: &str = r#"
local prefix, epoch, tomb, jttl, saw, token, read, gens, last, top = unpack(ARGV, 1, 10)
epoch, tomb, jttl, gens = tonumber(epoch), tonumber(tomb), tonumber(jttl), tonumber(gens)
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
    -- '-' (NO_HISTORY): the handle saw a Redis that held none, and accepts one that still does.
    if t == cur or (t == '-' and not cur) then ok = true end
  end
  if not ok then
    return redis.error_reply('MSGX_FORGOT redis holds another history than this instance wrote (' .. (redis.call('GET', seqkey) or '0') .. ' applies)')
  end
end
if epoch > 0 and held < epoch then redis.call('SET', ekey, epoch) end
if (cur or '') ~= read then
  return redis.error_reply('MSGX_MOVED redis was written since this round read its flights')
end
local jkey, dkey, pkey = prefix .. 'journal', prefix .. 'journal:done', prefix .. 'journal:pruned'
local ikey = prefix .. 'journal:identity'
-- The sections after the header, read in turn from ARGV[i].
local i = 11
local n = tonumber(ARGV[i])
-- No journal:pruned (a new store, or the journal expired with it after a quiet week): the
-- journal is complete from this round on.
if n > 0 and redis.call('EXISTS', pkey) == 0 then
  redis.call('SET', pkey, tonumber(ARGV[i + 1]) - 1)
end
-- Arguments ARGV[a..b] to `cmd` on `key`, at most 1000 a call.
local function chunked(cmd, key, a, b)
  for k = a, b, 1000 do
    redis.call(cmd, key, unpack(ARGV, k, math.min(k + 999, b)))
  end
end
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

/// The APPLY script's header, `ARGV[1..=10]`, written in the order its fields are declared,
/// which is the order the script's first line names them (a test holds the two together).
pub(super) struct ApplyHeader<'a> {
    pub prefix: &'a str,
    /// The lease epoch of this handle (0: not fenced).
    pub epoch: i64,
    /// A deleted flight's versions' time to live, and the journal keys', in seconds.
    pub tomb: u64,
    pub jttl: u64,
    /// The tokens this handle accepts as Redis's current `applied:token`, comma-separated
    /// (empty: none seen yet).
    pub saw: String,
    /// The token of this write, and the one the writes were worked out under (empty: none).
    pub token: &'a str,
    pub read: &'a str,
    /// The snapshots that advance the plan's generation, and the last one's MSG_ID.
    pub gens: i64,
    pub last: i64,
    /// The round's highest MSG_ID.
    pub top: i64,
}

impl ApplyHeader<'_> {
    #[cfg(test)]
    const NAMES: [&'static str; 10] =
        ["prefix", "epoch", "tomb", "jttl", "saw", "token", "read", "gens", "last", "top"];

    fn write(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.prefix).arg(self.epoch).arg(self.tomb).arg(self.jttl).arg(&self.saw);
        cmd.arg(self.token).arg(self.read).arg(self.gens).arg(self.last).arg(self.top);
    }
}

/// Messages PostgreSQL now holds the outcome of are done (ARGV: prefix, now ms, keep ms, journal
/// ttl, msg_id…): each is marked in `journal:done` with the time it was told, and
/// `applied:settled` keeps the highest (the evidence that PostgreSQL held it, #37). Those done
/// longer than the keep window go with their journal entries, at most 1000 a call, and
/// `journal:pruned` keeps the highest MSG_ID ever dropped: every entry and mark above it is still
/// there (the evidence the consistency check and the PostgreSQL heal stand on, #20). An entry's
/// identity goes with it, unless a later entry binds it. The four journal keys' time to live is
/// renewed together.
pub(super) const FORGET: &str = r#"
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
pub(super) struct Journal<'a> {
    pub events: &'a [crate::domain::NewEvent],
    pub references: &'a [crate::handlers::RefChange],
    #[serde(skip_serializing_if = "str::is_empty")]
    pub identity: &'a str,
    /// The rules that made the decision (#52): a reuse records them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<u32>,
}

/// Moves the fence to `epoch` unless a newer one is there (ARGV: prefix, epoch). A new lease
/// holder claims the flights before its stages start, so a stale pump's next apply is refused.
pub(super) const CLAIM: &str = r#"
local ekey = ARGV[1] .. 'lease:epoch'
local held = tonumber(redis.call('GET', ekey) or '0')
local epoch = tonumber(ARGV[2])
if held > epoch then return redis.error_reply('MSGX_FENCED epoch ' .. held .. ' holds the flights, this instance has ' .. epoch) end
redis.call('SET', ekey, epoch)
return epoch
"#;

/// Sends a pipeline and reads its replies, the first `skip` dropped. A reply that does not come
/// ends it at once: redis-rs's own `Pipeline::query` goes on reading after an I/O error and
/// waits out the read timeout once per command, so a frozen server held a round of 200
/// flights for 400 timeouts (#21 item 11). A server error is returned after every reply was
/// read, so the connection stays in step.
/// The journal entries Redis holds of `msg_ids` (`HMGET`'s reply in their order): decisions an
/// earlier attempt applied.
pub(super) fn journal_entries(
    msg_ids: &[i64],
    texts: Vec<Option<String>>,
) -> StoreResult<HashMap<i64, Decision>> {
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

impl RedisFlights {
    /// The commands that record `ids` taken (`journal:done`, no time yet: `+inf`), and keep the
    /// journal's four keys' common time to live.
    pub(super) fn taken_cmds(&self, ids: &[i64]) -> Vec<redis::Cmd> {
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
    pub(super) fn forget_cmd(&self, msg_ids: &[i64], now: SystemTime) -> redis::Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FORGET).arg(0).arg(&self.prefix).arg(unix_millis(now));
        cmd.arg(self.keep.as_millis() as i64).arg(JOURNAL_TTL_SECS).arg(msg_ids);
        cmd
    }

    /// The apply script's command for `round`, which left `known` as Redis will hold it (see
    /// [`APPLY`]).
    pub(super) fn apply_cmd(
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
        let header = ApplyHeader {
            prefix: &self.prefix,
            epoch: self.epoch,
            tomb: TOMBSTONE_TTL_SECS,
            jttl: JOURNAL_TTL_SECS,
            saw: self.seen.list(),
            token,
            read: known.token.as_deref().unwrap_or(""),
            gens: round.generations,
            last: round.generation_msg,
            top: decisions.last().map_or(0, |a| a.msg_id),
        };
        header.write(&mut cmd);
        journal(&mut cmd, round, decisions)?;
        flights(&mut cmd, known, round);
        Ok(cmd)
    }
}

/// The decisions, each journalled as a document, and the identities they hold (see [`APPLY`]).
fn journal(cmd: &mut redis::Cmd, round: &net::Round, decisions: &[Applying<'_>]) -> StoreResult<()> {
    cmd.arg(decisions.len());
    // Each document is written into one buffer, reused, and copied into the command.
    let mut doc = Vec::with_capacity(2048);
    for (a, applied) in decisions.iter().zip(&round.applied) {
        doc.clear();
        // A snapshot not newer than the plan's generation journals the empty decision.
        let (events, references) = match applied {
            true => (a.decision.events.as_slice(), a.decision.references.as_slice()),
            false => (&[][..], &[][..]),
        };
        let rules = a.decision.rules;
        serde_json::to_writer(&mut doc, &Journal { events, references, identity: a.identity, rules })
            .map_err(|e| StoreError::rejected(Store::Redis, format!("decision not serialisable: {e}")))?;
        cmd.arg(a.msg_id).arg(doc.as_slice());
    }
    let named: Vec<&Applying<'_>> = decisions.iter().filter(|a| !a.identity.is_empty()).collect();
    cmd.arg(named.len());
    for a in named {
        cmd.arg(a.identity).arg(a.msg_id);
    }
    Ok(())
}

/// Each flight's writes as the difference from what Redis holds, and the plan index's changes.
fn flights(cmd: &mut redis::Cmd, known: &net::Known, round: &net::Round) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header field the script names in another place would be read as another value.
    #[test]
    fn the_apply_header_is_written_in_the_order_the_script_names_it() {
        let line = APPLY.lines().find(|l| l.starts_with("local prefix,")).expect("the header line");
        let (names, from) = line.trim_start_matches("local ").split_once(" = ").unwrap();
        let names: Vec<&str> = names.split(", ").collect();
        assert_eq!(names, ApplyHeader::NAMES);
        assert_eq!(from, format!("unpack(ARGV, 1, {})", names.len()));
        assert!(
            APPLY.contains(&format!("local i = {}\n", names.len() + 1)),
            "the sections follow the header"
        );
    }
}
