//! Own-PostgreSQL migrations on a real server: applied once, checked at start-up, add-only.

use crate::common;

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

/// V018 (#52): whatever deletes outbox rows — the retention job of this release or of the one
/// before, which does not know the table — moves `OUTBOX_PRUNED` to the highest MSG_ID it took,
/// and the audit port reads it: a heal then knows which messages may have lost their events.
#[test]
fn deleting_events_moves_the_outbox_pruned_mark_whoever_deletes() {
    use msgx::ports::{Housekeeping, StateAudit};
    let s = Services::migrated("");
    let mut pg = s.pg();
    let insert = "INSERT INTO msg_event (target, partition_key, state_version, payload_json, state, created_at, sent_at, msg_id)
                  VALUES ('KAFKA:msg', 'F1', 1, '{}', 'SENT', now() - interval '9 days', now() - interval '8 days', $1)";
    for m in [40_i64, 70, 55] {
        pg.execute(insert, &[&m]).unwrap();
    }
    let mut adapter = msgx::store::pg::Pg::connect(&s.cfg.pg_url).unwrap();
    assert_eq!(adapter.events_pruned().unwrap(), 0, "a fresh schema: nothing pruned");
    let cut = std::time::SystemTime::now() - std::time::Duration::from_secs(7 * 86_400);
    assert_eq!(adapter.delete_sent_events(cut, 2).unwrap(), 2);
    assert_eq!(adapter.events_pruned().unwrap(), 70, "the highest MSG_ID the batch took");
    // A release that knows nothing of the mark deletes by hand: it moves all the same, never back.
    pg.execute("DELETE FROM msg_event WHERE msg_id = 55", &[]).unwrap();
    assert_eq!(adapter.events_pruned().unwrap(), 70);
}
