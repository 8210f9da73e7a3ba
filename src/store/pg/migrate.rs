//! Own-PostgreSQL migrations: versioned, add-only, checksummed (Flyway-style). `msgx migrate`
//! applies the pending ones; every other command refuses to run against a schema whose
//! applied migrations differ from the binary's, or that has pending ones.
//!
//! **Releases side by side (#52).** Each migration says which releases can run on a schema
//! that has it: the *oldest reader*, as the highest migration a release knows. An
//! **expand-only** migration (a column or table added, nullable or with a default, nothing
//! renamed, dropped or made stricter) is read by the release before it (`version - 1`, or, for a
//! second migration of one release, the release before that release: `Expand, since N`); any
//! other by its own release only. `msgx migrate` records it with the migration in
//! `msgx_schema_history.oldest_reader`, so a release that does not know a migration can still
//! tell whether it may run on it: the previous release keeps serving while the next one
//! migrates, and a rollback after `msgx migrate` needs no restore. A schema's oldest reader is
//! the highest of its migrations'; a release refuses only a schema that needs a newer reader.

use crate::error::Store;
use postgres::Client;
use sha2::{Digest, Sha256};

use crate::error::StoreError;

#[derive(Debug)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
    /// The oldest release that can run on a schema with this migration, as the highest
    /// migration that release knows (module doc).
    pub oldest_reader: i32,
}

/// What a migration changes, for the releases before it (module doc).
#[derive(Clone, Copy)]
enum Change {
    /// Adds only: the release before runs on the schema it leaves.
    Expand,
    /// Renames, drops or tightens: only its own release (and later ones) may run on it.
    Contract,
}

const fn oldest_reader(version: i32, change: Change) -> i32 {
    match change {
        Change::Expand => version - 1,
        Change::Contract => version,
    }
}

macro_rules! migration {
    ($version:literal, $name:literal, $file:literal, $change:ident) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../../../sql/migrations/", $file)),
            oldest_reader: oldest_reader($version, Change::$change),
        }
    };
    // An expand-only migration of the same release as the one before it: the release before
    // that one (which knows `$reader`) still runs on it. A test holds `$reader` between the
    // migration before's oldest reader and `version - 1`.
    ($version:literal, $name:literal, $file:literal, Expand, since $reader:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../../../sql/migrations/", $file)),
            oldest_reader: $reader,
        }
    };
}

