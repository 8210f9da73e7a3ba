//! `msgx reconcile`: abandoned marks reconciled with the mailbox owner (C-16).

use super::*;

pub(super) fn reconcile(cfg: &Config, ids: &[i64], note: &str) -> CmdResult {
    use msgx::ports::Operator;
    if note.trim().is_empty() {
        return Err((Exit::Usage, anyhow::anyhow!("--note must say what was found and agreed")));
    }
    let mut pg = own_pg(cfg)?;
    let out = pg.reconcile(ids, note.trim(), SystemClock.now()).map_err(unreachable)?;
    print_verdicts(&out, "reconciled")
}
