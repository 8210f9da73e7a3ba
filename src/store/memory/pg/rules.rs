//! `RULES_APPLY` in memory (#65), as the real adapter (`store::pg::rules`).

use super::*;
use crate::ports::{RulesDone, RulesJob, RulesJobState, RulesJobs};

/// A write that found the job finished refuses, as the real adapter's guard does.
fn open_job(s: &mut PgState, job_id: i64) -> StoreResult<&mut RulesJob> {
    s.rules_jobs.get_mut(&job_id).filter(|j| j.state.is_open()).ok_or_else(|| {
        StoreError::rejected(
            Store::Postgres,
            format!("rules apply job {job_id} is no longer OPEN or APPLYING: another instance finished it"),
        )
    })
}

impl RulesJobs for MemPg {
    fn ask_rules_apply(&mut self, since: i64, rules: u32, now: SystemTime) -> StoreResult<RulesJob> {
        self.session_write(|s| {
            let job_id = s.rules_jobs.keys().next_back().map_or(1, |k| k + 1);
            let job = RulesJob {
                job_id,
                since,
                rules,
                state: RulesJobState::Open,
                requested_at: now,
                done_at: None,
                staged: None,
                note: None,
            };
            s.rules_jobs.insert(job_id, job.clone());
            Ok(job)
        })
    }

    fn rules_jobs(&mut self, limit: usize) -> StoreResult<Vec<RulesJob>> {
        self.read(|s| Ok(s.rules_jobs.values().rev().take(limit).cloned().collect()))
    }

    fn open_rules_job(&mut self, rules: u32) -> StoreResult<Option<RulesJob>> {
        self.read(|s| Ok(s.rules_jobs.values().find(|j| j.rules == rules && j.state.is_open()).cloned()))
    }

    fn stage_rules_apply(&mut self, job_id: i64, staged: &str, _now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            let job = open_job(s, job_id)?;
            if job.state != RulesJobState::Open {
                return Err(StoreError::rejected(
                    Store::Postgres,
                    format!("rules apply job {job_id} is no longer OPEN: another instance finished it"),
                ));
            }
            job.state = RulesJobState::Applying;
            job.staged = Some(staged.to_string());
            Ok(())
        })
    }

    fn finish_rules_apply(
        &mut self,
        job: &RulesJob,
        done: &RulesDone<'_>,
        now: SystemTime,
    ) -> StoreResult<()> {
        self.write(|s| {
            let j = open_job(s, job.job_id)?;
            (j.state, j.done_at, j.note, j.staged) =
                (RulesJobState::Done, Some(now), Some(done.note.to_string()), None);
            let told =
                if crate::planted::on(crate::planted::Bug::RulesUntold) { &[][..] } else { done.events };
            for (m, ordinal, e) in told {
                s.next_event_id += 1;
                s.events.insert(s.next_event_id, MemEvent::of(s.next_event_id, *m, e, Some(*ordinal), now));
            }
            for m in done.redecided {
                for p in [s.procs.get_mut(m), s.hst.get_mut(m)].into_iter().flatten() {
                    if p.row.state == ProcStatus::Succeeded {
                        p.rules_version = Some(job.rules);
                    }
                }
            }
            Ok(())
        })
    }

    fn fail_rules_apply(&mut self, job_id: i64, why: &str, now: SystemTime) -> StoreResult<()> {
        self.write(|s| {
            let j = open_job(s, job_id)?;
            (j.state, j.done_at, j.note, j.staged) =
                (RulesJobState::Failed, Some(now), Some(why.to_string()), None);
            Ok(())
        })
    }
}