/// Every migration, in order. A test checks this list against the files in `sql/migrations`.
/// V001–V016 were written when every release refused a schema it did not know: they are marked
/// `Contract`, whatever they did. From V017 on each says what it is; a test holds the SQL of an
/// `Expand` migration to statements that only add.
pub const MIGRATIONS: &[Migration] = &[
    migration!(1, "baseline", "V001__baseline.sql", Contract),
    migration!(2, "event_sent_at", "V002__event_sent_at.sql", Contract),
    migration!(3, "head_deadline_and_type_tag", "V003__head_deadline_and_type_tag.sql", Contract),
    migration!(
        4,
        "schd_upsert_and_outbound_attempts",
        "V004__schd_upsert_and_outbound_attempts.sql",
        Contract
    ),
    migration!(5, "proc_state_hst", "V005__proc_state_hst.sql", Contract),
    migration!(6, "backfill_reconciled", "V006__backfill_reconciled.sql", Contract),
    migration!(7, "lease_and_fence", "V007__lease_and_fence.sql", Contract),
    migration!(8, "backfill_refused_index", "V008__backfill_refused_index.sql", Contract),
    migration!(9, "fence_key_share", "V009__fence_key_share.sql", Contract),
    migration!(10, "season_plan", "V010__season_plan.sql", Contract),
    migration!(11, "dead_letter_dismissed", "V011__dead_letter_dismissed.sql", Contract),
    migration!(12, "metrics_indexes", "V012__metrics_indexes.sql", Contract),
    migration!(13, "event_ordinal", "V013__event_ordinal.sql", Contract),
    migration!(14, "redis_record_and_heal_log", "V014__redis_record_and_heal_log.sql", Contract),
    migration!(15, "delivery_receipts", "V015__delivery_receipts.sql", Contract),
    migration!(16, "requests", "V016__requests.sql", Contract),
    migration!(17, "rules_version", "V017__rules_version.sql", Expand),
    migration!(18, "outbox_pruned", "V018__outbox_pruned.sql", Expand),
    // V018, V019 and V020 are all 0.2.0's: the release before it (0.1.0, which knows V017) runs on each.
    migration!(19, "request_identity_and_tries", "V019__request_identity_and_tries.sql", Expand, since 17),
    migration!(20, "snapshot_stale", "V020__snapshot_stale.sql", Expand, since 17),
    // 0.3.0's: an index, so every release since V017 (0.1.0, 0.2.0) runs on it.
    migration!(21, "heal_window_requests", "V021__heal_window_requests.sql", Expand, since 17),
    // 0.3.0's: a table no earlier release reads (`msgx rules apply`, #65).
    migration!(22, "rules_apply", "V022__rules_apply.sql", Expand, since 17),
];

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("applied migration V{version:03} {name} was changed after it was applied (checksum {applied} in the database, {ours} in this binary); migrations are add-only: restore the file and add a new migration")]
    Changed { version: i32, name: String, applied: String, ours: String },
    #[error("the database has migration V{version:03} ({name}) that this binary does not know, and a schema with it needs a release that knows V{reader:03} (this one knows V{known:03}): it was migrated by a newer msgx that changed what this release reads. Run that release, or restore the schema from before the migration")]
    Unknown { version: i32, name: String, reader: i32, known: i32 },
    #[error("{count} migration(s) pending, first V{first:03}: run `msgx migrate`")]
    Pending { count: usize, first: i32 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<postgres::Error> for SchemaError {
    fn from(e: postgres::Error) -> Self {
        SchemaError::Store(super::classify::classify(&e))
    }
}

pub fn checksum(sql: &str) -> String {
    let digest = Sha256::digest(sql.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The highest migration this release knows.
pub fn known() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

// `client_min_messages` for this transaction only: each later `msgx migrate` would otherwise
// print PostgreSQL's NOTICE that the table and the column already exist, which an operator
// reads as something to look into.
const HISTORY: &str = "SET LOCAL client_min_messages = warning;
    CREATE TABLE IF NOT EXISTS msgx_schema_history (
    version    INT          PRIMARY KEY,
    name       VARCHAR(100) NOT NULL,
    checksum   CHAR(64)     NOT NULL,
    applied_at TIMESTAMPTZ  NOT NULL DEFAULT now());
    ALTER TABLE msgx_schema_history ADD COLUMN IF NOT EXISTS oldest_reader INT";

/// One applied migration as the history records it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Applied {
    version: i32,
    name: String,
    checksum: String,
    /// `None`: recorded by a release before #52, which did not say (read as its own version).
    oldest_reader: Option<i32>,
}

/// The history's rows; `oldest_reader` read through `to_jsonb` so a history written before the
/// column existed reads too (this read never changes the schema).
const APPLIED: &str = "SELECT version, name, checksum, (to_jsonb(h) ->> 'oldest_reader')::int
    FROM msgx_schema_history h ORDER BY version";

fn rows_of(rows: &[postgres::Row]) -> Vec<Applied> {
    rows.iter()
        .map(|r| Applied {
            version: r.get(0),
            name: r.get(1),
            checksum: r.get::<_, String>(2).trim().to_string(),
            oldest_reader: r.get(3),
        })
        .collect()
}

/// Applied migrations, oldest first.
fn applied(client: &mut Client) -> Result<Vec<Applied>, SchemaError> {
    let exists: bool = client.query_one("SELECT to_regclass('msgx_schema_history') IS NOT NULL", &[])?.get(0);
    if !exists {
        return Ok(Vec::new());
    }
    Ok(rows_of(&client.query(APPLIED, &[])?))
}

/// A schema this release may run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// The highest migration applied.
    pub version: i32,
    /// The oldest release that can run on it, as the highest migration that release knows.
    pub oldest_reader: i32,
    /// Migrations a newer release applied that this one does not know but may run on.
    pub newer: Vec<(i32, String)>,
}

impl Schema {
    /// For `msgx check`, `msgx migrate` and the daemon's start.
    pub fn line(&self) -> String {
        let reader = format!("releases that know V{:03} or later run on it", self.oldest_reader);
        match self.newer.last() {
            None => format!("V{:03} ({reader})", self.version),
            Some((v, name)) => format!(
                "V{:03}, newer than this release (V{:03}): {} migration(s) up to V{v:03} {name} applied by a newer msgx, each expand-only for this release ({reader})",
                self.version,
                known(),
                self.newer.len()
            ),
        }
    }
}

/// Compares what is applied with [`MIGRATIONS`]: the pending ones, and the schema as it is.
fn compare(applied: &[Applied]) -> Result<(Vec<&'static Migration>, Schema), SchemaError> {
    let mut schema = Schema { version: 0, oldest_reader: 0, newer: Vec::new() };
    for a in applied {
        let reader = a.oldest_reader.unwrap_or(a.version);
        schema.version = schema.version.max(a.version);
        schema.oldest_reader = schema.oldest_reader.max(reader);
        match MIGRATIONS.iter().find(|m| m.version == a.version) {
            None if reader <= known() => schema.newer.push((a.version, a.name.clone())),
            None => {
                return Err(SchemaError::Unknown {
                    version: a.version,
                    name: a.name.clone(),
                    reader,
                    known: known(),
                })
            }
            Some(m) if checksum(m.sql) != a.checksum => {
                return Err(SchemaError::Changed {
                    version: a.version,
                    name: a.name.clone(),
                    applied: a.checksum.clone(),
                    ours: checksum(m.sql),
                })
            }
            Some(_) => {}
        }
    }
    let pending = MIGRATIONS.iter().filter(|m| !applied.iter().any(|a| a.version == m.version)).collect();
    Ok((pending, schema))
}

/// Checks the schema for start-up: every applied migration unchanged, none pending, and any
/// this release does not know readable by it. Returns the schema as it is.
pub fn verify(client: &mut Client) -> Result<Schema, SchemaError> {
    let (pending, schema) = compare(&applied(client)?)?;
    match pending.first() {
        None => Ok(schema),
        Some(first) => Err(SchemaError::Pending { count: pending.len(), first: first.version }),
    }
}

/// A migration `msgx migrate` applied: its version and name.
pub type Done = (i32, &'static str);

/// Applies pending migrations, each in its own transaction, under an advisory lock so two
/// concurrent `msgx migrate` runs cannot interleave. Returns the versions applied and the
/// schema they leave.
pub fn migrate(client: &mut Client) -> Result<(Vec<Done>, Schema), SchemaError> {
    {
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock(7302110771)", &[])?;
        tx.batch_execute(HISTORY)?;
        tx.commit()?;
    }
    let mut done = Vec::new();
    loop {
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock(7302110771)", &[])?;
        let (pending, schema) = compare(&rows_of(&tx.query(APPLIED, &[])?))?;
        let Some(m) = pending.into_iter().next() else { return Ok((done, schema)) };
        tx.batch_execute(m.sql).map_err(|e| {
            let cause = super::classify::classify(&e);
            SchemaError::Store(StoreError::new(
                Store::Postgres,
                cause.kind,
                format!("migration V{:03} {} failed: {}", m.version, m.name, cause.detail),
            ))
        })?;
        tx.execute(
            "INSERT INTO msgx_schema_history (version, name, checksum, oldest_reader) VALUES ($1, $2, $3, $4)",
            &[&m.version, &m.name, &checksum(m.sql), &m.oldest_reader],
        )?;
        tx.commit()?;
        done.push((m.version, m.name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_sql_migrations_is_listed_in_order() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/sql/migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|f| f.ends_with(".sql"))
            .collect();
        files.sort();
        assert_eq!(files.len(), MIGRATIONS.len(), "{files:?}");
        for (i, (f, m)) in files.iter().zip(MIGRATIONS).enumerate() {
            assert_eq!(m.version, i as i32 + 1, "versions are dense and ordered");
            assert_eq!(*f, format!("V{:03}__{}.sql", m.version, m.name));
        }
    }

    fn ok(v: i32) -> Applied {
        let m = &MIGRATIONS[v as usize - 1];
        Applied {
            version: v,
            name: m.name.into(),
            checksum: checksum(m.sql),
            oldest_reader: Some(m.oldest_reader),
        }
    }

    #[test]
    fn compare_finds_changed_unknown_and_pending() {
        assert_eq!(compare(&[]).unwrap().0.len(), MIGRATIONS.len());
        assert_eq!(compare(&[ok(1)]).unwrap().0.len(), MIGRATIONS.len() - 1);
        let mut changed = ok(1);
        changed.checksum = checksum("-- edited");
        assert!(matches!(compare(&[changed]), Err(SchemaError::Changed { version: 1, .. })));
        // Recorded before #52 (no oldest reader): only its own release reads it.
        let unknown =
            Applied { version: 999, name: "future".into(), checksum: checksum("x"), oldest_reader: None };
        assert!(matches!(compare(&[unknown]), Err(SchemaError::Unknown { version: 999, reader: 999, .. })));
    }

    /// #52: the next release's expand-only migration leaves a schema this release runs on; a
    /// contracting one, or two releases ahead, does not.
    #[test]
    fn a_newer_expand_only_migration_is_read_a_contracting_one_refused() {
        let all: Vec<Applied> = (1..=known()).map(ok).collect();
        let next = |reader| Applied {
            version: known() + 1,
            name: "next".into(),
            checksum: checksum("ALTER TABLE x ADD COLUMN y INT"),
            oldest_reader: Some(reader),
        };
        let (pending, schema) = compare(&[all.clone(), vec![next(known())]].concat()).unwrap();
        assert!(pending.is_empty());
        assert_eq!(schema.version, known() + 1);
        assert_eq!(schema.oldest_reader, known());
        assert_eq!(schema.newer, vec![(known() + 1, "next".to_string())]);
        assert!(schema.line().contains("newer than this release"), "{}", schema.line());
        let refused = compare(&[all.clone(), vec![next(known() + 1)]].concat()).unwrap_err();
        assert!(
            refused.to_string().contains(&format!("needs a release that knows V{:03}", known() + 1)),
            "{refused}"
        );
        let (_, own) = compare(&all).unwrap();
        assert!(own.newer.is_empty());
        assert_eq!(own.oldest_reader, MIGRATIONS.iter().map(|m| m.oldest_reader).max().unwrap());
    }

    /// An expand-only migration names as its oldest reader no release older than the migration
    /// before it does (those releases cannot run on the schema before it either), and none newer
    /// than the one before it.
    #[test]
    fn an_expand_only_migration_is_read_by_the_releases_that_read_the_one_before() {
        for w in MIGRATIONS.windows(2) {
            let (before, m) = (&w[0], &w[1]);
            if m.oldest_reader < m.version {
                assert!(
                    (before.oldest_reader..m.version).contains(&m.oldest_reader),
                    "V{:03} names V{:03} as its oldest reader; V{:03} is read from V{:03}",
                    m.version,
                    m.oldest_reader,
                    before.version,
                    before.oldest_reader
                );
            }
        }
    }

    /// An `Expand` migration only adds: a test on its text, so a release that marks a drop or a
    /// rename as expand-only fails here rather than at a rollback.
    #[test]
    fn an_expand_only_migration_only_adds() {
        for m in MIGRATIONS.iter().filter(|m| m.oldest_reader < m.version) {
            let text =
                m.sql.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join(" ");
            // A function's body (between `$$`) is part of its CREATE FUNCTION, semicolons and all.
            let outside: String = text.split("$$").step_by(2).collect::<Vec<_>>().join(" ");
            for s in outside.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                let upper = s.to_ascii_uppercase();
                let adds = [
                    "CREATE TABLE",
                    "CREATE INDEX",
                    "CREATE UNIQUE INDEX",
                    "CREATE FUNCTION",
                    "CREATE TRIGGER",
                ]
                .iter()
                .any(|p| upper.starts_with(p))
                    || (upper.starts_with("INSERT INTO") && upper.contains(" SELECT "))
                    || (upper.starts_with("ALTER TABLE")
                        && upper.contains(" ADD COLUMN ")
                        && !upper.contains("NOT NULL"));
                assert!(adds, "V{:03} is marked Expand but this statement does not only add: {s}", m.version);
            }
        }
    }
}
