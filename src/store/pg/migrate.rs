//! Own-PostgreSQL migrations: versioned, add-only, checksummed (Flyway-style). `msgx migrate`
//! applies the pending ones; every other command refuses to run against a schema whose
//! applied migrations differ from the binary's, or that has pending ones.

use crate::error::Store;
use postgres::Client;
use sha2::{Digest, Sha256};

use crate::error::StoreError;

pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

macro_rules! migration {
    ($version:literal, $name:literal, $file:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../../../sql/migrations/", $file)),
        }
    };
}

/// Every migration, in order. A test checks this list against the files in `sql/migrations`.
pub const MIGRATIONS: &[Migration] = &[
    migration!(1, "baseline", "V001__baseline.sql"),
    migration!(2, "event_sent_at", "V002__event_sent_at.sql"),
    migration!(3, "head_deadline_and_type_tag", "V003__head_deadline_and_type_tag.sql"),
    migration!(4, "schd_upsert_and_outbound_attempts", "V004__schd_upsert_and_outbound_attempts.sql"),
    migration!(5, "proc_state_hst", "V005__proc_state_hst.sql"),
    migration!(6, "backfill_reconciled", "V006__backfill_reconciled.sql"),
    migration!(7, "lease_and_fence", "V007__lease_and_fence.sql"),
    migration!(8, "backfill_refused_index", "V008__backfill_refused_index.sql"),
    migration!(9, "fence_key_share", "V009__fence_key_share.sql"),
    migration!(10, "season_plan", "V010__season_plan.sql"),
    migration!(11, "dead_letter_dismissed", "V011__dead_letter_dismissed.sql"),
    migration!(12, "metrics_indexes", "V012__metrics_indexes.sql"),
    migration!(13, "event_ordinal", "V013__event_ordinal.sql"),
    migration!(14, "redis_record_and_heal_log", "V014__redis_record_and_heal_log.sql"),
    migration!(15, "delivery_receipts", "V015__delivery_receipts.sql"),
    migration!(16, "requests", "V016__requests.sql"),
    migration!(17, "rules_version", "V017__rules_version.sql"),
];

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("applied migration V{version:03} {name} was changed after it was applied (checksum {applied} in the database, {ours} in this binary); migrations are add-only: restore the file and add a new migration")]
    Changed { version: i32, name: String, applied: String, ours: String },
    #[error("the database has migration V{version:03} ({name}) that this binary does not know: it was migrated by a newer msgx")]
    Unknown { version: i32, name: String },
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

const HISTORY: &str = "CREATE TABLE IF NOT EXISTS msgx_schema_history (
    version    INT          PRIMARY KEY,
    name       VARCHAR(100) NOT NULL,
    checksum   CHAR(64)     NOT NULL,
    applied_at TIMESTAMPTZ  NOT NULL DEFAULT now())";

/// Applied migrations as (version, name, checksum).
fn applied(client: &mut Client) -> Result<Vec<(i32, String, String)>, SchemaError> {
    let exists: bool = client.query_one("SELECT to_regclass('msgx_schema_history') IS NOT NULL", &[])?.get(0);
    if !exists {
        return Ok(Vec::new());
    }
    let rows =
        client.query("SELECT version, name, checksum FROM msgx_schema_history ORDER BY version", &[])?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get::<_, String>(2).trim().to_string())).collect())
}

/// Compares what is applied with [`MIGRATIONS`]; returns the pending ones.
fn compare(applied: &[(i32, String, String)]) -> Result<Vec<&'static Migration>, SchemaError> {
    for (version, name, sum) in applied {
        match MIGRATIONS.iter().find(|m| m.version == *version) {
            None => return Err(SchemaError::Unknown { version: *version, name: name.clone() }),
            Some(m) if checksum(m.sql) != *sum => {
                return Err(SchemaError::Changed {
                    version: *version,
                    name: name.clone(),
                    applied: sum.clone(),
                    ours: checksum(m.sql),
                })
            }
            Some(_) => {}
        }
    }
    Ok(MIGRATIONS.iter().filter(|m| !applied.iter().any(|(v, _, _)| *v == m.version)).collect())
}

/// Checks the schema for start-up: every applied migration unchanged, none pending.
pub fn verify(client: &mut Client) -> Result<(), SchemaError> {
    let pending = compare(&applied(client)?)?;
    match pending.first() {
        None => Ok(()),
        Some(first) => Err(SchemaError::Pending { count: pending.len(), first: first.version }),
    }
}

/// Applies pending migrations, each in its own transaction, under an advisory lock so two
/// concurrent `msgx migrate` runs cannot interleave. Returns the versions applied.
pub fn migrate(client: &mut Client) -> Result<Vec<(i32, &'static str)>, SchemaError> {
    client.batch_execute(HISTORY)?;
    let mut done = Vec::new();
    loop {
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock(7302110771)", &[])?;
        let rows =
            tx.query("SELECT version, name, checksum FROM msgx_schema_history ORDER BY version", &[])?;
        let applied: Vec<_> =
            rows.iter().map(|r| (r.get(0), r.get(1), r.get::<_, String>(2).trim().to_string())).collect();
        let Some(m) = compare(&applied)?.into_iter().next() else { break };
        tx.batch_execute(m.sql).map_err(|e| {
            let cause = super::classify::classify(&e);
            SchemaError::Store(StoreError::new(
                Store::Postgres,
                cause.kind,
                format!("migration V{:03} {} failed: {}", m.version, m.name, cause.detail),
            ))
        })?;
        tx.execute(
            "INSERT INTO msgx_schema_history (version, name, checksum) VALUES ($1, $2, $3)",
            &[&m.version, &m.name, &checksum(m.sql)],
        )?;
        tx.commit()?;
        done.push((m.version, m.name));
    }
    Ok(done)
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

    #[test]
    fn compare_finds_changed_unknown_and_pending() {
        let ok = |v: i32| {
            (v, MIGRATIONS[v as usize - 1].name.to_string(), checksum(MIGRATIONS[v as usize - 1].sql))
        };
        assert_eq!(compare(&[]).unwrap().len(), MIGRATIONS.len());
        assert_eq!(compare(&[ok(1)]).unwrap().len(), MIGRATIONS.len() - 1);
        let mut changed = ok(1);
        changed.2 = checksum("-- edited");
        assert!(matches!(compare(&[changed]), Err(SchemaError::Changed { version: 1, .. })));
        let unknown = (999, "future".to_string(), checksum("x"));
        assert!(matches!(compare(&[unknown]), Err(SchemaError::Unknown { version: 999, .. })));
    }
}
