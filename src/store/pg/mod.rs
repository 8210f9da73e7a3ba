//! Own PostgreSQL: `PROC_STATE`, `MSG_EVENT`, the watermark, the lease and the migrations.
//! Every state change is a conditional write (`WHERE state IN (…)`), so a row can only move
//! along the lifecycle, never back, whatever a caller does; and every write transaction of a
//! running instance starts with the fence (`msgx_fence(epoch)`, migration V007), so a stale
//! instance never commits after a newer one took the lease (PRE-5).

mod audit;
pub mod classify;
pub mod lease;
pub mod lineage;
pub mod migrate;
mod operator;
mod requests;
mod rules;
mod session;
pub mod witness;

use session::{Session, Statements};

pub use crate::ports::Gauges;
pub use operator::{Abandoned, Durability, HeadInfo, Status};

use crate::error::Store;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use postgres::Client;

use crate::secret::SecretFile;
use crate::store::tls::{self, Mode, Tls};

use crate::domain::{InboundRow, MsgEvent, NewEvent, ProcRow, ProcStatus, RedisRecord, Target};
use crate::error::{ErrorClass, StoreError, StoreErrorKind};
use crate::handlers::{self, RefChange};
use crate::ports::{
    ArchiveCut, ArchivedAs, Fifo, Held, Housekeeping, Intake, Landed, MarkLedger, Outbox, OwedMark,
    RoundRecord, Sent, StoreResult,
};

/// How long the server lets one of msgx's sessions sit idle inside a transaction before it
/// ends it (and so releases its locks): below the lease duration's default, so a frozen holder
/// delays a takeover by no more than the lease itself.
pub const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(5);

/// A PostgreSQL connection that reconnects on the next call after it broke.
pub struct Pg {
    config: postgres::Config,
    /// The connection string as configured: the store's name for the failover witness.
    store: std::sync::Arc<str>,
    client: Option<Client>,
    /// What `client` prepared; a new connection starts with none.
    statements: Statements,
    /// The lease epoch every write transaction is fenced with; `None` for an operator's
    /// command (replay, reconcile), which writes beside the daemon through conditional writes.
    fence: Option<i64>,
    /// The URL's libpq TLS parameters (#64), its files read at each new connection.
    tls: Tls,
    /// `datasources.default.password-file`, read at each new connection.
    password: Option<SecretFile>,
}

/// libpq's TLS parameters in `datasources.default.url` (#64): msgx's to read, with libpq's
/// meaning, for every host of a multi-host URL.
const TLS_PARAMS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

impl Pg {
    /// Parses the URL; connects lazily. Connect and statement time are bounded.
    pub fn new(url: &str) -> Result<Pg, StoreError> {
        let bad =
            |e: String| StoreError::rejected(Store::Postgres, format!("bad datasources.default.url: {e}"));
        let (rest, params) = tls::split_params(url, &TLS_PARAMS);
        let tls = pg_tls(&params).map_err(bad)?;
        let mut config: postgres::Config = rest.parse().map_err(|e: postgres::Error| bad(e.to_string()))?;
        config.ssl_mode(match tls.mode {
            Mode::Disable => postgres::config::SslMode::Disable,
            Mode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        });
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        if config.get_tcp_user_timeout().is_none() {
            // A server that stops answering (frozen, a half-open connection) is noticed.
            config.tcp_user_timeout(Duration::from_secs(30));
        }
        if config.get_application_name().is_none() {
            config.application_name("msgx");
        }
        config.keepalives_idle(Duration::from_secs(30));
        // msgx writes: a session on a standby (a multi-host URL, a VIP that has not moved yet)
        // is never wanted, whatever the URL says (#19).
        config.target_session_attrs(postgres::config::TargetSessionAttrs::ReadWrite);
        Ok(Pg {
            config,
            store: url.into(),
            client: None,
            statements: Statements::default(),
            fence: None,
            tls,
            password: None,
        })
    }

    /// Own PostgreSQL as the configuration names it: the URL and the password file.
    pub fn of(cfg: &crate::config::Config) -> Result<Pg, StoreError> {
        Ok(Pg::new(&cfg.pg_url)?.with_password(cfg.pg_password.clone()))
    }

    /// The password read from `file` at each new connection (#64), instead of the URL's.
    pub fn with_password(mut self, file: Option<SecretFile>) -> Pg {
        self.password = file;
        self
    }

    /// Connected now.
    pub fn connected(mut self) -> Result<Pg, StoreError> {
        self.client()?;
        Ok(self)
    }

