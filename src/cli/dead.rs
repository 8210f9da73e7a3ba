//! `msgx dead`: the dead-letter queue listed (#40), so that `replay` and `dismiss` have their
//! MSG_IDs without SQL.

use super::*;
use msgx::error::ErrorClass;
use msgx::ports::{DeadFilter, DeadLetter, LineageReads};

pub(super) fn dead(
    cfg: &Config,
    class: Option<&str>,
    since: Option<&str>,
    limit: i64,
    json: bool,
) -> CmdResult {
    let usage = |m: String| (Exit::Usage, anyhow::anyhow!(m));
    let class = match class {
        None => None,
        Some(c) => Some(ErrorClass::parse(c).ok_or_else(|| {
            let all: Vec<_> = ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
            usage(format!("--class {c:?} is not an error class ({})", all.join(", ")))
        })?),
    };
    let since = since.map(|s| time_arg("--since", s)).transpose()?;
    if limit < 1 {
        return Err(usage(format!("--limit {limit}: at least 1")));
    }
    let mut pg = own_pg(cfg)?;
    let rows = pg.dead_letters(&DeadFilter { class, since, limit }).map_err(unreachable)?;
    if json {
        let v: Vec<serde_json::Value> = rows.iter().map(as_json).collect();
        out!("{}", serde_json::to_string_pretty(&v).expect("a list of objects serialises"));
        return Ok(());
    }
    if rows.is_empty() {
        out!("no DEAD message{}", if class.is_some() || since.is_some() { " matches" } else { "" });
        return Ok(());
    }
    out!("{:<10} {:<12} {:<12} {:>8} {:<24} error", "msg_id", "type", "class", "attempts", "since");
    for r in &rows {
        out!(
            "{:<10} {:<12} {:<12} {:>8} {:<24} {}{}",
            r.msg_id,
            r.type_tag.as_deref().unwrap_or("-"),
            r.class.map_or("-", |c| c.as_str()),
            r.attempts,
            time(r.since),
            one_line(r.error.as_deref().unwrap_or("-")),
            r.dismissed.as_ref().map_or(String::new(), |(at, note)| format!(
                " [dismissed {}: {}]",
                time(*at),
                one_line(note)
            )),
        );
    }
    if rows.len() as i64 == limit {
        out!("(the first {limit}; --limit shows more)");
    }
    Ok(())
}

/// The stable JSON document of one DEAD message (docs/reference.md, `msgx dead --json`).
fn as_json(r: &DeadLetter) -> serde_json::Value {
    serde_json::json!({
        "msg_id": r.msg_id,
        "type": r.type_tag,
        "error_class": r.class.map(|c| c.as_str()),
        "last_error": r.error,
        "attempts": r.attempts,
        "since": time(r.since),
        "dismissed": r.dismissed.is_some(),
        "dismissed_at": r.dismissed.as_ref().map(|(at, _)| time(*at)),
        "dismissed_note": r.dismissed.as_ref().map(|(_, n)| n),
    })
}
