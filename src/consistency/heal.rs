//! Healing a store that forgot, where the evidence proves what to do (#20); otherwise an error
//! that says what a person must decide. Never a guess.
//!
//! - **PostgreSQL behind**: every mailbox row msgx has or had to process above the highest
//!   MSG_ID PostgreSQL knows is enqueued again, its mark ignored, with the rows Redis's journal
//!   holds decisions for; the pump then processes them in MSG_ID order, reusing each decision
//!   Redis already applied (its journal, I2), so the outbox gets the same events under the same
//!   identities. Proven only while the journal still holds every decision above the first
//!   forgotten row (`journal:pruned` below it).
//! - **Redis behind**: the flights are rebuilt from the mailbox texts of the SUCCEEDED messages
//!   in MSG_ID order through the same pure handlers, on top of what Redis still holds (field
//!   versions make a message already there change nothing), and written whole — Redis only, no
//!   new events. Proven only while the mailbox still holds every text.

use std::collections::BTreeMap;
use std::time::SystemTime;

use log::{info, warn};

use super::{texts, Behind, FindingKind, Report, Stores};
use crate::codec;
use crate::domain::InboundRow;
use crate::error::StoreError;
use crate::handlers::{self, Decision, FlightState, View};
use crate::ports::{FlightStore, Restore, RoundNeed};
use crate::store::memory::MemFlights;

/// Why a heal did not happen.
#[derive(Debug, thiserror::Error)]
pub enum HealError {
    /// A store did not answer or refused: try again later.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The evidence is not enough: what a person must decide.
    #[error("{0}")]
    Person(String),
}

/// What a heal did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Healed {
    /// PostgreSQL: rows enqueued again, how many of them were marked, and their MSG_ID range.
    pub enqueued: usize,
    pub marked: usize,
    pub range: Option<(i64, i64)>,
    /// Redis: flights written, from how many messages, from which MSG_ID.
    pub flights: usize,
    pub messages: usize,
    pub from: Option<i64>,
}

/// Heals what `report` found, PostgreSQL first (the rebuild reads its SUCCEEDED messages).
pub fn heal(st: &mut Stores<'_>, report: &Report, now: SystemTime) -> Result<Healed, HealError> {
    let mut healed = Healed::default();
    if report.behind(Behind::Postgres) {
        heal_postgres(st, report, now, &mut healed)?;
    }
    if report.behind(Behind::Redis) {
        let empty = report.finding(FindingKind::FlightsEmpty).is_some();
        let from = if empty {
            0
        } else {
            [FindingKind::JournalMissing, FindingKind::VersionsBehind, FindingKind::GenerationBehind]
                .iter()
                .filter_map(|k| report.finding(*k).and_then(|f| f.ids.first().copied()))
                .min()
                .unwrap_or(0)
        };
        let (flights, messages) = rebuild(st, from, None, now, true)?;
        if empty {
            // Nothing of the old journal is there: everything up to now counts as dropped.
            let top = st.pg.succeeded_last(1)?.first().copied().unwrap_or(0);
            st.flights.set_pruned(top)?;
        }
        info!("healed redis: {flights} flight(s) rebuilt from {messages} SUCCEEDED message(s) from MSG_ID {from}");
        (healed.flights, healed.messages, healed.from) = (flights, messages, Some(from));
    }
    if report.needs_pruned_mark && !report.behind(Behind::Redis) {
        let top = st.pg.succeeded_last(1)?.first().copied().unwrap_or(0);
        st.flights.set_pruned(top)?;
        info!("consistency: the Redis journal is kept from now on (journal:pruned set to {top})");
    }
    Ok(healed)
}

