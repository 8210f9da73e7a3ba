//! Why does this flight say that (#40): a flight as Redis holds it — each field with the
//! message that set it (its version) and when — and the messages that changed it, newest
//! first, each with its changes and where its event landed; and one field's story: the message
//! that set it, the element of its text, its event and offset, the values before it. Built
//! from the stores by [`flight`], printed by `msgx flight`, served as JSON by the console.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::clock::rfc3339 as time;
use crate::codec::{xml, Limits};
use crate::config::Config;
use crate::ports::{
    FlightAudit, Landed, LineageReads, MailboxEntries, MailboxEntry, Requests, StoreResult, TraceEvent,
    TraceRow,
};

/// The flight document (`msgx flight --json`, `/api/flight/{flid}`).
#[derive(Debug, Clone, Serialize)]
pub struct FlightReport {
    pub flid: String,
    /// Redis holds fields of it.
    pub exists: bool,
    /// The message that last deleted it (a tombstone), if any.
    pub deleted_by: Option<i64>,
    /// Its key in the daily plan's index (`yyyyMMddHHmm`).
    pub sodt: Option<i64>,
    pub fields: Vec<FieldNow>,
    /// The messages that changed it, newest first (their `KAFKA:msg` events).
    pub changes: Vec<Change>,
    /// The open request a heal made for the day it is scheduled on (#41): its fields may still
    /// lack what a message whose text is gone set, until the AODB's answer is processed.
    pub awaiting: Option<Awaiting>,
}

/// A request a flight's day awaits the answer to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Awaiting {
    pub req_id: i64,
    pub req_key: String,
}

impl FlightReport {
    /// Whether anything names the flight: Redis (its fields or its tombstone) or an event.
    pub fn known(&self) -> bool {
        self.exists || self.deleted_by.is_some() || !self.changes.is_empty()
    }
}

/// One field as Redis holds it.
#[derive(Debug, Clone, Serialize)]
pub struct FieldNow {
    pub name: String,
    pub value: String,
    /// The MSG_ID that set it (its version); `None` for a value older than versions.
    pub msg_id: Option<i64>,
    #[serde(rename = "type")]
    pub type_tag: Option<String>,
    /// When that message's decision was committed (its event's creation; without an event
    /// kept, its row's last change).
    pub set_at: Option<String>,
}

/// One message that changed the flight: its event and what it changed.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub msg_id: Option<i64>,
    #[serde(rename = "type")]
    pub type_tag: Option<String>,
    pub event_id: i64,
    pub event_key: String,
    pub state: String,
    pub sent_at: Option<String>,
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub changes: Vec<FieldChange>,
}

