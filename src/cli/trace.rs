//! `msgx trace MSG_ID`: one message's life, oldest first (#40) — its mailbox row, its
//! PROC_STATE row (or the archived one), what it is and which flights it names, and every outbox
//! event with its `event_key` and delivery. Read only.

use super::*;
use msgx::ports::Landed;
use msgx::store::mailbox::MailboxEntry;
use msgx::store::pg::lineage::{TraceEvent, TraceRow};

pub(super) fn trace(cfg: &Config, msg_id: i64, json: bool) -> CmdResult {
    let mut pg = own_pg(cfg)?;
    let (row, events) = pg.trace(msg_id).map_err(unreachable)?;
    let mut mb = MysqlMailbox::connect(&cfg.mysql_url, &cfg.inbound).map_err(unreachable)?;
    let entry = mb.entry(msg_id, cfg.pipeline.max_message_bytes).map_err(unreachable)?;
    let decoded = entry.as_ref().and_then(|e| e.text.as_deref()).map(codec::decode);
    let (kind, flights) = match &decoded {
        Some(Ok(m)) => (Some(m.kind.type_tag().into_owned()), msgx::handlers::need_of(m).flids),
        _ => (row.as_ref().and_then(|r| r.type_tag.clone()), Vec::new()),
    };
    let t = Trace { msg_id, entry, row, kind, flights, events, topics: (&cfg.topic_msg, &cfg.topic_schd) };
    if json {
        out!("{}", serde_json::to_string_pretty(&t.json()).expect("a trace serialises"));
    } else {
        t.print(decoded.as_ref().and_then(|d| d.as_ref().err()).map(|e| e.to_string()));
    }
    if t.entry.is_none() && t.row.is_none() {
        return Err((
            Exit::Failed,
            anyhow::anyhow!("msg_id {msg_id}: not in the mailbox, and msgx never saw it"),
        ));
    }
    Ok(())
}

struct Trace<'a> {
    msg_id: i64,
    entry: Option<MailboxEntry>,
    row: Option<TraceRow>,
    kind: Option<String>,
    flights: Vec<String>,
    events: Vec<TraceEvent>,
    topics: (&'a str, &'a str),
}

fn opt_time(t: Option<std::time::SystemTime>) -> String {
    t.map_or("-".into(), time)
}

impl Trace<'_> {
    fn topic(&self, target: &str) -> Option<&str> {
        match target {
            "KAFKA:msg" => Some(self.topics.0),
            "KAFKA:schd" => Some(self.topics.1),
            _ => None,
        }
    }

    fn print(&self, undecodable: Option<String>) {
        out!("msg_id {}", self.msg_id);
        match &self.entry {
            None => out!("mailbox:  no such row (deleted, or never written)"),
            Some(e) => out!(
                "mailbox:  received {}  status {}  processed {}",
                opt_time(e.received_at),
                e.status.as_deref().unwrap_or("-"),
                opt_time(e.processed_at)
            ),
        }
        match &self.row {
            None if self.entry.is_some() => out!("msgx:     never saw it (not read yet: below the watermark's reach, or a status msgx does not take)"),
            None => out!("msgx:     never saw it"),
            Some(r) => self.print_row(r),
        }
        let kind = self.kind.as_deref().unwrap_or("-");
        match undecodable {
            Some(e) => out!("type:     {kind}  (the text does not decode: {})", one_line(&e)),
            None if self.flights.is_empty() => out!("type:     {kind}"),
            None => out!("type:     {kind}  flights {}", self.flights.join(",")),
        }
        if self.events.is_empty() {
            out!("events:   none (no flight changed, or pruned after event-retention)");
        }
        for e in &self.events {
            let topic = match &e.landed {
                Some(Landed::Kafka { topic, at }) => {
                    format!(" topic {topic} partition {} offset {}", at.partition, at.offset)
                }
                Some(Landed::Outbound { row }) => format!(" coutmsgs_id {row}"),
                None => self.topic(&e.target).map_or(String::new(), |t| format!(" topic {t}")),
            };
            out!(
                "event:    {} event_id={} {} {} attempts {} sent {}{topic}{}",
                e.event_key,
                e.event_id,
                e.target,
                e.state,
                e.attempts,
                opt_time(e.sent_at),
                e.error.as_deref().map_or(String::new(), |x| format!(" error: {}", one_line(x)))
            );
            out!("          {}", one_line(&e.payload_json));
        }
    }

    fn print_row(&self, r: &TraceRow) {
        let archived = r.archived_at.map_or(String::new(), |t| format!(" (archived {})", time(t)));
        out!(
            "state:    {}{archived}  attempts {}  enqueued {}  last change {}",
            r.state,
            r.attempts,
            time(r.enqueued_at),
            time(r.updated_at)
        );
        if r.class.is_some() || r.error.is_some() {
            out!(
                "error:    {} {}",
                r.class.map_or("-", |c| c.as_str()),
                one_line(r.error.as_deref().unwrap_or("-"))
            );
        }
        let mark = match (&r.marked_at, &r.mark_abandoned) {
            (Some(t), _) => format!("marked {}", time(*t)),
            (None, Some(why)) => format!("mark abandoned: {why}"),
            (None, None) => "not marked yet".into(),
        };
        out!(
            "outcome:  identity {}  redis {}  {mark}{}",
            r.identity.as_deref().unwrap_or("-"),
            r.redis_record.as_deref().unwrap_or("-"),
            r.dismissed_at.map_or(String::new(), |t| format!("  dismissed {}", time(t)))
        );
    }

    /// The stable document (docs/reference.md, `msgx trace --json`).
    fn json(&self) -> serde_json::Value {
        let r = self.row.as_ref();
        serde_json::json!({
            "msg_id": self.msg_id,
            "mailbox": self.entry.as_ref().map(|e| serde_json::json!({
                "received": e.received_at.map(time),
                "status": e.status,
                "processed": e.processed_at.map(time),
            })),
            "state": r.map(|r| r.state.as_str()),
            "archived": r.map(|r| r.archived_at.is_some()),
            "attempts": r.map(|r| r.attempts),
            "error_class": r.and_then(|r| r.class).map(|c| c.as_str()),
            "last_error": r.and_then(|r| r.error.as_deref()),
            "type": self.kind,
            "identity": r.and_then(|r| r.identity.as_deref()),
            "redis_record": r.and_then(|r| r.redis_record.as_deref()),
            "marked": r.and_then(|r| r.marked_at).map(time),
            "flights": self.flights,
            "events": self.events.iter().map(|e| serde_json::json!({
                "event_id": e.event_id,
                "event_key": e.event_key,
                "target": e.target,
                "state": e.state,
                "attempts": e.attempts,
                "sent_at": e.sent_at.map(time),
                "topic": match &e.landed {
                    Some(Landed::Kafka { topic, .. }) => Some(topic.as_ref()),
                    _ => self.topic(&e.target),
                },
                "partition": match &e.landed { Some(Landed::Kafka { at, .. }) => Some(at.partition), _ => None },
                "offset": match &e.landed { Some(Landed::Kafka { at, .. }) => Some(at.offset), _ => None },
                "coutmsgs_id": match &e.landed { Some(Landed::Outbound { row }) => Some(*row), _ => None },
                "payload": serde_json::from_str::<serde_json::Value>(&e.payload_json).unwrap_or(serde_json::Value::Null),
            })).collect::<Vec<_>>(),
        })
    }
}
