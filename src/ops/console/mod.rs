//! The read-only console (#40) on the operations endpoint: `GET /` (the instance, its stages and
//! stores, the queue, the dead letters, the lease — from what the endpoint already holds, no
//! store read), `/dead`, `/trace/{msg_id}`, `/flight/{flid}` (server-rendered HTML, no
//! JavaScript, every MSG_ID, FLID and event linked), and `/api/trace/{msg_id}`,
//! `/api/flight/{flid}`: the JSON `msgx trace --json` and `msgx flight --json` print.
//!
//! It runs on a thread of its own with its own connections, opened when first needed and
//! dropped after an error: a store that hangs holds the console, never `/live` or `/metrics`.
//! No page shows a configuration value, a URL or a password; a store's error is logged and the
//! page names only the store.

mod pages;

use std::time::{Duration, SystemTime};

use askama::Template;
use log::warn;

use super::http::Answer;
use super::metrics::Metrics;
use super::{Ops, STORES};
use crate::clock::rfc3339 as time;
use crate::config::Config;
use crate::error::{Store, StoreError};
use crate::lineage::{self, FlightReport, Trace};
use crate::ports::{DeadFilter, FlightAudit, MailboxEntries, OwnReads, StoreResult, TraceEvent};
use pages::{Link, Pair};

/// How many DEAD messages `/dead` lists, and changes `/flight` shows.
const LIST_LIMIT: i64 = 200;

/// A console request, from its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Page {
    Overview,
    Dead,
    Trace(i64),
    Flight(String),
    ApiTrace(i64),
    ApiFlight(String),
    /// The navigation form: to a message's or a flight's page.
    Find(Option<String>, Option<String>),
}

impl Page {
    /// The console page `path` asks for; `None`: not the console's; `Err`: a bad id.
    pub fn of(path: &str) -> Option<Result<Page, String>> {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let id = |s: &str| s.parse::<i64>().map_err(|_| format!("{s:?} is not a MSG_ID"));
        let flid = |s: &str| {
            let f = percent_decoded(s);
            if f.is_empty() || f.len() > 64 {
                Err("a FLID is 1 to 64 characters".to_string())
            } else {
                Ok(f)
            }
        };
        Some(match path {
            "/" => Ok(Page::Overview),
            "/dead" => Ok(Page::Dead),
            "/find" => {
                let arg = |name: &str| {
                    query
                        .split('&')
                        .filter_map(|kv| kv.split_once('='))
                        .find(|(k, _)| *k == name)
                        .map(|(_, v)| percent_decoded(&v.replace('+', " ")).trim().to_string())
                        .filter(|v| !v.is_empty())
                };
                Ok(Page::Find(arg("msg_id"), arg("flid")))
            }
            p => {
                if let Some(s) = p.strip_prefix("/trace/") {
                    id(s).map(Page::Trace)
                } else if let Some(s) = p.strip_prefix("/flight/") {
                    flid(s).map(Page::Flight)
                } else if let Some(s) = p.strip_prefix("/api/trace/") {
                    id(s).map(Page::ApiTrace)
                } else if let Some(s) = p.strip_prefix("/api/flight/") {
                    flid(s).map(Page::ApiFlight)
                } else {
                    return None;
                }
            }
        })
    }
}

/// `%XX` sequences decoded; anything else kept.
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex =
            || std::str::from_utf8(b.get(i + 1..i + 3)?).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex()) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A path segment: every byte but the unreserved ones percent-encoded.
fn segment(s: &str) -> String {
    s.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (c as char).to_string(),
            _ => format!("%{c:02X}"),
        })
        .collect()
}

fn msg_link(id: i64) -> Link {
    Link { href: format!("/trace/{id}"), text: id.to_string() }
}

fn flight_link(flid: &str) -> Link {
    Link { href: format!("/flight/{}", segment(flid)), text: flid.to_string() }
}