/// Enqueues again, ignoring their marks, the rows PostgreSQL forgot (module documentation).
fn heal_postgres(
    st: &mut Stores<'_>,
    report: &Report,
    now: SystemTime,
    healed: &mut Healed,
) -> Result<(), HealError> {
    let known = report.pg_known_max;
    let mut rows: Vec<InboundRow> = Vec::new();
    let mut marked = 0;
    let mut from = known + 1;
    loop {
        let page = st.mailbox.ours(from, i64::MAX, 5_000, false)?;
        marked += page.iter().filter(|r| r.marked).count();
        rows.extend(page.iter().map(|r| r.row));
        match page.last() {
            Some(last) if page.len() == 5_000 => from = last.row.id + 1,
            _ => break,
        }
    }
    // Journal entries below the highest known MSG_ID whose row is gone too (a late row).
    let lost_below: Vec<i64> = st.flights.journal_ids()?.into_iter().filter(|m| *m <= known).collect();
    let mut lost_below = st.pg.unknown(&lost_below)?;
    lost_below.extend(super::late_forgotten(st, known)?);
    lost_below.sort_unstable();
    lost_below.dedup();
    rows.extend(lost_below.iter().map(|id| InboundRow { id: *id, received_at: None }));
    rows.sort_by_key(|r| r.id);
    rows.dedup_by_key(|r| r.id);
    let first_forgotten = lost_below.first().copied().or_else(|| rows.first().map(|r| r.id));
    let covered = match (first_forgotten, report.redis.pruned) {
        (None, _) => true,
        (Some(first), Some(pruned)) => first > pruned,
        (Some(_), None) => false,
    };
    if !covered {
        return Err(HealError::Person(format!(
            "postgres lost the outcome of {} mailbox row(s) from MSG_ID {} on, and the Redis journal no longer holds every decision above MSG_ID {} (redis.journal-keep): processing them again would decide them on today's flight state and could publish different events. A person must decide: restore own PostgreSQL from a newer backup, or accept deciding them again",
            rows.len(),
            first_forgotten.unwrap_or(0),
            report.redis.pruned.map_or("?".to_string(), |p| p.to_string())
        )));
    }
    let watermark = st.pg.watermark()?;
    for chunk in rows.chunks(1_000) {
        let top = chunk.last().map(|r| r.id).unwrap_or(0).max(watermark);
        st.pg.enqueue(chunk, Some(top), now)?;
    }
    if let (Some(a), Some(b)) = (rows.first(), rows.last()) {
        healed.range = Some((a.id, b.id));
        info!(
            "healed postgres: {} mailbox row(s) enqueued again from MSG_ID {} to {} ({marked} of them marked processed before); each is processed again in MSG_ID order, a decision Redis already applied is reused with its events",
            rows.len(),
            a.id,
            b.id
        );
    }
    (healed.enqueued, healed.marked) = (rows.len(), marked);
    Ok(())
}

/// Rebuilds flights from the SUCCEEDED messages from MSG_ID `from` on, on top of what Redis
/// holds (`seed`), and writes those that changed — only `only`'s when given. With `write` false
/// nothing is written (`msgx rebuild-flights` without `--yes`). Returns (flights that differ,
/// messages read).
fn rebuild(
    st: &mut Stores<'_>,
    from: i64,
    only: Option<&[String]>,
    now: SystemTime,
    write: bool,
) -> Result<(usize, usize), HealError> {
    let pruned = st.flights.audit()?.pruned;
    let seed: BTreeMap<String, (FlightState, Option<i64>)> =
        st.flights.all_flights()?.into_iter().map(|(k, f, s)| (k, (f, s))).collect();
    let generation = st.flights.generation_of()?;
    let mut scratch = MemFlights::new();
    scratch.replace_state(crate::store::memory::FlightsState {
        flights: seed.iter().map(|(k, (f, _))| (k.clone(), f.clone())).collect(),
        sodt: seed.iter().filter_map(|(k, (_, s))| s.map(|s| (k.clone(), s))).collect(),
        generation,
        ..Default::default()
    });
    let (journal, messages) = replay_onto(st, &mut scratch, from, pruned)?;
    let state = scratch.state();
    let changed: Vec<(String, FlightState, Option<i64>)> = state
        .flights
        .iter()
        .filter(|(k, _)| only.is_none_or(|o| o.contains(k)))
        .filter(|(k, f)| seed.get(*k).map(|(s, i)| (s, *i)) != Some((*f, state.sodt.get(*k).copied())))
        .map(|(k, f)| (k.clone(), f.clone(), state.sodt.get(k).copied()))
        .collect();
    if write {
        let journal = if only.is_some() { Vec::new() } else { journal };
        let generation = (state.generation != generation).then_some(state.generation);
        st.flights.restore(&Restore { flights: changed.clone(), generation, journal }, now)?;
    }
    Ok((changed.len(), messages))
}

