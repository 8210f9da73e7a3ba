//! Own PostgreSQL: `PROC_STATE`, `MSG_EVENT`, the watermark and the migrations. Every state
//! change is a conditional write (`WHERE state IN (…)`), so a row can only move along the
//! lifecycle, never back, whatever a caller does.

pub mod migrate;

use std::time::{Duration, SystemTime};

use postgres::{Client, NoTls};

use crate::domain::{EventStatus, InboundRow, MsgEvent, NewEvent, ProcRow, ProcStatus, Target};
use crate::error::{ErrorClass, StoreError};
use crate::handlers::RefChange;
use crate::ports::{
    Archived, Failure, Housekeeping, Outbox, Outcome, ProcStore, ReplaySelection, Replayed, ReplayedEvent,
    Settle, StoreResult,
};
use crate::pump::replay;

/// A PostgreSQL connection that reconnects on the next call after it broke.
pub struct Pg {
    config: postgres::Config,
    client: Option<Client>,
}

impl Pg {
    /// Parses the URL; connects lazily. Connect and statement time are bounded.
    pub fn new(url: &str) -> Result<Pg, StoreError> {
        let mut config: postgres::Config = url
            .parse()
            .map_err(|e| StoreError::new("postgres", format!("bad datasources.default.url: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        if config.get_application_name().is_none() {
            config.application_name("msgx");
        }
        Ok(Pg { config, client: None })
    }

    pub fn connect(url: &str) -> Result<Pg, StoreError> {
        let mut pg = Pg::new(url)?;
        pg.client()?;
        Ok(pg)
    }

    pub fn client(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            let mut c = self.config.connect(NoTls)?;
            c.batch_execute("SET statement_timeout = '60s'; SET lock_timeout = '30s'; SET TIME ZONE 'UTC'")?;
            self.client = Some(c);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// Runs `f`; a failure on a broken connection drops it so the next call reconnects.
    fn run<R>(&mut self, f: impl FnOnce(&mut Client) -> Result<R, postgres::Error>) -> StoreResult<R> {
        let client = self.client()?;
        let result = f(client);
        if result.is_err() && client.is_closed() {
            self.client = None;
        }
        result.map_err(StoreError::from)
    }
}

/// Clips text to a column's width on a character boundary.
pub fn clip(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

const TERMINAL: &str = "('SUCCEEDED', 'SKIPPED', 'DEAD')";
const UNFINISHED: &str = "('PENDING', 'FAILED')";

fn proc_row(r: &postgres::Row) -> Result<ProcRow, StoreError> {
    let state: String = r.get("state");
    let attempts: i32 = r.get("attempts");
    Ok(ProcRow {
        msg_id: r.get("msg_id"),
        state: ProcStatus::parse(&state)
            .ok_or_else(|| StoreError::new("postgres", format!("unknown PROC_STATE.STATE {state:?}")))?,
        attempts: attempts.max(0) as u32,
        next_attempt_at: r.get("next_attempt_at"),
        error_class: r.get::<_, Option<String>>("error_class").and_then(|c| ErrorClass::parse(&c)),
        last_error: r.get("last_error"),
        identity_key: r.get("identity_key"),
        first_failed_at: r.get("first_failed_at"),
        type_tag: r.get("type_tag"),
    })
}

/// Inserts a round's events in order (WITH ORDINALITY keeps EVENT_IDs in it), each with its
/// message id. `KAFKA:schd` events are upserted per FLID instead: a newer (or equal) generation
/// resets the flight's row to PENDING with the new payload and clears SENT_AT; an older one is
/// dropped. One statement per kind, whatever the round's size.
/// An event and the message that caused it.
type RoundEvent<'a> = (i64, &'a NewEvent);

fn insert_events(
    tx: &mut postgres::Transaction<'_>,
    events: &[RoundEvent<'_>],
    now: SystemTime,
) -> Result<(), postgres::Error> {
    let schd = Target::KafkaSchd.as_str();
    let (upserts, inserts): (Vec<&RoundEvent<'_>>, Vec<&RoundEvent<'_>>) =
        events.iter().partition(|(_, e)| e.target == schd);
    if !inserts.is_empty() {
        let msg_ids: Vec<i64> = inserts.iter().map(|(m, _)| *m).collect();
        let targets: Vec<&str> = inserts.iter().map(|(_, e)| e.target.as_str()).collect();
        let keys: Vec<String> = inserts.iter().map(|(_, e)| clip(&e.partition_key, 32)).collect();
        let types: Vec<&str> = inserts.iter().map(|(_, e)| e.event_type.as_str()).collect();
        let versions: Vec<i64> = inserts.iter().map(|(_, e)| e.state_version).collect();
        let payloads: Vec<&str> = inserts.iter().map(|(_, e)| e.payload_json.as_str()).collect();
        tx.execute(
            "INSERT INTO msg_event (target, partition_key, event_type, state_version, payload_json, state, attempts, created_at, msg_id)
             SELECT t, k, ty, v, p, 'PENDING', 0, $7, m
             FROM UNNEST($1::varchar[], $2::varchar[], $3::varchar[], $4::bigint[], $5::text[], $6::bigint[])
                  WITH ORDINALITY AS x(t, k, ty, v, p, m, ord)
             ORDER BY ord",
            &[&targets, &keys, &types, &versions, &payloads, &msg_ids, &now],
        )?;
    }
    if !upserts.is_empty() {
        // A FLID once per statement: the newest generation of the round (then the later event).
        let mut latest: std::collections::BTreeMap<&str, (i64, &NewEvent)> =
            std::collections::BTreeMap::new();
        for (m, e) in upserts {
            let slot = latest.entry(e.partition_key.as_str()).or_insert((*m, e));
            if e.state_version >= slot.1.state_version {
                *slot = (*m, e);
            }
        }
        let keys: Vec<String> = latest.keys().map(|k| clip(k, 32)).collect();
        let types: Vec<&str> = latest.values().map(|(_, e)| e.event_type.as_str()).collect();
        let versions: Vec<i64> = latest.values().map(|(_, e)| e.state_version).collect();
        let payloads: Vec<&str> = latest.values().map(|(_, e)| e.payload_json.as_str()).collect();
        let msg_ids: Vec<i64> = latest.values().map(|(m, _)| *m).collect();
        tx.execute(
            "INSERT INTO msg_event (target, partition_key, event_type, state_version, payload_json, state, attempts, created_at, msg_id)
             SELECT 'KAFKA:schd', k, ty, v, p, 'PENDING', 0, $6, m
             FROM UNNEST($1::varchar[], $2::varchar[], $3::bigint[], $4::text[], $5::bigint[]) AS x(k, ty, v, p, m)
             ON CONFLICT (partition_key) WHERE target = 'KAFKA:schd' DO UPDATE SET
                 event_type = EXCLUDED.event_type, state_version = EXCLUDED.state_version,
                 payload_json = EXCLUDED.payload_json, state = 'PENDING', attempts = 0,
                 next_attempt_at = NULL, error_class = NULL, last_error = NULL, sent_at = NULL,
                 last_attempt_at = NULL, created_at = EXCLUDED.created_at, msg_id = EXCLUDED.msg_id
             WHERE msg_event.state_version <= EXCLUDED.state_version",
            &[&keys, &types, &versions, &payloads, &msg_ids, &now],
        )?;
    }
    Ok(())
}

/// REF_MASTER changes (SOURCE = AODB), in the message's transaction.
fn write_references(
    tx: &mut postgres::Transaction<'_>,
    refs: &[RefChange],
    now: SystemTime,
) -> Result<(), postgres::Error> {
    for r in refs {
        match r {
            RefChange::Keep { rtype, keys } => {
                tx.execute(
                    "DELETE FROM ref_master WHERE rtype = $1 AND NOT (rkey = ANY($2))",
                    &[rtype, keys],
                )?;
            }
            RefChange::Upsert { rtype, rkey, payload_json } => {
                tx.execute(
                    "INSERT INTO ref_master (rtype, rkey, payload_json, source, refreshed_at) VALUES ($1, $2, $3, 'AODB', $4)
                     ON CONFLICT (rtype, rkey) DO UPDATE SET payload_json = EXCLUDED.payload_json, source = 'AODB',
                         refreshed_at = EXCLUDED.refreshed_at",
                    &[&clip(rtype, 8), &clip(rkey, 64), payload_json, &now],
                )?;
            }
            RefChange::Delete { rtype, rkey } => {
                tx.execute("DELETE FROM ref_master WHERE rtype = $1 AND rkey = $2", &[rtype, rkey])?;
            }
        }
    }
    Ok(())
}

/// The rows a replay selection names: by id whatever their state (so a refusal can say why),
/// by range or class only those in `replayable` state. `select` lists id, then the columns the
/// caller reads; `id` is the key column.
fn replay_rows(
    tx: &mut postgres::Transaction<'_>,
    select: &str,
    id: &str,
    replayable: &str,
    sel: &ReplaySelection,
    limit: i64,
) -> Result<Vec<postgres::Row>, postgres::Error> {
    match sel {
        ReplaySelection::Ids(ids) => {
            tx.query(&format!("{select} WHERE {id} = ANY($1) ORDER BY {id} LIMIT $2"), &[ids, &limit])
        }
        ReplaySelection::Range(a, b) => tx.query(
            &format!("{select} WHERE {id} BETWEEN $1 AND $2 AND {replayable} ORDER BY {id} LIMIT $3"),
            &[a, b, &limit],
        ),
        ReplaySelection::Class(class) => tx.query(
            &format!("{select} WHERE error_class = $1 AND {replayable} ORDER BY {id} LIMIT $2"),
            &[&class.as_str(), &limit],
        ),
    }
}

/// Ids a replay selection named that no row answered (reported as "no such …").
fn absent_ids(sel: &ReplaySelection, found: &[i64], limit: usize) -> Vec<i64> {
    match sel {
        ReplaySelection::Ids(ids) => {
            ids.iter().take(limit).filter(|id| !found.contains(id)).copied().collect()
        }
        _ => Vec::new(),
    }
}

impl ProcStore for Pg {
    fn known(&mut self, ids: &[i64]) -> StoreResult<Vec<i64>> {
        let rows = self.run(|c| {
            c.query("SELECT msg_id FROM proc_state WHERE msg_id = ANY($1) ORDER BY msg_id", &[&ids])
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn enqueue(
        &mut self,
        rows: &[InboundRow],
        watermark: Option<i64>,
        now: SystemTime,
    ) -> StoreResult<Vec<i64>> {
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let received: Vec<Option<SystemTime>> = rows.iter().map(|r| r.received_at).collect();
        self.run(|c| {
            let mut tx = c.transaction()?;
            let new = tx.query(
                "INSERT INTO proc_state (msg_id, state, attempts, updated_at, received_at, enqueued_at)
                 SELECT id, 'PENDING', 0, $3, rcv, $3 FROM UNNEST($1::bigint[], $2::timestamptz[]) AS t(id, rcv)
                 ON CONFLICT (msg_id) DO NOTHING RETURNING msg_id",
                &[&ids, &received, &now],
            )?;
            if let Some(w) = watermark {
                tx.execute("UPDATE ingress_watermark SET last_id = $1, updated_at = $2 WHERE id = 1", &[&w, &now])?;
            }
            tx.commit()?;
            let mut new: Vec<i64> = new.iter().map(|r| r.get(0)).collect();
            new.sort_unstable();
            Ok(new)
        })
    }

    fn watermark(&mut self) -> StoreResult<i64> {
        self.run(|c| Ok(c.query_one("SELECT last_id FROM ingress_watermark WHERE id = 1", &[])?.get(0)))
    }

    fn row(&mut self, msg_id: i64) -> StoreResult<Option<ProcRow>> {
        let row = self.run(|c| {
            c.query_opt(
                "SELECT msg_id, state, attempts, next_attempt_at, error_class, last_error, identity_key,
                        first_failed_at, type_tag
                 FROM proc_state WHERE msg_id = $1",
                &[&msg_id],
            )
        })?;
        row.as_ref().map(proc_row).transpose()
    }

    fn unfinished(&mut self, limit: usize) -> StoreResult<Vec<ProcRow>> {
        let rows = self.run(|c| {
            c.query(
                &format!(
                    "SELECT msg_id, state, attempts, next_attempt_at, error_class, last_error, identity_key,
                            first_failed_at, type_tag
                     FROM proc_state WHERE state IN {UNFINISHED} ORDER BY msg_id LIMIT $1"
                ),
                &[&(limit as i64)],
            )
        })?;
        rows.iter().map(proc_row).collect()
    }

    fn identity_holder(&mut self, key: &str) -> StoreResult<Option<i64>> {
        // ARCHIVED shadow rows keep IDENTITY_KEY, so they answer here too (INV-9).
        let row =
            self.run(|c| c.query_opt("SELECT msg_id FROM proc_state WHERE identity_key = $1", &[&key]))?;
        Ok(row.map(|r| r.get(0)))
    }

    fn identity_holders(&mut self, keys: &[String]) -> StoreResult<std::collections::HashMap<String, i64>> {
        if keys.is_empty() {
            return Ok(Default::default());
        }
        let rows = self.run(|c| {
            c.query("SELECT identity_key, msg_id FROM proc_state WHERE identity_key = ANY($1)", &[&keys])
        })?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn commit(&mut self, settles: &[Settle], now: SystemTime) -> StoreResult<()> {
        for st in settles {
            if let Outcome::Succeeded { events, .. } = &st.outcome {
                if let Some(e) = events.iter().find(|e| Target::parse(&e.target).is_none()) {
                    return Err(StoreError::new("postgres", format!("unknown event target {:?}", e.target)));
                }
            }
        }
        // Set-based: one statement per kind of outcome, its row count checked, so a round of
        // fifty costs a handful of statements and stays all-or-nothing.
        let mut events: Vec<RoundEvent<'_>> = Vec::new();
        let (mut ok_ids, mut ok_keys, mut ok_tags) = (Vec::new(), Vec::new(), Vec::new());
        let (mut sk_ids, mut sk_reasons, mut sk_tags) = (Vec::new(), Vec::new(), Vec::new());
        let mut references = Vec::new();
        let mut failures = Vec::new();
        for st in settles {
            let tag = st.type_tag.as_deref().map(|t| clip(t, 32));
            match &st.outcome {
                Outcome::Succeeded { identity, events: evs, references: refs } => {
                    events.extend(evs.iter().map(|e| (st.msg_id, e)));
                    references.extend(refs.iter());
                    ok_ids.push(st.msg_id);
                    ok_keys.push(clip(identity, 200));
                    ok_tags.push(tag);
                }
                Outcome::Skipped { reason } => {
                    sk_ids.push(st.msg_id);
                    sk_reasons.push(clip(reason, 1000));
                    sk_tags.push(tag);
                }
                Outcome::Failed(f) => failures.push((st.msg_id, tag, f)),
            }
        }
        let mut short = None;
        self.run(|c| {
            let mut tx = c.transaction()?;
            insert_events(&mut tx, &events, now)?;
            let refs: Vec<RefChange> = references.iter().map(|r| (*r).clone()).collect();
            write_references(&mut tx, &refs, now)?;
            if !ok_ids.is_empty() {
                // SUCCEEDED, the identity (INV-9) and the backfill intent (INV-8) in one statement.
                let n = tx.execute(
                    &format!(
                        "UPDATE proc_state p SET state = 'SUCCEEDED', identity_key = x.k, type_tag = COALESCE(x.t, p.type_tag),
                             next_attempt_at = NULL, updated_at = $4, backfill_next_at = $4
                         FROM UNNEST($1::bigint[], $2::varchar[], $3::varchar[]) AS x(id, k, t)
                         WHERE p.msg_id = x.id AND p.state IN {UNFINISHED}"
                    ),
                    &[&ok_ids, &ok_keys, &ok_tags, &now],
                )?;
                if n as usize != ok_ids.len() {
                    short = Some("succeed");
                    return Ok(());
                }
            }
            if !sk_ids.is_empty() {
                let n = tx.execute(
                    &format!(
                        "UPDATE proc_state p SET state = 'SKIPPED', last_error = x.r, type_tag = COALESCE(x.t, p.type_tag),
                             next_attempt_at = NULL, updated_at = $4, backfill_next_at = $4
                         FROM UNNEST($1::bigint[], $2::varchar[], $3::varchar[]) AS x(id, r, t)
                         WHERE p.msg_id = x.id AND p.state IN {UNFINISHED}"
                    ),
                    &[&sk_ids, &sk_reasons, &sk_tags, &now],
                )?;
                if n as usize != sk_ids.len() {
                    short = Some("skip");
                    return Ok(());
                }
            }
            for (id, tag, f) in &failures {
                let n = match f {
                    Failure::Retry { class, error, next_attempt_at } => tx.execute(
                        &format!(
                            "UPDATE proc_state SET state = 'FAILED', attempts = attempts + 1, error_class = $2, last_error = $3,
                             type_tag = COALESCE($4, type_tag), next_attempt_at = $5, updated_at = $6,
                             first_failed_at = COALESCE(first_failed_at, $6)
                             WHERE msg_id = $1 AND state IN {UNFINISHED}"
                        ),
                        &[id, &class.as_str(), &clip(error, 1000), tag, next_attempt_at, &now],
                    )?,
                    Failure::Dead { class, error } => tx.execute(
                        &format!(
                            "UPDATE proc_state SET state = 'DEAD', attempts = attempts + 1, error_class = $2, last_error = $3,
                             type_tag = COALESCE($4, type_tag), next_attempt_at = NULL, updated_at = $5,
                             first_failed_at = COALESCE(first_failed_at, $5), backfill_next_at = $5
                             WHERE msg_id = $1 AND state IN {UNFINISHED}"
                        ),
                        &[id, &class.as_str(), &clip(error, 1000), tag, &now],
                    )?,
                };
                if n != 1 {
                    short = Some("fail");
                    return Ok(());
                }
            }
            tx.commit()
        })?;
        match short {
            None => Ok(()),
            Some(what) => Err(StoreError::new(
                "postgres",
                format!("commit ({what}): a row of the round is not unfinished (INV-3 guard); nothing of the round was recorded"),
            )),
        }
    }

    fn replay(&mut self, sel: &ReplaySelection, limit: usize, now: SystemTime) -> StoreResult<Vec<Replayed>> {
        let limit = limit as i64;
        self.run(|c| {
            let mut tx = c.transaction()?;
            let select = "SELECT msg_id, state, error_class FROM proc_state";
            let rows = replay_rows(&mut tx, select, "msg_id", "state IN ('FAILED', 'DEAD')", sel, limit)?;
            let mut out = Vec::new();
            for r in &rows {
                let id: i64 = r.get(0);
                let state = ProcStatus::parse(r.get::<_, &str>(1)).unwrap_or(ProcStatus::Archived);
                let class = r.get::<_, Option<String>>(2).and_then(|c| ErrorClass::parse(&c));
                let mut verdict = replay::verdict(state, class);
                if verdict.is_ok() {
                    // Class and last error stay for audit; a mark not yet written is no longer
                    // owed while the row is unfinished (INV-8).
                    let n = tx.execute(
                        "UPDATE proc_state SET state = 'PENDING', attempts = 0, next_attempt_at = NULL, first_failed_at = NULL,
                         updated_at = $2, backfill_next_at = CASE WHEN backfill_at IS NULL THEN NULL ELSE backfill_next_at END
                         WHERE msg_id = $1 AND state IN ('FAILED', 'DEAD')
                           AND error_class IN ('CODEC_ERROR', 'UNSUPPORTED', 'INFRA', 'EXHAUSTED')",
                        &[&id, &now],
                    )?;
                    if n != 1 {
                        verdict = Err("changed while replaying; run replay again".into());
                    }
                }
                out.push(Replayed { msg_id: id, was: Some((state, class)), verdict });
            }
            let found: Vec<i64> = out.iter().map(|x| x.msg_id).collect();
            for id in absent_ids(sel, &found, limit as usize) {
                out.push(Replayed { msg_id: id, was: None, verdict: Err("no such message".into()) });
            }
            tx.commit()?;
            Ok(out)
        })
    }

    fn due_backfills(&mut self, now: SystemTime, limit: usize) -> StoreResult<Vec<i64>> {
        let rows = self.run(|c| {
            c.query(
                &format!(
                    "SELECT msg_id FROM proc_state
                     WHERE state IN {TERMINAL} AND backfill_at IS NULL AND backfill_abandoned_at IS NULL
                       AND backfill_next_at IS NOT NULL AND backfill_next_at <= $1
                     ORDER BY backfill_next_at, msg_id LIMIT $2"
                ),
                &[&now, &(limit as i64)],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn backfill_settled(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.run(|c| {
            c.execute(
                "UPDATE proc_state SET backfill_at = $2, backfill_next_at = NULL, updated_at = $2
                 WHERE msg_id = ANY($1) AND backfill_at IS NULL",
                &[&ids, &now],
            )
        })?;
        Ok(())
    }

    fn backfill_retry(&mut self, id: i64, error: &str, next_at: SystemTime) -> StoreResult<u32> {
        let error = clip(error, 512);
        let row = self.run(|c| {
            c.query_opt(
                // A retry is no lifecycle step: UPDATED_AT keeps the terminal time (overdue anchor).
                "UPDATE proc_state SET backfill_attempts = backfill_attempts + 1, backfill_error = $2, backfill_next_at = $3
                 WHERE msg_id = $1 AND backfill_at IS NULL RETURNING backfill_attempts",
                &[&id, &error, &next_at],
            )
        })?;
        Ok(row.map(|r| r.get::<_, i32>(0).max(0) as u32).unwrap_or(0))
    }

    fn backfill_abandon(&mut self, ids: &[i64], reason: &str, now: SystemTime) -> StoreResult<()> {
        let reason = clip(reason, 64);
        self.run(|c| {
            c.execute(
                "UPDATE proc_state SET backfill_abandoned_at = $3, backfill_abandoned_reason = $2, backfill_next_at = NULL, updated_at = $3
                 WHERE msg_id = ANY($1) AND backfill_at IS NULL",
                &[&ids, &reason, &now],
            )
        })?;
        Ok(())
    }

    fn backfill_overdue(&mut self, owed_before: SystemTime, limit: usize) -> StoreResult<Vec<i64>> {
        let rows = self.run(|c| {
            c.query(
                &format!(
                    "SELECT msg_id FROM proc_state
                     WHERE state IN {TERMINAL} AND backfill_at IS NULL AND backfill_abandoned_at IS NULL
                       AND backfill_next_at IS NOT NULL AND updated_at <= $1
                     ORDER BY msg_id LIMIT $2"
                ),
                &[&owed_before, &(limit as i64)],
            )
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn reconcile(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>> {
        let note = clip(note, 200);
        self.run(|c| {
            let mut tx = c.transaction()?;
            let mut out = Vec::new();
            for id in ids {
                let n = tx.execute(
                    "UPDATE proc_state SET backfill_reconciled_at = $2, backfill_reconciled_note = $3, updated_at = $2
                     WHERE msg_id = $1 AND backfill_abandoned_at IS NOT NULL AND backfill_reconciled_at IS NULL",
                    &[id, &now, &note],
                )?;
                let verdict = if n == 1 {
                    Ok(())
                } else {
                    let r = tx.query_opt(
                        "SELECT backfill_abandoned_at IS NOT NULL FROM proc_state WHERE msg_id = $1",
                        &[id],
                    )?;
                    Err(match r.map(|r| r.get::<_, bool>(0)) {
                        None => "no such message".to_string(),
                        Some(false) => "its mark was not abandoned; nothing to reconcile".to_string(),
                        Some(true) => "already reconciled".to_string(),
                    })
                };
                out.push((*id, verdict));
            }
            tx.commit()?;
            Ok(out)
        })
    }

    fn backfill_attempts(&mut self, id: i64) -> StoreResult<u32> {
        let row =
            self.run(|c| c.query_opt("SELECT backfill_attempts FROM proc_state WHERE msg_id = $1", &[&id]))?;
        Ok(row.map(|r| r.get::<_, i32>(0).max(0) as u32).unwrap_or(0))
    }
}

impl Outbox for Pg {
    fn pending(&mut self, target: Target, limit: usize) -> StoreResult<Vec<MsgEvent>> {
        let rows = self.run(|c| {
            c.query(
                "SELECT event_id, msg_id, partition_key, state_version, payload_json, attempts, next_attempt_at, last_attempt_at
                 FROM msg_event WHERE target = $1 AND state = 'PENDING' ORDER BY event_id LIMIT $2",
                &[&target.as_str(), &(limit as i64)],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| MsgEvent {
                event_id: r.get(0),
                msg_id: r.get(1),
                target,
                partition_key: r.get(2),
                state_version: r.get(3),
                payload_json: r.get(4),
                attempts: r.get::<_, i32>(5).max(0) as u32,
                next_attempt_at: r.get(6),
                last_attempt_at: r.get(7),
            })
            .collect())
    }

    fn mark_sent(&mut self, sent: &[(i64, i64)], now: SystemTime) -> StoreResult<()> {
        let ids: Vec<i64> = sent.iter().map(|(id, _)| *id).collect();
        let versions: Vec<i64> = sent.iter().map(|(_, v)| *v).collect();
        // SENT and SENT_AT in the same conditional UPDATE (G-EVENT-RETENTION); a row reset to a
        // newer generation meanwhile does not match and stays PENDING.
        self.run(|c| {
            c.execute(
                "UPDATE msg_event e SET state = 'SENT', sent_at = $3
                 FROM UNNEST($1::bigint[], $2::bigint[]) AS s(id, v)
                 WHERE e.event_id = s.id AND e.state_version = s.v AND e.state = 'PENDING'",
                &[&ids, &versions, &now],
            )
        })?;
        Ok(())
    }

    fn retry(&mut self, ids: &[i64], class: ErrorClass, error: &str, next_at: SystemTime) -> StoreResult<()> {
        let error = clip(error, 1000);
        self.run(|c| {
            c.execute(
                "UPDATE msg_event SET attempts = attempts + 1, next_attempt_at = $2, error_class = $3, last_error = $4
                 WHERE event_id = ANY($1) AND state = 'PENDING'",
                &[&ids, &next_at, &class.as_str(), &error],
            )
        })?;
        Ok(())
    }

    fn dead(&mut self, ids: &[i64], class: ErrorClass, error: &str) -> StoreResult<()> {
        let error = clip(error, 1000);
        self.run(|c| {
            c.execute(
                "UPDATE msg_event SET state = 'DEAD', attempts = attempts + 1, error_class = $2, last_error = $3
                 WHERE event_id = ANY($1) AND state = 'PENDING'",
                &[&ids, &class.as_str(), &error],
            )
        })?;
        Ok(())
    }

    fn started(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.run(|c| {
            c.execute(
                "UPDATE msg_event SET last_attempt_at = $2 WHERE event_id = ANY($1) AND state = 'PENDING'",
                &[&ids, &now],
            )
        })?;
        Ok(())
    }

    fn replay_events(&mut self, sel: &ReplaySelection, limit: usize) -> StoreResult<Vec<ReplayedEvent>> {
        let limit = limit as i64;
        self.run(|c| {
            let mut tx = c.transaction()?;
            let select = "SELECT event_id, target, state FROM msg_event";
            let rows = replay_rows(&mut tx, select, "event_id", "state = 'DEAD'", sel, limit)?;
            let mut out = Vec::new();
            for r in &rows {
                let id: i64 = r.get(0);
                let (target, state): (String, String) = (r.get(1), r.get(2));
                let mut verdict =
                    replay::event_verdict(EventStatus::parse(&state).unwrap_or(EventStatus::Pending));
                if verdict.is_ok() {
                    let n = tx.execute(
                        "UPDATE msg_event SET state = 'PENDING', attempts = 0, next_attempt_at = NULL
                         WHERE event_id = $1 AND state = 'DEAD'",
                        &[&id],
                    )?;
                    if n != 1 {
                        verdict = Err("changed while replaying; run replay again".into());
                    }
                }
                out.push(ReplayedEvent { event_id: id, was: Some((target, state)), verdict });
            }
            let found: Vec<i64> = out.iter().map(|x| x.event_id).collect();
            for id in absent_ids(sel, &found, limit as usize) {
                out.push(ReplayedEvent { event_id: id, was: None, verdict: Err("no such event".into()) });
            }
            tx.commit()?;
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clip_respects_character_boundaries() {
        assert_eq!(clip("航班延误", 2), "航班");
        assert_eq!(clip("abc", 10), "abc");
        assert_eq!(clip("", 0), "");
    }
}

/// PROC_STATE's columns but ARCHIVED_AT, in table order: what PROC_STATE_HST copies.
const PROC_COLUMNS: &str =
    "msg_id, state, identity_key, attempts, next_attempt_at, error_class, last_error, updated_at, \
     received_at, backfill_at, backfill_next_at, backfill_attempts, backfill_error, backfill_abandoned_at, \
     backfill_abandoned_reason, enqueued_at, first_failed_at, type_tag, backfill_reconciled_at, backfill_reconciled_note";

/// An archive candidate: terminal, mark written or abandoned-and-reconciled (C-16), settled
/// before $2.
const ARCHIVABLE: &str = "state IN ('SUCCEEDED', 'SKIPPED', 'DEAD') \
     AND (backfill_at IS NOT NULL OR (backfill_abandoned_at IS NOT NULL AND backfill_reconciled_at IS NOT NULL)) \
     AND updated_at < $2";

impl Housekeeping for Pg {
    fn delete_sent_events(&mut self, sent_before: SystemTime, limit: usize) -> StoreResult<usize> {
        let n = self.run(|c| {
            // The outer STATE = 'SENT' re-check keeps a KAFKA:schd row that a new generation
            // reset to PENDING meanwhile (either order is safe).
            c.execute(
                "DELETE FROM msg_event WHERE state = 'SENT' AND event_id IN (
                     SELECT event_id FROM msg_event
                     WHERE state = 'SENT' AND sent_at IS NOT NULL AND sent_at < $1
                     ORDER BY event_id LIMIT $2)",
                &[&sent_before, &(limit as i64)],
            )
        })?;
        Ok(n as usize)
    }

    fn archive(
        &mut self,
        settled_before: SystemTime,
        limit: usize,
        now: SystemTime,
    ) -> StoreResult<Archived> {
        let ids: Vec<i64> = self
            .run(|c| {
                c.query(
                    // $1 is a no-op bound so that ARCHIVABLE's $2 means the same in every statement.
                    &format!("SELECT msg_id FROM proc_state WHERE {ARCHIVABLE} AND msg_id > $1 ORDER BY msg_id LIMIT $3"),
                    &[&i64::MIN, &settled_before, &(limit as i64)],
                )
            })?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut report = Archived::default();
        for id in ids {
            let moved = self.run(|c| {
                let mut tx = c.transaction()?;
                // Copy and shadow in one transaction, each re-checking the candidate: a DEAD row
                // replayed to PENDING meanwhile matches neither, and nothing is kept.
                let copied = tx.execute(
                    &format!(
                        "INSERT INTO proc_state_hst ({PROC_COLUMNS}, archived_at)
                         SELECT {PROC_COLUMNS}, $3 FROM proc_state WHERE msg_id = $1 AND {ARCHIVABLE}"
                    ),
                    &[&id, &settled_before, &now],
                )?;
                if copied != 1 {
                    return Ok(false);
                }
                let shadowed = tx.execute(
                    &format!(
                        "UPDATE proc_state SET state = 'ARCHIVED', archived_at = $3, updated_at = $3, attempts = 0,
                             next_attempt_at = NULL, error_class = NULL, last_error = NULL, received_at = NULL,
                             backfill_at = NULL, backfill_next_at = NULL, backfill_attempts = 0, backfill_error = NULL,
                             first_failed_at = NULL, type_tag = NULL
                         WHERE msg_id = $1 AND {ARCHIVABLE}"
                    ),
                    &[&id, &settled_before, &now],
                )?;
                if shadowed != 1 {
                    return Ok(false);
                }
                tx.commit()?;
                Ok(true)
            })?;
            if moved {
                report.archived += 1;
            } else {
                report.skipped += 1;
            }
        }
        Ok(report)
    }
}

/// What `msgx status` shows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Status {
    pub watermark: i64,
    /// Rows per `PROC_STATE.STATE`.
    pub states: Vec<(String, i64)>,
    /// The FIFO head: MSG_ID, state, attempts, class, last error, next attempt.
    pub head: Option<HeadInfo>,
    /// Rows per (`TARGET`, `MSG_EVENT.STATE`).
    pub events: Vec<(String, String, i64)>,
    pub backfill_owed: i64,
    pub abandoned: Vec<Abandoned>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeadInfo {
    pub msg_id: i64,
    pub state: String,
    pub attempts: i32,
    pub error_class: Option<String>,
    pub last_error: Option<String>,
    pub next_attempt_at_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Abandoned {
    pub msg_id: i64,
    pub state: String,
    pub reason: String,
    pub abandoned_at_ms: i64,
}

impl Pg {
    /// A read-only snapshot for operators (`msgx status`); abandoned backfills are listed
    /// up to `limit` (C-16: they stay queryable).
    pub fn status(&mut self, limit: i64) -> StoreResult<Status> {
        use crate::clock::unix_millis;
        self.run(|c| {
            let watermark = c.query_one("SELECT last_id FROM ingress_watermark WHERE id = 1", &[])?.get(0);
            let states = c
                .query("SELECT state, count(*) FROM proc_state GROUP BY state ORDER BY state", &[])?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            let head = c
                .query_opt(
                    &format!(
                        "SELECT msg_id, state, attempts, error_class, last_error, next_attempt_at FROM proc_state
                         WHERE state IN {UNFINISHED} ORDER BY msg_id LIMIT 1"
                    ),
                    &[],
                )?
                .map(|r| HeadInfo {
                    msg_id: r.get(0),
                    state: r.get(1),
                    attempts: r.get(2),
                    error_class: r.get(3),
                    last_error: r.get(4),
                    next_attempt_at_ms: r.get::<_, Option<SystemTime>>(5).map(unix_millis),
                });
            let events = c
                .query("SELECT target, state, count(*) FROM msg_event GROUP BY target, state ORDER BY target, state", &[])?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect();
            let backfill_owed = c
                .query_one(
                    &format!(
                        "SELECT count(*) FROM proc_state WHERE state IN {TERMINAL} AND backfill_at IS NULL
                         AND backfill_abandoned_at IS NULL"
                    ),
                    &[],
                )?
                .get(0);
            let abandoned = c
                .query(
                    "SELECT msg_id, state, backfill_abandoned_reason, backfill_abandoned_at FROM proc_state
                     WHERE backfill_abandoned_at IS NOT NULL AND backfill_reconciled_at IS NULL ORDER BY msg_id LIMIT $1",
                    &[&limit],
                )?
                .iter()
                .map(|r| Abandoned {
                    msg_id: r.get(0),
                    state: r.get(1),
                    reason: r.get::<_, Option<String>>(2).unwrap_or_default(),
                    abandoned_at_ms: unix_millis(r.get(3)),
                })
                .collect();
            Ok(Status { watermark, states, head, events, backfill_owed, abandoned })
        })
    }
}
