//! A round recorded as its transaction does: every outcome on copies of the tables, swapped in
//! whole (all or nothing), and the FIFO read.

use super::*;

/// The tables a round changes, copied (swapped in whole: all or nothing).
struct Tables {
    procs: BTreeMap<i64, MemProc>,
    events: BTreeMap<i64, MemEvent>,
    refs: BTreeMap<(String, String), (String, SystemTime)>,
    seasons: BTreeMap<String, MemSeason>,
    next_event_id: i64,
    requests: BTreeMap<i64, crate::requests::Request>,
}

/// Applies one round to copies of the tables, each outcome as its SQL does (`store::pg`).
fn record_round(s: &PgState, round: &RoundRecord<'_>, now: SystemTime) -> StoreResult<Tables> {
    // The refused value is in the message's success or skip; its failure can be recorded.
    if let Some(bad) = s.refuse_outcome_of {
        if round.succeeded.iter().any(|x| x.msg_id == bad) || round.skipped.iter().any(|x| x.msg_id == bad) {
            return Err(StoreError::rejected(
                Store::Postgres,
                format!("value refused for msg_id={bad} (22021, injected)"),
            ));
        }
    }
    let mut t = Tables {
        procs: s.procs.clone(),
        events: s.events.clone(),
        refs: s.refs.clone(),
        seasons: s.seasons.clone(),
        next_event_id: s.next_event_id,
        requests: s.requests.clone(),
    };
    let mut round_keys: HashMap<&str, i64> = HashMap::new();
    for x in &round.succeeded {
        t.succeed(s, x, &mut round_keys, now)?;
        if let Some(answer) = x.answer {
            t.answer(x.msg_id, answer, now);
        }
    }
    for x in &round.skipped {
        t.skip(x, now)?;
    }
    for x in &round.retried {
        t.retry(x, now)?;
    }
    for x in &round.dead {
        t.die(x, now)?;
    }
    Ok(t)
}

impl Tables {
    /// The answer guard (G-RESP-GUARD): the request the message answers is closed (DONE), or
    /// noted when it had EXPIRED (`requests::closes`, as the PostgreSQL statement).
    fn answer(&mut self, msg_id: i64, answer: &crate::requests::Answer, now: SystemTime) {
        let Some(id) = crate::requests::closes(answer, self.requests.values()).map(|r| r.req_id) else {
            return;
        };
        let r = self.requests.get_mut(&id).expect("found above");
        if r.state.is_open() {
            r.state = crate::requests::ReqState::Done;
        }
        r.answer_msg_id = Some(msg_id);
        r.updated_at = now;
    }

