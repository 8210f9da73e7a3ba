//! What an operator's commands do to own PostgreSQL: `msgx replay`, `msgx reconcile` and the
//! read-only `msgx status`.

use std::time::SystemTime;

use super::{clip, known_state, Pg, TERMINAL, UNFINISHED};
use crate::domain::Target;
use crate::domain::{EventStatus, ProcRow, ProcStatus};
use crate::error::ErrorClass;
use crate::policy::replay;
use crate::ports::{
    Gauges, Operator, ReplaySelection, Replayed, ReplayedEvent, ResendFrom, Resent, StoreResult,
};

/// The rows a replay selection names: by id whatever their state (so a refusal can say why),
/// by range or class only those in `replayable` state. `select` lists id, then the columns the
/// caller reads; `id` is the key column.
fn replay_rows(
    c: &mut super::Session<'_>,
    select: &str,
    id: &str,
    replayable: &str,
    sel: &ReplaySelection,
    limit: i64,
) -> Result<Vec<postgres::Row>, postgres::Error> {
    match sel {
        ReplaySelection::Ids(ids) => {
            c.query(&format!("{select} WHERE {id} = ANY($1) ORDER BY {id} LIMIT $2"), &[ids, &limit])
        }
        ReplaySelection::Range(a, b) => c.query(
            &format!("{select} WHERE {id} BETWEEN $1 AND $2 AND {replayable} ORDER BY {id} LIMIT $3"),
            &[a, b, &limit],
        ),
        ReplaySelection::Class(class) => c.query(
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

/// Whether a row (state, class, skip reason) may be replayed, and if not why.
type Verdict = fn(ProcStatus, Option<ErrorClass>, Option<&str>) -> Result<(), String>;

/// Which rows a replay brings back: the rows it lists by range or class, the guard of its
/// UPDATE, and the verdict for a row named by id.
struct ReplayOf {
    replayable: &'static str,
    guard: &'static str,
    verdict: Verdict,
}

/// `msgx replay` (SPEC §4.7): FAILED/DEAD rows of a replayable class.
const FAILURES: ReplayOf = ReplayOf {
    replayable: "state IN ('FAILED', 'DEAD')",
    guard:
        "state IN ('FAILED', 'DEAD') AND error_class IN ('CODEC_ERROR', 'UNSUPPORTED', 'INFRA', 'EXHAUSTED')",
    verdict: |state, class, _| replay::verdict(state, class),
};

/// `msgx replay --skipped`: SKIPPED rows of a kind msgx did not process (#21 item 6).
const NOT_FOR_MSGX: ReplayOf = ReplayOf {
    replayable: "state = 'SKIPPED' AND last_error LIKE 'not-for-msgx:%'",
    guard: "state = 'SKIPPED' AND last_error LIKE 'not-for-msgx:%'",
    verdict: |state, _, reason| replay::skipped_verdict(state, reason),
};

impl Pg {
    fn replay_where(
        &mut self,
        sel: &ReplaySelection,
        limit: usize,
        now: SystemTime,
        of: &ReplayOf,
    ) -> StoreResult<Vec<Replayed>> {
        let limit = limit as i64;
        self.write(|c| {
            let select = "SELECT msg_id, state, error_class, last_error FROM proc_state";
            let rows = replay_rows(c, select, "msg_id", of.replayable, sel, limit)?;
            let mut out = Vec::new();
            for r in &rows {
                let id: i64 = r.get(0);
                let text: &str = r.get(1);
                let state = match known_state(ProcStatus::parse(text), "PROC_STATE.STATE", text) {
                    Ok(s) => s,
                    Err(e) => return Ok(Err(e)),
                };
                let class = r.get::<_, Option<String>>(2).and_then(|c| ErrorClass::parse(&c));
                let mut verdict = (of.verdict)(state, class, r.get::<_, Option<&str>>(3));
                if verdict.is_ok() {
                    // Class and last error stay for audit. A mark not yet written is no longer
                    // owed while the row is unfinished (INV-8); an abandoned one is owed again
                    // when the row ends (C-16: replay clears the abandonment).
                    let n = c.execute(
                        &format!(
                            "UPDATE proc_state SET state = 'PENDING', attempts = 0, next_attempt_at = NULL, first_failed_at = NULL,
                             updated_at = $2, dismissed_at = NULL, dismissed_note = NULL,
                             backfill_next_at = CASE WHEN backfill_at IS NULL THEN NULL ELSE backfill_next_at END,
                             backfill_abandoned_at = CASE WHEN backfill_at IS NULL THEN NULL ELSE backfill_abandoned_at END,
                             backfill_abandoned_reason = CASE WHEN backfill_at IS NULL THEN NULL ELSE backfill_abandoned_reason END,
                             backfill_attempts = CASE WHEN backfill_at IS NULL THEN 0 ELSE backfill_attempts END
                             WHERE msg_id = $1 AND {}",
                            of.guard
                        ),
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
            Ok(Ok(out))
        })
    }
}

impl Operator for Pg {
    fn reset_watermark(&mut self, to: i64, now: SystemTime) -> StoreResult<Result<i64, String>> {
        self.write(|c| {
            let was: i64 =
                c.query_one("SELECT last_id FROM ingress_watermark WHERE id = 1 FOR UPDATE", &[])?.get(0);
            let above =
                c.query_one("SELECT count(*), max(msg_id) FROM proc_state WHERE msg_id > $1", &[&to])?;
            let (count, max): (i64, Option<i64>) = (above.get(0), above.get(1));
            if count > 0 {
                return Ok(Ok(Err(crate::ports::watermark_refusal(to, count, max.unwrap_or(to)))));
            }
            c.execute(
                "UPDATE ingress_watermark SET last_id = $1, updated_at = $2 WHERE id = 1",
                &[&to, &now],
            )?;
            Ok(Ok(Ok(was)))
        })
    }

    fn season(&mut self, season: &str) -> StoreResult<Vec<String>> {
        let rows = self.run(|c| {
            c.query("SELECT flight_key FROM season_plan WHERE season = $1 ORDER BY flight_key", &[&season])
        })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn row(&mut self, msg_id: i64) -> StoreResult<Option<ProcRow>> {
        let row = self.run(|c| {
            c.query_opt(&format!("SELECT {} FROM proc_state WHERE msg_id = $1", super::PROC_ROW), &[&msg_id])
        })?;
        row.as_ref().map(super::proc_row).transpose()
    }

    fn replay(&mut self, sel: &ReplaySelection, limit: usize, now: SystemTime) -> StoreResult<Vec<Replayed>> {
        self.replay_where(sel, limit, now, &FAILURES)
    }

    fn replay_skipped(
        &mut self,
        sel: &ReplaySelection,
        limit: usize,
        now: SystemTime,
    ) -> StoreResult<Vec<Replayed>> {
        self.replay_where(sel, limit, now, &NOT_FOR_MSGX)
    }

    fn reconcile(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>> {
        let note = clip(note, 200);
        self.write(|c| {
            let mut out = Vec::new();
            for id in ids {
                let n = c.execute(
                    "UPDATE proc_state SET backfill_reconciled_at = $2, backfill_reconciled_note = $3, updated_at = $2
                     WHERE msg_id = $1 AND backfill_abandoned_at IS NOT NULL AND backfill_reconciled_at IS NULL",
                    &[id, &now, &note],
                )?;
                let verdict = if n == 1 {
                    Ok(())
                } else {
                    let r = c.query_opt("SELECT backfill_abandoned_at IS NOT NULL FROM proc_state WHERE msg_id = $1", &[id])?;
                    Err(match r.map(|r| r.get::<_, bool>(0)) {
                        None => "no such message".to_string(),
                        Some(false) => "its mark was not abandoned; nothing to reconcile".to_string(),
                        Some(true) => "already reconciled".to_string(),
                    })
                };
                out.push((*id, verdict));
            }
            Ok(Ok(out))
        })
    }

    fn dismiss(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>> {
        let note = clip(note, 200);
        self.write(|c| {
            let mut out = Vec::new();
            for id in ids {
                let n = c.execute(
                    "UPDATE proc_state SET dismissed_at = $2, dismissed_note = $3, updated_at = $2
                     WHERE msg_id = $1 AND state = 'DEAD' AND dismissed_at IS NULL",
                    &[id, &now, &note],
                )?;
                let verdict = if n == 1 {
                    Ok(())
                } else {
                    let r = c.query_opt(
                        "SELECT state, dismissed_at IS NOT NULL FROM proc_state WHERE msg_id = $1",
                        &[id],
                    )?;
                    let was = match r {
                        None => None,
                        Some(r) => {
                            let text: &str = r.get(0);
                            match known_state(ProcStatus::parse(text), "PROC_STATE.STATE", text) {
                                Ok(s) => Some((s, r.get(1))),
                                Err(e) => return Ok(Err(e)),
                            }
                        }
                    };
                    Err(replay::dismiss_refusal(was))
                };
                out.push((*id, verdict));
            }
            Ok(Ok(out))
        })
    }

    fn resend(&mut self, target: Target, from: ResendFrom, apply: bool) -> StoreResult<Resent> {
        let (event, since) = match from {
            ResendFrom::Event(id) => (id, std::time::UNIX_EPOCH),
            ResendFrom::Since(t) => (i64::MIN, t),
        };
        let which = "target = $1 AND state = 'SENT' AND event_id >= $2 AND sent_at >= $3";
        self.write(|c| {
            let r = if apply {
                c.query_one(
                    &format!(
                        "WITH again AS (UPDATE msg_event SET state = 'PENDING', attempts = 0, next_attempt_at = NULL,
                             sent_at = NULL, last_attempt_at = NULL WHERE {which} RETURNING event_id)
                         SELECT count(*), min(event_id), max(event_id) FROM again"
                    ),
                    &[&target.as_str(), &event, &since],
                )?
            } else {
                c.query_one(
                    &format!("SELECT count(*), min(event_id), max(event_id) FROM msg_event WHERE {which}"),
                    &[&target.as_str(), &event, &since],
                )?
            };
            Ok(Ok(Resent { events: r.get::<_, i64>(0) as usize, first: r.get(1), last: r.get(2) }))
        })
    }

    fn park(&mut self, ids: &[i64], note: &str) -> StoreResult<Vec<(i64, Result<(), String>)>> {
        self.write(|c| {
            let mut out = Vec::new();
            for id in ids {
                // Read and changed under one row lock: the dispatcher's SENT mark cannot land
                // between the verdict and the change.
                let row = c.query_opt(
                    "SELECT target, state, attempts, last_error FROM msg_event WHERE event_id = $1 FOR UPDATE",
                    &[id],
                )?;
                let was = match &row {
                    None => None,
                    Some(r) => {
                        let (target, state): (&str, &str) = (r.get(0), r.get(1));
                        let target = match known_state(Target::parse(target), "MSG_EVENT.TARGET", target) {
                            Ok(t) => t,
                            Err(e) => return Ok(Err(e)),
                        };
                        match known_state(EventStatus::parse(state), "MSG_EVENT.STATE", state) {
                            Ok(s) => Some((target, s, r.get::<_, i32>(2))),
                            Err(e) => return Ok(Err(e)),
                        }
                    }
                };
                let verdict = replay::park_verdict(was);
                if verdict.is_ok() {
                    let last: Option<String> = row.as_ref().and_then(|r| r.get(3));
                    let error = clip(&replay::parked_error(note, last.as_deref()), 1000);
                    c.execute(
                        "UPDATE msg_event SET state = 'DEAD', last_error = $2 WHERE event_id = $1 AND state = 'PENDING'",
                        &[id, &error],
                    )?;
                }
                out.push((*id, verdict));
            }
            Ok(Ok(out))
        })
    }

    fn replay_events(&mut self, sel: &ReplaySelection, limit: usize) -> StoreResult<Vec<ReplayedEvent>> {
        let limit = limit as i64;
        self.write(|c| {
            let select = "SELECT event_id, target, state FROM msg_event";
            let rows = replay_rows(c, select, "event_id", "state = 'DEAD'", sel, limit)?;
            let mut out = Vec::new();
            for r in &rows {
                let id: i64 = r.get(0);
                let (target, state): (String, String) = (r.get(1), r.get(2));
                let status = match known_state(EventStatus::parse(&state), "MSG_EVENT.STATE", &state) {
                    Ok(s) => s,
                    Err(e) => return Ok(Err(e)),
                };
                let mut verdict = replay::event_verdict(status);
                if verdict.is_ok() {
                    let n = c.execute(
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
            Ok(Ok(out))
        })
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
    /// DEAD messages a person dismissed (`msgx dismiss`): out of the dead-letter queue.
    pub dead_dismissed: i64,
    /// Abandoned marks not reconciled: the true count, and the first `limit` of them.
    pub abandoned_count: i64,
    pub abandoned: Vec<Abandoned>,
    /// The seasonal plans held (SCHS).
    pub seasons: Vec<SeasonHeld>,
    /// The events the Kafka topics hold at because the broker refused them (#67).
    pub refused: Vec<RefusedEvent>,
}

/// A Kafka target's PENDING event with a refused attempt: its topic holds there (#67).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RefusedEvent {
    pub target: String,
    pub event_id: i64,
    pub msg_id: Option<i64>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SeasonHeld {
    pub season: String,
    pub airport: Option<String>,
    pub start: Option<String>,
    pub end: Option<String>,
    pub flights: i64,
    /// The message that delivered it.
    pub msg_id: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeadInfo {
    pub msg_id: i64,
    pub state: String,
    pub attempts: i32,
    pub error_class: Option<String>,
    pub last_error: Option<String>,
    pub next_attempt_at_ms: Option<i64>,
    /// Since msgx enqueued it, by the database's clock.
    pub age_ms: i64,
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
        self.run(|c| {
            let watermark = c.query_one("SELECT last_id FROM ingress_watermark WHERE id = 1", &[])?.get(0);
            let states = c
                .query("SELECT state, count(*) FROM proc_state GROUP BY state ORDER BY state", &[])?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            let head = head_info(c)?;
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
            let dead_dismissed: i64 = c
                .query_one("SELECT count(*) FROM proc_state WHERE state = 'DEAD' AND dismissed_at IS NOT NULL", &[])?
                .get(0);
            let abandoned_count: i64 = c
                .query_one(
                    "SELECT count(*) FROM proc_state
                     WHERE backfill_abandoned_at IS NOT NULL AND backfill_reconciled_at IS NULL",
                    &[],
                )?
                .get(0);
            let abandoned = abandoned(c, limit)?;
            let seasons = seasons(c)?;
            let refused = refused(c)?;
            Ok(Status {
                refused,
                watermark,
                states,
                head,
                events,
                backfill_owed,
                dead_dismissed,
                abandoned_count,
                abandoned,
                seasons,
            })
        })
    }
}

/// The FIFO head, with its age by the database's clock.
fn head_info(c: &mut super::Session<'_>) -> Result<Option<HeadInfo>, postgres::Error> {
    use crate::clock::unix_millis;
    Ok(c.query_opt(
        &format!(
            "SELECT msg_id, state, attempts, error_class, last_error, next_attempt_at,
                        (EXTRACT(EPOCH FROM clock_timestamp() - enqueued_at) * 1000)::bigint
                 FROM proc_state WHERE state IN {UNFINISHED} ORDER BY msg_id LIMIT 1"
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
        age_ms: r.get::<_, i64>(6).max(0),
    }))
}

/// Abandoned marks not reconciled yet, the first `limit` (C-16).
fn abandoned(c: &mut super::Session<'_>, limit: i64) -> Result<Vec<Abandoned>, postgres::Error> {
    use crate::clock::unix_millis;
    Ok(c
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
        .collect())
}

/// The head of each Kafka target when the broker refused it: a PENDING event with an attempt
/// charged (an outage charges none, SPEC §4.9). A schd batch refused whole shows its first.
fn refused(c: &mut super::Session<'_>) -> Result<Vec<RefusedEvent>, postgres::Error> {
    use crate::clock::unix_millis;
    Ok(c.query(
        "SELECT DISTINCT ON (target) target, event_id, msg_id, attempts, last_error, next_attempt_at
             FROM msg_event WHERE state = 'PENDING' AND target IN ('KAFKA:msg', 'KAFKA:schd') AND attempts > 0
             ORDER BY target, event_id",
        &[],
    )?
    .iter()
    .map(|r| RefusedEvent {
        target: r.get(0),
        event_id: r.get(1),
        msg_id: r.get(2),
        attempts: r.get(3),
        last_error: r.get(4),
        next_attempt_at_ms: r.get::<_, Option<SystemTime>>(5).map(unix_millis),
    })
    .collect())
}

/// The seasonal plans held, one line per season.
fn seasons(c: &mut super::Session<'_>) -> Result<Vec<SeasonHeld>, postgres::Error> {
    Ok(c.query(
        "SELECT season, min(airport), min(season_start), min(season_end), count(*), max(msg_id)
             FROM season_plan GROUP BY season ORDER BY season",
        &[],
    )?
    .iter()
    .map(|r| SeasonHeld {
        season: r.get(0),
        airport: r.get(1),
        start: r.get(2),
        end: r.get(3),
        flights: r.get(4),
        msg_id: r.get(5),
    })
    .collect())
}

impl crate::ports::GaugeSource for Pg {
    fn gauges(&mut self) -> StoreResult<Gauges> {
        Pg::gauges(self)
    }
}

impl Pg {
    /// The gauges of `/metrics`; every query walks a partial index (V001, V012).
    pub fn gauges(&mut self) -> StoreResult<Gauges> {
        self.run(|c| {
            let pairs = |rows: Vec<postgres::Row>| rows.iter().map(|r| (r.get(0), r.get(1))).collect::<Vec<_>>();
            let queue = pairs(c.query(
                &format!("SELECT state, count(*) FROM proc_state WHERE state IN {UNFINISHED} GROUP BY state"),
                &[],
            )?);
            let dead = pairs(c.query(
                "SELECT coalesce(error_class, '-'), count(*) FROM proc_state
                 WHERE state = 'DEAD' AND dismissed_at IS NULL GROUP BY 1",
                &[],
            )?);
            let unsupported = pairs(c.query(
                "SELECT left(coalesce(type_tag, '-'), $1), count(*) FROM proc_state
                 WHERE state = 'DEAD' AND error_class = 'UNSUPPORTED' AND dismissed_at IS NULL
                 GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT $2",
                &[&crate::ports::KIND_NAME_BYTES, &crate::ports::UNSUPPORTED_KINDS],
            )?);
            let events = c.query(
                "SELECT target, state, count(*), coalesce(EXTRACT(EPOCH FROM clock_timestamp() - min(created_at))::float8, 0)
                 FROM msg_event WHERE state IN ('PENDING', 'DEAD') GROUP BY target, state",
                &[],
            )?;
            let mut g = Gauges { queue, dead, unsupported, ..Gauges::default() };
            for r in &events {
                let (target, state, n): (String, String, i64) = (r.get(0), r.get(1), r.get(2));
                match state.as_str() {
                    "PENDING" => g.outbox.push((target, n, r.get(3))),
                    _ => g.dead_events.push((target, n)),
                }
            }
            let ages = c.query_one(
                &format!(
                    "SELECT coalesce(EXTRACT(EPOCH FROM clock_timestamp() - min(enqueued_at))::float8, 0),
                            coalesce(EXTRACT(EPOCH FROM clock_timestamp() - min(received_at))::float8, 0)
                     FROM proc_state WHERE state IN {UNFINISHED}"
                ),
                &[],
            )?;
            (g.head_age, g.lag) = (ages.get::<_, f64>(0).max(0.0), ages.get::<_, f64>(1).max(0.0));
            g.marks_owed = c
                .query_one(
                    "SELECT count(*) FROM proc_state
                     WHERE backfill_at IS NULL AND backfill_abandoned_at IS NULL AND backfill_next_at IS NOT NULL",
                    &[],
                )?
                .get(0);
            g.marks_abandoned = c
                .query_one(
                    "SELECT count(*) FROM proc_state WHERE backfill_abandoned_at IS NOT NULL AND backfill_reconciled_at IS NULL",
                    &[],
                )?
                .get(0);
            g.requests_open = pairs(c.query(
                "SELECT origin, count(*) FROM req_track WHERE state IN ('REGISTERED', 'SENT', 'WAITING') GROUP BY origin",
                &[],
            )?);
            let awaited = format!("SELECT count(*) FROM req_track r WHERE {}", super::requests::AWAITED);
            g.awaited = c.query_one(&awaited, &[])?.get(0);
            Ok(g)
        })
    }
}

/// How durable own PostgreSQL's commits are (#19): logged at start, shown by `msgx check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durability {
    pub synchronous_commit: String,
    pub synchronous_standby_names: String,
    /// Standbys streaming from this server, and how many of them are synchronous now.
    pub standbys: i64,
    pub synchronous: i64,
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "synchronous_commit={} synchronous_standby_names={:?} standbys={} synchronous_standbys={}",
            self.synchronous_commit, self.synchronous_standby_names, self.standbys, self.synchronous
        )
    }
}

impl Pg {
    /// The server's durability settings and its attached standbys (`pg_stat_replication`; a
    /// role without pg_monitor sees none).
    pub fn durability(&mut self) -> StoreResult<Durability> {
        self.run(|c| {
            let sc: String = c.query_one("SHOW synchronous_commit", &[])?.get(0);
            let names: String = c.query_one("SHOW synchronous_standby_names", &[])?.get(0);
            let r = c.query_one(
                "SELECT count(*), count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')) FROM pg_stat_replication",
                &[],
            )?;
            Ok(Durability { synchronous_commit: sc, synchronous_standby_names: names, standbys: r.get(0), synchronous: r.get(1) })
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::SkipReason;

    /// The SQL finds the replayable skips by the text `SkipReason` stores (#43: a constant
    /// meant to say so was never used).
    #[test]
    fn the_replayable_skips_are_found_by_the_text_skip_reason_stores() {
        let stored = SkipReason::NotForMsgx("a request to the platform".into()).to_string();
        let (prefix, _) = stored.split_once(':').unwrap();
        for sql in [super::NOT_FOR_MSGX.replayable, super::NOT_FOR_MSGX.guard] {
            assert!(sql.contains(&format!("last_error LIKE '{prefix}:%'")), "{sql}");
        }
        for other in [SkipReason::Ignored("LDM".into()), SkipReason::DuplicateOf(7)] {
            assert!(!other.to_string().starts_with(&format!("{prefix}:")), "{other}");
            assert!(!other.is_replayable());
        }
    }
}
