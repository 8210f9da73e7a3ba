//! The shared MySQL mailbox (someone else's database, C-14): msgx only reads `CMINMSGS`,
//! writes the processed mark on rows it finished, and inserts into `COUTMSGS`. Table and
//! column names come from configuration; they were validated as plain SQL names there.
//!
//! No read converts a value it was not asked to: bodies are read as bytes (a `LONGBLOB`
//! column or a binary connection charset may hold anything) and checked by the pump, so a
//! row that is not text is that row's failure, never a panic in the driver.

pub mod classify;
mod tls;

use crate::error::Store;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use mysql::prelude::Queryable;
use mysql::{Opts, OptsBuilder, Row, Value};

use crate::clock::zone::MailboxZone;
use crate::config::{InboundMailbox, OutboundMailbox};
use crate::domain::{InboundRow, MailboxRow};
use crate::error::StoreError;
use crate::ports::{
    within_budget, MailboxMarks, MailboxScan, MailboxSubmit, MailboxTexts, Mark, Outbound, Raw, StoreResult,
};

/// How long a mailbox call may go unanswered before the mailbox counts as unavailable (#21
/// item 11): a server that hangs is an outage from its first seconds, not after a minute. The
/// largest read msgx makes (a round's texts within `process-batch-bytes`, a rescan chunk) takes
/// tens of milliseconds on a healthy server.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one of msgx's mailbox sessions may wait for a lock or sit idle inside a
/// transaction: below the lease duration's default (10 s), so a frozen instance's marks never
/// hold the rows past a takeover.
pub const SESSION_LIMIT: Duration = Duration::from_secs(5);

/// A MySQL connection that is opened lazily and dropped after any error, so the next call
/// starts clean (a connection in an unknown state is not worth reasoning about).
struct Conn {
    opts: Opts,
    conn: Option<mysql::Conn>,
    /// The URL's TLS parameters (#64), the files read at each new connection.
    tls: crate::store::tls::Tls,
    /// `mailbox.shared-mysql.password-file`, read at each new connection.
    password: Option<crate::secret::SecretFile>,
}

