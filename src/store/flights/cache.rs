//! The flights known between rounds: what the last read or apply left, kept while Redis still
//! holds the token they stand under, read again when it moved; and a round's one pipeline.

use super::*;

impl RedisFlights {
    /// Reads what a round needs that `known` lacks: the token (nothing known yet), the plan's
    /// generation (a snapshot), the flights the decisions change that were not read.
    pub(super) fn know(&mut self, decisions: &[(i64, &Decision)]) -> StoreResult<()> {
        let fresh = self.known.is_none();
        let known = self.known.get_or_insert_with(Default::default);
        let missing: Vec<String> =
            net::unknown_flids(known, decisions).into_iter().map(str::to_string).collect();
        let generation = known.generation_msg.is_none() && decisions.iter().any(|(_, d)| d.snapshot);
        if fresh || generation {
            let (tkey, genkey) =
                (format!("{}applied:token", self.prefix), format!("{}schd:gen", self.prefix));
            let got: StoreResult<Vec<Value>> = self.run(|c, _| {
                let mut p = redis::pipe();
                p.get(&tkey);
                p.hget(&genkey, "msg_id");
                query_bounded(c, &p, 0)
            });
            let got = got.inspect_err(|_| self.known = None)?;
            let mut got = got.into_iter();
            let known = self.known.as_mut().expect("inserted above");
            if fresh {
                known.token = parse(got.next().unwrap_or(Value::Nil))?;
                self.seen.observe(known.token.as_deref());
            } else {
                got.next();
            }
            known.generation_msg =
                Some(parse::<Option<i64>>(got.next().unwrap_or(Value::Nil))?.unwrap_or(-1));
        }
        if !missing.is_empty() {
            let read = self.read_flights(&missing)?;
            let known = self.known.as_mut().expect("inserted above");
            known.flights.extend(missing.into_iter().zip(read.into_iter().map(Arc::new)));
        }
        Ok(())
    }

    /// `flids` read whole, in one round trip (an error forgets what was known).
    pub(super) fn read_flights(&mut self, flids: &[String]) -> StoreResult<Vec<FlightState>> {
        if flids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<(String, String)> =
            flids.iter().map(|f| (self.key("flight", f), self.key("fver", f))).collect();
        let got: StoreResult<Vec<Value>> = self.run(|c, _| {
            let mut p = redis::pipe();
            for (f, v) in &keys {
                p.hgetall(f);
                p.hgetall(v);
            }
            query_bounded(c, &p, 0)
        });
        let got = got.inspect_err(|_| self.known = None)?;
        let mut got = got.into_iter();
        let mut out = Vec::with_capacity(flids.len());
        while let (Some(fields), Some(versions)) = (got.next(), got.next()) {
            out.push(flight_of(fields, versions)?);
        }
        if out.len() != flids.len() {
            self.known = None;
            return Err(StoreError::rejected(Store::Redis, "short pipeline reply"));
        }
        Ok(out)
    }

    /// One try at the round on what is known: `None` when Redis was written since it was read
    /// (`MSGX_MOVED`, nothing written).
    /// `pairs`: `decisions` as the round is played (`Applying::pairs`, made once a round).
    pub(super) fn apply_known(
        &mut self,
        decisions: &[Applying<'_>],
        pairs: &[(i64, &Decision)],
    ) -> StoreResult<Option<Vec<bool>>> {
        // Played in place: what is known is put back only once Redis took the writes.
        let mut known = self.known.take().expect("known before a round is played");
        let round = net::play(&mut known, pairs);
        let token = crate::store::write_token();
        let cmd = self.apply_cmd(&known, &round, decisions, &token)?;
        let result = self.run(|c, script| match evalsha::<i64>(c, script, &cmd) {
            Err(e) if classify::Refusal::of(&e.to_string()) == Some(classify::Refusal::Moved) => Ok(None),
            r => r.map(Some),
        });
        match &result {
            Ok(Some(_)) => self.seen.after(token.clone(), true),
            // Unavailable: it may have been written, or not. Refused or moved: it was not.
            Err(e) if e.is_unavailable() => self.seen.after(token.clone(), false),
            _ => {}
        }
        if let Ok(Some(_)) = result {
            known.token = Some(token);
            if round.generations > 0 {
                known.generation_msg = Some(round.generation_msg);
            }
            self.known = Some(known);
        }
        Ok(result?.map(|_| round.applied))
    }
}

/// The parts of a round's read (`FlightStore::prepare`).
impl RedisFlights {
    /// A round's one pipeline: what PostgreSQL now holds (`told`: replies skipped), then, when
    /// the round asks (`reads`: its need and the flights not known), the token, the journal,
    /// each flight and its versions, and a snapshot's generation and window.
    pub(super) fn round_reads(
        &self,
        told: &[redis::Cmd],
        reads: Option<(&RoundNeed, &[&String])>,
    ) -> redis::Pipeline {
        let mut p = redis::pipe();
        for cmd in told {
            p.add_command(cmd.clone());
        }
        let Some((need, unread)) = reads else { return p };
        p.get(format!("{}applied:token", self.prefix));
        if !need.msg_ids.is_empty() {
            p.cmd("HMGET").arg(format!("{}journal", self.prefix)).arg(&need.msg_ids);
        }
        if !need.identities.is_empty() {
            p.cmd("HMGET").arg(format!("{}journal:identity", self.prefix)).arg(&need.identities);
        }
        for f in unread {
            p.hgetall(self.key("flight", f));
            p.hgetall(self.key("fver", f));
        }
        if let Some((a, b)) = need.window {
            p.hget(format!("{}schd:gen", self.prefix), "msg_id");
            p.zrangebyscore(format!("{}sodt", self.prefix), a, b);
        }
        p
    }

    /// The round's flights — those it read, and those known from the last round while Redis
    /// still holds the token they stand under (else read again) — each that holds something,
    /// shared with what is kept as known (a state is copied only where the round changes one
    /// that is still shared).
    pub(super) fn hand_flights(
        &mut self,
        mut known: net::Known,
        token: Option<String>,
        window: bool,
        cached: Vec<&String>,
        mut read: Vec<(String, Arc<FlightState>)>,
    ) -> StoreResult<FlightView> {
        let mut flights = FlightView::new();
        let mut hand = |flid: &String, f: &Arc<FlightState>| {
            if !f.fields.is_empty() || !f.versions.is_empty() || f.deleted > 0 {
                flights.insert(flid.clone(), Arc::clone(f));
            }
        };
        if token != known.token {
            // Written since: what was known is not what Redis holds.
            let generation_msg = known.generation_msg.filter(|_| window);
            known = net::Known { token, generation_msg, flights: HashMap::new() };
            let cached: Vec<String> = cached.into_iter().cloned().collect();
            let again = self.read_flights(&cached)?;
            read.extend(cached.into_iter().zip(again.into_iter().map(Arc::new)));
        } else {
            for flid in cached {
                hand(flid, known.flights.get(flid).expect("partitioned above"));
            }
        }
        for (flid, f) in read {
            hand(&flid, &f);
            known.flights.insert(flid, f);
        }
        self.known = Some(known);
        Ok(flights)
    }
}
