//! `msgx resend`: SENT events delivered again, in EVENT_ID order, with their own `event_key`.

use super::*;

pub(super) fn resend(
    cfg: &Config,
    target: &str,
    since: Option<&str>,
    from_event: Option<i64>,
    yes: bool,
) -> CmdResult {
    use msgx::domain::Target;
    use msgx::ports::{Operator, ResendFrom};
    let usage = |m: String| (Exit::Usage, anyhow::anyhow!(m));
    let target = match Target::parse(target) {
        Some(t @ (Target::KafkaMsg | Target::KafkaSchd)) => t,
        _ => return Err(usage(format!("--target {target:?}: KAFKA:msg or KAFKA:schd"))),
    };
    let from = match (since, from_event) {
        (Some(s), _) => ResendFrom::Since(time_arg("--since", s)?),
        (None, Some(id)) => ResendFrom::Event(id),
        (None, None) => return Err(usage("--since or --from-event is required".into())),
    };
    let mut pg = own_pg(cfg)?;
    let r = pg.resend(target, from, yes).map_err(unreachable)?;
    let range = match (r.first, r.last) {
        (Some(a), Some(b)) => format!(" (event_id {a}..={b})"),
        _ => String::new(),
    };
    if !yes {
        out!("would resend {} {} event(s){range}; run again with --yes", r.events, target.as_str());
        return Err((Exit::Usage, anyhow::anyhow!("nothing done without --yes")));
    }
    out!(
        "resending {} {} event(s){range}: back in the outbox, delivered in order with their event_key",
        r.events,
        target.as_str()
    );
    Ok(())
}