impl Conn {
    fn new(url: &str) -> StoreResult<Conn> {
        let bad =
            |e: String| StoreError::rejected(Store::Mailbox, format!("bad mailbox.shared-mysql.url: {e}"));
        let (rest, params) = crate::store::tls::split_params(url, &tls::PARAMS);
        let tls = tls::settings(&params).map_err(bad)?;
        let opts = Opts::from_url(&rest).map_err(|e| bad(e.to_string()))?;
        let opts: Opts = OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(Duration::from_secs(5)))
            .read_timeout(Some(RESPONSE_TIMEOUT))
            .write_timeout(Some(RESPONSE_TIMEOUT))
            .into();
        Ok(Conn { opts, conn: None, tls, password: None })
    }

    /// The connection; a failure to connect is always unavailable (untrusted when TLS refused
    /// the server or a file could not be read: #64).
    fn get(&mut self) -> StoreResult<&mut mysql::Conn> {
        if self.conn.is_none() {
            let unavailable =
                |e: mysql::Error| StoreError::unavailable(Store::Mailbox, classify::classify(&e).detail);
            let mut c = tls::open(&self.opts, &self.tls, self.password.as_ref())?;
            // msgx writes DATETIMEs in mailbox.time-zone itself; the session stays on UTC so
            // that nothing depends on the server's own zone.
            c.query_drop("SET time_zone = '+00:00'").map_err(unavailable)?;
            // A frozen msgx (SIGSTOP, a paused VM) must not hold someone else's rows: lock waits
            // and a transaction left idle end well inside the lease duration (#21 item 10).
            // `idle_transaction_timeout` is MariaDB's (10.3+); MySQL answers 1193 and keeps
            // only the lock-wait limit (docs/operations.md).
            c.query_drop(format!("SET SESSION innodb_lock_wait_timeout = {}", SESSION_LIMIT.as_secs()))
                .map_err(unavailable)?;
            match c.query_drop(format!("SET SESSION idle_transaction_timeout = {}", SESSION_LIMIT.as_secs()))
            {
                Err(mysql::Error::MySqlError(e)) if e.code == 1193 => {}
                other => other.map_err(unavailable)?,
            }
            self.conn = Some(c);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    fn run<R>(&mut self, f: impl FnOnce(&mut mysql::Conn) -> Result<R, mysql::Error>) -> StoreResult<R> {
        let r = f(self.get()?);
        if r.is_err() {
            self.conn = None;
        }
        r.map_err(|e| classify::classify(&e))
    }
}

/// The inbound mailbox `CMINMSGS`: read, mark, and the compat insert.
pub struct MysqlMailbox {
    conn: Conn,
    names: InboundMailbox,
}

/// `t` as a DATETIME of the mailbox's zone (`mailbox.time-zone`).
pub fn to_value(t: SystemTime, zone: &MailboxZone) -> Value {
    let c = zone.civil(t);
    Value::Date(
        c.year() as u16,
        c.month() as u8,
        c.day() as u8,
        c.hour() as u8,
        c.minute() as u8,
        c.second() as u8,
        (c.subsec_nanosecond() / 1000) as u32,
    )
}

/// A DATETIME of the mailbox's zone as an instant (`None` for NULL or a value out of range).
pub fn from_value(v: Value, zone: &MailboxZone) -> Option<SystemTime> {
    match v {
        Value::Date(y, mo, d, h, mi, s, us) => {
            let dt = jiff::civil::DateTime::new(
                i16::try_from(y).ok()?,
                mo as i8,
                d as i8,
                h as i8,
                mi as i8,
                s as i8,
                (us * 1000) as i32,
            )
            .ok()?;
            zone.instant(dt)
        }
        _ => None,
    }
}

impl MysqlMailbox {
    pub fn new(url: &str, names: &InboundMailbox) -> StoreResult<MysqlMailbox> {
        Ok(MysqlMailbox { conn: Conn::new(url)?, names: names.clone() })
    }

    /// The inbound mailbox as the configuration names it: the URL and the password file.
    pub fn of(cfg: &crate::config::Config) -> StoreResult<MysqlMailbox> {
        let mut m = MysqlMailbox::new(&cfg.mysql_url, &cfg.inbound)?;
        m.conn.password = cfg.mysql_password.clone();
        Ok(m)
    }

    /// Connected now.
    pub fn connected(mut self) -> StoreResult<MysqlMailbox> {
        self.conn.get()?;
        Ok(self)
    }

    /// How this connection is secured, as configured and as the server sees it
    /// (`Ssl_version`, `Ssl_cipher`): for `msgx check` and the start-up log (#64).
    pub fn security(&mut self) -> StoreResult<String> {
        let configured = self.conn.tls.describe();
        let rows: Vec<(String, String)> = self
            .conn
            .run(|c| c.query("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')"))?;
        let get = |k: &str| rows.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default();
        let (version, cipher) = (get("Ssl_version"), get("Ssl_cipher"));
        let seen = if version.is_empty() {
            crate::store::tls::PLAINTEXT.to_string()
        } else {
            format!("{version} {cipher}")
        };
        Ok(format!("{seen} ({configured})"))
    }

    /// The host of the URL, for the plaintext-off-loopback warning.
    pub fn host(&self) -> String {
        self.conn.opts.get_ip_or_hostname().to_string()
    }

    pub fn connect(url: &str, names: &InboundMailbox) -> StoreResult<MysqlMailbox> {
        let mut m = MysqlMailbox::new(url, names)?;
        m.conn.get()?;
        Ok(m)
    }

    fn run<R>(
        &mut self,
        f: impl FnOnce(&mut mysql::Conn, &InboundMailbox) -> Result<R, mysql::Error>,
    ) -> StoreResult<R> {
        let names = &self.names;
        self.conn.run(|c| f(c, names))
    }

    /// Checks, read-only, that the configured table and columns exist (`msgx check`).
    pub fn check_layout(&mut self) -> StoreResult<()> {
        let n = self.names.clone();
        let sql = format!(
            "SELECT {id}, {body}, {rcv}, {proc}, {st} FROM {t} WHERE 1 = 0",
            id = n.id_column,
            body = n.body_column,
            rcv = n.received_column,
            proc = n.processed_column,
            st = n.status_column,
            t = n.table
        );
        self.run(|c, _| c.query_drop(sql))
    }
}

fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// A column's value as `T`, or a conversion error (never a panic). `_what` names it for the
/// reader of the code; the error carries the value.
fn column<T: mysql::prelude::FromValue>(row: &mut Row, i: usize, _what: &str) -> Result<T, mysql::Error> {
    match row.take_opt::<T, usize>(i) {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(mysql::Error::FromValueError(e.0)),
        None => Err(mysql::Error::FromValueError(Value::NULL)),
    }
}

/// The rescan's read: a range of the primary key, so no chunk scans the table.
fn unmarked_sql(n: &InboundMailbox, from: i64, to: i64, limit: usize) -> (String, Vec<Value>) {
    let sql = format!(
        "SELECT {id}, {rcv} FROM {t} WHERE {id} >= ? AND {id} <= ? AND {proc} IS NULL AND {st} IN ({ph})
         ORDER BY {id} LIMIT ?",
        id = n.id_column,
        rcv = n.received_column,
        t = n.table,
        proc = n.processed_column,
        st = n.status_column,
        ph = placeholders(n.status_filter.len())
    );
    let mut params: Vec<Value> = vec![from.into(), to.into()];
    params.extend(n.status_filter.iter().map(|s| Value::from(s.as_str())));
    params.push((limit as u64).into());
    (sql, params)
}

impl crate::ports::MailboxAudit for MysqlMailbox {
    fn ours(
        &mut self,
        from: i64,
        to: i64,
        limit: usize,
        marked_only: bool,
    ) -> StoreResult<Vec<crate::ports::OursRow>> {
        self.run(|c, n| {
            let unmarked = if marked_only { "FALSE" } else { "TRUE" };
            let sql = format!(
                "SELECT {id}, {rcv}, {proc} FROM {t} WHERE {id} >= ? AND {id} <= ?
                   AND (({unmarked} AND {proc} IS NULL AND {st} IN ({ph})) OR ({proc} IS NOT NULL AND {st} = ?))
                 ORDER BY {id} LIMIT ?",
                id = n.id_column,
                rcv = n.received_column,
                t = n.table,
                proc = n.processed_column,
                st = n.status_column,
                ph = placeholders(n.status_filter.len())
            );
            let mut params: Vec<Value> = vec![from.into(), to.into()];
            params.extend(n.status_filter.iter().map(|s| Value::from(s.as_str())));
            params.push(n.processed_status.as_str().into());
            params.push((limit as u64).into());
            let rows: Vec<Row> = c.exec(sql, params)?;
            rows.into_iter()
                .map(|mut r| {
                    let id: i64 = column(&mut r, 0, "id")?;
                    let rcv: Value = column(&mut r, 1, "received")?;
                    let marked: Value = column(&mut r, 2, "marked")?;
                    let row = InboundRow { id, received_at: from_value(rcv, &n.zone) };
                    let marked_at = from_value(marked.clone(), &n.zone);
                    Ok(crate::ports::OursRow { row, marked: marked != Value::NULL, marked_at })
                })
                .collect()
        })
    }

    fn exclusive_marks(&self) -> bool {
        self.names.exclusive_marks
    }
}

impl MysqlMailbox {
    /// `EXPLAIN` of the rescan's chunk read, as (access type, key, estimated rows) per table:
    /// the proof that a chunk reads a primary-key range, not the table.
    pub fn explain_rescan(
        &mut self,
        from: i64,
        to: i64,
        limit: usize,
    ) -> StoreResult<Vec<(String, Option<String>, i64)>> {
        self.run(|c, n| {
            let (sql, params) = unmarked_sql(n, from, to, limit);
            let rows: Vec<Row> = c.exec(format!("EXPLAIN {sql}"), params)?;
            Ok(rows
                .into_iter()
                .map(|r| {
                    let get = |k: &str| r.get_opt::<Option<String>, _>(k).and_then(|v| v.ok()).flatten();
                    let rows = get("rows").and_then(|v| v.parse().ok()).unwrap_or(-1);
                    (get("type").unwrap_or_default(), get("key"), rows)
                })
                .collect())
        })
    }
}

impl crate::ports::MailboxEntries for MysqlMailbox {
    /// The row `id`, its text fetched when at most `max_bytes` long; `None`: no such row.
    fn entry(&mut self, id: i64, max_bytes: u64) -> StoreResult<Option<crate::ports::MailboxEntry>> {
        self.run(|c, n| {
            let sql = format!(
                "SELECT {rcv}, {st}, {proc}, IF(OCTET_LENGTH({body}) <= ?, {body}, NULL) FROM {t} WHERE {id} = ?",
                rcv = n.received_column,
                st = n.status_column,
                proc = n.processed_column,
                body = n.body_column,
                t = n.table,
                id = n.id_column,
            );
            let row: Option<Row> = c.exec_first(sql, (max_bytes, id))?;
            let Some(mut r) = row else { return Ok(None) };
            let rcv: Value = column(&mut r, 0, "received")?;
            let status: Option<String> = column(&mut r, 1, "status")?;
            let proc: Value = column(&mut r, 2, "processed")?;
            let body: Option<Vec<u8>> = column(&mut r, 3, "body")?;
            Ok(Some(crate::ports::MailboxEntry {
                received_at: from_value(rcv, &n.zone),
                status,
                processed_at: from_value(proc, &n.zone),
                text: body.map(|b| String::from_utf8_lossy(&b).into_owned()),
            }))
        })
    }
}

impl MailboxScan for MysqlMailbox {
    fn rows(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<MailboxRow>> {
        self.run(|c, n| {
            let sql = format!(
                "SELECT {id}, {rcv}, ({proc} IS NULL AND {st} IN ({ph})) FROM {t}
                 WHERE {id} >= ? AND {id} <= ? ORDER BY {id} LIMIT ?",
                id = n.id_column,
                rcv = n.received_column,
                proc = n.processed_column,
                st = n.status_column,
                ph = placeholders(n.status_filter.len()),
                t = n.table,
            );
            let mut params: Vec<Value> = n.status_filter.iter().map(|s| Value::from(s.as_str())).collect();
            params.extend([from.into(), to.into(), (limit as u64).into()]);
            let rows: Vec<Row> = c.exec(sql, params)?;
            rows.into_iter()
                .map(|mut r| {
                    let id: i64 = column(&mut r, 0, "id")?;
                    let rcv: Value = column(&mut r, 1, "received")?;
                    let wanted: Option<i64> = column(&mut r, 2, "wanted")?;
                    Ok(MailboxRow { id, received_at: from_value(rcv, &n.zone), wanted: wanted == Some(1) })
                })
                .collect()
        })
    }

    fn ids_in_use(&mut self) -> StoreResult<(Option<i64>, Option<i64>)> {
        self.run(|c, n| {
            let max: Option<Option<i64>> =
                c.query_first(format!("SELECT MAX({id}) FROM {t}", id = n.id_column, t = n.table))?;
            let auto: Option<Option<u64>> = c.exec_first(
                "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
                (n.table.as_str(),),
            )?;
            Ok((max.flatten(), auto.flatten().map(|a| a as i64)))
        })
    }

    fn unmarked(&mut self, from: i64, to: i64, limit: usize) -> StoreResult<Vec<InboundRow>> {
        self.run(|c, n| {
            let (sql, params) = unmarked_sql(n, from, to, limit);
            let rows: Vec<Row> = c.exec(sql, params)?;
            rows.into_iter()
                .map(|mut r| {
                    let id: i64 = column(&mut r, 0, "id")?;
                    let rcv: Value = column(&mut r, 1, "received")?;
                    Ok(InboundRow { id, received_at: from_value(rcv, &n.zone) })
                })
                .collect()
        })
    }
}

impl MailboxSubmit for MysqlMailbox {
    fn insert(&mut self, raw: &str, at: SystemTime) -> StoreResult<i64> {
        self.run(|c, n| {
            // A new row as the upstream writes it: the first status of the filter (VALID).
            let sql = format!(
                "INSERT INTO {t} ({body}, {rcv}, {st}) VALUES (?, ?, ?)",
                t = n.table,
                body = n.body_column,
                rcv = n.received_column,
                st = n.status_column
            );
            c.exec_drop(sql, (raw, to_value(at, &n.zone), n.status_filter[0].as_str()))?;
            Ok(c.last_insert_id() as i64)
        })
    }
}

impl MailboxTexts for MysqlMailbox {
    fn raws(&mut self, ids: &[i64], max_bytes: u64, budget: u64) -> StoreResult<HashMap<i64, Raw>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        // One read when the texts are small: each body comes only if it is within its share of
        // the budget, so that read holds at most the budget whatever the rows hold. Its sizes
        // then say where the round ends; only a text over its share that still fits (over 16
        // KiB at the defaults) is read again.
        let share = (budget / ids.len() as u64).clamp(1, max_bytes);
        let mut first = self.texts(ids, share)?;
        let sizes: Vec<(i64, Option<u64>)> = ids.iter().map(|id| (*id, first.get(id).map(|t| t.0))).collect();
        let cut = within_budget(&sizes, max_bytes, budget);
        let mut out = HashMap::with_capacity(ids.len());
        let mut again = Vec::new();
        for id in &ids[..cut] {
            match first.remove(id) {
                None => {} // no row, or no text: absent
                Some((bytes, _)) if bytes > max_bytes => {
                    out.insert(*id, Raw::TooLarge { bytes });
                }
                Some((_, Some(body))) => {
                    out.insert(*id, Raw::Body(body));
                }
                Some((_, None)) => again.push(*id),
            }
        }
        drop(first); // the texts past the cut, before the second read
        if !again.is_empty() {
            for (id, (bytes, body)) in self.texts(&again, max_bytes)? {
                out.insert(id, body.map(Raw::Body).unwrap_or(Raw::TooLarge { bytes }));
            }
        }
        out.extend(ids[cut..].iter().map(|id| (*id, Raw::Later)));
        Ok(out)
    }
}

/// A row's text size in bytes, and the text when it was asked for.
type Text = (u64, Option<Vec<u8>>);

impl MysqlMailbox {
    /// Each row's text size, and its text when that is at most `up_to` bytes; a row without
    /// text (NULL) is absent. The size comes first in the statement: a 20 MB CLOB is refused
    /// without being read.
    fn texts(&mut self, ids: &[i64], up_to: u64) -> StoreResult<HashMap<i64, Text>> {
        self.run(|c, n| {
            let sql = format!(
                "SELECT {id}, OCTET_LENGTH({body}), CASE WHEN OCTET_LENGTH({body}) > ? THEN NULL ELSE {body} END
                 FROM {t} WHERE {id} IN ({ph})",
                body = n.body_column,
                t = n.table,
                id = n.id_column,
                ph = placeholders(ids.len())
            );
            let mut params: Vec<Value> = Vec::with_capacity(ids.len() + 1);
            params.push(up_to.into());
            params.extend(ids.iter().map(|id| Value::from(*id)));
            let rows: Vec<Row> = c.exec(sql, params)?;
            let mut out = HashMap::with_capacity(rows.len());
            for mut r in rows {
                let id: i64 = column(&mut r, 0, "id")?;
                let Some(bytes) = column::<Option<u64>>(&mut r, 1, "length")? else {
                    continue; // NULL body: the text is missing
                };
                let body = match column::<Value>(&mut r, 2, "body")? {
                    Value::NULL => None,
                    Value::Bytes(b) => Some(b),
                    other => Some(other.as_sql(true).into_bytes()),
                };
                out.insert(id, (bytes, body));
            }
            Ok(out)
        })
    }
}

impl MailboxMarks for MysqlMailbox {
    fn mark(
        &mut self,
        ids: &[i64],
        at: SystemTime,
        still_ours: &dyn Fn() -> StoreResult<()>,
    ) -> StoreResult<Vec<Mark>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // The common case in one statement: every row there and unmarked, so the write moves
        // them all. Otherwise which rows were marked by someone else, or are gone, is known
        // only by locking and reading them first: the write is taken back and done that way.
        if let Some(written) = self.mark_all(ids, at, still_ours)? {
            return written.map(|()| vec![Mark::Written; ids.len()]);
        }
        self.mark_each(ids, at, still_ours)
    }
}