impl Change {
    /// Where its event landed, if it was sent.
    pub fn landed(&self) -> Option<Landed<'_>> {
        let (topic, partition, offset) = (self.topic.as_deref()?, self.partition?, self.offset?);
        Some(Landed::Kafka { topic: topic.into(), at: crate::ports::Position { partition, offset } })
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FieldChange {
    pub field: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

/// Why one field says what it says (`msgx flight FLID --field NAME`).
#[derive(Debug, Clone, Serialize)]
pub struct FieldStory {
    pub flid: String,
    pub field: String,
    pub now: Option<FieldNow>,
    /// The element of the setting message's text that carried it.
    pub element: Option<String>,
    /// The setting message's event (its change of this field, its delivery).
    pub event: Option<Change>,
    /// The values before, newest first, each with the message that set it.
    pub earlier: Vec<Earlier>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Earlier {
    pub value: Option<String>,
    pub msg_id: Option<i64>,
}

/// The flight `flid` from Redis (`flights`) and own PostgreSQL, with at most `limit` changes.
pub fn flight<P: LineageReads + Requests + ?Sized, F: FlightAudit + ?Sized>(
    pg: &mut P,
    flights: &mut F,
    flid: &str,
    limit: i64,
) -> StoreResult<FlightReport> {
    let held = flights.flights_of(&[flid.to_string()])?.into_iter().next();
    let events = pg.flight_events(flid, limit)?;
    let (state, sodt) = match held {
        Some((_, state, sodt)) => (state, sodt),
        None => Default::default(),
    };
    let mut ids: BTreeSet<i64> = state.versions.values().copied().filter(|v| *v > 0).collect();
    ids.extend(events.iter().filter_map(|e| e.msg_id));
    let decided = pg.decided(&ids.into_iter().collect::<Vec<_>>())?;
    let fields = state
        .fields
        .iter()
        .map(|(name, value)| {
            let msg_id = state.versions.get(name).copied().filter(|v| *v > 0);
            let d = msg_id.and_then(|m| decided.get(&m));
            // Its event was written with its outcome; the row's last change may be its mailbox
            // mark, later.
            let event = events.iter().find(|e| msg_id.is_some() && e.msg_id == msg_id);
            FieldNow {
                name: name.clone(),
                value: value.clone(),
                msg_id,
                type_tag: d.and_then(|d| d.type_tag.clone()),
                set_at: event.map(|e| e.created_at).or(d.map(|d| d.at)).map(time),
            }
        })
        .collect();
    let changes = events
        .iter()
        .map(|e| change(e, e.msg_id.and_then(|m| decided.get(&m)).and_then(|d| d.type_tag.clone())))
        .collect();
    let awaiting = match sodt {
        Some(k) => awaiting(pg, k)?,
        None => None,
    };
    Ok(FlightReport {
        flid: flid.to_string(),
        exists: state.exists(),
        deleted_by: Some(state.deleted).filter(|d| *d > 0),
        sodt,
        fields,
        changes,
        awaiting,
    })
}

/// The window a heal asked for, whose flights await the AODB, that holds plan key `k`, if any.
fn awaiting(pg: &mut (impl Requests + ?Sized), k: i64) -> StoreResult<Option<Awaiting>> {
    Ok(pg
        .awaited(100)?
        .into_iter()
        .find(|r| crate::requests::window_holds(&r.req_key, k))
        .map(|r| Awaiting { req_id: r.req_id, req_key: r.req_key }))
}

/// A `KAFKA:msg` event as a change: its payload's `changes` and where it landed.
fn change(e: &TraceEvent, type_tag: Option<String>) -> Change {
    let payload: serde_json::Value = serde_json::from_str(&e.payload_json).unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let changes = payload["changes"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| {
                    Some(FieldChange {
                        field: text(&c["field"])?,
                        old: text(&c["old"]),
                        new: text(&c["new"]),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let (topic, at) = match &e.landed {
        Some(Landed::Kafka { topic, at }) => (Some(topic.to_string()), Some(*at)),
        _ => (None, None),
    };
    Change {
        msg_id: e.msg_id,
        type_tag: type_tag.or_else(|| text(&payload["type"])),
        event_id: e.event_id,
        event_key: e.event_key.clone(),
        state: e.state.clone(),
        sent_at: e.sent_at.map(time),
        topic,
        partition: at.map(|p| p.partition),
        offset: at.map(|p| p.offset),
        changes,
    }
}

/// Field `field` of `report`: who set it, from `text` (the setting message's mailbox text, if
/// it is still there) the element that carried it, its event, and the values before it.
pub fn field_story(report: &FlightReport, field: &str, text: Option<&str>, limits: &Limits) -> FieldStory {
    let now = report.fields.iter().find(|f| f.name == field).cloned();
    let version = now.as_ref().and_then(|f| f.msg_id);
    let touching = |c: &&Change| c.changes.iter().any(|x| x.field == field);
    let event =
        report.changes.iter().filter(touching).find(|c| version.is_some() && c.msg_id == version).cloned();
    let earlier = report
        .changes
        .iter()
        .filter(touching)
        .filter(|c| version.is_none_or(|v| c.msg_id.is_some_and(|m| m < v)))
        .filter_map(|c| {
            let x = c.changes.iter().find(|x| x.field == field)?;
            Some(Earlier { value: x.new.clone(), msg_id: c.msg_id })
        })
        .collect();
    FieldStory {
        flid: report.flid.clone(),
        field: field.to_string(),
        element: text.and_then(|t| element_in(t, &report.flid, field, limits)),
        now,
        event,
        earlier,
    }
}

/// The first element named `field` in the record of flight `flid` in `text` (a record: an
/// element whose `FLID` child is `flid`), else in the whole text; written back as XML. Read
/// under the configured limits, as the pump read it (#68).
pub fn element_in(text: &str, flid: &str, field: &str, limits: &Limits) -> Option<String> {
    let doc = xml::parse(text, limits).ok()?;
    let root = doc.root();
    let record = find(root, &|e| e.child_text("FLID").is_some_and(|f| xml::trim(f) == flid));
    find(record.unwrap_or(root), &|e| xml::same_name(e.name(), field)).map(write)
}

/// Depth first, `e` itself included.
fn find<'d, 'a>(
    e: xml::Element<'d, 'a>,
    hit: &dyn Fn(xml::Element<'d, 'a>) -> bool,
) -> Option<xml::Element<'d, 'a>> {
    if hit(e) {
        return Some(e);
    }
    e.children().find_map(|c| find(c, hit))
}

fn write(e: xml::Element) -> String {
    let attrs: String = e.attrs().map(|(k, v)| format!(" {k}=\"{}\"", escape(v))).collect();
    let inner: String = if e.has_children() { e.children().map(write).collect() } else { escape(e.text()) };
    format!("<{0}{attrs}>{inner}</{0}>", e.name())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// One message's life (`msgx trace`, `/trace/{msg_id}`, `/api/trace/{msg_id}`).
#[derive(Debug, Clone)]
pub struct Trace {
    pub msg_id: i64,
    pub entry: Option<MailboxEntry>,
    pub row: Option<TraceRow>,
    /// Its type tag (its text decoded, else what msgx recorded).
    pub kind: Option<String>,
    pub flights: Vec<String>,
    /// Why its text does not decode, if it does not.
    pub undecodable: Option<String>,
    pub events: Vec<TraceEvent>,
    /// The configured topics of `KAFKA:msg` and `KAFKA:schd`.
    pub topics: (String, String),
}

/// Message `msg_id` from own PostgreSQL and the mailbox, its text read under `rules` (#65).
pub fn trace(
    pg: &mut (impl LineageReads + ?Sized),
    mailbox: &mut (impl MailboxEntries + ?Sized),
    (cfg, rules): (&Config, &crate::codec::Rulebook),
    msg_id: i64,
) -> StoreResult<Trace> {
    let (row, events) = pg.trace(msg_id)?;
    let entry = mailbox.entry(msg_id, cfg.pipeline.max_message_bytes)?;
    let limits = Limits::of(&cfg.pipeline);
    let decoded =
        entry.as_ref().and_then(|e| e.text.as_deref()).map(|t| crate::codec::decode_with(t, &limits, rules));
    let (kind, flights) = match &decoded {
        Some(Ok(m)) => (Some(m.kind.type_tag().into_owned()), crate::handlers::need_of(m).flids),
        _ => (row.as_ref().and_then(|r| r.type_tag.clone()), Vec::new()),
    };
    let undecodable = decoded.and_then(|d| d.err()).map(|e| e.to_string());
    let topics = (cfg.topic_msg.clone(), cfg.topic_schd.clone());
    Ok(Trace { msg_id, entry, row, kind, flights, undecodable, events, topics })
}

impl Trace {
    /// Whether the mailbox or msgx knows the message.
    pub fn known(&self) -> bool {
        self.entry.is_some() || self.row.is_some()
    }

    /// The configured topic of a Kafka target.
    pub fn topic(&self, target: &str) -> Option<&str> {
        match target {
            "KAFKA:msg" => Some(&self.topics.0),
            "KAFKA:schd" => Some(&self.topics.1),
            _ => None,
        }
    }

    /// The stable document (docs/reference.md, `msgx trace --json`).
    pub fn json(&self) -> serde_json::Value {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_element_is_the_flights_own_record_in_a_snapshot() {
        let text = crate::fixtures::schd(1, "DNLD", &[("71", "05MAR260900"), ("72", "05MAR261100")]);
        assert_eq!(element_in(&text, "72", "STND", &Limits::DEFAULT).as_deref(), Some("<STND>S72</STND>"));
        assert_eq!(element_in(&text, "71", "FLID", &Limits::DEFAULT).as_deref(), Some("<FLID>71</FLID>"));
        assert_eq!(element_in(&text, "71", "GATE", &Limits::DEFAULT), None);
    }

    #[test]
    fn an_element_is_written_back_escaped_with_its_attributes_and_children() {
        let text = crate::fixtures::flop_body("DELY", "9", "<DELY CODE=\"93\">a &lt;b&gt; &amp; c</DELY>");
        assert_eq!(
            element_in(&text, "9", "DELY", &Limits::DEFAULT).as_deref(),
            Some("<DELY CODE=\"93\">a &lt;b&gt; &amp; c</DELY>")
        );
        let text =
            crate::fixtures::flop_body("PORT", "9", "<PORT><POTM>05MAR261438</POTM><POID>O</POID></PORT>");
        assert_eq!(
            element_in(&text, "9", "PORT", &Limits::DEFAULT).as_deref(),
            Some("<PORT><POTM>05MAR261438</POTM><POID>O</POID></PORT>")
        );
    }

    fn change(msg_id: i64, field: &str, old: Option<&str>, new: Option<&str>) -> Change {
        Change {
            msg_id: Some(msg_id),
            type_tag: Some("FLOP-STND".into()),
            event_id: msg_id,
            event_key: format!("{msg_id}.0.x"),
            state: "SENT".into(),
            sent_at: None,
            topic: Some("t".into()),
            partition: Some(0),
            offset: Some(msg_id),
            changes: vec![FieldChange {
                field: field.into(),
                old: old.map(Into::into),
                new: new.map(Into::into),
            }],
        }
    }

    #[test]
    fn a_fields_story_is_the_message_that_set_it_and_the_values_before() {
        let report = FlightReport {
            flid: "9".into(),
            exists: true,
            deleted_by: None,
            sodt: None,
            awaiting: None,
            fields: vec![FieldNow {
                name: "STND".into(),
                value: "B12".into(),
                msg_id: Some(30),
                type_tag: Some("FLOP-STND".into()),
                set_at: None,
            }],
            changes: vec![
                change(31, "ACFT", None, Some("32N")),
                change(30, "STND", Some("A1"), Some("B12")),
                change(20, "STND", Some("212"), Some("A1")),
                change(10, "STND", None, Some("212")),
            ],
        };
        let story = field_story(&report, "STND", None, &Limits::DEFAULT);
        assert_eq!(story.event.as_ref().and_then(|e| e.offset), Some(30), "the setting message's event");
        let earlier: Vec<(Option<&str>, Option<i64>)> =
            story.earlier.iter().map(|e| (e.value.as_deref(), e.msg_id)).collect();
        assert_eq!(earlier, [(Some("A1"), Some(20)), (Some("212"), Some(10))]);
    }
}