fn opt_time(t: Option<SystemTime>) -> String {
    t.map_or("-".into(), time)
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Where the console's connections come from, each opened when first needed and again after
/// it failed: the daemon's store factory (`daemon::stores::ConsoleStores`) — the console names
/// no adapter, it reads through the ports.
pub trait Opener: Send {
    fn own(&self) -> StoreResult<Box<dyn OwnReads>>;
    fn mailbox(&self) -> StoreResult<Box<dyn MailboxEntries + Send>>;
    fn flights(&self) -> StoreResult<Box<dyn FlightAudit + Send>>;
}

/// The console's own connections, opened when first needed.
pub struct Console {
    cfg: Config,
    /// The instance's rules: a message's text is traced as its pump read it (#65).
    rules: std::sync::Arc<crate::codec::Rulebook>,
    open: Box<dyn Opener>,
    pg: Option<Box<dyn OwnReads>>,
    mailbox: Option<Box<dyn MailboxEntries + Send>>,
    redis: Option<Box<dyn FlightAudit + Send>>,
}

impl Console {
    pub fn new(cfg: Config, rules: std::sync::Arc<crate::codec::Rulebook>, open: Box<dyn Opener>) -> Console {
        Console { cfg, rules, open, pg: None, mailbox: None, redis: None }
    }

    /// The answer to `page`.
    pub fn answer(&mut self, page: Page, ops: &Ops, metrics: &Metrics) -> Answer {
        let read = match page {
            Page::Overview => return html("overview", &overview(ops, metrics).render()),
            Page::Find(msg_id, flid) => return found(msg_id, flid),
            Page::Dead => self.dead().map(|b| html("dead letters", &b)),
            Page::Trace(id) => self.trace(id).map(|t| {
                let status = if t.known() { 200 } else { 404 };
                with_status(status, html(&format!("message {id}"), &trace_page(&t).render()))
            }),
            Page::Flight(flid) => self.flight(&flid).map(|r| {
                let status = if r.known() { 200 } else { 404 };
                with_status(status, html(&format!("flight {flid}"), &flight_page(&r).render()))
            }),
            Page::ApiTrace(id) => self.trace(id).map(|t| json(if t.known() { 200 } else { 404 }, &t.json())),
            Page::ApiFlight(flid) => self.flight(&flid).map(|r| {
                let v = serde_json::to_value(&r).expect("a flight serialises");
                json(if r.known() { 200 } else { 404 }, &v)
            }),
        };
        read.unwrap_or_else(|store| {
            let message = format!("{} did not answer; the log says why. Try again.", store.name());
            with_status(503, html("unavailable", &pages::Problem { message }.render()))
        })
    }

    /// A store's error: the connection is dropped (opened again next time) and logged; the
    /// page names only the store.
    fn failed(&mut self, e: StoreError) -> Store {
        warn!("console could not read {}: {e}", e.store.name());
        match e.store {
            Store::Mailbox => self.mailbox = None,
            Store::Redis => self.redis = None,
            _ => self.pg = None,
        }
        e.store
    }

    fn pg(&mut self) -> Result<&mut dyn OwnReads, StoreError> {
        if self.pg.is_none() {
            self.pg = Some(self.open.own()?);
        }
        Ok(self.pg.as_deref_mut().expect("just connected"))
    }

    fn dead(&mut self) -> Result<askama::Result<String>, Store> {
        let filter = DeadFilter { class: None, since: None, limit: LIST_LIMIT };
        let rows = match self.pg().and_then(|pg| pg.dead_letters(&filter)) {
            Ok(rows) => rows,
            Err(e) => return Err(self.failed(e)),
        };
        let more = rows.len() as i64 == LIST_LIMIT;
        let rows = rows
            .into_iter()
            .map(|r| pages::DeadRow {
                msg: msg_link(r.msg_id),
                type_tag: r.type_tag.unwrap_or_else(|| "-".into()),
                class: r.class.map_or("-", |c| c.as_str()).to_string(),
                attempts: r.attempts,
                since: time(r.since),
                error: r.error.unwrap_or_default(),
                dismissed: r.dismissed.map_or(String::new(), |(at, note)| format!("{}: {note}", time(at))),
            })
            .collect();
        Ok(pages::Dead { rows, more }.render())
    }

    fn trace(&mut self, id: i64) -> Result<Trace, Store> {
        let read = (|| {
            self.pg()?;
            if self.mailbox.is_none() {
                self.mailbox = Some(self.open.mailbox()?);
            }
            let pg = self.pg.as_deref_mut().expect("connected");
            lineage::trace(pg, self.mailbox.as_deref_mut().expect("connected"), (&self.cfg, &self.rules), id)
        })();
        read.map_err(|e| self.failed(e))
    }

    fn flight(&mut self, flid: &str) -> Result<FlightReport, Store> {
        let read = (|| {
            self.pg()?;
            if self.redis.is_none() {
                self.redis = Some(self.open.flights()?);
            }
            let pg = self.pg.as_deref_mut().expect("connected");
            lineage::flight(pg, self.redis.as_deref_mut().expect("connected"), flid, LIST_LIMIT)
        })();
        read.map_err(|e| self.failed(e))
    }
}

fn with_status(status: u16, a: Answer) -> Answer {
    Answer { status, ..a }
}

fn html(title: &str, body: &askama::Result<String>) -> Answer {
    let body = match body {
        Ok(b) => b.as_str(),
        Err(e) => {
            warn!("console could not render {title}: {e}");
            "<p>this page could not be rendered; the log says why</p>"
        }
    };
    let version = env!("CARGO_PKG_VERSION");
    let page = pages::Layout { title, body, version }.render().unwrap_or_default();
    Answer { status: 200, content_type: "text/html; charset=utf-8", body: page, location: None }
}

fn json(status: u16, v: &serde_json::Value) -> Answer {
    let body = serde_json::to_string_pretty(v).expect("a document serialises") + "\n";
    Answer { status, content_type: "application/json", body, location: None }
}

/// The navigation form's answer: to the message, else to the flight, else back.
fn found(msg_id: Option<String>, flid: Option<String>) -> Answer {
    let to = match (msg_id.and_then(|m| m.parse::<i64>().ok()), flid) {
        (Some(id), _) => format!("/trace/{id}"),
        (None, Some(f)) => format!("/flight/{}", segment(&f)),
        (None, None) => "/".to_string(),
    };
    Answer {
        status: 303,
        content_type: "text/plain; charset=utf-8",
        body: format!("see {to}\n"),
        location: Some(to),
    }
}

fn overview(ops: &Ops, metrics: &Metrics) -> pages::Overview {
    let (_, role) = ops.summary(metrics.brief().as_deref());
    let (gauges_age, gauges) = gauge_rows(metrics);
    pages::Overview {
        role,
        ready: ops.ready().is_ok(),
        stages: stage_rows(ops, metrics),
        stores: store_rows(ops),
        gauges_age,
        gauges,
    }
}

/// Each watched loop and how long its current turn has lasted.
fn stage_rows(ops: &Ops, metrics: &Metrics) -> Vec<Pair> {
    let now = metrics.clock().mono();
    ops.pulse
        .turns(now)
        .into_iter()
        .map(|(name, turn)| Pair {
            name: name.to_string(),
            value: turn.map_or("waiting for work".into(), |d| format!("in a turn for {}", secs(d))),
        })
        .collect()
}

/// Each store, with the stages that wait for it, and the lease.
fn store_rows(ops: &Ops) -> Vec<Pair> {
    let stalled = ops.stalled();
    let lease = Pair {
        name: "lease".into(),
        value: ops.lease().map_or("not held by this instance".into(), |e| format!("held, epoch {e}")),
    };
    STORES
        .iter()
        .map(|s| {
            let waiting: Vec<&str> =
                stalled.iter().filter(|(_, st)| *st == s.name()).map(|(stage, _)| *stage).collect();
            let value = if waiting.is_empty() {
                "answering".into()
            } else {
                format!("waited for by {}", waiting.join(", "))
            };
            Pair { name: s.name().to_string(), value }
        })
        .chain(refused_rows(ops))
        .chain(std::iter::once(lease))
        .collect()
}

/// Each Kafka target that holds at an event the broker refuses (#67).
fn refused_rows(ops: &Ops) -> Vec<Pair> {
    let held = ops.stats.refused.held().into_iter();
    held.map(|(target, event_id)| Pair {
        name: target.as_str().to_string(),
        value: format!(
            "holds at event {event_id}: the broker refuses it; nothing behind it is delivered (msgx status; msgx park)"
        ),
    })
    .collect()
}

/// The last read of own PostgreSQL's gauges (its age, and the rows), never a read of its own.
fn gauge_rows(metrics: &Metrics) -> (String, Vec<Pair>) {
    let (up, read) = metrics.gauges();
    let Some((age, g)) = read else { return ("own PostgreSQL not read yet".to_string(), Vec::new()) };
    let age = format!("read {} ago{}", secs(age), if up { "" } else { " (own PostgreSQL does not answer)" });
    let pair = |name: String, value: String| Pair { name, value };
    let mut rows = vec![
        pair("lag (oldest unfinished, since the mailbox received it)".into(), format!("{:.1} s", g.lag)),
        pair("head (since msgx enqueued it)".into(), format!("{:.1} s", g.head_age)),
    ];
    rows.extend(g.queue.iter().map(|(state, n)| pair(format!("messages {state}"), n.to_string())));
    rows.extend(g.dead.iter().map(|(class, n)| pair(format!("DEAD {class}"), n.to_string())));
    rows.extend(
        g.outbox
            .iter()
            .map(|(t, n, oldest)| pair(format!("events PENDING {t}"), format!("{n} (oldest {oldest:.1} s)"))),
    );
    rows.extend(g.dead_events.iter().map(|(t, n)| pair(format!("events DEAD {t}"), n.to_string())));
    rows.push(pair("mailbox marks owed".into(), g.marks_owed.to_string()));
    rows.push(pair("mailbox marks abandoned".into(), g.marks_abandoned.to_string()));
    (age, rows)
}

fn trace_page(t: &Trace) -> pages::Trace {
    let mut facts = Vec::new();
    let mut fact = |name: &str, value: String| facts.push(Pair { name: name.into(), value });
    match &t.entry {
        None => fact("mailbox", "no such row (deleted, or never written)".into()),
        Some(e) => fact(
            "mailbox",
            format!(
                "received {}, status {}, processed {}",
                opt_time(e.received_at),
                e.status.as_deref().unwrap_or("-"),
                opt_time(e.processed_at)
            ),
        ),
    }
    match &t.row {
        None => fact("msgx", "never saw it".into()),
        Some(r) => {
            let archived = r.archived_at.map_or(String::new(), |a| format!(" (archived {})", time(a)));
            fact("state", format!("{}{archived}, attempts {}", r.state, r.attempts));
            fact("enqueued", format!("{}, last change {}", time(r.enqueued_at), time(r.updated_at)));
            if r.class.is_some() || r.error.is_some() {
                let class = r.class.map_or("-", |c| c.as_str());
                fact("error", format!("{class} {}", r.error.as_deref().unwrap_or("-")));
            }
            fact("identity", r.identity.clone().unwrap_or_else(|| "-".into()));
            fact("redis", r.redis_record.clone().unwrap_or_else(|| "-".into()));
            let mark = match (&r.marked_at, &r.mark_abandoned) {
                (Some(at), _) => format!("marked {}", time(*at)),
                (None, Some(why)) => format!("abandoned: {why}"),
                (None, None) => "not marked yet".into(),
            };
            fact("mailbox mark", mark);
        }
    }
    let kind = t.kind.clone().unwrap_or_else(|| "-".into());
    match &t.undecodable {
        Some(e) => fact("type", format!("{kind} (the text does not decode: {e})")),
        None => fact("type", kind),
    }
    let flights = t.flights.iter().map(|f| flight_link(f)).collect();
    let events = t.events.iter().map(|e| event_row(e, None, Vec::new())).collect();
    pages::Trace { facts, flights, events }
}

fn event_row(e: &TraceEvent, type_tag: Option<String>, changes: Vec<String>) -> pages::EventRow {
    pages::EventRow {
        event_key: e.event_key.clone(),
        msg: e.msg_id.map(msg_link),
        target: e.target.clone(),
        state: e.state.clone(),
        sent_at: opt_time(e.sent_at),
        landed: e.landed.as_ref().map_or("-".into(), ToString::to_string),
        payload: e.payload_json.clone(),
        changes,
        type_tag: type_tag.unwrap_or_else(|| "-".into()),
    }
}

fn flight_page(r: &FlightReport) -> pages::Flight {
    let mut summary = match (r.exists, r.deleted_by) {
        (true, _) => format!("{} field(s) in Redis", r.fields.len()),
        (false, Some(m)) => format!("deleted by message {m} (a tombstone)"),
        (false, None) => "Redis holds nothing of this flight".into(),
    };
    if let Some(a) = &r.awaiting {
        summary.push_str(&format!(
            "; degraded: its day's flights await the AODB's answer after a heal (req_id={} {})",
            a.req_id, a.req_key
        ));
    }
    let fields = r
        .fields
        .iter()
        .map(|f| pages::FieldRow {
            name: f.name.clone(),
            value: f.value.clone(),
            msg: f.msg_id.map(msg_link),
            type_tag: f.type_tag.clone().unwrap_or_else(|| "-".into()),
            set_at: f.set_at.clone().unwrap_or_else(|| "-".into()),
        })
        .collect();
    let changes = r
        .changes
        .iter()
        .map(|c| pages::EventRow {
            event_key: c.event_key.clone(),
            msg: c.msg_id.map(msg_link),
            target: "KAFKA:msg".into(),
            state: c.state.clone(),
            sent_at: c.sent_at.clone().unwrap_or_else(|| "-".into()),
            landed: c.landed().map_or("-".into(), |l| l.to_string()),
            payload: String::new(),
            changes: c
                .changes
                .iter()
                .map(|x| {
                    let v = |v: &Option<String>| v.clone().unwrap_or_else(|| "(empty)".into());
                    format!("{}: {} -> {}", x.field, v(&x.old), v(&x.new))
                })
                .collect(),
            type_tag: c.type_tag.clone().unwrap_or_else(|| "-".into()),
        })
        .collect();
    pages::Flight { summary, fields, changes }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_paths_are_read_with_their_ids() {
        assert_eq!(Page::of("/"), Some(Ok(Page::Overview)));
        assert_eq!(Page::of("/trace/42"), Some(Ok(Page::Trace(42))));
        assert_eq!(Page::of("/api/flight/MU%2051"), Some(Ok(Page::ApiFlight("MU 51".into()))));
        assert!(matches!(Page::of("/trace/x"), Some(Err(_))));
        assert_eq!(Page::of("/find?msg_id=&flid=9001"), Some(Ok(Page::Find(None, Some("9001".into())))));
        assert_eq!(Page::of("/metrics"), None);
    }

    #[test]
    fn the_overview_names_an_event_the_broker_refuses() {
        let ops = Ops::new(std::sync::Arc::new(crate::stats::Stats::default()));
        assert!(refused_rows(&ops).is_empty());
        ops.stats.refused.set(crate::domain::Target::KafkaSchd, 42);
        let rows = refused_rows(&ops);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].name, "KAFKA:schd");
        assert!(rows[0].value.starts_with("holds at event 42: the broker refuses it"), "{}", rows[0].value);
    }

    #[test]
    fn upstream_text_renders_as_text() {
        let page = pages::Flight {
            summary: "1 field(s)".into(),
            fields: vec![pages::FieldRow {
                name: "REMC".into(),
                value: "<script>alert(1)</script>".into(),
                msg: Some(msg_link(7)),
                type_tag: "FLOP-REMC".into(),
                set_at: "-".into(),
            }],
            changes: Vec::new(),
        };
        let html = page.render().unwrap();
        assert!(!html.contains("<script>"), "{html}");
        assert!(
            html.contains("&#60;script&#62;alert(1)&#60;/script&#62;") || html.contains("&lt;script&gt;"),
            "{html}"
        );
        assert_eq!(flight_link("a/b<c").href, "/flight/a%2Fb%3Cc");
    }
}
