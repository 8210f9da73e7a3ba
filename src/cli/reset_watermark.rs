//! `msgx reset-watermark`: the ingress watermark moved (PRE-3).

use super::*;

pub(super) fn reset_watermark(cfg: &Config, to: i64, yes: bool) -> CmdResult {
    use msgx::ports::{MailboxScan, Operator};
    if to < 0 {
        return Err((Exit::Usage, anyhow::anyhow!("--to {to}: a watermark is 0 or a mailbox ID")));
    }
    let mut pg = own_pg(cfg)?;
    let was = pg.status(0).map_err(unreachable)?.watermark;
    let mut mb = MysqlMailbox::of(cfg).and_then(MysqlMailbox::connected).map_err(unreachable)?;
    let (highest, auto) = mb.ids_in_use().map_err(unreachable)?;
    let show = |v: Option<i64>| v.map_or("none".to_string(), |v| v.to_string());
    out!(
        "watermark: {was} -> {to}; mailbox {}: highest ID {}, next ID {}",
        cfg.inbound.table,
        show(highest),
        show(auto)
    );
    if !yes {
        return Err((
            Exit::Usage,
            anyhow::anyhow!("not changed: rows above {to} will be read (again); run with --yes to do it"),
        ));
    }
    match pg.reset_watermark(to, SystemClock.now()).map_err(unreachable)? {
        Ok(old) => {
            out!("watermark moved from {old} to {to}: the poller reads IDs above {to} from its next round");
            info!("watermark reset from {old} to {to} by msgx reset-watermark (PRE-3)");
            Ok(())
        }
        Err(why) => Err((Exit::Failed, anyhow::anyhow!("watermark not moved: {why}"))),
    }
}