impl MysqlMailbox {
    /// `UPDATE {proc} = at` on every row of `ids`. `None` (rolled back) when it did not move
    /// exactly `ids.len()` rows: some were marked already, missing, or named twice.
    fn mark_all(
        &mut self,
        ids: &[i64],
        at: SystemTime,
        still_ours: &dyn Fn() -> StoreResult<()>,
    ) -> StoreResult<Option<StoreResult<()>>> {
        // Short by design: check the gate, write, check the gate, commit. A frozen instance
        // holding these locks is cut off by the session's idle_transaction_timeout.
        self.run(|c, n| {
            let mut tx = c.start_transaction(mysql::TxOpts::default())?;
            if let Err(e) = still_ours() {
                tx.rollback()?;
                return Ok(Some(Err(e)));
            }
            let moved = write_marks(&mut tx, n, ids, at)?;
            if moved != ids.len() as u64 {
                tx.rollback()?;
                return Ok(None);
            }
            // The marks were stamped before the write; one that woke after a takeover must not
            // commit them.
            if let Err(e) = still_ours() {
                tx.rollback()?;
                return Ok(Some(Err(e)));
            }
            tx.commit()?;
            Ok(Some(Ok(())))
        })
    }

    /// Locks the rows first so "already marked by someone else" is known for sure, then marks
    /// the rest.
    fn mark_each(
        &mut self,
        ids: &[i64],
        at: SystemTime,
        still_ours: &dyn Fn() -> StoreResult<()>,
    ) -> StoreResult<Vec<Mark>> {
        self.run(|c, n| {
            let mut tx = c.start_transaction(mysql::TxOpts::default())?;
            let sql = format!(
                "SELECT {id}, {proc} IS NOT NULL FROM {t} WHERE {id} IN ({ph}) FOR UPDATE",
                id = n.id_column,
                proc = n.processed_column,
                t = n.table,
                ph = placeholders(ids.len())
            );
            let rows: Vec<Row> = tx.exec(sql, ids.to_vec())?;
            let mut found: HashMap<i64, bool> = HashMap::with_capacity(rows.len());
            for mut r in rows {
                let id: i64 = column(&mut r, 0, "id")?;
                let marked: i64 = column(&mut r, 1, "marked")?;
                found.insert(id, marked != 0);
            }
            if let Err(e) = still_ours() {
                tx.rollback()?;
                return Ok(Err(e));
            }
            let to_write: Vec<i64> =
                found.iter().filter(|(_, marked)| !**marked).map(|(id, _)| *id).collect();
            if !to_write.is_empty() {
                write_marks(&mut tx, n, &to_write, at)?;
            }
            if let Err(e) = still_ours() {
                tx.rollback()?;
                return Ok(Err(e));
            }
            tx.commit()?;
            Ok(Ok(ids
                .iter()
                .map(|id| match found.get(id) {
                    None => Mark::Missing,
                    Some(true) => Mark::AlreadyMarked,
                    Some(false) => Mark::Written,
                })
                .collect()))
        })?
    }
}

