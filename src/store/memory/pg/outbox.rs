//! The outbox as the dispatchers read and settle it.

use super::*;

impl Outbox for MemPg {
    fn pending(&mut self, target: Target, limit: usize) -> StoreResult<Vec<MsgEvent>> {
        let fence = self.1;
        self.read(|s| {
            // A stale instance reads nothing to send (the PostgreSQL query checks the epoch too).
            if fence.is_some_and(|e| e != s.lease.epoch) {
                return Ok(Vec::new());
            }
            Ok(s.events
                .values()
                .filter(|e| e.state == EventStatus::Pending && e.event.target == target)
                .take(limit)
                .map(|e| e.event.clone())
                .collect())
        })
    }

    fn mark_sent(&mut self, sent: &[Sent<'_>], now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            for x in sent {
                if let Some(e) = s
                    .events
                    .get_mut(&x.event_id)
                    .filter(|e| e.state == EventStatus::Pending && e.event.state_version == x.state_version)
                {
                    e.state = EventStatus::Sent;
                    e.sent_at = Some(now);
                    e.landed = x.landed.clone().map(Landed::into_owned);
                    if let Some(Landed::Outbound { row }) = &x.landed {
                        super::requests::sent(s, x.event_id, *row, now);
                    }
                }
            }
            Ok(())
        })
    }

    fn retry(&mut self, ids: &[i64], class: ErrorClass, error: &str, next_at: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            for id in ids {
                if let Some(e) = s.events.get_mut(id).filter(|e| e.state == EventStatus::Pending) {
                    e.event.attempts += 1;
                    e.event.next_attempt_at = Some(next_at);
                    e.error_class = Some(class);
                    e.last_error = Some(error.to_string());
                }
            }
            Ok(())
        })
    }

    fn dead(&mut self, ids: &[i64], class: ErrorClass, error: &str) -> StoreResult<()> {
        self.write(|s| {
            for id in ids {
                if let Some(e) = s.events.get_mut(id).filter(|e| e.state == EventStatus::Pending) {
                    e.event.attempts += 1;
                    e.state = EventStatus::Dead;
                    e.error_class = Some(class);
                    e.last_error = Some(error.to_string());
                }
            }
            Ok(())
        })
    }

    fn started(&mut self, ids: &[i64], now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            for id in ids {
                if let Some(e) = s.events.get_mut(id).filter(|e| e.state == EventStatus::Pending) {
                    e.event.last_attempt_at = Some(now);
                }
            }
            Ok(())
        })
    }
}
