//! `msgx trace MSG_ID`: one message's life, oldest first (#40) — its mailbox row, its
//! PROC_STATE row (or the archived one), what it is and which flights it names, and every outbox
//! event with its `event_key` and delivery. Read only. The document is the library's
//! (`lineage::Trace`): the console serves the same.

use super::*;
use msgx::lineage::Trace;
use msgx::ports::TraceRow;

pub(super) fn trace(cfg: &Config, msg_id: i64, json: bool) -> CmdResult {
    let mut pg = own_pg(cfg)?;
    let mut mb = MysqlMailbox::of(cfg).and_then(MysqlMailbox::connected).map_err(unreachable)?;
    let t = msgx::lineage::trace(&mut pg, &mut mb, (cfg, &msgx::codec::Rulebook::this_release()), msg_id)
        .map_err(unreachable)?;
    if json {
        out!("{}", serde_json::to_string_pretty(&t.json()).expect("a trace serialises"));
    } else {
        print(&t);
    }
    if !t.known() {
        return Err((
            Exit::Failed,
            anyhow::anyhow!("msg_id {msg_id}: not in the mailbox, and msgx never saw it"),
        ));
    }
    Ok(())
}

fn opt_time(t: Option<std::time::SystemTime>) -> String {
    t.map_or("-".into(), time)
}

fn print(t: &Trace) {
    out!("msg_id {}", t.msg_id);
    match &t.entry {
        None => out!("mailbox:  no such row (deleted, or never written)"),
        Some(e) => out!(
            "mailbox:  received {}  status {}  processed {}",
            opt_time(e.received_at),
            e.status.as_deref().unwrap_or("-"),
            opt_time(e.processed_at)
        ),
    }
    match &t.row {
            None if t.entry.is_some() => out!("msgx:     never saw it (not read yet: below the watermark's reach, or a status msgx does not take)"),
            None => out!("msgx:     never saw it"),
            Some(r) => print_row(r),
        }
    let kind = t.kind.as_deref().unwrap_or("-");
    match &t.undecodable {
        Some(e) => out!("type:     {kind}  (the text does not decode: {})", one_line(e)),
        None if t.flights.is_empty() => out!("type:     {kind}"),
        None => out!("type:     {kind}  flights {}", t.flights.join(",")),
    }
    if t.events.is_empty() {
        out!("events:   none (no flight changed, or pruned after event-retention)");
    }
    for e in &t.events {
        let topic = match &e.landed {
            Some(l) => format!(" {l}"),
            None => t.topic(&e.target).map_or(String::new(), |t| format!(" topic {t}")),
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

fn print_row(r: &TraceRow) {
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
