//! What an operator's commands do: replay, dismiss, reconcile, resend, the watermark.

use super::*;

/// The ids a replay selection names, at most `limit`.
fn selected<V>(
    map: &BTreeMap<i64, V>,
    sel: &ReplaySelection,
    limit: usize,
    replayable: impl Fn(&V) -> bool,
    class: impl Fn(&V) -> Option<ErrorClass>,
) -> Vec<i64> {
    match sel {
        ReplaySelection::Ids(ids) => ids.iter().copied().take(limit).collect(),
        ReplaySelection::Range(a, b) => {
            map.range(*a..=*b).filter(|(_, v)| replayable(v)).map(|(id, _)| *id).take(limit).collect()
        }
        ReplaySelection::Class(c) => map
            .iter()
            .filter(|(_, v)| replayable(v) && class(v) == Some(*c))
            .map(|(id, _)| *id)
            .take(limit)
            .collect(),
    }
}

impl MemPg {
    /// A replay: the rows `sel` names (by range or class those `listed`), each back to PENDING
    /// when `verdict` allows it.
    fn replay_where(
        &mut self,
        sel: &ReplaySelection,
        limit: usize,
        now: SystemTime,
        listed: impl Fn(&MemProc) -> bool,
        verdict: impl Fn(&MemProc) -> Result<(), String>,
    ) -> StoreResult<Vec<Replayed>> {
        self.session_write(|s| {
            let ids = selected(&s.procs, sel, limit, &listed, |p| p.row.error_class);
            Ok(ids
                .into_iter()
                .map(|id| match s.procs.get_mut(&id) {
                    None => Replayed { msg_id: id, was: None, verdict: Err("no such message".into()) },
                    Some(p) => {
                        let was = (p.row.state, p.row.error_class);
                        let verdict = verdict(p);
                        if verdict.is_ok() {
                            p.row.state = ProcStatus::Pending;
                            p.row.attempts = 0;
                            p.row.next_attempt_at = None;
                            p.row.first_failed_at = None;
                            p.updated_at = now;
                            p.dismissed_at = None;
                            p.dismissed_note = None;
                            if p.backfill_at.is_none() {
                                // Not terminal any more: no mark is owed until it is (INV-8), and an
                                // abandoned mark is owed again when it ends (C-16).
                                p.backfill_next_at = None;
                                p.backfill_abandoned_at = None;
                                p.backfill_abandoned_reason = None;
                                p.backfill_attempts = 0;
                            }
                        }
                        Replayed { msg_id: id, was: Some(was), verdict }
                    }
                })
                .collect())
        })
    }
}

impl Operator for MemPg {
    fn reset_watermark(&mut self, to: i64, _now: SystemTime) -> StoreResult<Result<i64, String>> {
        self.session_write(|s| {
            let above: Vec<i64> = s.procs.range(to.saturating_add(1)..).map(|(id, _)| *id).collect();
            if let Some(max) = above.last() {
                return Ok(Err(crate::ports::watermark_refusal(to, above.len() as i64, *max)));
            }
            Ok(Ok(std::mem::replace(&mut s.watermark, to)))
        })
    }

    fn row(&mut self, msg_id: i64) -> StoreResult<Option<ProcRow>> {
        self.read(|s| Ok(s.procs.get(&msg_id).map(|p| p.row.clone())))
    }

    fn season(&mut self, season: &str) -> StoreResult<Vec<String>> {
        self.read(|s| {
            Ok(s.seasons.get(season).map(|x| x.records.keys().cloned().collect()).unwrap_or_default())
        })
    }

    fn replay(&mut self, sel: &ReplaySelection, limit: usize, now: SystemTime) -> StoreResult<Vec<Replayed>> {
        self.replay_where(
            sel,
            limit,
            now,
            |p| matches!(p.row.state, ProcStatus::Failed | ProcStatus::Dead),
            |p| replay::verdict(p.row.state, p.row.error_class),
        )
    }

    fn replay_skipped(
        &mut self,
        sel: &ReplaySelection,
        limit: usize,
        now: SystemTime,
    ) -> StoreResult<Vec<Replayed>> {
        let skipped = |p: &MemProc| replay::skipped_verdict(p.row.state, p.row.last_error.as_deref());
        self.replay_where(sel, limit, now, |p| skipped(p).is_ok(), skipped)
    }