/// Stamps the processed mark on those of `ids` that hold none (only an empty mark is ever
/// written, INV-7, C-5); how many rows it moved.
fn write_marks(
    tx: &mut mysql::Transaction<'_>,
    n: &InboundMailbox,
    ids: &[i64],
    at: SystemTime,
) -> Result<u64, mysql::Error> {
    let sql = format!(
        "UPDATE {t} SET {proc} = ?, {st} = ? WHERE {id} IN ({ph}) AND {proc} IS NULL",
        t = n.table,
        proc = n.processed_column,
        st = n.status_column,
        id = n.id_column,
        ph = placeholders(ids.len())
    );
    let mut params: Vec<Value> = Vec::with_capacity(ids.len() + 2);
    params.push(to_value(at, &n.zone));
    params.push(n.processed_status.as_str().into());
    params.extend(ids.iter().map(|id| Value::from(*id)));
    tx.exec_drop(sql, params)?;
    Ok(tx.affected_rows())
}

/// The outbound mailbox `COUTMSGS`: insert only (someone else reads and sends, C-14).
pub struct MysqlOutbound {
    conn: Conn,
    names: OutboundMailbox,
}

impl MysqlOutbound {
    /// Parses the URL; connects lazily.
    pub fn new(url: &str, names: &OutboundMailbox) -> StoreResult<MysqlOutbound> {
        Ok(MysqlOutbound { conn: Conn::new(url)?, names: names.clone() })
    }

