//! Own-PostgreSQL migrations on a real server: applied once, checked at start-up, add-only.

mod common;

use common::*;
use msgx::store::pg::migrate::{self, SchemaError, MIGRATIONS};

#[test]
fn migrate_applies_everything_once_and_is_idempotent() {
    let s = Services::new("");
    let mut pg = s.pg();
    assert!(matches!(migrate::verify(&mut pg), Err(SchemaError::Pending { first: 1, .. })));
    let (applied, schema) = migrate::migrate(&mut pg).unwrap();
    assert_eq!(applied.len(), MIGRATIONS.len());
    assert_eq!(schema.version, migrate::known());
    assert!(migrate::migrate(&mut pg).unwrap().0.is_empty(), "second run applies nothing");
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

/// #52: a newer release's expand-only migration, recorded with its oldest reader, leaves a
/// schema this release runs on (the previous release keeps serving while the next migrates,
/// and comes back after a rollback); one that needs a newer reader is refused with exit 3.
#[test]
fn a_newer_expand_only_migration_is_run_on_and_a_contracting_one_refused() {
    let s = Services::migrated("");
    let mut pg = s.pg();
    let next = migrate::known() + 1;
    let oldest: Option<i32> = pg
        .query_one("SELECT oldest_reader FROM msgx_schema_history WHERE version = $1", &[&migrate::known()])
        .unwrap()
        .get(0);
    assert_eq!(oldest, Some(MIGRATIONS.last().unwrap().oldest_reader), "recorded with the migration");
    pg.batch_execute("ALTER TABLE proc_state ADD COLUMN next_release_note TEXT").unwrap();
    pg.execute(
        "INSERT INTO msgx_schema_history (version, name, checksum, oldest_reader) VALUES ($1, 'next_release_note', repeat('a', 64), $2)",
        &[&next, &migrate::known()],
    )
    .unwrap();
    let schema = migrate::verify(&mut pg).unwrap();
    assert_eq!((schema.version, schema.oldest_reader), (next, migrate::known()));
    assert!(migrate::migrate(&mut pg).unwrap().0.is_empty(), "nothing of this release's is pending");
    let url = s.cfg.pg_url.clone();
    let (code, out) = msgx_cli(&s, &url, &["status"]);
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = msgx_cli(&s, &url, &["migrate"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("newer than this release"), "{out}");
    pg.execute("UPDATE msgx_schema_history SET oldest_reader = $1 WHERE version = $1", &[&next]).unwrap();
    let (code, out) = msgx_cli(&s, &url, &["status"]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains(&format!("needs a release that knows V{next:03}")), "{out}");
}
