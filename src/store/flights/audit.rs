//! What the consistency sentinel reads and writes (`FlightAudit`): the journal's marks, the
//! flights whole, and a heal's restore, each transaction fenced like an apply.

use super::*;

impl FlightAudit for RedisFlights {
    fn audit(&mut self) -> StoreResult<FlightMarks> {
        let keys = [
            "lease:epoch",
            "journal:pruned",
            "applied:seq",
            "applied:max",
            "applied:token",
            "applied:settled",
        ]
        .map(|k| format!("{}{k}", self.prefix));
        let got: Vec<Option<String>> = self.run(|c, _| redis::cmd("MGET").arg(&keys).query(c))?;
        let v = |k: usize| got.get(k).cloned().flatten().and_then(|x| x.parse::<i64>().ok());
        Ok(FlightMarks {
            epoch: v(0).unwrap_or(0),
            pruned: v(1),
            seq: v(2).unwrap_or(0),
            applied_max: v(3).unwrap_or(0),
            token: got.get(4).cloned().flatten(),
            settled_max: v(5).unwrap_or(0),
        })
    }

    fn journal_has(&mut self, ids: &[i64]) -> StoreResult<Vec<bool>> {
        let journal = format!("{}journal", self.prefix);
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(1000) {
            let got: Vec<Value> = self.run(|c, _| {
                let mut p = redis::pipe();
                chunk.iter().for_each(|m| {
                    p.hexists(&journal, *m);
                });
                query_bounded(c, &p, 0)
            })?;
            for v in got {
                out.push(parse::<bool>(v)?);
            }
        }
        Ok(out)
    }

    fn journal_ids(&mut self) -> StoreResult<Vec<i64>> {
        let journal = format!("{}journal", self.prefix);
        let keys: Vec<i64> = self.run(|c, _| redis::cmd("HKEYS").arg(&journal).query(c))?;
        let mut keys = keys;
        keys.sort_unstable();
        Ok(keys)
    }

    fn recorded(&mut self, ids: &[i64]) -> StoreResult<Vec<bool>> {
        let (journal, done) = (format!("{}journal", self.prefix), format!("{}journal:done", self.prefix));
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let got: Vec<Value> = self.run(|c, _| {
                let mut p = redis::pipe();
                chunk.iter().for_each(|m| {
                    p.hexists(&journal, *m);
                    p.zscore(&done, *m);
                });
                query_bounded(c, &p, 0)
            })?;
            let mut got = got.into_iter();
            while let (Some(entry), Some(mark)) = (got.next(), got.next()) {
                out.push(parse::<bool>(entry)? || parse::<Option<f64>>(mark)?.is_some());
            }
        }
        Ok(out)
    }

    fn settled_ids(&mut self) -> StoreResult<Vec<i64>> {
        let done = format!("{}journal:done", self.prefix);
        let mut ids: Vec<i64> = self.run(|c, _| redis::cmd("ZRANGE").arg(&done).arg(0).arg(-1).query(c))?;
        ids.sort_unstable();
        Ok(ids)
    }

    fn set_pruned(&mut self, id: i64) -> StoreResult<()> {
        let key = format!("{}journal:pruned", self.prefix);
        let mut cmds = vec![redis::Cmd::set(&key, id)];
        cmds.extend(self.journal_keys().iter().map(|k| redis::Cmd::expire(k, JOURNAL_TTL_SECS as i64)));
        self.fenced_write(&cmds)
    }

    /// Each transaction of the restore is fenced like an apply (#38): written only while no
    /// newer epoch than this handle's holds the flights, so a heal cut short by a takeover
    /// never writes over what the new holder's pump wrote since.
    fn restore(&mut self, r: &Restore, now: SystemTime) -> StoreResult<()> {
        self.known = None;
        let idx = format!("{}sodt", self.prefix);
        for chunk in r.flights.chunks(200).filter(|c| !c.is_empty()) {
            let cmds: Vec<redis::Cmd> =
                chunk.iter().flat_map(|(flid, f, sodt)| self.restore_flight(&idx, flid, f, *sodt)).collect();
            self.fenced_write(&cmds)?;
        }
        let (jkey, dkey) = (format!("{}journal", self.prefix), format!("{}journal:done", self.prefix));
        let top = r.journal.iter().map(|(m, _)| *m).max();
        let keys = self.journal_keys();
        for chunk in r.journal.chunks(500) {
            let mut cmds = Vec::with_capacity(2 * chunk.len() + keys.len());
            for (m, d) in chunk {
                let doc = serde_json::to_string(&Journal {
                    events: &d.events,
                    references: &d.references,
                    identity: "",
                    rules: d.rules,
                })
                .map_err(|e| StoreError::rejected(Store::Redis, format!("decision not serialisable: {e}")))?;
                cmds.push(redis::Cmd::hset(&jkey, *m, doc));
                cmds.push(redis::Cmd::zadd(&dkey, *m, unix_millis(now)));
            }
            cmds.extend(keys.iter().map(|k| redis::Cmd::expire(k, JOURNAL_TTL_SECS as i64)));
            self.fenced_write(&cmds)?;
        }
        let gen = format!("{}schd:gen", self.prefix);
        let max = format!("{}applied:max", self.prefix);
        let seq = format!("{}applied:seq", self.prefix);
        let tkey = format!("{}applied:token", self.prefix);
        // A restore is a write a later rollback can lose, as an apply is.
        let mut cmds = vec![redis::Cmd::incr(&seq, 1), redis::Cmd::set(&tkey, crate::store::write_token())];
        if let Some((g, m)) = r.generation {
            cmds.push(redis::Cmd::hset_multiple(&gen, &[("gen", g), ("msg_id", m)]));
        }
        if let Some(top) = top {
            cmds.push(redis::Cmd::set(&max, top));
        }
        self.fenced_write(&cmds)?;
        self.durable()
    }

    fn generation_of(&mut self) -> StoreResult<(i64, i64)> {
        self.generation()
    }

    fn all_flights(&mut self) -> StoreResult<Vec<(String, FlightState, Option<i64>)>> {
        let mut flids = std::collections::BTreeSet::new();
        for what in ["flight", "fver"] {
            let pattern = format!("{}{what}:*", self.prefix);
            let skip = pattern.len() - 1;
            let keys: Vec<String> = self.run(|c, _| {
                redis::Commands::scan_match::<_, String>(c, &pattern)?.collect::<Result<Vec<String>, _>>()
            })?;
            flids.extend(keys.into_iter().map(|k| k[skip..].to_string()));
        }
        let flids: Vec<String> = flids.into_iter().collect();
        let mut out = Vec::with_capacity(flids.len());
        for chunk in flids.chunks(500) {
            out.extend(self.flights_of(chunk)?);
        }
        Ok(out)
    }

    fn flights_of(&mut self, flids: &[String]) -> StoreResult<Vec<(String, FlightState, Option<i64>)>> {
        if flids.is_empty() {
            return Ok(Vec::new());
        }
        let idx = format!("{}sodt", self.prefix);
        let need = RoundNeed { flids: flids.to_vec(), ..Default::default() };
        let got = self.prepare(&need, &[], SystemTime::UNIX_EPOCH)?.flights;
        let scores: Vec<Option<i64>> = self.run(|c, _| {
            let mut p = redis::pipe();
            flids.iter().for_each(|f| {
                p.zscore(&idx, f);
            });
            p.query(c)
        })?;
        Ok(flids
            .iter()
            .zip(scores)
            .filter_map(|(flid, sodt)| got.get(flid).map(|f| (flid.clone(), FlightState::clone(f), sodt)))
            .collect())
    }
}

