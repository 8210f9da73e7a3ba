//! `msgx migrate`: pending own-PostgreSQL migrations applied.

use super::*;

pub(super) fn migrate_cmd(cfg: &Config) -> CmdResult {
    let err = |e: migrate::SchemaError| {
        let code = if matches!(e, migrate::SchemaError::Store(_)) { Exit::Unreachable } else { Exit::Schema };
        (code, anyhow::Error::from(e))
    };
    let mut pg = Pg::of(cfg).and_then(Pg::connected).map_err(unreachable)?;
    let (applied, schema) = migrate::migrate(pg.client().map_err(unreachable)?).map_err(err)?;
    if applied.is_empty() {
        out!("schema up to date: {}", schema.line());
    }
    for (v, name) in &applied {
        out!("applied V{v:03} {name}");
    }
    if !applied.is_empty() {
        out!("schema: {}", schema.line());
    }
    Ok(())
}
