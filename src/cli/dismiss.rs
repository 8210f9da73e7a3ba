//! `msgx dismiss`: DEAD messages a person dealt with leave the dead-letter queue; `msgx park`:
//! an event the broker refuses leaves the head of its topic for the dead-letter queue (#67).

use super::*;

pub(super) fn dismiss(cfg: &Config, ids: &[i64], note: &str) -> CmdResult {
    use msgx::ports::Operator;
    if note.trim().is_empty() {
        return Err((Exit::Usage, anyhow::anyhow!("--note must say what was decided and why")));
    }
    let mut pg = own_pg(cfg)?;
    let out = pg.dismiss(ids, note.trim(), SystemClock.now()).map_err(unreachable)?;
    print_verdicts(&out, "dismissed")
}

pub(super) fn park(cfg: &Config, ids: &[i64], note: &str) -> CmdResult {
    use msgx::ports::Operator;
    if note.trim().is_empty() {
        return Err((Exit::Usage, anyhow::anyhow!("--note must say what was decided and why")));
    }
    let mut pg = own_pg(cfg)?;
    let out = pg.park(ids, note.trim()).map_err(unreachable)?;
    print_verdicts_of(&out, "parked", ("event_id", "event(s)"))
}