impl RedisFlights {
    /// Runs `cmds` as one transaction while no newer epoch than this handle's holds the flights
    /// (`WATCH lease:epoch`, read it, `MULTI` … `EXEC`, again when the epoch moved meanwhile);
    /// `MSGX_FENCED` otherwise, nothing written. An unfenced handle (epoch 0) writes as it is.
    pub(super) fn fenced_write(&mut self, cmds: &[redis::Cmd]) -> StoreResult<()> {
        let (ekey, epoch) = (format!("{}lease:epoch", self.prefix), self.epoch);
        let held = self.run(|c, _| {
            redis::transaction(c, &[&ekey], |c, p| {
                let held: i64 = redis::cmd("GET").arg(&ekey).query::<Option<i64>>(c)?.unwrap_or(0);
                if epoch > 0 && held > epoch {
                    return Ok(Some(Some(held)));
                }
                cmds.iter().for_each(|cmd| {
                    p.add_command(cmd.clone()).ignore();
                });
                Ok(p.query::<Option<()>>(c)?.map(|()| None))
            })
        })?;
        match held {
            Some(held) => Err(StoreError::fenced(
                Store::Redis,
                format!("MSGX_FENCED epoch {held} holds the flights, this heal has {epoch}; nothing more of it is written"),
            )),
            None => Ok(()),
        }
    }

    /// The commands that put one flight in place whole.
    pub(super) fn restore_flight(
        &self,
        idx: &str,
        flid: &str,
        f: &FlightState,
        sodt: Option<i64>,
    ) -> Vec<redis::Cmd> {
        let (key, vkey) = (self.key("flight", flid), self.key("fver", flid));
        let mut cmds = vec![redis::Cmd::del(&key), redis::Cmd::del(&vkey)];
        if !f.fields.is_empty() {
            let kv: Vec<(&String, &String)> = f.fields.iter().collect();
            cmds.push(redis::Cmd::hset_multiple(&key, &kv));
        }
        let mut versions: Vec<(String, i64)> = f.versions.iter().map(|(k, v)| (k.clone(), *v)).collect();
        if f.deleted > 0 {
            versions.push(("~del".into(), f.deleted));
        }
        if !versions.is_empty() {
            cmds.push(redis::Cmd::hset_multiple(&vkey, &versions));
        }
        match sodt.filter(|_| f.exists()) {
            Some(k) => cmds.push(redis::Cmd::zadd(idx, flid, k)),
            None => cmds.push(redis::Cmd::zrem(idx, flid)),
        }
        if !f.exists() && !versions.is_empty() {
            cmds.push(redis::Cmd::expire(&vkey, TOMBSTONE_TTL_SECS as i64));
        }
        cmds
    }

    /// Deletes every key under the prefix: what a FLUSHALL does to msgx (tests, drills).
    pub fn drop_everything(&mut self) -> StoreResult<()> {
        self.known = None;
        let pattern = format!("{}*", self.prefix);
        let keys: Vec<String> = self.run(|c, _| redis::cmd("KEYS").arg(&pattern).query(c))?;
        if keys.is_empty() {
            return Ok(());
        }
        self.run(|c, _| redis::cmd("DEL").arg(&keys).query::<()>(c))
    }
}
