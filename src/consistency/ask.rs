//! Healing by request (#41, SPEC §4.11): where Redis is rebuilt and the mailbox no longer holds
//! the text of a message that changed flights, the AODB is asked for the windows those flights
//! lie in, instead of stopping for a person. The rebuild writes what the other messages prove;
//! the answer — a snapshot of each window, processed as any message — brings the rest.
//!
//! Which windows: the flights the message's outbox events name (`KAFKA:msg`, `KAFKA:schd`), on
//! the day their scheduled time falls on (the time the event carried, else Redis's plan index).
//! When that cannot be known (the events are past `event-retention`, the flights have no
//! scheduled time) the heal stops for a person, naming the messages (SPEC §4.10: not enough
//! evidence): today is no better a guess than any other day, and a heal that asked for it would
//! end degraded with an answer for flights it never lost (#55). Only a first start asks for
//! today (`on_empty`): there nothing was lost.

use std::collections::BTreeSet;
use std::time::SystemTime;

use log::{info, warn};

use super::heal::{HealError, Rebuild};
use super::Stores;
use crate::clock::zone::MailboxZone;
use crate::domain::{RedisRecord, Target};
use crate::requests::{Ask, NewRequest, Origin, Request};

pub use crate::requests::Asking;

/// A SUCCEEDED message whose text the mailbox no longer holds, with what Redis acknowledged of
/// its decision.
pub(super) type Gone = (i64, Option<RedisRecord>);

/// Asks the AODB for the windows of the flights the `gone` messages changed; the requests asked
/// (or already open for the same window). A snapshot among them that advanced the plan moves the
/// replay's generation to it: its window's answer is a newer snapshot.
pub(super) fn for_gone(
    st: &mut Stores<'_>,
    replay: &mut Rebuild,
    asking: &Asking,
    gone: &[Gone],
    now: SystemTime,
) -> Result<Vec<Request>, HealError> {
    for (m, _) in gone.iter().filter(|(_, r)| *r == Some(RedisRecord::Generation)) {
        replay.plan.advance_to(*m);
    }
    let wrote: Vec<i64> = gone
        .iter()
        .filter(|(_, r)| matches!(r, Some(RedisRecord::Applied | RedisRecord::Generation)))
        .map(|(m, _)| *m)
        .collect();
    if wrote.is_empty() {
        return Ok(Vec::new());
    }
    let (days, unplaced) = days_of(st, replay, &wrote)?;
    let mut windows = days.iter().map(|d| day_window(d)).collect::<Result<Vec<Ask>, HealError>>()?;
    if !unplaced.is_empty() {
        windows.push(named_window(st, asking, &unplaced)?);
    }
    let mut asked = Vec::new();
    for w in windows {
        asked.push(ask_window(st, asking, &w, &wrote, now)?);
    }
    Ok(asked)
}

/// The window a person named for flights nothing places on a day (`msgx.requests.heal-window`);
/// none named: the heal stops for a person (exit 6), never guessing a day. A window is named
/// for the messages a heal stopped for, once: when a heal's request for it was answered or
/// dismissed, it was spent on those, and a later heal stops for a person again rather than ask
/// a stale window (#68).
fn named_window(st: &mut Stores<'_>, asking: &Asking, unplaced: &[i64]) -> Result<Ask, HealError> {
    let Some(key) = &asking.policy.heal_window else {
        return Err(HealError::Person(unplaceable(unplaced)));
    };
    if let Some(spent) = spent_on(st, key)? {
        return Err(HealError::Person(format!(
            "msgx.requests.heal-window {key:?} was named for messages an earlier heal could not place, and {spent}: it says nothing of these. {} (a new window, or clear the key)",
            unplaceable(unplaced)
        )));
    }
    let ids: Vec<String> = unplaced.iter().take(10).map(i64::to_string).collect();
    warn!(
        "heal: which day's flights message(s) {} changed is not known; asking the window msgx.requests.heal-window names ({key}), as a person decided",
        ids.join(", ")
    );
    Ask::window(key)
        .ok_or_else(|| HealError::Person(format!("msgx.requests.heal-window {key:?} is not a window")))
}

/// How many of a heal's requests for the named window are read, newest first: its tries
/// (`msgx.requests.heal-tries`, at most 20) and heals before them.
const SPENT_LOOKBACK: usize = 100;

/// Whether a heal's request for window `key` was answered or dismissed, and how (for the log).
fn spent_on(st: &mut Stores<'_>, key: &str) -> Result<Option<String>, HealError> {
    let heal = st.pg.heal_requests(key, SPENT_LOOKBACK)?;
    Ok(heal.into_iter().find_map(|r| match (r.answer_msg_id, &r.dismissed) {
        (Some(m), _) => Some(format!("its request req_id={} was answered by msg {m}", r.req_id)),
        (None, Some(_)) => Some(format!("its request req_id={} was dismissed by a person", r.req_id)),
        _ => None,
    }))
}

/// A day's window, `00:00` to `23:59`.
fn day_window(day: &str) -> Result<Ask, HealError> {
    Ask::flights(&format!("{day}T00:00"), &format!("{day}T23:59"))
        .map_err(|e| HealError::Person(format!("asking the AODB for {day}: {e}")))
}