    /// SUCCEEDED: the identity (uk_proc_identity, also within the round), the row, its
    /// references and events.
    fn succeed<'a>(
        &mut self,
        s: &PgState,
        x: &crate::ports::Succeeded<'a>,
        round_keys: &mut HashMap<&'a str, i64>,
        now: SystemTime,
    ) -> StoreResult<()> {
        let crate::ports::Succeeded {
            msg_id: id,
            tag,
            identity,
            events,
            references,
            record,
            answer: _,
            rules,
        } = *x;
        if planted::on(Bug::IdentityUnchecked) {
            round_keys.clear();
        } else if let Some(other) = round_keys.insert(identity, id) {
            return Err(StoreError::rejected(Store::Postgres, format!("identity {identity} twice in one round: msg_id={other} and {id} (uk_proc_identity, 23505)")));
        }
        if let Some(other) = s
            .procs
            .values()
            .filter(|_| !planted::on(Bug::IdentityUnchecked))
            .find(|o| o.row.identity_key.as_deref() == Some(identity) && o.row.msg_id != id)
        {
            return Err(StoreError::rejected(
                Store::Postgres,
                format!(
                    "identity {identity} is held by msg_id={} (uk_proc_identity, 23505)",
                    other.row.msg_id
                ),
            ));
        }
        let p = unfinished(&mut self.procs, id)?;
        if let Some(t) = tag {
            p.row.type_tag = Some(t.to_string());
        }
        p.row.identity_key = Some(identity.to_string());
        p.redis_record = record;
        p.rules_version = rules;
        terminal(p, ProcStatus::Succeeded, now);
        self.references(id, references, now);
        for (ordinal, e) in events.iter().enumerate() {
            self.event(id, ordinal, e, now)?;
        }
        Ok(())
    }

    /// A SUCCEEDED message's reference changes: upserts, deletes, a type kept to a key set, a
    /// seasonal plan replaced whole.
    fn references(&mut self, id: i64, references: &[RefChange], now: SystemTime) {
        for r in references {
            match r {
                RefChange::Keep { rtype, keys } => {
                    self.refs.retain(|(t, k), _| *t != *rtype || keys.contains(k))
                }
                RefChange::Upsert { rtype, rkey, payload_json } => {
                    self.refs.insert((rtype.clone(), rkey.clone()), (payload_json.clone(), now));
                }
                RefChange::Delete { rtype, rkey } => {
                    self.refs.remove(&(rtype.clone(), rkey.clone()));
                }
                RefChange::Season { season, airport, start, end, records } => {
                    let plan = MemSeason {
                        airport: airport.clone(),
                        start: start.clone(),
                        end: end.clone(),
                        records: records.iter().cloned().collect(),
                        msg_id: id,
                    };
                    self.seasons.insert(season.clone(), plan);
                }
            }
        }
    }

    /// One outbox event; a KAFKA:schd row is the flight's, reset in place by a newer (or
    /// equal) generation and left alone by an older one.
    fn event(
        &mut self,
        id: i64,
        ordinal: usize,
        e: &crate::domain::NewEvent,
        now: SystemTime,
    ) -> StoreResult<()> {
        let target = e.target;
        // As the real adapter: a KAFKA:schd row is the flight's, not one message's.
        let place = (target != Target::KafkaSchd).then_some(ordinal as i32);
        let fresh = |event_id| MemEvent::of(event_id, id, e, place, now);
        let existing = (target == Target::KafkaSchd)
            .then(|| {
                self.events
                    .values_mut()
                    .find(|x| x.event.target == Target::KafkaSchd && x.event.partition_key == e.partition_key)
            })
            .flatten();
        match existing {
            Some(x) if x.event.state_version <= e.state_version => *x = fresh(x.event.event_id),
            Some(_) => {} // an older generation than the one held: stale
            None => {
                self.next_event_id += 1;
                self.events.insert(self.next_event_id, fresh(self.next_event_id));
            }
        }
        Ok(())
    }

    fn skip(&mut self, x: &crate::ports::Skipped<'_>, now: SystemTime) -> StoreResult<()> {
        let p = unfinished(&mut self.procs, x.msg_id)?;
        if let Some(t) = x.tag {
            p.row.type_tag = Some(t.to_string());
        }
        p.row.last_error = Some(x.reason.to_string());
        terminal(p, ProcStatus::Skipped, now);
        Ok(())
    }

    /// FAILED: one attempt more, the deadline anchor as the pump moved it, the backoff.
    fn retry(&mut self, x: &crate::ports::Retried<'_>, now: SystemTime) -> StoreResult<()> {
        let p = unfinished(&mut self.procs, x.msg_id)?;
        if let Some(t) = x.tag {
            p.row.type_tag = Some(t.to_string());
        }
        p.row.attempts += 1;
        p.row.first_failed_at = Some(x.failing_since);
        p.row.state = ProcStatus::Failed;
        p.row.error_class = Some(x.class);
        p.row.last_error = Some(x.error.to_string());
        p.row.next_attempt_at = Some(x.next_attempt_at);
        p.updated_at = now;
        Ok(())
    }

    /// DEAD, with its backfill intent (INV-8).
    fn die(&mut self, x: &crate::ports::Died<'_>, now: SystemTime) -> StoreResult<()> {
        let p = unfinished(&mut self.procs, x.msg_id)?;
        if let Some(t) = x.tag {
            p.row.type_tag = Some(t.to_string());
        }
        p.row.attempts += 1;
        p.row.first_failed_at.get_or_insert(now);
        p.row.error_class = Some(x.class);
        p.row.last_error = Some(x.error.to_string());
        terminal(p, ProcStatus::Dead, now);
        if planted::on(Bug::IntentForgotten) {
            p.backfill_next_at = None;
        }
        Ok(())
    }
}

impl Fifo for MemPg {
    fn unfinished(&mut self, limit: usize, skip: &[i64]) -> StoreResult<Vec<ProcRow>> {
        self.read(|s| {
            Ok(s.procs
                .values()
                .filter(|p| p.row.state.is_unfinished() && !skip.contains(&p.row.msg_id))
                .take(limit)
                .map(|p| p.row.clone())
                .collect())
        })
    }

    fn identity_holders(&mut self, keys: &[String]) -> StoreResult<HashMap<String, i64>> {
        // ARCHIVED shadow rows keep their identity too (INV-9 after archive).
        self.read(|s| {
            Ok(s.procs
                .values()
                .filter_map(|p| {
                    p.row
                        .identity_key
                        .as_ref()
                        .filter(|k| keys.contains(k))
                        .map(|k| (k.clone(), p.row.msg_id))
                })
                .collect())
        })
    }

    fn commit(&mut self, round: &RoundRecord<'_>, now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            let t = record_round(s, round, now)?;
            s.procs = t.procs;
            s.events = t.events;
            s.refs = t.refs;
            s.seasons = t.seasons;
            s.next_event_id = t.next_event_id;
            s.requests = t.requests;
            Ok(())
        })
    }

    fn answered(&mut self, msg_ids: &[i64]) -> StoreResult<Vec<crate::requests::Request>> {
        self.read(|s| {
            Ok(s.requests
                .values()
                .filter(|r| r.answer_msg_id.is_some_and(|m| msg_ids.contains(&m)))
                .cloned()
                .collect())
        })
    }
}
