//! The requests' clock (G-REQ-TRACK, #41, #55): a request in `COUTMSGS` starts waiting, one
//! waiting past `msgx.requests.timeout` expires, one whose outbox event went DEAD never goes
//! out — and a heal's window is never forgotten: its expired request is asked again
//! (`msgx.requests.heal-tries`, `heal-backoff`), and after the last try it waits for a person.

use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;

use log::{error, info, warn};

use super::Jobs;
use crate::error::StoreError;
use crate::ports::{Housekeeping, Requests};
use crate::requests::{self, Ask, NewRequest, Origin, Request};

/// How many awaited windows one round looks at: what a long outage of the AODB makes the
/// keeper read stays bounded (the oldest first; the rest at the next rounds).
const AWAITED_PER_ROUND: usize = 100;

impl<H: Housekeeping + Requests> Jobs<H> {
    pub(super) fn keep_requests(&mut self, now: SystemTime) -> Result<(), StoreError> {
        let timeout = self.asking.policy.timeout;
        let kept = self.store.keep_requests(timeout, now)?;
        let timeout = crate::config::format_duration(timeout);
        for r in &kept.waiting {
            let (id, ty, key) = (r.req_id, &r.req_type, &r.req_key);
            let until = r.expires_at.map_or_else(|| "-".into(), crate::clock::rfc3339);
            let row = r.coutmsgs_id.map_or_else(|| "-".into(), |x| x.to_string());
            info!(
                "request sent req_id={id} seqn={} type={ty} key={key} coutmsgs_id={row}: waiting for its answer until {until}",
                r.wire_seqn()
            );
        }
        for r in &kept.expired {
            self.count_expired(r);
            let (id, ty, key) = (r.req_id, &r.req_type, &r.req_key);
            warn!(
                "request expired req_id={id} type={ty} key={key}: no answer within msgx.requests.timeout ({timeout}); \
                 an answer that comes later is processed and noted"
            );
            self.said_the_last_try(r);
        }
        for r in &kept.undeliverable {
            self.count_expired(r);
            let (id, ty, key, event) = (r.req_id, &r.req_type, &r.req_key, r.event_id.unwrap_or_default());
            warn!(
                "request undeliverable req_id={id} type={ty} key={key} event_id={event}: its outbox event is DEAD, \
                 it never went out; EXPIRED (ask again with msgx request)"
            );
        }
        self.ask_again(now)
    }

