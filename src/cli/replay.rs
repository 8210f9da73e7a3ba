//! `msgx replay`: FAILED/DEAD messages, SKIPPED not-for-msgx messages or DEAD events back to PENDING.

use super::*;

/// What `msgx replay` brings back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum ReplayOf {
    Failures,
    Skipped,
    Events,
}

pub(super) fn replay(
    cfg: &Config,
    ids: &[i64],
    range: Option<&str>,
    class: Option<&str>,
    limit: usize,
    of: ReplayOf,
) -> CmdResult {
    let events = of == ReplayOf::Events;
    use msgx::error::ErrorClass;
    use msgx::ports::{Operator, ReplaySelection};
    let usage = |m: String| (Exit::Usage, anyhow::anyhow!(m));
    let sel = if let Some(r) = range {
        let (a, b) = r
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse::<i64>().ok()?, b.trim().parse::<i64>().ok()?)))
            .ok_or_else(|| usage(format!("--range {r:?} is not FROM-TO, e.g. 100-200")))?;
        if a > b {
            return Err(usage(format!("--range {r:?}: FROM is after TO")));
        }
        ReplaySelection::Range(a, b)
    } else if let Some(c) = class {
        let c = ErrorClass::parse(c).ok_or_else(|| {
            let all: Vec<_> = ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
            usage(format!("--class {c:?} is not an error class ({})", all.join(", ")))
        })?;
        if !c.is_replayable() && !events {
            return Err(usage(format!(
                "{c} messages are never replayed: the message itself is illegal; have it corrected and resent upstream"
            )));
        }
        ReplaySelection::Class(c)
    } else {
        ReplaySelection::Ids(ids.to_vec())
    };
    let mut pg = own_pg(cfg)?;
    if events {
        return replay_events(&mut pg, &sel, limit);
    }
    let out = match of {
        ReplayOf::Skipped => pg.replay_skipped(&sel, limit, SystemClock.now()),
        _ => pg.replay(&sel, limit, SystemClock.now()),
    }
    .map_err(unreachable)?;
    let lines = out.iter().map(|r| {
        let was = match r.was {
            Some((state, class)) => {
                format!("was={} class={}", state.as_str(), class.map(|c| c.as_str()).unwrap_or("-"))
            }
            None => "was=absent".to_string(),
        };
        (r.msg_id, was, r.verdict.clone())
    });
    print_replay("msg_id", "message", lines.collect(), limit)
}

pub(super) fn replay_events(pg: &mut Pg, sel: &msgx::ports::ReplaySelection, limit: usize) -> CmdResult {
    use msgx::ports::Operator;
    let out = pg.replay_events(sel, limit).map_err(unreachable)?;
    let lines = out.iter().map(|r| {
        let was = match &r.was {
            Some((target, state)) => format!("target={target} was={state}"),
            None => "was=absent".to_string(),
        };
        (r.event_id, was, r.verdict.clone())
    });
    print_replay("event_id", "event", lines.collect(), limit)
}

/// One line per row (`replayed …` or `refused … : why`), a summary, exit 1 when any was refused.
pub(super) fn print_replay(
    id: &str,
    noun: &str,
    rows: Vec<(i64, String, Result<(), String>)>,
    limit: usize,
) -> CmdResult {
    let mut refused = 0;
    for (n, was, verdict) in &rows {
        match verdict {
            Ok(()) => out!("replayed {id}={n} {was} -> PENDING"),
            Err(why) => {
                refused += 1;
                out!("refused  {id}={n} {was}: {why}");
            }
        }
    }
    let more = if rows.len() >= limit { " (limit reached: run again for more)" } else { "" };
    out!("replayed {} {noun}(s), refused {refused}{more}", rows.len() - refused);
    if refused > 0 {
        return Err((Exit::Failed, anyhow::anyhow!("{refused} {noun}(s) not replayed")));
    }
    Ok(())
}
