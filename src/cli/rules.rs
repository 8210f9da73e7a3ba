//! `msgx rules apply --since MSG_ID [--yes]` and `msgx rules list` (#65, SPEC §4.13): the
//! SUCCEEDED messages from a MSG_ID decided again under this release's rules, every difference
//! told as an event. This command previews the difference (read only) and registers the job;
//! the active instance of these rules runs it under its lease (`consistency::rules`).

use super::*;
use msgx::consistency::rules::{self, Difference};
use msgx::consistency::HealError;
use msgx::ports::{RulesJob, RulesJobs};

/// What `msgx rules` does.
#[derive(Subcommand)]
pub(super) enum RulesArgs {
    /// Decide the SUCCEEDED messages from MSG_ID on again under this release's rules and tell
    /// every flight that differs as an event (KAFKA:msg): without --yes, show what differs and
    /// exit 2; with it, register the job, which the active instance of these rules runs before
    /// its stages go on.
    Apply {
        /// The first MSG_ID decided again.
        #[arg(long, value_name = "MSG_ID")]
        since: i64,
        /// Do it (without: show what would be told and refuse).
        #[arg(long)]
        yes: bool,
    },
    /// The jobs, newest first: their state and what they did.
    List {
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn rules(cfg: &Config, args: &RulesArgs) -> CmdResult {
    match args {
        RulesArgs::Apply { since, yes } => apply(cfg, *since, *yes),
        RulesArgs::List { limit, json } => list(cfg, *limit, *json),
    }
}

/// How many flights the preview names one by one.
const SHOWN: usize = 20;

fn apply(cfg: &Config, since: i64, yes: bool) -> CmdResult {
    if since < 1 {
        return Err((Exit::Usage, anyhow::anyhow!("--since {since}: a MSG_ID, 1 or more")));
    }
    let rulebook = codec::Rulebook::this_release();
    if !yes {
        let (mut pg, mut mailbox, mut flights) = super::consistency::open(cfg)?;
        let mut st = super::consistency::stores(cfg, &mut pg, &mut mailbox, &mut flights);
        let diff = rules::difference(&mut st, since).map_err(|e| match e {
            HealError::Store(e) => unreachable(e),
            HealError::Person(why) => (Exit::Failed, anyhow::anyhow!(why)),
        })?;
        preview(&diff, rulebook.version());
        out!(
            "run again with --yes: the active instance of rules {} tells it, under its lease",
            rulebook.version()
        );
        return Err((Exit::Usage, anyhow::anyhow!("nothing done without --yes")));
    }
    let mut pg = own_pg(cfg)?;
    let job = pg.ask_rules_apply(since, rulebook.version(), SystemClock.now()).map_err(unreachable)?;
    out!(
        "registered job_id={} since MSG_ID {} under rules {}: the active instance of these rules runs it before its stages go on (msgx rules list)",
        job.job_id,
        job.since,
        job.rules
    );
    Ok(())
}

/// What a job from `since` would tell, the first flights one by one.
fn preview(diff: &Difference, version: u32) {
    let told = diff.events(version);
    out!("would decide again under rules {version}: {}", diff.summary(version, told.len()));
    for (m, _, e) in told.iter().take(SHOWN) {
        out!("  flid={} msg_id={m} {} {}", e.partition_key, e.event_type, e.payload_json);
    }
    if told.len() > SHOWN {
        out!("  … and {} more", told.len() - SHOWN);
    }
    for (m, field) in diff.kept.iter().take(SHOWN) {
        out!("  kept msg_id={m} {field}: other rules wrote it, rules {version} do not");
    }
}

fn list(cfg: &Config, limit: usize, json: bool) -> CmdResult {
    let mut pg = own_pg(cfg)?;
    let jobs = pg.rules_jobs(limit.clamp(1, 1_000)).map_err(unreachable)?;
    let this = codec::Rulebook::this_release().version();
    if json {
        let v: Vec<serde_json::Value> = jobs.iter().map(as_json).collect();
        out!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    if jobs.is_empty() {
        out!("no rules apply job");
    }
    for j in &jobs {
        let waits =
            (j.rules != this && j.note.is_none()).then(|| format!(" (this release carries rules {this})"));
        out!(
            "job_id={} since={} rules={} state={} requested_at={}{}{}",
            j.job_id,
            j.since,
            j.rules,
            j.state.name(),
            msgx::clock::rfc3339(j.requested_at),
            waits.unwrap_or_default(),
            j.note.as_deref().map(|n| format!(": {n}")).unwrap_or_default()
        );
    }
    Ok(())
}

fn as_json(j: &RulesJob) -> serde_json::Value {
    serde_json::json!({
        "job_id": j.job_id, "since": j.since, "rules": j.rules, "state": j.state.name(),
        "requested_at": msgx::clock::rfc3339(j.requested_at),
        "done_at": j.done_at.map(msgx::clock::rfc3339), "note": j.note,
    })
}