    /// How this connection is secured, as configured and as the server sees it (`pg_stat_ssl`):
    /// for `msgx check` and the start-up log (#64).
    pub fn security(&mut self) -> StoreResult<String> {
        let configured = self.tls.describe();
        let row = self
            .client()?
            .query_opt(
                "SELECT ssl, version, cipher, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .map_err(|e| classify::classify(&e))?;
        let seen = match row {
            Some(r) if r.get::<_, bool>(0) => format!(
                "{} {}{}",
                r.get::<_, Option<String>>(1).unwrap_or_default(),
                r.get::<_, Option<String>>(2).unwrap_or_default(),
                if r.get::<_, Option<String>>(3).is_some() { ", client certificate accepted" } else { "" }
            ),
            _ => tls::PLAINTEXT.into(),
        };
        Ok(format!("{seen} ({configured})"))
    }

    /// The hosts of the URL, for the plaintext-off-loopback warning.
    pub fn hosts(&self) -> Vec<String> {
        self.config
            .get_hosts()
            .iter()
            .map(|h| match h {
                postgres::config::Host::Tcp(h) => h.clone(),
                postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .collect()
    }

    /// The TLS connector for a new connection, its files read now; the password likewise.
    fn connecting(&self) -> StoreResult<(postgres::Config, postgres_openssl::MakeTlsConnector)> {
        let mut config = self.config.clone();
        if let Some(f) = &self.password {
            let pw = f.read().map_err(|e| StoreError::new(Store::Postgres, StoreErrorKind::Untrusted, e))?;
            config.password(pw);
        }
        let builder = self.tls.openssl(Store::Postgres)?;
        let mut connector = postgres_openssl::MakeTlsConnector::new(builder.build());
        if self.tls.effective() != Mode::VerifyFull {
            // verify-ca: the chain, not the name; prefer and require verify nothing (set above).
            connector.set_callback(|c, _| {
                c.set_verify_hostname(false);
                Ok(())
            });
        }
        Ok((config, connector))
    }

    pub fn connect(url: &str) -> Result<Pg, StoreError> {
        let mut pg = Pg::new(url)?;
        pg.client()?;
        Ok(pg)
    }

    /// Another connection to the same database, not connected yet, with the same fence.
    pub fn twin(&self) -> Pg {
        Pg {
            config: self.config.clone(),
            store: self.store.clone(),
            client: None,
            statements: Statements::default(),
            fence: self.fence,
            tls: self.tls.clone(),
            password: self.password.clone(),
        }
    }

    /// Every write transaction of this connection checks that `epoch` still holds the lease.
    pub fn fenced(mut self, epoch: i64) -> Pg {
        self.fence = Some(epoch);
        self
    }

    /// The connection; a failure to connect is always unavailable (whatever the server said,
    /// no message can be at fault for it).
    pub fn client(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            let (config, connector) = self.connecting()?;
            let mut c = config.connect(connector).map_err(|e| {
                // A TLS refusal's reason (another CA, an expired certificate) is in the chain.
                let detail = tls::with_causes(&classify::classify(&e).detail, &e);
                // A refused certificate will not pass by itself: untrusted, an ERROR at once (#64).
                let kind = tls::connect_kind(&detail);
                StoreError::new(Store::Postgres, kind, format!("{detail} (sslmode={})", self.tls.mode.name()))
            })?;
            // Plans must not depend on fresh statistics: the FIFO, outbox and backfill queries
            // walk their partial indexes in order instead of sorting every unfinished row when
            // the table's statistics are stale (docs/performance.md). enable_seqscan = off for
            // the same reason: on statistics that had not seen a burst (a table thought empty)
            // the round's identity check read all of PROC_STATE for a thousand keys, every round
            // (27 ms a round at 100 000 pending against 5 at 20 000, #23). Every msgx statement
            // has an index to walk; a table with none is still read whole.
            //
            // idle_in_transaction_session_timeout: an instance frozen (SIGSTOP, a VM paused)
            // inside a fenced write holds the lease row FOR KEY SHARE, and a takeover's FOR
            // UPDATE would wait for it for ever; the server ends such a session instead. A
            // healthy instance never idles inside a transaction: its transactions are SQL only.
            //
            // jit = off: enable_sort = off prices every plan that keeps a sort (an outer ORDER
            // BY over a LIMIT) at ten billion, far above jit_above_cost, so the server compiled
            // such a query with LLVM on every call: 25–145 ms for a query that reads one index
            // page (the consistency check's newest SUCCEEDED rows, #23). msgx's statements are
            // short index walks; compiling never pays for them.
            //
            // plan_cache_mode = force_custom_plan: a statement is prepared once per connection
            // (session.rs) but planned with each call's values, as when it was sent as text. A
            // plan kept for any values took a batch of a thousand for ten rows and joined the
            // SENT update in a nested loop (286 ms a call), and it cannot hash a `<> ALL($2)`
            // list whose contents it does not know (the head query, 13 ms a call against 1.5).
            c.batch_execute(&format!(
                "SET statement_timeout = '60s'; SET lock_timeout = '30s'; SET TIME ZONE 'UTC'; SET enable_sort = off; \
                 SET enable_seqscan = off; SET jit = off; SET plan_cache_mode = force_custom_plan; \
                 SET idle_in_transaction_session_timeout = '{}ms'",
                IDLE_IN_TRANSACTION.as_millis()
            ))
            .map_err(|e| StoreError::unavailable(Store::Postgres, classify::classify(&e).detail))?;
            self.judge_server(&mut c)?;
            self.client = Some(c);
            self.statements = Statements::default();
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// A new session's server against what this process saw of the store before: a new
    /// timeline is a failover msgx follows (WARN); a server behind a position msgx saw it
    /// acknowledge lost commits (ERROR): msgx stops writing (fenced), never carries on (#19).
    fn judge_server(&self, c: &mut Client) -> StoreResult<()> {
        let before = witness::seen(&self.store);
        let Ok(now) = witness::sight(c) else { return Ok(()) }; // it cannot say: nothing to compare
        match witness::witness(&self.store, before, now, witness::Source::NewSession) {
            witness::Verdict::Same => Ok(()),
            witness::Verdict::Failover { from, to } => {
                log::warn!(
                    "postgres failover detected: timeline {from} -> {to} at {}; msgx follows the new primary",
                    witness::lsn_text(now.lsn)
                );
                Ok(())
            }
            witness::Verdict::LostCommits { seen, now: at, other_cluster } => {
                let what = if other_cluster {
                    "the server is another cluster (its system identifier changed)".to_string()
                } else {
                    format!(
                        "its WAL position {} (timeline {}) is behind {} that msgx saw it acknowledge",
                        witness::lsn_text(at),
                        now.timeline,
                        witness::lsn_text(seen)
                    )
                };
                log::error!(
                    "postgres lost commits: {what} (an asynchronous replica promoted with a lost tail, or a restore); msgx stops its stages, compares the stores and heals what it can prove (docs/operations.md)"
                );
                Err(StoreError::forgot(Store::Postgres, format!("lost commits: {what}")))
            }
        }
    }

    /// The store's name for the failover witness (its connection string).
    pub fn store_name(&self) -> &str {
        &self.store
    }

    /// Runs `f`; a failure on a broken connection drops it so the next call reconnects.
    fn run<R>(&mut self, f: impl FnOnce(&mut Session<'_>) -> Result<R, postgres::Error>) -> StoreResult<R> {
        self.client()?;
        let client = self.client.as_mut().expect("connected above");
        let mut session = Session::new(client, &mut self.statements);
        let result = f(&mut session);
        let closed = session.is_closed();
        if let Err(e) = &result {
            if closed || classify::classify(e).is_unavailable() {
                self.client = None;
            }
            // A statement prepared before a schema change may be refused now ("cached plan
            // must not change result type"): after any failure they are prepared again.
            self.statements = Statements::default();
        }
        result.map_err(|e| classify::classify(&e))
    }

    /// One write transaction, fenced: `BEGIN` and the fence in one round trip, then `f`, then
    /// `COMMIT`. `f` returns `Ok(Err(..))` to roll back with an error of its own (a guard that
    /// found a row not in the state it expected).
    fn write<R>(
        &mut self,
        f: impl FnOnce(&mut Session<'_>) -> Result<Result<R, StoreError>, postgres::Error>,
    ) -> StoreResult<R> {
        let begin = match self.fence {
            Some(epoch) => format!("BEGIN; SELECT msgx_fence({epoch})"),
            None => "BEGIN".to_string(),
        };
        let outcome = self.run(|c| {
            if let Err(e) = c.batch_execute(&begin) {
                // A refused fence leaves the transaction aborted: end it.
                let _ = c.batch_execute("ROLLBACK");
                return Err(e);
            }
            match f(c) {
                Ok(Ok(r)) => {
                    c.batch_execute("COMMIT")?;
                    Ok(Ok(r))
                }
                Ok(Err(e)) => {
                    c.batch_execute("ROLLBACK")?;
                    Ok(Err(e))
                }
                Err(e) => {
                    let _ = c.batch_execute("ROLLBACK");
                    Err(e)
                }
            }
        });
        outcome?
    }
}

/// Clips text to a column's width on a character boundary, and drops NUL characters, which
/// PostgreSQL text cannot hold (an error message may quote them).
pub fn clip(s: &str, max_chars: usize) -> String {
    let s: String = if s.contains('\0') { s.replace('\0', "\u{FFFD}") } else { s.to_string() };
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => s[..i].to_string(),
        None => s,
    }
}

const TERMINAL: &str = "('SUCCEEDED', 'SKIPPED', 'DEAD')";
const UNFINISHED: &str = "('PENDING', 'FAILED')";

/// A state column as msgx writes it, or an error that names the value: an unknown state is
/// never read as a guess (#43: one was read as ARCHIVED, another as PENDING).
pub(crate) fn known_state<T>(parsed: Option<T>, column: &str, value: &str) -> Result<T, StoreError> {
    parsed.ok_or_else(|| StoreError::rejected(Store::Postgres, format!("unknown {column} {value:?}")))
}

/// A row of [`PROC_ROW`]'s columns, read by their place in it: by name, each `get` looked
/// through the columns comparing names, ten a row (#23).
fn proc_row(r: &postgres::Row) -> Result<ProcRow, StoreError> {
    let state: &str = r.get(1);
    let attempts: i32 = r.get(2);
    Ok(ProcRow {
        msg_id: r.get(0),
        state: known_state(ProcStatus::parse(state), "PROC_STATE.STATE", state)?,
        attempts: attempts.max(0) as u32,
        next_attempt_at: r.get(3),
        error_class: r.get::<_, Option<&str>>(4).and_then(ErrorClass::parse),
        last_error: r.get(5),
        identity_key: r.get(6),
        first_failed_at: r.get(7),
        type_tag: r.get(8),
        received_at: r.get(9),
    })
}

/// The columns [`proc_row`] reads, in the order it reads them.
const PROC_ROW: &str =
    "msg_id, state, attempts, next_attempt_at, error_class, last_error, identity_key, first_failed_at, type_tag, received_at";

impl Intake for Pg {
    fn enqueue(
        &mut self,
        rows: &[InboundRow],
        watermark: Option<i64>,
        now: SystemTime,
    ) -> StoreResult<Vec<i64>> {
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let received: Vec<Option<SystemTime>> = rows.iter().map(|r| r.received_at).collect();
        self.write(|c| {
            let new = c.query(
                "INSERT INTO proc_state (msg_id, state, attempts, updated_at, received_at, enqueued_at)
                 SELECT id, 'PENDING', 0, $3, rcv, $3 FROM UNNEST($1::bigint[], $2::timestamptz[]) AS t(id, rcv)
                 ON CONFLICT (msg_id) DO NOTHING RETURNING msg_id",
                &[&ids, &received, &now],
            )?;
            if let Some(w) = watermark {
                c.execute("UPDATE ingress_watermark SET last_id = $1, updated_at = $2 WHERE id = 1", &[&w, &now])?;
            }
            let mut new: Vec<i64> = new.iter().map(|r| r.get(0)).collect();
            new.sort_unstable();
            Ok(Ok(new))
        })
    }

    fn held(&mut self, ids: &[i64]) -> StoreResult<Vec<Held>> {
        let rows = self.run(|c| {
            c.query(
                "SELECT msg_id, backfill_at IS NOT NULL, identity_key FROM proc_state WHERE msg_id = ANY($1) ORDER BY msg_id",
                &[&ids],
            )
        })?;
        Ok(rows.iter().map(|r| Held { msg_id: r.get(0), marked: r.get(1), identity: r.get(2) }).collect())
    }

    fn watermark(&mut self) -> StoreResult<i64> {
        self.run(|c| Ok(c.query_one("SELECT last_id FROM ingress_watermark WHERE id = 1", &[])?.get(0)))
    }
}

/// An event and the message that caused it.
type RoundEvent<'a> = (i64, usize, &'a NewEvent);

/// Inserts a round's events in order (WITH ORDINALITY keeps EVENT_IDs in it), each with its
/// message id. `KAFKA:schd` events are upserted per FLID instead: a newer (or equal) generation
/// resets the flight's row to PENDING with the new payload and clears SENT_AT; an older one is
/// dropped. One statement per kind, whatever the round's size.
pub(super) fn insert_events(
    c: &mut Session<'_>,
    events: &[RoundEvent<'_>],
    now: SystemTime,
) -> Result<(), postgres::Error> {
    let (upserts, inserts): (Vec<&RoundEvent<'_>>, Vec<&RoundEvent<'_>>) =
        events.iter().partition(|(_, _, e)| e.target == Target::KafkaSchd);
    if !inserts.is_empty() {
        let msg_ids: Vec<i64> = inserts.iter().map(|(m, _, _)| *m).collect();
        let ordinals: Vec<i32> = inserts.iter().map(|(_, o, _)| *o as i32).collect();
        let targets: Vec<&str> = inserts.iter().map(|(_, _, e)| e.target.as_str()).collect();
        let keys: Vec<String> =
            inserts.iter().map(|(_, _, e)| clip(&e.partition_key, handlers::EVENT_KEY_MAX_CHARS)).collect();
        let types: Vec<&str> = inserts.iter().map(|(_, _, e)| e.event_type.as_str()).collect();
        let versions: Vec<i64> = inserts.iter().map(|(_, _, e)| e.state_version).collect();
        let payloads: Vec<&str> = inserts.iter().map(|(_, _, e)| e.payload_json.as_str()).collect();
        c.execute(
            "INSERT INTO msg_event (target, partition_key, event_type, state_version, payload_json, state, attempts, created_at, msg_id, ordinal)
             SELECT t, k, ty, v, p, 'PENDING', 0, $7, m, o
             FROM UNNEST($1::varchar[], $2::varchar[], $3::varchar[], $4::bigint[], $5::text[], $6::bigint[], $8::int[])
                  WITH ORDINALITY AS x(t, k, ty, v, p, m, o, ord)
             ORDER BY ord",
            &[&targets, &keys, &types, &versions, &payloads, &msg_ids, &now, &ordinals],
        )?;
    }
    if !upserts.is_empty() {
        // A FLID once per statement: the newest generation of the round (then the later event).
        let mut latest: BTreeMap<&str, (i64, &NewEvent)> = BTreeMap::new();
        for (m, _, e) in upserts {
            let slot = latest.entry(e.partition_key.as_str()).or_insert((*m, e));
            if e.state_version >= slot.1.state_version {
                *slot = (*m, e);
            }
        }
        let keys: Vec<String> = latest.keys().map(|k| clip(k, handlers::EVENT_KEY_MAX_CHARS)).collect();
        let types: Vec<&str> = latest.values().map(|(_, e)| e.event_type.as_str()).collect();
        let versions: Vec<i64> = latest.values().map(|(_, e)| e.state_version).collect();
        let payloads: Vec<&str> = latest.values().map(|(_, e)| e.payload_json.as_str()).collect();
        let msg_ids: Vec<i64> = latest.values().map(|(m, _)| *m).collect();
        c.execute(
            "INSERT INTO msg_event (target, partition_key, event_type, state_version, payload_json, state, attempts, created_at, msg_id)
             SELECT 'KAFKA:schd', k, ty, v, p, 'PENDING', 0, $6, m
             FROM UNNEST($1::varchar[], $2::varchar[], $3::bigint[], $4::text[], $5::bigint[]) AS x(k, ty, v, p, m)
             ON CONFLICT (partition_key) WHERE target = 'KAFKA:schd' DO UPDATE SET
                 event_type = EXCLUDED.event_type, state_version = EXCLUDED.state_version,
                 payload_json = EXCLUDED.payload_json, state = 'PENDING', attempts = 0,
                 next_attempt_at = NULL, error_class = NULL, last_error = NULL, sent_at = NULL,
                 sent_topic = NULL, sent_partition = NULL, sent_offset = NULL, sent_row_id = NULL,
                 last_attempt_at = NULL, created_at = EXCLUDED.created_at, msg_id = EXCLUDED.msg_id
             WHERE msg_event.state_version <= EXCLUDED.state_version",
            &[&keys, &types, &versions, &payloads, &msg_ids, &now],
        )?;
    }
    Ok(())
}

/// REF_MASTER changes (SOURCE = AODB), in the message's transaction.
fn write_references(
    c: &mut Session<'_>,
    refs: &[(i64, &RefChange)],
    now: SystemTime,
) -> Result<(), postgres::Error> {
    for (msg_id, r) in refs {
        match r {
            RefChange::Keep { rtype, keys } => {
                c.execute(
                    "DELETE FROM ref_master WHERE rtype = $1 AND NOT (rkey = ANY($2))",
                    &[rtype, keys],
                )?;
            }
            RefChange::Upsert { rtype, rkey, payload_json } => {
                c.execute(
                    "INSERT INTO ref_master (rtype, rkey, payload_json, source, refreshed_at) VALUES ($1, $2, $3, 'AODB', $4)
                     ON CONFLICT (rtype, rkey) DO UPDATE SET payload_json = EXCLUDED.payload_json, source = 'AODB',
                         refreshed_at = EXCLUDED.refreshed_at",
                    &[&clip(rtype, 8), &clip(rkey, handlers::REF_KEY_MAX_CHARS), payload_json, &now],
                )?;
            }
            RefChange::Delete { rtype, rkey } => {
                c.execute("DELETE FROM ref_master WHERE rtype = $1 AND rkey = $2", &[rtype, rkey])?;
            }
            RefChange::Season { season, airport, start, end, records } => {
                let season = clip(season, handlers::SEASON_MAX_CHARS);
                c.execute("DELETE FROM season_plan WHERE season = $1", &[&season])?;
                let keys: Vec<String> =
                    records.iter().map(|(k, _)| clip(k, handlers::SEASON_KEY_MAX_CHARS)).collect();
                let docs: Vec<&str> = records.iter().map(|(_, v)| v.as_str()).collect();
                c.execute(
                    "INSERT INTO season_plan (season, flight_key, airport, season_start, season_end, record_json, msg_id, updated_at)
                     SELECT $1, k, $2, $3, $4, d, $5, $6 FROM UNNEST($7::varchar[], $8::text[]) AS x(k, d)",
                    &[
                        &season,
                        &airport.as_deref().map(|a| clip(a, 10)),
                        &start.as_deref().map(|s| clip(s, 20)),
                        &end.as_deref().map(|s| clip(s, 20)),
                        msg_id,
                        &now,
                        &keys,
                        &docs,
                    ],
                )?;
            }
        }
    }
    Ok(())
}

/// The INV-3 guard: a statement that moved fewer rows than it named found one that is no
/// longer unfinished; nothing of the round may be recorded.
fn guard(what: &str, moved: u64, named: usize) -> Result<(), StoreError> {
    if moved as usize == named {
        Ok(())
    } else {
        Err(StoreError::rejected(
            Store::Postgres,
            format!("commit ({what}): a row of the round is not unfinished (INV-3 guard); nothing of the round was recorded"),
        ))
    }
}

fn tags(tags: impl Iterator<Item = Option<String>>) -> Vec<Option<String>> {
    tags.collect()
}

/// The lowest and highest of `ids` ((0, -1), which matches nothing, for none). A batch update
/// joins its rows by id; the same bounds as a range on the key let the server read only the
/// batch's part of the index. Without them, on statistics that have not seen the backlog, it
/// hashed every unfinished row to update a thousand of them: 66 of 83 ms per round with
/// 100 000 pending, a cost that grew with the backlog (#23).
fn span(ids: impl IntoIterator<Item = i64>) -> (i64, i64) {
    ids.into_iter().fold((0, -1), |(lo, hi), id| if lo > hi { (id, id) } else { (lo.min(id), hi.max(id)) })
}

/// One outcome kind's statement: how many rows it moved.
type Recorder = fn(&mut Session<'_>, &RoundRecord<'_>, SystemTime) -> Result<u64, postgres::Error>;

/// SUCCEEDED, the identity (INV-9) and the backfill intent (INV-8), in one statement.
fn record_succeeded(
    c: &mut Session<'_>,
    round: &RoundRecord<'_>,
    now: SystemTime,
) -> Result<u64, postgres::Error> {
    let ids: Vec<i64> = round.succeeded.iter().map(|x| x.msg_id).collect();
    let t = tags(round.succeeded.iter().map(|x| x.tag.map(|t| clip(t, 32))));
    let keys: Vec<String> = round.succeeded.iter().map(|x| clip(x.identity, 200)).collect();
    let columns: Vec<Option<(&str, Option<bool>)>> =
        round.succeeded.iter().map(|x| x.record.map(RedisRecord::columns)).collect();
    let records: Vec<Option<&str>> = columns.iter().map(|c| c.map(|c| c.0)).collect();
    let stale: Vec<Option<bool>> = columns.iter().map(|c| c.and_then(|c| c.1)).collect();
    let rules: Vec<Option<i32>> = round.succeeded.iter().map(|x| x.rules.map(|v| v as i32)).collect();
    let (lo, hi) = span(ids.iter().copied());
    c.execute(&succeed_sql(), &[&ids, &keys, &t, &now, &lo, &hi, &records, &rules, &stale])
}

fn succeed_sql() -> String {
    format!(
        "UPDATE proc_state p SET state = 'SUCCEEDED', identity_key = x.k, type_tag = COALESCE(x.t, p.type_tag),
             next_attempt_at = NULL, updated_at = $4, backfill_next_at = $4, redis_record = x.r, rules_version = x.v,
             snapshot_stale = x.s
         FROM UNNEST($1::bigint[], $2::varchar[], $3::varchar[], $7::varchar[], $8::int[], $9::bool[]) AS x(id, k, t, r, v, s)
         WHERE p.msg_id = x.id AND p.state IN {UNFINISHED} AND p.msg_id BETWEEN $5 AND $6"
    )
}

/// SKIPPED with its reason and the backfill intent (INV-8), in one statement.
fn record_skipped(
    c: &mut Session<'_>,
    round: &RoundRecord<'_>,
    now: SystemTime,
) -> Result<u64, postgres::Error> {
    let ids: Vec<i64> = round.skipped.iter().map(|x| x.msg_id).collect();
    let t = tags(round.skipped.iter().map(|x| x.tag.map(|t| clip(t, 32))));
    let reasons: Vec<String> = round.skipped.iter().map(|x| clip(&x.reason.to_string(), 1000)).collect();
    let (lo, hi) = span(ids.iter().copied());
    c.execute(
        &format!(
            "UPDATE proc_state p SET state = 'SKIPPED', last_error = x.r, type_tag = COALESCE(x.t, p.type_tag),
                 next_attempt_at = NULL, updated_at = $4, backfill_next_at = $4
             FROM UNNEST($1::bigint[], $2::varchar[], $3::varchar[]) AS x(id, r, t)
             WHERE p.msg_id = x.id AND p.state IN {UNFINISHED} AND p.msg_id BETWEEN $5 AND $6"
        ),
        &[&ids, &reasons, &t, &now, &lo, &hi],
    )
}

/// FAILED: attempts+1, class, error, the next attempt, and the head-deadline anchor the rules
/// computed (the first failure, moved on by the time the row waited past its backoff).
fn record_retried(
    c: &mut Session<'_>,
    round: &RoundRecord<'_>,
    now: SystemTime,
) -> Result<u64, postgres::Error> {
    let ids: Vec<i64> = round.retried.iter().map(|x| x.msg_id).collect();
    let t = tags(round.retried.iter().map(|x| x.tag.map(|t| clip(t, 32))));
    let classes: Vec<&str> = round.retried.iter().map(|x| x.class.as_str()).collect();
    let errors: Vec<String> = round.retried.iter().map(|x| clip(x.error, 1000)).collect();
    let next: Vec<SystemTime> = round.retried.iter().map(|x| x.next_attempt_at).collect();
    let since: Vec<SystemTime> = round.retried.iter().map(|x| x.failing_since).collect();
    let (lo, hi) = span(ids.iter().copied());
    c.execute(
        &format!(
            "UPDATE proc_state p SET state = 'FAILED', attempts = p.attempts + 1, error_class = x.c, last_error = x.e,
                 type_tag = COALESCE(x.t, p.type_tag), next_attempt_at = x.n, updated_at = $6, first_failed_at = x.f
             FROM UNNEST($1::bigint[], $2::varchar[], $3::varchar[], $4::varchar[], $5::timestamptz[], $7::timestamptz[])
                  AS x(id, t, c, e, n, f)
             WHERE p.msg_id = x.id AND p.state IN {UNFINISHED} AND p.msg_id BETWEEN $8 AND $9"
        ),
        &[&ids, &t, &classes, &errors, &next, &now, &since, &lo, &hi],
    )
}

/// DEAD with its class and the backfill intent (INV-8), in one statement.
fn record_dead(
    c: &mut Session<'_>,
    round: &RoundRecord<'_>,
    now: SystemTime,
) -> Result<u64, postgres::Error> {
    let ids: Vec<i64> = round.dead.iter().map(|x| x.msg_id).collect();
    let t = tags(round.dead.iter().map(|x| x.tag.map(|t| clip(t, 32))));
    let classes: Vec<&str> = round.dead.iter().map(|x| x.class.as_str()).collect();
    let errors: Vec<String> = round.dead.iter().map(|x| clip(x.error, 1000)).collect();
    let (lo, hi) = span(ids.iter().copied());
    c.execute(
        &format!(
            "UPDATE proc_state p SET state = 'DEAD', attempts = p.attempts + 1, error_class = x.c, last_error = x.e,
                 type_tag = COALESCE(x.t, p.type_tag), next_attempt_at = NULL, updated_at = $5,
                 first_failed_at = COALESCE(p.first_failed_at, $5), backfill_next_at = $5
             FROM UNNEST($1::bigint[], $2::varchar[], $3::varchar[], $4::varchar[]) AS x(id, t, c, e)
             WHERE p.msg_id = x.id AND p.state IN {UNFINISHED} AND p.msg_id BETWEEN $6 AND $7"
        ),
        &[&ids, &t, &classes, &errors, &now, &lo, &hi],
    )
}

/// The FIFO's first rows (INV-3): walked in order on the partial index `idx_proc_head`, which
/// holds only unfinished rows — with `enable_sort = off` (set for every msgx session) the plan
/// cannot fall back to sorting every pending row when the statistics are stale.
fn head_query() -> String {
    format!(
        "SELECT {PROC_ROW} FROM proc_state WHERE state IN {UNFINISHED} AND msg_id <> ALL($2) ORDER BY msg_id LIMIT $1"
    )
}

impl Pg {
    /// A run-time parameter as msgx's sessions have it (`SHOW`), for the checks that hold them.
    pub fn setting(&mut self, name: &str) -> StoreResult<String> {
        self.run(|c| Ok(c.query_one("SELECT current_setting($1)", &[&name])?.get(0)))
    }

    /// The plan PostgreSQL uses to record `ids` SUCCEEDED, as msgx's sessions run it.
    pub fn explain_succeeded(&mut self, ids: &[i64]) -> StoreResult<String> {
        let keys: Vec<String> = ids.iter().map(|id| format!("plan:{id}")).collect();
        let t: Vec<Option<String>> = vec![None; ids.len()];
        let (lo, hi) = span(ids.iter().copied());
        let now = SystemTime::UNIX_EPOCH;
        let records: Vec<Option<&str>> = vec![Some(RedisRecord::Applied.as_str()); ids.len()];
        let rules: Vec<Option<i32>> = vec![Some(1); ids.len()];
        let stale: Vec<Option<bool>> = vec![None; ids.len()];
        self.explain(&succeed_sql(), &[&ids, &keys, &t, &now, &lo, &hi, &records, &rules, &stale])
    }

    /// The plan PostgreSQL uses to find who holds `keys` (INV-9), as msgx's sessions run it.
    pub fn explain_identity_holders(&mut self, keys: &[String]) -> StoreResult<String> {
        self.explain(IDENTITY_HOLDERS, &[&keys])
    }

    /// The plan PostgreSQL uses for the FIFO head query, as msgx's sessions run it.
    pub fn explain_head(&mut self, limit: usize) -> StoreResult<String> {
        let skip: &[i64] = &[];
        self.explain(&head_query(), &[&(limit as i64), &skip])
    }

    /// `EXPLAIN` of `sql` with `params` on this session, one line per plan line.
    fn explain(&mut self, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> StoreResult<String> {
        let rows = self.run(|c| c.query(&format!("EXPLAIN {sql}"), params))?;
        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n"))
    }

    /// The plan the server would keep for the SENT update if it planned it once for any
    /// values (`plan_cache_mode = force_generic_plan`, which msgx's sessions never use).
    pub fn explain_sent_for_any_values(&mut self) -> StoreResult<String> {
        self.run(|c| {
            c.batch_execute(&format!(
                "SET plan_cache_mode = force_generic_plan;
                 PREPARE msgx_explain_sent(bigint[], bigint[], timestamptz, bigint, bigint, text[], int[], bigint[],
                     bigint[]) AS {SENT}"
            ))?;
            let rows = c.query(
                "EXPLAIN EXECUTE msgx_explain_sent('{1}', '{1}', now(), 1, 1, '{t}', '{0}', '{1}', '{NULL}')",
                &[],
            );
            c.batch_execute("DEALLOCATE msgx_explain_sent; SET plan_cache_mode = force_custom_plan")?;
            Ok(rows?.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n"))
        })
    }
}

/// Who holds each of a round's identities (INV-9).
const IDENTITY_HOLDERS: &str = "SELECT identity_key, msg_id FROM proc_state WHERE identity_key = ANY($1)";

impl Fifo for Pg {
    fn unfinished(&mut self, limit: usize, skip: &[i64]) -> StoreResult<Vec<ProcRow>> {
        let rows = self.run(|c| c.query(&head_query(), &[&(limit as i64), &skip]))?;
        rows.iter().map(proc_row).collect()
    }

    fn identity_holders(&mut self, keys: &[String]) -> StoreResult<HashMap<String, i64>> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        // ARCHIVED shadow rows keep IDENTITY_KEY, so they answer here too (INV-9).
        let rows = self.run(|c| c.query(IDENTITY_HOLDERS, &[&keys]))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn commit(&mut self, round: &RoundRecord<'_>, now: SystemTime) -> StoreResult<()> {
        let events = round.events();
        let references: Vec<(i64, &RefChange)> =
            round.succeeded.iter().flat_map(|x| x.references.iter().map(move |r| (x.msg_id, r))).collect();
        // Set-based: one statement per kind of outcome, its row count checked, so a round of
        // fifty costs a handful of statements and stays all-or-nothing.
        self.write(|c| {
            insert_events(c, &events, now)?;
            write_references(c, &references, now)?;
            let answers: Vec<(i64, &crate::requests::Answer)> =
                round.succeeded.iter().filter_map(|x| x.answer.map(|a| (x.msg_id, a))).collect();
            requests::answer(c, &answers, now)?;
            let steps: [(&str, usize, Recorder); 4] = [
                ("succeed", round.succeeded.len(), record_succeeded),
                ("skip", round.skipped.len(), record_skipped),
                ("fail", round.retried.len(), record_retried),
                ("dead", round.dead.len(), record_dead),
            ];
            for (what, named, step) in steps {
                if named > 0 {
                    if let Err(e) = guard(what, step(c, round, now)?, named) {
                        return Ok(Err(e));
                    }
                }
            }
            Ok(Ok(()))
        })
    }

    fn answered(&mut self, msg_ids: &[i64]) -> StoreResult<Vec<crate::requests::Request>> {
        let rows = self.run(|c| requests::answered(c, msg_ids))?;
        requests::requests(&rows)
    }
}

impl MarkLedger for Pg {
    fn still_holds(&mut self) -> StoreResult<()> {
        // An empty fenced transaction: `msgx_fence` refuses an epoch that no longer holds.
        self.write(|_| Ok(Ok(())))
    }

    fn due_backfills(&mut self, now: SystemTime, limit: usize) -> StoreResult<Vec<OwedMark>> {
        let rows = self.run(|c| {
            c.query(
                &format!(
                    "SELECT msg_id, backfill_attempts FROM proc_state
                     WHERE state IN {TERMINAL} AND backfill_at IS NULL AND backfill_abandoned_at IS NULL
                       AND backfill_next_at IS NOT NULL AND backfill_next_at <= $1
                     ORDER BY backfill_next_at, msg_id LIMIT $2"
                ),
                &[&now, &(limit as i64)],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| OwedMark { msg_id: r.get(0), attempts: r.get::<_, i32>(1).max(0) as u32 })
            .collect())
    }

    fn backfill_settled(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.write(|c| {
            c.execute(
                "UPDATE proc_state SET backfill_at = $2, backfill_next_at = NULL, updated_at = $2
                 WHERE msg_id = ANY($1) AND backfill_at IS NULL",
                &[&ids, &now],
            )?;
            Ok(Ok(()))
        })
    }

    fn backfill_retry(&mut self, ids: &[i64], error: &str, next_at: &[SystemTime]) -> StoreResult<()> {
        let error = clip(error, 512);
        self.write(|c| {
            // A retry is no lifecycle step: UPDATED_AT keeps the terminal time (overdue anchor).
            c.execute(
                "UPDATE proc_state p SET backfill_attempts = p.backfill_attempts + 1, backfill_error = $3, backfill_next_at = x.n
                 FROM UNNEST($1::bigint[], $2::timestamptz[]) AS x(id, n)
                 WHERE p.msg_id = x.id AND p.backfill_at IS NULL",
                &[&ids, &next_at, &error],
            )?;
            Ok(Ok(()))
        })
    }

    fn backfill_abandon(&mut self, ids: &[i64], reason: &str, now: SystemTime) -> StoreResult<()> {
        let reason = clip(reason, 64);
        self.write(|c| {
            c.execute(
                "UPDATE proc_state SET backfill_abandoned_at = $3, backfill_abandoned_reason = $2, backfill_next_at = NULL, updated_at = $3
                 WHERE msg_id = ANY($1) AND backfill_at IS NULL",
                &[&ids, &reason, &now],
            )?;
            Ok(Ok(()))
        })
    }

    fn backfill_overdue(&mut self, owed_before: SystemTime, limit: usize) -> StoreResult<Vec<i64>> {
        let rows = self.run(|c| {
            c.query(
                &format!(
                    "SELECT msg_id FROM proc_state
                     WHERE state IN {TERMINAL} AND backfill_at IS NULL AND backfill_abandoned_at IS NULL
                       AND backfill_next_at IS NOT NULL AND backfill_attempts > 0 AND updated_at <= $1
                     ORDER BY msg_id LIMIT $2"
                ),
                &[&owed_before, &(limit as i64)],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

/// Events SENT, each only at the version that was produced.
const SENT: &str = "UPDATE msg_event e SET state = 'SENT', sent_at = $3,
         sent_topic = s.topic, sent_partition = s.part, sent_offset = s.off, sent_row_id = s.row_id
     FROM UNNEST($1::bigint[], $2::bigint[], $6::text[], $7::int[], $8::bigint[], $9::bigint[])
          AS s(id, v, topic, part, off, row_id)
     WHERE e.event_id = s.id AND e.state_version = s.v AND e.state = 'PENDING'
       AND e.event_id BETWEEN $4 AND $5";

/// The receipts of a SENT statement, a column each (NULL where an event has none).
struct Receipts<'a> {
    topic: Vec<Option<&'a str>>,
    partition: Vec<Option<i32>>,
    offset: Vec<Option<i64>>,
    row: Vec<Option<i64>>,
}

impl<'a> Receipts<'a> {
    fn of(sent: &'a [Sent<'_>]) -> Receipts<'a> {
        let mut r = Receipts {
            topic: Vec::with_capacity(sent.len()),
            partition: Vec::with_capacity(sent.len()),
            offset: Vec::with_capacity(sent.len()),
            row: Vec::with_capacity(sent.len()),
        };
        for x in sent {
            let (topic, at, row) = match &x.landed {
                Some(Landed::Kafka { topic, at }) => (Some(topic.as_ref()), Some(*at), None),
                Some(Landed::Outbound { row }) => (None, None, Some(*row)),
                None => (None, None, None),
            };
            r.topic.push(topic);
            r.partition.push(at.map(|p| p.partition));
            r.offset.push(at.map(|p| p.offset));
            r.row.push(row);
        }
        r
    }
}

impl Outbox for Pg {
    fn pending(&mut self, target: Target, limit: usize) -> StoreResult<Vec<MsgEvent>> {
        // A stale instance reads nothing to send: the epoch is checked in the same statement
        // (-1 when unfenced never matches a NULL comparison, so it is skipped there).
        let epoch = self.fence.unwrap_or(-1);
        let rows = self.run(|c| {
            c.query(
                "SELECT event_id, msg_id, partition_key, state_version, payload_json, attempts, next_attempt_at, last_attempt_at,
                        created_at, ordinal
                 FROM msg_event WHERE target = $1 AND state = 'PENDING'
                   AND ($3::bigint < 0 OR EXISTS (SELECT 1 FROM msgx_lease WHERE id = 1 AND epoch = $3::bigint))
                 ORDER BY event_id LIMIT $2",
                &[&target.as_str(), &(limit as i64), &epoch],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| MsgEvent {
                event_id: r.get(0),
                msg_id: r.get(1),
                target,
                partition_key: r.get(2),
                state_version: r.get(3),
                payload_json: r.get(4),
                attempts: r.get::<_, i32>(5).max(0) as u32,
                next_attempt_at: r.get(6),
                last_attempt_at: r.get(7),
                created_at: r.get(8),
                ordinal: r.get(9),
            })
            .collect())
    }

    fn mark_sent(&mut self, sent: &[Sent<'_>], now: SystemTime) -> StoreResult<()> {
        let ids: Vec<i64> = sent.iter().map(|x| x.event_id).collect();
        let versions: Vec<i64> = sent.iter().map(|x| x.state_version).collect();
        let receipts = Receipts::of(sent);
        let (lo, hi) = span(ids.iter().copied());
        // SENT, SENT_AT and where it landed in the same conditional UPDATE (G-EVENT-RETENTION,
        // #40); a row reset to a newer generation meanwhile does not match and stays PENDING.
        // The bounds keep an outbox that grew during an outage from being hashed whole for
        // every batch (`span`).
        self.write(|c| {
            let r = &receipts;
            c.execute(SENT, &[&ids, &versions, &now, &lo, &hi, &r.topic, &r.partition, &r.offset, &r.row])?;
            requests::sent(c, sent, now)?;
            Ok(Ok(()))
        })
    }

    fn retry(&mut self, ids: &[i64], class: ErrorClass, error: &str, next_at: SystemTime) -> StoreResult<()> {
        let error = clip(error, 1000);
        self.write(|c| {
            c.execute(
                "UPDATE msg_event SET attempts = attempts + 1, next_attempt_at = $2, error_class = $3, last_error = $4
                 WHERE event_id = ANY($1) AND state = 'PENDING'",
                &[&ids, &next_at, &class.as_str(), &error],
            )?;
            Ok(Ok(()))
        })
    }

    fn dead(&mut self, ids: &[i64], class: ErrorClass, error: &str) -> StoreResult<()> {
        let error = clip(error, 1000);
        self.write(|c| {
            c.execute(
                "UPDATE msg_event SET state = 'DEAD', attempts = attempts + 1, error_class = $2, last_error = $3
                 WHERE event_id = ANY($1) AND state = 'PENDING'",
                &[&ids, &class.as_str(), &error],
            )?;
            Ok(Ok(()))
        })
    }

    fn started(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.write(|c| {
            c.execute(
                "UPDATE msg_event SET last_attempt_at = $2 WHERE event_id = ANY($1) AND state = 'PENDING'",
                &[&ids, &now],
            )?;
            Ok(Ok(()))
        })
    }
}

/// PROC_STATE's columns but ARCHIVED_AT, in table order: what PROC_STATE_HST copies.
const PROC_COLUMNS: &str = "msg_id, state, identity_key, attempts, next_attempt_at, error_class, last_error, updated_at, \
     received_at, backfill_at, backfill_next_at, backfill_attempts, backfill_error, backfill_abandoned_at, \
     backfill_abandoned_reason, enqueued_at, first_failed_at, type_tag, backfill_reconciled_at, backfill_reconciled_note, \
     dismissed_at, dismissed_note, redis_record, rules_version, snapshot_stale";

/// An archive candidate ($2 settled before, $4 DEAD since before): terminal, mark written or
/// abandoned-and-reconciled (C-16); a DEAD row only once dismissed or past `dead-keep`.
const ARCHIVABLE: &str = "(state IN ('SUCCEEDED', 'SKIPPED') OR (state = 'DEAD' AND (dismissed_at IS NOT NULL OR updated_at < $4))) \
     AND (backfill_at IS NOT NULL OR (backfill_abandoned_at IS NOT NULL AND backfill_reconciled_at IS NOT NULL)) \
     AND updated_at < $2";

impl Housekeeping for Pg {
    fn delete_sent_events(&mut self, sent_before: SystemTime, limit: usize) -> StoreResult<usize> {
        self.write(|c| {
            // The outer STATE = 'SENT' re-check keeps a KAFKA:schd row that a new generation
            // reset to PENDING meanwhile (either order is safe).
            let n = c.execute(
                "DELETE FROM msg_event WHERE state = 'SENT' AND event_id IN (
                     SELECT event_id FROM msg_event
                     WHERE state = 'SENT' AND sent_at IS NOT NULL AND sent_at < $1
                     ORDER BY event_id LIMIT $2)",
                &[&sent_before, &(limit as i64)],
            )?;
            Ok(Ok(n as usize))
        })
    }

    fn archive_candidates(&mut self, cut: &ArchiveCut, limit: usize) -> StoreResult<Vec<i64>> {
        let rows = self.run(|c| {
            // $1 is a no-op bound so that ARCHIVABLE's $2 and $4 mean the same in every statement.
            c.query(
                &format!("SELECT msg_id FROM proc_state WHERE {ARCHIVABLE} AND msg_id > $1 ORDER BY msg_id LIMIT $3"),
                &[&i64::MIN, &cut.settled_before, &(limit as i64), &cut.dead_before],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn archive_one(
        &mut self,
        msg_id: i64,
        cut: &ArchiveCut,
        now: SystemTime,
    ) -> StoreResult<Option<ArchivedAs>> {
        self.write(|c| {
            // Copy and shadow in one statement on the row locked and re-checked: a DEAD row
            // replayed to PENDING meanwhile matches nothing, and nothing is kept.
            let row = c.query_opt(
                &format!(
                    "WITH old AS (SELECT {PROC_COLUMNS} FROM proc_state WHERE msg_id = $1 AND {ARCHIVABLE} FOR UPDATE),
                          copied AS (INSERT INTO proc_state_hst ({PROC_COLUMNS}, archived_at) SELECT {PROC_COLUMNS}, $3 FROM old)
                     UPDATE proc_state p SET state = 'ARCHIVED', archived_at = $3, updated_at = $3, attempts = 0,
                         next_attempt_at = NULL, error_class = NULL, last_error = NULL, received_at = NULL,
                         backfill_at = NULL, backfill_next_at = NULL, backfill_attempts = 0, backfill_error = NULL,
                         first_failed_at = NULL, type_tag = NULL, dismissed_at = NULL, dismissed_note = NULL
                     FROM old WHERE p.msg_id = old.msg_id
                     RETURNING old.state = 'DEAD' AND old.dismissed_at IS NULL"
                ),
                &[&msg_id, &cut.settled_before, &now, &cut.dead_before],
            )?;
            Ok(Ok(row.map(|r| if r.get(0) { ArchivedAs::DeadUndealt } else { ArchivedAs::Settled })))
        })
    }
}

/// The URL's libpq TLS parameters as msgx's settings: `sslmode` (libpq's default: prefer),
/// `sslrootcert`, `sslcert`, `sslkey`.
fn pg_tls(params: &BTreeMap<String, String>) -> Result<Tls, String> {
    let mode = match params.get("sslmode") {
        Some(m) => Mode::libpq(m).ok_or_else(|| {
            format!("sslmode={m} is not disable, prefer, require, verify-ca or verify-full")
        })?,
        None => Mode::Prefer,
    };
    let file = |k: &str| params.get(k).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    let tls = Tls {
        mode,
        files: tls::Files { ca: file("sslrootcert"), cert: file("sslcert"), key: file("sslkey") },
    };
    tls.check("sslcert/sslkey")?;
    if matches!(mode, Mode::VerifyCa | Mode::VerifyFull) && tls.files.ca.is_none() {
        // libpq reads ~/.postgresql/root.crt; a service has no such home: the system's roots.
        log::debug!("sslmode={} without sslrootcert: the system's CAs", mode.name());
    }
    Ok(tls)
}

#[cfg(test)]
mod tests {
    use super::clip;

    /// `proc_row` reads by place: the places are these columns'.
    #[test]
    fn proc_row_reads_the_columns_of_proc_row_in_their_order() {
        let columns: Vec<&str> = super::PROC_ROW.split(", ").collect();
        let read = [
            "msg_id",
            "state",
            "attempts",
            "next_attempt_at",
            "error_class",
            "last_error",
            "identity_key",
            "first_failed_at",
            "type_tag",
            "received_at",
        ];
        assert_eq!(columns, read);
    }

    #[test]
    fn a_span_is_the_lowest_and_highest_id_and_none_matches_nothing() {
        assert_eq!(super::span([7, 3, 9, 4]), (3, 9));
        assert_eq!(super::span([5]), (5, 5));
        let (lo, hi) = super::span([]);
        assert!(lo > hi, "an empty batch's bounds hold no id");
    }

    #[test]
    fn clip_respects_character_boundaries_and_drops_nul() {
        assert_eq!(clip("航班延误", 2), "航班");
        assert_eq!(clip("abc", 10), "abc");
        assert_eq!(clip("", 0), "");
        assert_eq!(clip("a\0b", 10), "a\u{FFFD}b", "PostgreSQL text cannot hold NUL (22021)");
    }
}
