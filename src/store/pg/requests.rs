//! `REQ_TRACK` (G-REQ-TRACK, SPEC §4.11): the requests msgx writes to the AODB. Every transition
//! is one conditional statement; the open-request index (`uk_req_open`, V001) keeps one open
//! request per type and key.

use std::time::{Duration, SystemTime};

use super::{known_state, Pg, Session};
use crate::domain::OutboundIntent;
use crate::error::StoreError;
use crate::ports::{Kept, Requests, Sent, StoreResult};
use crate::requests::{Answer, NewRequest, Outgoing, ReqState, Request};

/// The columns [`request`] reads, in its order.
pub(super) const REQUEST: &str =
    "req_id, req_type, req_key, state, origin, event_id, coutmsgs_id, mgid, answer_msg_id, \
     created_at, updated_at, expires_at, seqn, tries, dismissed_at, dismissed_note";

/// The heal's requests whose window awaits the AODB (`Requests::awaited`), of `req_track r`:
/// no answer, no person's dismissal, and no later request of the same window that is a heal's
/// (its next try) or was answered.
pub(super) const AWAITED: &str = "r.origin = 'heal' AND r.answer_msg_id IS NULL AND r.dismissed_at IS NULL
     AND r.state IN ('REGISTERED', 'SENT', 'WAITING', 'EXPIRED')
     AND NOT EXISTS (SELECT 1 FROM req_track l
                     WHERE l.req_type = r.req_type AND l.req_key = r.req_key AND l.req_id > r.req_id
                       AND (l.origin = 'heal' OR l.answer_msg_id IS NOT NULL))";

const OPEN: &str = "('REGISTERED', 'SENT', 'WAITING')";

pub(super) fn request(r: &postgres::Row) -> Result<Request, StoreError> {
    let state: &str = r.get(3);
    Ok(Request {
        req_id: r.get(0),
        req_type: r.get(1),
        req_key: r.get(2),
        state: known_state(ReqState::parse(state), "REQ_TRACK.STATE", state)?,
        origin: r.get(4),
        event_id: r.get(5),
        coutmsgs_id: r.get(6),
        mgid: r.get(7),
        answer_msg_id: r.get(8),
        created_at: r.get(9),
        updated_at: r.get(10),
        expires_at: r.get(11),
        seqn: r.get::<_, Option<i64>>(12).unwrap_or(r.get(0)),
        tries: r.get::<_, Option<i16>>(13).map_or(1, |t| t.max(1) as u16),
        dismissed: match (r.get::<_, Option<SystemTime>>(14), r.get::<_, Option<String>>(15)) {
            (Some(at), note) => Some((at, note.unwrap_or_default())),
            (None, _) => None,
        },
    })
}

pub(super) fn requests(rows: &[postgres::Row]) -> StoreResult<Vec<Request>> {
    rows.iter().map(request).collect()
}

/// The request and its outbox event in one statement; nothing when one of the same type and key
/// is open (the partial unique index is the arbiter, so two operators at once cannot both win).
fn register_sql() -> String {
    format!(
        "WITH r AS (
           INSERT INTO req_track (req_id, req_type, req_key, state, origin, event_id, mgid, created_at, updated_at, seqn, tries)
           VALUES ($1, $2, $3, 'REGISTERED', $4, $5, $6, $7, $7, $9, $10)
           ON CONFLICT (req_type, req_key) WHERE state IN {OPEN} DO NOTHING
           RETURNING {REQUEST})
         , e AS (
           INSERT INTO msg_event (event_id, target, partition_key, event_type, state_version, payload_json, state, attempts, created_at)
           SELECT $5, 'COUTMSGS', 'req:' || r.req_id, 'REQUEST', r.req_id, $8, 'PENDING', 0, $7 FROM r)
         SELECT {REQUEST} FROM r"
    )
}