    /// The outbound mailbox as the configuration names it: the URL and the password file.
    pub fn of(cfg: &crate::config::Config) -> StoreResult<MysqlOutbound> {
        let mut m = MysqlOutbound::new(&cfg.mysql_url, &cfg.outbound)?;
        m.conn.password = cfg.mysql_password.clone();
        Ok(m)
    }

    pub fn connect(url: &str, names: &OutboundMailbox) -> StoreResult<MysqlOutbound> {
        let mut m = MysqlOutbound::new(url, names)?;
        m.conn.get()?;
        Ok(m)
    }

    /// Checks, read-only, that the configured table and columns exist (`msgx check`).
    pub fn check_layout(&mut self) -> StoreResult<()> {
        let n = &self.names;
        let sql = format!(
            "SELECT {id}, {body}, {ins}, {rt} FROM {t} WHERE 1 = 0",
            id = n.id_column,
            body = n.body_column,
            ins = n.inserted_column,
            rt = n.routing_column,
            t = n.table
        );
        self.conn.run(|c| c.query_drop(sql))
    }
}

/// A time truncated to the second, as a `DATETIME` column stores it.
fn to_value_secs(t: SystemTime, zone: &MailboxZone) -> Value {
    match to_value(t, zone) {
        Value::Date(y, mo, d, h, mi, s, _) => Value::Date(y, mo, d, h, mi, s, 0),
        other => other,
    }
}

