//! `msgx flight FLID [--field NAME]`: why does this flight say that (#40) — the flight as Redis
//! holds it, each field with the message that set it and when, then the messages that changed
//! it, newest first, with their changes and where their events landed; `--field`: one field's
//! story. Read only.

use super::*;
use msgx::lineage::{self, Change, FieldStory, FlightReport};
use msgx::ports::MailboxEntries;
use msgx::store::flights::RedisFlights;

pub(super) fn flight(cfg: &Config, flid: &str, field: Option<&str>, limit: i64, json: bool) -> CmdResult {
    if limit < 1 {
        return Err((Exit::Usage, anyhow::anyhow!("--limit {limit}: at least 1")));
    }
    let mut pg = own_pg(cfg)?;
    let mut redis = RedisFlights::connect_to(&cfg.redis, &cfg.redis_prefix).map_err(unreachable)?;
    let report = lineage::flight(&mut pg, &mut redis, flid, limit).map_err(unreachable)?;
    match field {
        None if json => out!("{}", serde_json::to_string_pretty(&report).expect("a flight serialises")),
        None => print(&report),
        Some(name) => {
            let setter = report.fields.iter().find(|f| f.name == name).and_then(|f| f.msg_id);
            let text = match setter {
                Some(m) => {
                    let mut mb =
                        MysqlMailbox::of(cfg).and_then(MysqlMailbox::connected).map_err(unreachable)?;
                    mb.entry(m, cfg.pipeline.max_message_bytes).map_err(unreachable)?.and_then(|e| e.text)
                }
                None => None,
            };
            let story =
                lineage::field_story(&report, name, text.as_deref(), &msgx::codec::Limits::of(&cfg.pipeline));
            if json {
                out!("{}", serde_json::to_string_pretty(&story).expect("a story serialises"));
            } else {
                print_story(&story, setter.is_some() && text.is_none());
            }
        }
    }
    if !report.known() {
        return Err((
            Exit::Failed,
            anyhow::anyhow!("flight {flid}: Redis holds nothing of it and no event names it"),
        ));
    }
    Ok(())
}

fn print(r: &FlightReport) {
    let sodt = r.sodt.map_or(String::new(), |k| format!("  plan key {k}"));
    match (r.exists, r.deleted_by) {
        (true, _) => out!("flight {}: {} field(s) in Redis{sodt}", one_line(&r.flid), r.fields.len()),
        (false, Some(m)) => out!("flight {}: deleted by msg {m} (a tombstone)", one_line(&r.flid)),
        (false, None) => out!("flight {}: Redis holds nothing of it", one_line(&r.flid)),
    }
    if let Some(a) = &r.awaiting {
        out!(
            "degraded: its day's flights await the AODB's answer after a heal (req_id={} {}); a field a message whose text is gone set may be missing until then",
            a.req_id,
            a.req_key
        );
    }
    for f in &r.fields {
        out!(
            "  {:<6} = {}    set by msg {} {} at {}",
            f.name,
            one_line(&f.value),
            f.msg_id.map_or("-".into(), |m| m.to_string()),
            f.type_tag.as_deref().unwrap_or("-"),
            f.set_at.as_deref().unwrap_or("-")
        );
    }
    if r.changes.is_empty() {
        out!("changes: none kept (no KAFKA:msg event names it, or pruned after event-retention)");
        return;
    }
    out!("changes, newest first ({} KAFKA:msg event(s) within event-retention):", r.changes.len());
    for c in &r.changes {
        print_change(c);
    }
}

fn print_change(c: &Change) {
    out!(
        "  msg {} {}  event {} {}{}{}",
        c.msg_id.map_or("-".into(), |m| m.to_string()),
        c.type_tag.as_deref().unwrap_or("-"),
        c.event_key,
        c.state,
        c.sent_at.as_deref().map_or(String::new(), |t| format!(" {t}")),
        c.landed().map_or(String::new(), |l| format!(" {l}"))
    );
    for x in &c.changes {
        let v = |v: &Option<String>| v.as_deref().map_or("(empty)".to_string(), one_line);
        out!("      {}: {} -> {}", x.field, v(&x.old), v(&x.new));
    }
}

fn print_story(s: &FieldStory, text_gone: bool) {
    let Some(now) = &s.now else {
        out!("flight {} {}: Redis holds no value", one_line(&s.flid), s.field);
        print_earlier(s);
        return;
    };
    out!("flight {} {} = {}", one_line(&s.flid), s.field, one_line(&now.value));
    out!(
        "set by:   msg {} {} at {}",
        now.msg_id.map_or("- (older than field versions)".into(), |m| m.to_string()),
        now.type_tag.as_deref().unwrap_or("-"),
        now.set_at.as_deref().unwrap_or("-")
    );
    match (&s.element, text_gone) {
        (Some(e), _) => out!("element:  {}", one_line(e)),
        (None, true) => out!("element:  - (the mailbox no longer holds its text)"),
        (None, false) => out!("element:  - (no element {} in its text)", s.field),
    }
    match &s.event {
        Some(c) => print_change(c),
        None => out!(
            "event:    - (none kept: the value changed nothing downstream, or pruned after event-retention)"
        ),
    }
    print_earlier(s);
}

fn print_earlier(s: &FieldStory) {
    if s.earlier.is_empty() {
        out!("earlier:  none kept");
        return;
    }
    let list: Vec<String> = s
        .earlier
        .iter()
        .map(|e| {
            format!(
                "{} (msg {})",
                e.value.as_deref().map_or("(empty)".to_string(), one_line),
                e.msg_id.map_or("-".into(), |m| m.to_string())
            )
        })
        .collect();
    out!("earlier:  {}", list.join(", "));
}
