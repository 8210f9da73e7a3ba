//! `msgx reconcile`: abandoned marks reconciled with the mailbox owner (C-16).

use super::*;

pub(super) fn reconcile(cfg: &Config, ids: &[i64], note: &str) -> CmdResult {
    use msgx::ports::Operator;
    if note.trim().is_empty() {
        return Err((Exit::Usage, anyhow::anyhow!("--note must say what was found and agreed")));
    }
    let mut pg = own_pg(cfg)?;
    let out = pg.reconcile(ids, note.trim(), SystemClock.now()).map_err(unreachable)?;
    let mut refused = 0;
    for (id, verdict) in &out {
        match verdict {
            Ok(()) => println!("reconciled msg_id={id}"),
            Err(why) => {
                refused += 1;
                println!("refused    msg_id={id}: {why}");
            }
        }
    }
    if refused > 0 {
        return Err((Exit::Failed, anyhow::anyhow!("{refused} message(s) not reconciled")));
    }
    Ok(())
}
