//! `REQ_TRACK` in memory: the requests to the AODB, as `store::pg::requests` keeps them.

use super::*;
use crate::domain::OutboundIntent;
use crate::ports::{Kept, Requests};
use crate::requests::{NewRequest, Origin, Outgoing, ReqState, Request};

/// REGISTERED → SENT: the outbox event `event_id` became `COUTMSGS` row `row` (in the same
/// write as the event's SENT, as in PostgreSQL).
pub(super) fn sent(s: &mut PgState, event_id: i64, row: i64, now: SystemTime) {
    for r in s.requests.values_mut() {
        if r.event_id == Some(event_id) && r.state == ReqState::Registered {
            r.state = ReqState::Sent;
            r.coutmsgs_id = Some(row);
            r.updated_at = now;
        }
    }
}

/// The outbox event that carries request `req_id`'s text to `COUTMSGS`.
fn request_event(event_id: i64, req_id: i64, intent: &OutboundIntent, now: SystemTime) -> MemEvent {
    let event = MsgEvent {
        event_id,
        msg_id: None,
        target: Target::Coutmsgs,
        partition_key: format!("req:{req_id}"),
        state_version: req_id,
        payload_json: serde_json::to_string(intent).expect("two strings serialise"),
        attempts: 0,
        next_attempt_at: None,
        last_attempt_at: None,
        created_at: Some(now),
        ordinal: None,
    };
    MemEvent::pending(event)
}

impl Requests for MemPg {
    fn register(
        &mut self,
        new: &NewRequest,
        text: &dyn Fn(i64) -> Outgoing,
        now: SystemTime,
    ) -> StoreResult<Result<Request, Request>> {
        self.session_write(|s| {
            let open = s
                .requests
                .values()
                .find(|r| r.state.is_open() && r.req_type == new.req_type && r.req_key == new.req_key);
            if let Some(open) = open {
                return Ok(Err(open.clone()));
            }
            s.next_req_id += 1;
            s.next_event_id += 1;
            let (req_id, event_id) = (s.next_req_id, s.next_event_id);
            let wanted = crate::requests::seqn_of(req_id, now);
            let seqn = crate::requests::free_seqn(wanted, |n| s.requests.values().any(|r| r.seqn == n))
                .ok_or_else(|| {
                    StoreError::rejected(Store::Postgres, crate::requests::no_free_seqn(wanted))
                })?;
            let out = text(seqn);
            let intent = OutboundIntent { routing_id: out.routing_id, xml: out.xml };
            s.events.insert(event_id, request_event(event_id, req_id, &intent, now));
            let r = Request {
                req_id,
                req_type: new.req_type.to_string(),
                req_key: new.req_key.clone(),
                state: ReqState::Registered,
                origin: new.origin.as_str().to_string(),
                event_id: Some(event_id),
                coutmsgs_id: None,
                mgid: out.mgid,
                answer_msg_id: None,
                created_at: now,
                updated_at: now,
                expires_at: None,
                seqn,
                tries: new.tries,
                dismissed: None,
            };
            s.requests.insert(req_id, r.clone());
            Ok(Ok(r))
        })
    }

    fn requests(&mut self, open_only: bool, limit: usize) -> StoreResult<Vec<Request>> {
        self.read(|s| {
            Ok(s.requests
                .values()
                .rev()
                .filter(|r| !open_only || r.state.is_open())
                .take(limit)
                .cloned()
                .collect())
        })
    }

    fn awaited(&mut self, limit: usize) -> StoreResult<Vec<Request>> {
        self.read(|s| {
            let all: Vec<&Request> = s.requests.values().collect();
            Ok(all.iter().filter(|r| awaited(r, &all)).take(limit).map(|r| (*r).clone()).collect())
        })
    }

    fn heal_requests(&mut self, key: &str, limit: usize) -> StoreResult<Vec<Request>> {
        self.read(|s| {
            let heal =
                s.requests.values().rev().filter(|r| r.origin == Origin::Heal.as_str() && r.req_key == key);
            Ok(heal.take(limit).cloned().collect())
        })
    }

    fn dismiss_request(
        &mut self,
        req_id: i64,
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Option<(Request, bool)>> {
        self.session_write(|s| {
            let all: Vec<&Request> = s.requests.values().collect();
            let new = all.iter().any(|r| r.req_id == req_id && awaited(r, &all));
            Ok(s.requests.get_mut(&req_id).map(|r| {
                if new {
                    r.dismissed = Some((now, note.chars().take(crate::requests::NOTE_MAX_CHARS).collect()));
                }
                (r.clone(), new)
            }))
        })
    }

    fn keep_requests(&mut self, timeout: Duration, now: SystemTime) -> StoreResult<Kept> {
        self.session_write(|s| {
            let mut kept = Kept::default();
            let dead: Vec<i64> = s
                .events
                .values()
                .filter(|e| e.state == EventStatus::Dead)
                .map(|e| e.event.event_id)
                .collect();
            for r in s.requests.values_mut() {
                match r.state {
                    ReqState::Sent => {
                        r.state = ReqState::Waiting;
                        r.expires_at = Some(r.updated_at + timeout);
                        r.updated_at = now;
                        kept.waiting.push(r.clone());
                    }
                    ReqState::Waiting if r.expires_at.is_some_and(|t| t <= now) => {
                        r.state = ReqState::Expired;
                        r.updated_at = now;
                        kept.expired.push(r.clone());
                    }
                    ReqState::Registered if r.event_id.is_some_and(|e| dead.contains(&e)) => {
                        r.state = ReqState::Expired;
                        r.updated_at = now;
                        kept.undeliverable.push(r.clone());
                    }
                    _ => {}
                }
            }
            Ok(kept)
        })
    }
}

/// A heal's window whose flights await the AODB (the PostgreSQL adapter's `AWAITED`): open, or
/// unanswered after its last try, not dismissed, and no later request took its place.
fn awaited(r: &Request, all: &[&Request]) -> bool {
    r.origin == Origin::Heal.as_str()
        && r.answer_msg_id.is_none()
        && r.dismissed.is_none()
        && r.state != ReqState::Done
        && !all.iter().any(|l| {
            l.req_type == r.req_type
                && l.req_key == r.req_key
                && l.req_id > r.req_id
                && (l.origin == Origin::Heal.as_str() || l.answer_msg_id.is_some())
        })
}
