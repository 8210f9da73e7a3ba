//! `RULES_APPLY` (V022, #65): the `msgx rules apply` jobs.

use std::time::SystemTime;

use super::{clip, Pg};
use crate::error::{Store, StoreError};
use crate::ports::{RulesDone, RulesJob, RulesJobState, RulesJobs, StoreResult};

const JOB: &str = "job_id, since, rules_version, state, requested_at, done_at, staged, note";

fn job(r: &postgres::Row) -> StoreResult<RulesJob> {
    let state: String = r.get(3);
    let state = RulesJobState::parse(&state).ok_or_else(|| {
        StoreError::rejected(Store::Postgres, format!("rules_apply.state {state:?} is no state msgx writes"))
    })?;
    let rules: i32 = r.get(2);
    Ok(RulesJob {
        job_id: r.get(0),
        since: r.get(1),
        rules: u32::try_from(rules).unwrap_or_default(),
        state,
        requested_at: r.get(4),
        done_at: r.get(5),
        staged: r.get(6),
        note: r.get(7),
    })
}

/// The rules version as the column holds it.
fn version(rules: u32) -> i32 {
    i32::try_from(rules).unwrap_or(i32::MAX)
}

impl RulesJobs for Pg {
    fn ask_rules_apply(&mut self, since: i64, rules: u32, now: SystemTime) -> StoreResult<RulesJob> {
        let sql = format!("INSERT INTO rules_apply (since, rules_version, requested_at) VALUES ($1, $2, $3) RETURNING {JOB}");
        // Unfenced: an operator's command writes beside the daemon.
        let row = self.run(|c| c.query_one(&sql, &[&since, &version(rules), &now]))?;
        job(&row)
    }

    fn rules_jobs(&mut self, limit: usize) -> StoreResult<Vec<RulesJob>> {
        let sql = format!("SELECT {JOB} FROM rules_apply ORDER BY job_id DESC LIMIT $1");
        let rows = self.run(|c| c.query(&sql, &[&(limit as i64)]))?;
        rows.iter().map(job).collect()
    }

    fn open_rules_job(&mut self, rules: u32) -> StoreResult<Option<RulesJob>> {
        // `idx_rules_apply_open`: the sentinel asks this every interval.
        let sql = format!(
            "SELECT {JOB} FROM rules_apply WHERE rules_version = $1 AND state IN ('OPEN', 'APPLYING') ORDER BY job_id LIMIT 1"
        );
        let row = self.run(|c| c.query_opt(&sql, &[&version(rules)]))?;
        row.as_ref().map(job).transpose()
    }

    fn stage_rules_apply(&mut self, job_id: i64, staged: &str, now: SystemTime) -> StoreResult<()> {
        self.write(|c| {
            let n = c.execute(
                "UPDATE rules_apply SET state = 'APPLYING', staged = $2, started_at = $3
                 WHERE job_id = $1 AND state = 'OPEN'",
                &[&job_id, &staged, &now],
            )?;
            Ok(unchanged(n, job_id, "OPEN"))
        })
    }

    fn finish_rules_apply(
        &mut self,
        job: &RulesJob,
        done: &RulesDone<'_>,
        now: SystemTime,
    ) -> StoreResult<()> {
        let events: Vec<(i64, usize, &crate::domain::NewEvent)> =
            done.events.iter().map(|(m, o, e)| (*m, usize::try_from(*o).unwrap_or_default(), e)).collect();
        let note = clip(done.note, 1000);
        let rules = version(job.rules);
        self.write(|c| {
            let n = c.execute(
                "UPDATE rules_apply SET state = 'DONE', done_at = $2, note = $3, staged = NULL
                 WHERE job_id = $1 AND state IN ('OPEN', 'APPLYING')",
                &[&job.job_id, &now, &note],
            )?;
            if n != 1 {
                return Ok(unchanged(n, job.job_id, "OPEN or APPLYING"));
            }
            // In the order given, as a round's: the event ids hand out the order they are sent in.
            super::insert_events(c, &events, now)?;
            for table in ["proc_state", "proc_state_hst"] {
                c.execute(
                    &format!("UPDATE {table} SET rules_version = $2 WHERE msg_id = ANY($1) AND state = 'SUCCEEDED'"),
                    &[&done.redecided, &rules],
                )?;
            }
            Ok(Ok(()))
        })
    }

    fn fail_rules_apply(&mut self, job_id: i64, why: &str, now: SystemTime) -> StoreResult<()> {
        let note = clip(why, 1000);
        self.write(|c| {
            let n = c.execute(
                "UPDATE rules_apply SET state = 'FAILED', done_at = $2, note = $3, staged = NULL
                 WHERE job_id = $1 AND state IN ('OPEN', 'APPLYING')",
                &[&job_id, &now, &note],
            )?;
            Ok(unchanged(n, job_id, "OPEN or APPLYING"))
        })
    }
}

/// One row changed, or the job was not in the state the write expects (another instance
/// finished it): refused, nothing written.
fn unchanged(n: u64, job_id: i64, expected: &str) -> Result<(), StoreError> {
    if n == 1 {
        Ok(())
    } else {
        Err(StoreError::rejected(
            Store::Postgres,
            format!("rules apply job {job_id} is no longer {expected}: another instance finished it"),
        ))
    }
}