/// Start-up with an empty Redis and nothing to rebuild it from (a first start, or every
/// message msgx processed changed no flight): with `msgx.requests.on-empty`, the AODB is asked
/// for today's flights (SPEC §4.11) under its own origin: nothing was lost, so nothing is
/// degraded while the answer is awaited. A request already open for today is not asked again.
pub(super) fn on_empty(
    st: &mut Stores<'_>,
    asking: &Asking,
    now: SystemTime,
) -> Result<Option<Request>, HealError> {
    if !asking.policy.on_empty {
        return Ok(None);
    }
    let day = today(&asking.zone, now);
    let (r, how) = register(st, asking, &day_window(&day)?, Origin::FirstStart, now)?;
    info!(
        "first start req_id={} key={}: Redis holds no flight and no message msgx holds changed one; {how} the AODB for today's flights ({}) to fill it (msgx.requests.on-empty); nothing is degraded",
        r.req_id, r.req_key, r.req_type
    );
    Ok(Some(r))
}

/// The days (`2026-03-05`) of the flights the messages `wrote` changed, and the messages whose
/// flights cannot be placed on a day.
fn days_of(
    st: &mut Stores<'_>,
    replay: &mut Rebuild,
    wrote: &[i64],
) -> Result<(BTreeSet<String>, Vec<i64>), HealError> {
    let events = st.pg.events_of(wrote)?;
    let flights: Vec<String> = events
        .iter()
        .filter(|(_, e)| matches!(e.target, Target::KafkaMsg | Target::KafkaSchd))
        .map(|(_, e)| e.partition_key.clone())
        .collect();
    replay.load(st, flights)?;
    let mut days = BTreeSet::new();
    let mut placed = BTreeSet::new();
    for (m, e) in events.iter().filter(|(_, e)| matches!(e.target, Target::KafkaMsg | Target::KafkaSchd)) {
        // The scheduled time the lost message itself wrote (a plan record's), else the day
        // Redis's plan index puts the flight on.
        let day = day_in(&e.payload_json)
            .or_else(|| replay.plan.sodt.get(&e.partition_key).map(|k| day_of_key(*k)));
        if let Some(day) = day {
            days.insert(day);
            placed.insert(*m);
        }
    }
    let unplaced = wrote.iter().filter(|m| !placed.contains(m)).copied().collect();
    Ok((days, unplaced))
}

/// The day (`2026-03-05`) of a plan index key (`yyyyMMddHHmm`).
fn day_of_key(k: i64) -> String {
    let mut t = crate::handlers::sodt_text(k);
    t.truncate(10);
    t
}

/// The day of the `SODT` an event's payload carries (a `KAFKA:schd` record's, `2026-03-05T08:00`).
fn day_in(payload: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(payload).ok()?;
    let sodt = v.get("SODT")?.as_str()?;
    let day = sodt.get(..10)?;
    jiff::civil::Date::strptime("%Y-%m-%d", day).ok().map(|_| day.to_string())
}

fn today(zone: &MailboxZone, now: SystemTime) -> String {
    zone.civil(now).date().strftime("%Y-%m-%d").to_string()
}

fn unplaceable(unplaced: &[i64]) -> String {
    let ids: Vec<String> = unplaced.iter().take(10).map(i64::to_string).collect();
    format!(
        "the mailbox no longer holds the text of SUCCEEDED message(s) {} that changed flights, and which day's flights they changed is not known (their events are past msgx.pipeline.event-retention, or the flights have no scheduled time): Redis cannot be rebuilt without them, and the AODB cannot be asked for their window. A person must decide: restore the mailbox rows and start msgx again, or name the window the heal is to ask the AODB for in msgx.requests.heal-window and start msgx again (it serves, degraded, until the answer comes)",
        ids.join(", ")
    )
}

/// Registers the request for `ask` on behalf of `origin`, or finds the one open for
/// it: the request, and `asked` or `already asked`.
fn register(
    st: &mut Stores<'_>,
    asking: &Asking,
    ask: &Ask,
    origin: Origin,
    now: SystemTime,
) -> Result<(Request, &'static str), HealError> {
    let policy = &asking.policy;
    let new = NewRequest::first(ask.req_type(policy.dialect), ask.req_key(), origin);
    let text = |seqn| asking.text(ask, seqn, now);
    Ok(match st.pg.register(&new, &text, now)? {
        Ok(r) => (r, "asked"),
        Err(open) => (open, "already asked"),
    })
}

/// Asks for a window's flights on behalf of the messages `wrote`, whose texts are gone.
fn ask_window(
    st: &mut Stores<'_>,
    asking: &Asking,
    ask: &Ask,
    wrote: &[i64],
    now: SystemTime,
) -> Result<Request, HealError> {
    let (r, how) = register(st, asking, ask, Origin::Heal, now)?;
    let ids: Vec<String> = wrote.iter().take(10).map(i64::to_string).collect();
    warn!(
        "heal by request req_id={} key={}: the mailbox no longer holds the texts of SUCCEEDED message(s) {}; {how} the AODB for the window's flights ({}), which stay as the other messages leave them until its answer is processed",
        r.req_id,
        r.req_key,
        ids.join(", "),
        r.req_type
    );
    Ok(r)
}