impl Requests for Pg {
    fn register(
        &mut self,
        new: &NewRequest,
        text: &dyn Fn(i64) -> Outgoing,
        now: SystemTime,
    ) -> StoreResult<Result<Request, Request>> {
        let sql = register_sql();
        // Unfenced: an operator's command writes beside the daemon, through the index.
        self.write(|c| {
            let ids = c.query_one(
                "SELECT nextval('req_track_req_id_seq'), nextval('msg_event_event_id_seq')",
                &[],
            )?;
            let (req_id, event_id): (i64, i64) = (ids.get(0), ids.get(1));
            let wanted = crate::requests::seqn_of(req_id, now);
            // The first free number of this tenth of a second's and the next tenths' (`free_seqn`,
            // the twin's rule): the unique index refuses one two writers took at once.
            let seqn: Option<i64> = c
                .query_opt(
                    "SELECT $1::bigint + 10 * k FROM generate_series(0, $2::bigint - 1) k
                     WHERE NOT EXISTS (SELECT 1 FROM req_track WHERE seqn = $1::bigint + 10 * k)
                     ORDER BY k LIMIT 1",
                    &[&wanted, &crate::requests::SEQN_BUMPS],
                )?
                .map(|r| r.get(0));
            let Some(seqn) = seqn else {
                let why = crate::requests::no_free_seqn(wanted);
                return Ok(Err(StoreError::rejected(crate::error::Store::Postgres, why)));
            };
            let out = text(seqn);
            let payload = serde_json::to_string(&OutboundIntent { routing_id: out.routing_id, xml: out.xml })
                .expect("two strings serialise");
            let origin = new.origin.as_str();
            let tries = i16::try_from(new.tries).unwrap_or(i16::MAX);
            let params: [&(dyn postgres::types::ToSql + Sync); 10] = [
                &req_id,
                &new.req_type,
                &new.req_key,
                &origin,
                &event_id,
                &out.mgid,
                &now,
                &payload,
                &seqn,
                &tries,
            ];
            if let Some(row) = c.query_opt(&sql, &params)? {
                return Ok(request(&row).map(Ok));
            }
            let open = c.query_one(
                &format!("SELECT {REQUEST} FROM req_track WHERE req_type = $1 AND req_key = $2 AND state IN {OPEN}"),
                &[&new.req_type, &new.req_key],
            )?;
            Ok(request(&open).map(Err))
        })
    }

    fn requests(&mut self, open_only: bool, limit: usize) -> StoreResult<Vec<Request>> {
        let sql = format!(
            "SELECT {REQUEST} FROM req_track WHERE NOT $1 OR state IN {OPEN} ORDER BY req_id DESC LIMIT $2"
        );
        let rows = self.run(|c| c.query(&sql, &[&open_only, &(limit as i64)]))?;
        requests(&rows)
    }

    fn awaited(&mut self, limit: usize) -> StoreResult<Vec<Request>> {
        let sql =
            format!("SELECT {} FROM req_track r WHERE {AWAITED} ORDER BY r.req_id LIMIT $1", prefixed("r."));
        let rows = self.run(|c| c.query(&sql, &[&(limit as i64)]))?;
        requests(&rows)
    }

    fn heal_requests(&mut self, key: &str, limit: usize) -> StoreResult<Vec<Request>> {
        // `idx_req_heal_key` (V021).
        let sql = format!(
            "SELECT {REQUEST} FROM req_track WHERE origin = 'heal' AND req_key = $1 ORDER BY req_id DESC LIMIT $2"
        );
        let rows = self.run(|c| c.query(&sql, &[&key, &(limit as i64)]))?;
        requests(&rows)
    }

    fn dismiss_request(
        &mut self,
        req_id: i64,
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Option<(Request, bool)>> {
        let note: String = note.chars().take(crate::requests::NOTE_MAX_CHARS).collect();
        // Unfenced, as `register`: a person's word, written beside the daemon.
        self.write(|c| {
            // Only a heal's window that awaits the AODB (#68: any request was accepted).
            let set = format!(
                "UPDATE req_track r SET dismissed_at = $2, dismissed_note = $3
                 WHERE r.req_id = $1 AND {AWAITED} RETURNING {REQUEST}"
            );
            if let Some(row) = c.query_opt(&set, &[&req_id, &now, &note])? {
                return Ok(request(&row).map(|r| Some((r, true))));
            }
            let row =
                c.query_opt(&format!("SELECT {REQUEST} FROM req_track WHERE req_id = $1"), &[&req_id])?;
            Ok(row.as_ref().map(request).transpose().map(|r| r.map(|r| (r, false))))
        })
    }

    fn keep_requests(&mut self, timeout: Duration, now: SystemTime) -> StoreResult<Kept> {
        let micros = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX);
        self.write(|c| {
            let expired = c.query(
                &format!(
                    "UPDATE req_track SET state = 'EXPIRED', updated_at = $1
                     WHERE state = 'WAITING' AND expires_at <= $1 RETURNING {REQUEST}"
                ),
                &[&now],
            )?;
            let waiting = c.query(
                &format!(
                    "UPDATE req_track SET state = 'WAITING', updated_at = $1,
                            expires_at = updated_at + $2::bigint * interval '1 microsecond'
                     WHERE state = 'SENT' RETURNING {REQUEST}"
                ),
                &[&now, &micros],
            )?;
            let undeliverable = c.query(
                &format!(
                    "UPDATE req_track r SET state = 'EXPIRED', updated_at = $1
                     FROM msg_event e WHERE r.state = 'REGISTERED' AND e.event_id = r.event_id AND e.state = 'DEAD'
                     RETURNING {}",
                    prefixed("r.")
                ),
                &[&now],
            )?;
            Ok(kept(&waiting, &expired, &undeliverable))
        })
    }
}

