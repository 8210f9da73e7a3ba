//! Own-PostgreSQL migrations on a real server: applied once, checked at start-up, add-only.

mod common;

use common::*;
use msgx::store::pg::migrate::{self, SchemaError, MIGRATIONS};

#[test]
fn migrate_applies_everything_once_and_is_idempotent() {
    let s = Services::new("");
    let mut pg = s.pg();
    assert!(matches!(migrate::verify(&mut pg), Err(SchemaError::Pending { first: 1, .. })));
    let applied = migrate::migrate(&mut pg).unwrap();
    assert_eq!(applied.len(), MIGRATIONS.len());
    assert!(migrate::migrate(&mut pg).unwrap().is_empty(), "second run applies nothing");
    migrate::verify(&mut pg).unwrap();
    // The baseline tables exist with their spec columns.
    for (table, column) in [
        ("proc_state", "backfill_abandoned_reason"),
        ("proc_state", "enqueued_at"),
        ("msg_event", "sent_at"),
        ("ingress_watermark", "last_id"),
        ("pump_job", "kind"),
        ("req_track", "coutmsgs_id"),
        ("ref_master", "refreshed_at"),
    ] {
        let n = count(
            &mut pg,
            &format!("SELECT count(*) FROM information_schema.columns WHERE table_name = '{table}' AND column_name = '{column}'"),
        );
        assert_eq!(n, 1, "{table}.{column}");
    }
}

#[test]
fn a_changed_applied_migration_is_refused() {
    let s = Services::migrated("");
    let mut pg = s.pg();
    pg.execute("UPDATE msgx_schema_history SET checksum = repeat('0', 64) WHERE version = 1", &[]).unwrap();
    let err = migrate::verify(&mut pg).unwrap_err();
    assert!(matches!(err, SchemaError::Changed { version: 1, .. }), "{err}");
    assert!(err.to_string().contains("add-only"), "{err}");
    assert!(matches!(migrate::migrate(&mut pg), Err(SchemaError::Changed { .. })));
}

#[test]
fn a_migration_unknown_to_this_binary_is_refused() {
    let s = Services::migrated("");
    let mut pg = s.pg();
    pg.execute(
        "INSERT INTO msgx_schema_history (version, name, checksum) VALUES (999, 'future', repeat('a', 64))",
        &[],
    )
    .unwrap();
    assert!(matches!(migrate::verify(&mut pg), Err(SchemaError::Unknown { version: 999, .. })));
}