impl Outbound for MysqlOutbound {
    fn insert(&mut self, routing_id: &str, xml: &str, at: SystemTime) -> StoreResult<i64> {
        let n = self.names.clone();
        self.conn.run(|c| {
            let sql = format!(
                "INSERT INTO {t} ({body}, {ins}, {rt}) VALUES (?, ?, ?)",
                t = n.table,
                body = n.body_column,
                ins = n.inserted_column,
                rt = n.routing_column
            );
            c.exec_drop(sql, (xml, to_value_secs(at, &n.zone), routing_id))?;
            Ok(c.last_insert_id() as i64)
        })
    }

    fn find(&mut self, routing_id: &str, xml: &str, since: SystemTime) -> StoreResult<Option<i64>> {
        let n = self.names.clone();
        self.conn.run(|c| {
            let sql = format!(
                "SELECT {id} FROM {t} WHERE {rt} = ? AND {ins} >= ? AND {body} = ? ORDER BY {id} LIMIT 1",
                id = n.id_column,
                t = n.table,
                rt = n.routing_column,
                ins = n.inserted_column,
                body = n.body_column
            );
            let row: Option<Row> = c.exec_first(sql, (routing_id, to_value_secs(since, &n.zone), xml))?;
            row.map(|mut r| column::<i64>(&mut r, 0, "id")).transpose()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    #[test]
    fn datetime_values_round_trip_to_the_microsecond() {
        let t = FakeClock::new().now() + Duration::from_micros(123_456);
        let utc = MailboxZone::default();
        assert_eq!(from_value(to_value(t, &utc), &utc), Some(t));
        assert_eq!(from_value(Value::NULL, &utc), None);
        let beijing = MailboxZone::parse("+08:00").unwrap();
        assert_eq!(from_value(to_value(t, &beijing), &beijing), Some(t));
        assert_ne!(to_value(t, &beijing), to_value(t, &utc));
    }
}