/// Every SUCCEEDED message from MSG_ID `from` on decided again, in order, on `scratch`; the
/// journal entries Redis is missing above `pruned` (with the events the outbox holds); and how
/// many messages were read.
#[allow(clippy::type_complexity)]
fn replay_onto(
    st: &mut Stores<'_>,
    scratch: &mut MemFlights,
    from: i64,
    pruned: Option<i64>,
) -> Result<(Vec<(i64, Decision)>, usize), HealError> {
    let mut journal = Vec::new();
    let mut messages = 0;
    let mut after = from - 1;
    loop {
        let ids = st.pg.succeeded_above(after, 2_000)?;
        let Some(last) = ids.last().copied() else { break };
        // Only a missing entry is written, with the events its message made then (the outbox):
        // deciding it again on today's flights could say less.
        let has = st.flights.journal_has(&ids)?;
        let missing: Vec<i64> = ids
            .iter()
            .zip(has)
            .filter(|(m, h)| !h && pruned.is_some_and(|p| **m > p))
            .map(|(m, _)| *m)
            .collect();
        let mut made: BTreeMap<i64, Vec<crate::domain::NewEvent>> = BTreeMap::new();
        for (m, e) in st.pg.events_of(&missing)? {
            made.entry(m).or_default().push(e);
        }
        for (m, text) in texts(st, &ids)? {
            let names = redecide(scratch, m, text, from)?;
            if missing.contains(&m) && (names || made.contains_key(&m)) {
                let events = made.remove(&m).unwrap_or_default();
                journal.push((m, Decision { events, ..Default::default() }));
            }
            messages += 1;
        }
        after = last;
    }
    Ok((journal, messages))
}

/// Decides message `m` again on the scratch flights and applies it there; whether it names
/// flights (its journal entry is then owed, even when every change of it is superseded by now).
fn redecide(scratch: &mut MemFlights, m: i64, text: Option<String>, from: i64) -> Result<bool, HealError> {
    let Some(text) = text else {
        return Err(HealError::Person(format!(
            "the mailbox no longer holds the text of SUCCEEDED message {m}: Redis cannot be rebuilt from MSG_ID {from} without it. A person must decide: restore the mailbox rows, or accept the flights as Redis holds them (msgx rebuild-flights --flid for the others)"
        )));
    };
    let msg = match codec::decode(&text) {
        Ok(msg) => msg,
        Err(e) => {
            warn!("rebuild: SUCCEEDED message {m} no longer decodes ({e}); left out");
            return Ok(false);
        }
    };
    let need = handlers::need_of(&msg);
    let names = need.names_flights();
    let read = RoundNeed { msg_ids: Vec::new(), flids: need.flids, window: need.window };
    let p = scratch.prepare(&read, &[], SystemTime::UNIX_EPOCH)?;
    let Ok(d) = handlers::decide(&View { flights: p.flights, window: p.window }, &msg, m) else {
        return Ok(names);
    };
    if !d.flights.is_empty() || d.snapshot {
        scratch.apply(&[(m, &d)])?;
    }
    Ok(names)
}

/// `msgx rebuild-flights`: every flight (or those of `only`) rebuilt from every SUCCEEDED message
/// held; with `write` false, what it would change. Returns (flights that differ, messages read).
pub fn rebuild_flights(
    st: &mut Stores<'_>,
    only: Option<&[String]>,
    now: SystemTime,
    write: bool,
) -> Result<(usize, usize), HealError> {
    rebuild(st, 0, only, now, write)
}