    /// `msgx_requests_expired_total{origin}`.
    fn count_expired(&self, r: &Request) {
        let s = &self.stats;
        let counter = match Origin::parse(&r.origin) {
            Some(Origin::Heal) => &s.requests_expired_heal,
            Some(Origin::FirstStart) => &s.requests_expired_first_start,
            _ => &s.requests_expired_operator,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// A heal's last try expired: its window now waits for a person (said once, here).
    fn said_the_last_try(&self, r: &Request) {
        let policy = &self.asking.policy;
        if Origin::parse(&r.origin) != Some(Origin::Heal) || r.tries < policy.heal_tries {
            return;
        }
        error!(
            "heal request unanswered req_id={} type={} key={}: the AODB answered none of {} tries; the window's flights \
             stay as the other messages leave them and msgx stays degraded until an answer comes or a person \
             dismisses it (msgx requests --dismiss {} --note …)",
            r.req_id, r.req_type, r.req_key, r.tries, r.req_id
        );
    }

    /// Asks again every heal window whose request expired and whose next try is due.
    fn ask_again(&mut self, now: SystemTime) -> Result<(), StoreError> {
        let awaited = self.store.awaited(AWAITED_PER_ROUND)?;
        for r in awaited {
            let due = requests::next_try_at(&r, &self.asking.policy).is_some_and(|at| at <= now);
            if due {
                self.ask_again_one(&r, now)?;
            }
        }
        Ok(())
    }

    fn ask_again_one(&mut self, r: &Request, now: SystemTime) -> Result<(), StoreError> {
        let Some(ask) = Ask::window(&r.req_key) else {
            // Only a flight window is ever a heal's; a key that is not one cannot be asked again.
            warn!("heal request req_id={} key={}: not a window msgx can ask again", r.req_id, r.req_key);
            return Ok(());
        };
        let new = NewRequest {
            tries: r.tries + 1,
            ..NewRequest::first(ask.req_type(self.asking.policy.dialect), ask.req_key(), Origin::Heal)
        };
        let text = |seqn| self.asking.text(&ask, seqn, now);
        let (tries, of) = (new.tries, self.asking.policy.heal_tries);
        match self.store.register(&new, &text, now)? {
            Ok(again) => info!(
                "request asked again req_id={} after req_id={} type={} key={}: try {tries} of {of} for a heal's window",
                again.req_id, r.req_id, again.req_type, again.req_key
            ),
            // Someone asked that window meanwhile: that request takes this one's place.
            Err(open) => info!(
                "request req_id={} key={} not asked again: req_id={} asks that window now",
                r.req_id, r.req_key, open.req_id
            ),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::config::Config;
    use crate::health::{assess, Awaited, Level, Observed};
    use crate::stats::Stats;
    use crate::store::memory::MemPg;

    /// #55 item 3, with the defaults (10 min timeout, 3 tries, 5 min backoff doubled, the jobs
    /// thread every jobs-interval): a heal's window the AODB never answers is asked three times,
    /// awaited at every moment from the first ask on — so `MsgxAwaitingTheAodb` (`for: 15m`)
    /// fires — and after the last try waits for a person: `status --check` WARNING naming it.
    #[test]
    fn a_heal_window_the_aodb_never_answers_is_asked_three_times_then_waits_for_a_person() {
        let cfg = Config::defaults();
        let clock = FakeClock::new();
        let mut pg = MemPg::new();
        let stats = Arc::new(Stats::default());
        let mut jobs = Jobs::new(pg.clone(), &cfg, stats.clone());
        let asking = crate::requests::Asking::of(&cfg);
        let ask = Ask::flights("2026-03-05T00:00", "2026-03-05T23:59").unwrap();
        let new = NewRequest::first(ask.req_type(asking.policy.dialect), ask.req_key(), Origin::Heal);
        let t0 = clock.now();
        pg.register(&new, &|seqn| asking.text(&ask, seqn, t0), t0).unwrap().unwrap();
        let (mut awaited_since, mut asked) = (None, Vec::new());
        let tick = cfg.pipeline.jobs_interval;
        while clock.now() < t0 + Duration::from_secs(3600) {
            let now = clock.now();
            crate::testkit::deliver_requests(&pg, now);
            jobs.round(now).unwrap();
            let awaited = pg.awaited(10).unwrap();
            assert_eq!(
                awaited.len(),
                1,
                "awaited at every moment, {:?} after the first ask",
                now.duration_since(t0)
            );
            awaited_since.get_or_insert(now);
            if asked.last() != Some(&awaited[0].req_id) {
                asked.push(awaited[0].req_id);
            }
            clock.advance(tick);
        }
        assert_eq!(asked.len(), 3, "asked {asked:?}");
        assert_eq!(stats.requests_expired_heal.load(Relaxed), 3);
        let last = pg.awaited(10).unwrap().remove(0);
        assert_eq!((last.tries, last.state), (3, crate::requests::ReqState::Expired));
        let alert_for = Duration::from_secs(15 * 60);
        assert!(clock.now().duration_since(awaited_since.unwrap()).unwrap() > alert_for);
        let o = Observed {
            awaiting: vec![Awaited::of(&last, &cfg.requests)],
            holder: Some("a".into()),
            ..Default::default()
        };
        let v = assess(&o, &cfg.health);
        assert_eq!(v.level, Level::Warning);
        assert!(v.line.contains("the AODB answered none of 3 request(s) a heal made for the flights of 2026-03-05T00:00/2026-03-05T23:59"), "{}", v.line);
        // A person's word ends it.
        pg.dismiss_request(last.req_id, "the AODB was down; plan re-sent as DNLD", clock.now()).unwrap();
        jobs.round(clock.now()).unwrap();
        assert!(pg.awaited(10).unwrap().is_empty());
        assert_eq!(pg.requests(false, 10).unwrap().len(), 3, "nothing asked after the dismissal");
    }
}