/// What [`Requests::keep_requests`] moved, each list read back.
fn kept(
    waiting: &[postgres::Row],
    expired: &[postgres::Row],
    undeliverable: &[postgres::Row],
) -> StoreResult<Kept> {
    Ok(Kept {
        waiting: requests(waiting)?,
        expired: requests(expired)?,
        undeliverable: requests(undeliverable)?,
    })
}

/// [`REQUEST`]'s columns of a table aliased `p`.
fn prefixed(p: &str) -> String {
    REQUEST.split(", ").map(|c| format!("{p}{c}")).collect::<Vec<_>>().join(", ")
}

/// REGISTERED → SENT for the outbox events that became `COUTMSGS` rows, in the transaction that
/// marks them SENT.
pub(super) fn sent(c: &mut Session<'_>, sent: &[Sent<'_>], now: SystemTime) -> Result<(), postgres::Error> {
    let (events, rows): (Vec<i64>, Vec<i64>) = sent
        .iter()
        .filter_map(|x| match x.landed {
            Some(crate::ports::Landed::Outbound { row }) => Some((x.event_id, row)),
            _ => None,
        })
        .unzip();
    if events.is_empty() {
        return Ok(());
    }
    c.execute(
        "UPDATE req_track r SET state = 'SENT', coutmsgs_id = x.row_id, updated_at = $3
         FROM UNNEST($1::bigint[], $2::bigint[]) AS x(event_id, row_id)
         WHERE r.event_id = x.event_id AND r.state = 'REGISTERED'",
        &[&events, &rows, &now],
    )?;
    Ok(())
}

/// How many unanswered requests of an answer's kind the guard weighs, newest first: what
/// a long run of unanswered requests makes it read stays bounded.
const CANDIDATES: i64 = 1000;

/// The answer guard (G-RESP-GUARD) in the round's transaction: the unanswered, sent requests of
/// the answer's kind are locked and read, and `requests::closes` — the one rule, which the
/// in-memory twin applies too — picks the one it closes (DONE) or notes itself on (EXPIRED);
/// none, and the answer is unsolicited. One answer after the other: answers are rare (a snapshot
/// a request asked for, a reference list), and two in one round must not close the same request.
pub(super) fn answer(
    c: &mut Session<'_>,
    answers: &[(i64, &Answer)],
    now: SystemTime,
) -> Result<(), postgres::Error> {
    for (msg_id, a) in answers {
        let (matching, key): (&str, Option<&str>) = match a {
            // $1 is NULL here: named so that every statement takes the same parameters.
            Answer::Window(_) => ("req_type = 'RQFD' AND $1::text IS NULL", None),
            Answer::Reference(t) => ("req_type = 'RQRD' AND req_key = $1", Some(t.as_str())),
            Answer::Rmid(m) => ("mgid = $1", Some(m.as_str())),
        };
        let rows = c.query(
            &format!(
                "SELECT {REQUEST} FROM req_track
                 WHERE answer_msg_id IS NULL AND coutmsgs_id IS NOT NULL
                   AND state IN ('SENT', 'WAITING', 'EXPIRED') AND {matching}
                 ORDER BY req_id DESC LIMIT {CANDIDATES} FOR UPDATE"
            ),
            &[&key],
        )?;
        // The WHERE admits only states `ReqState` knows: every row reads back.
        let candidates: Vec<Request> = rows.iter().filter_map(|r| request(r).ok()).collect();
        let Some(r) = crate::requests::closes(a, &candidates) else { continue };
        c.execute(
            "UPDATE req_track SET state = CASE WHEN state = 'EXPIRED' THEN state ELSE 'DONE' END,
                    answer_msg_id = $1, updated_at = $2
             WHERE req_id = $3",
            &[msg_id, &now, &r.req_id],
        )?;
    }
    Ok(())
}

/// The requests these messages answered.
pub(super) fn answered(c: &mut Session<'_>, msg_ids: &[i64]) -> Result<Vec<postgres::Row>, postgres::Error> {
    c.query(&format!("SELECT {REQUEST} FROM req_track WHERE answer_msg_id = ANY($1)"), &[&msg_ids])
}