    fn reconcile(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>> {
        self.session_write(|s| {
            Ok(ids
                .iter()
                .map(|id| {
                    let verdict = match s.procs.get_mut(id) {
                        None => Err("no such message".to_string()),
                        Some(p) if p.backfill_abandoned_at.is_none() => {
                            Err("its mark was not abandoned; nothing to reconcile".to_string())
                        }
                        Some(p) if p.backfill_reconciled_at.is_some() => {
                            Err("already reconciled".to_string())
                        }
                        Some(p) => {
                            p.backfill_reconciled_at = Some(now);
                            p.backfill_reconciled_note = Some(note.to_string());
                            p.updated_at = now;
                            Ok(())
                        }
                    };
                    (*id, verdict)
                })
                .collect())
        })
    }

    fn dismiss(
        &mut self,
        ids: &[i64],
        note: &str,
        now: SystemTime,
    ) -> StoreResult<Vec<(i64, Result<(), String>)>> {
        self.session_write(|s| {
            Ok(ids
                .iter()
                .map(|id| {
                    let verdict = match s.procs.get_mut(id) {
                        Some(p) if p.row.state == ProcStatus::Dead && p.dismissed_at.is_none() => {
                            p.dismissed_at = Some(now);
                            p.dismissed_note = Some(note.to_string());
                            p.updated_at = now;
                            Ok(())
                        }
                        other => Err(replay::dismiss_refusal(
                            other.map(|p| (p.row.state, p.dismissed_at.is_some())),
                        )),
                    };
                    (*id, verdict)
                })
                .collect())
        })
    }

    fn resend(&mut self, target: Target, from: ResendFrom, apply: bool) -> StoreResult<Resent> {
        self.session_write(|s| {
            let mut out = Resent::default();
            for (id, e) in s.events.iter_mut() {
                let after = match from {
                    ResendFrom::Event(first) => *id >= first,
                    ResendFrom::Since(t) => e.sent_at.is_some_and(|at| at >= t),
                };
                if e.event.target != target || e.state != EventStatus::Sent || !after {
                    continue;
                }
                out.events += 1;
                out.first.get_or_insert(*id);
                out.last = Some(*id);
                if apply {
                    e.state = EventStatus::Pending;
                    e.event.attempts = 0;
                    e.event.next_attempt_at = None;
                    e.event.last_attempt_at = None;
                    e.sent_at = None;
                }
            }
            Ok(out)
        })
    }

    fn park(&mut self, ids: &[i64], note: &str) -> StoreResult<Vec<(i64, Result<(), String>)>> {
        self.session_write(|s| {
            Ok(ids
                .iter()
                .map(|id| {
                    let e = s.events.get_mut(id);
                    let verdict = replay::park_verdict(
                        e.as_ref().map(|e| (e.event.target, e.state, e.event.attempts as i32)),
                    );
                    if let (Ok(()), Some(e)) = (&verdict, e) {
                        e.state = EventStatus::Dead;
                        e.last_error = Some(replay::parked_error(note, e.last_error.as_deref()));
                    }
                    (*id, verdict)
                })
                .collect())
        })
    }

    fn replay_events(&mut self, sel: &ReplaySelection, limit: usize) -> StoreResult<Vec<ReplayedEvent>> {
        self.session_write(|s| {
            let ids = selected(&s.events, sel, limit, |e| e.state == EventStatus::Dead, |e| e.error_class);
            Ok(ids
                .into_iter()
                .map(|id| match s.events.get_mut(&id) {
                    None => ReplayedEvent { event_id: id, was: None, verdict: Err("no such event".into()) },
                    Some(e) => {
                        let was = Some((e.event.target.as_str().to_string(), e.state.as_str().to_string()));
                        let verdict = replay::event_verdict(e.state);
                        if verdict.is_ok() {
                            e.state = EventStatus::Pending;
                            e.event.attempts = 0;
                            e.event.next_attempt_at = None;
                        }
                        ReplayedEvent { event_id: id, was, verdict }
                    }
                })
                .collect())
        })
    }
}
