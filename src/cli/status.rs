//! `msgx status [--json]` and `msgx status --check` (the Nagios plugin convention).

use super::*;

/// `status --check`: exits with the plugin's code, never through `CmdResult`.
pub(super) fn health_check(cfg: &Config) -> ExitCode {
    use msgx::health::{assess, unknown, Observed};
    let now = SystemClock.now();
    let verdict = match own_pg(cfg).and_then(|mut pg| {
        let s = pg.status(0).map_err(unreachable)?;
        Ok((running(&mut pg, now)?, s, awaited(&mut pg)?))
    }) {
        Err((_, e)) => unknown(&format!("{e:#}")),
        Ok((r, s, awaited)) => {
            let count = |states: &[&str]| -> u64 {
                s.states.iter().filter(|(st, _)| states.contains(&st.as_str())).map(|(_, n)| *n as u64).sum()
            };
            let dead_events: i64 = s.events.iter().filter(|(_, st, _)| st == "DEAD").map(|(_, _, n)| n).sum();
            let o = Observed {
                head_age: s.head.as_ref().map(|h| std::time::Duration::from_millis(h.age_ms as u64)),
                head_msg_id: s.head.as_ref().map(|h| h.msg_id),
                backlog: count(&["PENDING", "PROCESSING", "FAILED"]),
                // The dead-letter queue: DEAD messages nobody dismissed, and DEAD events.
                dead: (count(&["DEAD"]) - s.dead_dismissed as u64) + dead_events as u64,
                abandoned: s.abandoned_count as u64,
                stalled: r.stalled.first().cloned(),
                holder: (!r.holder.free).then(|| who(&r.holder)),
                forgotten: super::consistency::finding(cfg),
                awaiting: awaited.iter().map(|r| msgx::health::Awaited::of(r, &cfg.requests)).collect(),
                refused: s.refused.iter().map(|r| (r.target.clone(), r.event_id)).collect(),
            };
            assess(&o, &cfg.health)
        }
    };
    out!("{}", verdict.line);
    ExitCode::from(verdict.level as u8)
}

pub(super) fn status(cfg: &Config, json: bool) -> CmdResult {
    let mut pg = own_pg(cfg)?;
    let s = pg.status(100).map_err(unreachable)?;
    let now = SystemClock.now();
    let r = running(&mut pg, now)?;
    let heals = Heals::read(&mut pg, cfg, now)?;
    let open = open_requests(&mut pg)?;
    let awaited = awaited(&mut pg)?;
    let jobs = open_jobs(&mut pg)?;
    if json {
        print_json(&s, &r, &heals, &open, awaited.len(), &jobs);
        return Ok(());
    }
    print_lease(&r);
    print_messages(&s);
    print_outbox(&s);
    heals.print();
    print_requests(&open);
    print_unanswered(&awaited, &cfg.requests);
    print_jobs(&jobs);
    Ok(())
}

/// The `msgx rules apply` jobs not finished (#65), oldest first: at most 100 of the newest.
fn open_jobs(pg: &mut Pg) -> Result<Vec<msgx::ports::RulesJob>, (Exit, anyhow::Error)> {
    use msgx::ports::RulesJobs;
    let mut jobs = pg.rules_jobs(100).map_err(unreachable)?;
    jobs.retain(|j| j.state.is_open());
    jobs.reverse();
    Ok(jobs)
}

fn print_jobs(jobs: &[msgx::ports::RulesJob]) {
    out!("rules apply jobs open: {}", jobs.len());
    for j in jobs {
        out!(
            "  job_id={} since={} rules={} {} since {} — run by the active instance of rules {} (msgx rules list)",
            j.job_id,
            j.since,
            j.rules,
            j.state.name(),
            time(j.requested_at),
            j.rules
        );
    }
}

/// A heal's windows whose request expired unanswered (#55): asked again later, or after the
/// last try waiting for a person.
fn print_unanswered(awaited: &[msgx::requests::Request], policy: &config::RequestPolicy) {
    for r in awaited.iter().filter(|r| !r.state.is_open()) {
        let next = match msgx::requests::next_try_at(r, policy) {
            Some(at) => format!("asked again at {} (try {} of {})", time(at), r.tries + 1, policy.heal_tries),
            None => format!(
                "the AODB answered none of {} tries; a person decides, then: msgx requests --dismiss {} --note …",
                r.tries, r.req_id
            ),
        };
        out!("  req_id={} {} {} EXPIRED unanswered — degraded: {next}", r.req_id, r.req_type, r.req_key);
    }
}

/// The open requests to the AODB (#41), oldest first: at most 100.
fn open_requests(pg: &mut Pg) -> Result<Vec<msgx::requests::Request>, (Exit, anyhow::Error)> {
    use msgx::ports::Requests;
    let mut open = pg.requests(true, 100).map_err(unreachable)?;
    open.reverse();
    Ok(open)
}

/// The windows a heal asked for whose flights await the AODB (#55), oldest first: at most 100.
fn awaited(pg: &mut Pg) -> Result<Vec<msgx::requests::Request>, (Exit, anyhow::Error)> {
    use msgx::ports::Requests;
    pg.awaited(100).map_err(unreachable)
}

fn print_requests(open: &[msgx::requests::Request]) {
    out!("requests open: {}", open.len());
    for r in open {
        use msgx::requests::Origin;
        let why = match Origin::parse(&r.origin) {
            Some(Origin::Heal) => " — degraded: asked by a heal, the window's flights await its answer",
            Some(Origin::FirstStart) => {
                " — asked at the first start (Redis was empty): today's flights fill it when the answer comes; nothing is degraded"
            }
            _ => "",
        };
        out!(
            "  req_id={} {} {} {} since {}{why}",
            r.req_id,
            r.req_type,
            r.req_key,
            r.state,
            time(r.created_at)
        );
    }
}

/// The heals of the last hour against the budget (#37).
struct Heals {
    recent: Vec<msgx::ports::HealRecord>,
    per_hour: u32,
}

impl Heals {
    fn read(pg: &mut Pg, cfg: &Config, now: std::time::SystemTime) -> Result<Heals, (Exit, anyhow::Error)> {
        use msgx::ports::HealLog;
        let recent = pg.heals_since(msgx::consistency::HealBudget::since(now)).map_err(unreachable)?;
        Ok(Heals { recent, per_hour: cfg.pipeline.max_heals_per_hour })
    }

    fn print(&self) {
        out!(
            "heals in the last hour: {} of at most {} (msgx.consistency-check.max-heals-per-hour)",
            self.recent.len(),
            self.per_hour
        );
        for h in &self.recent {
            let at = time(h.at);
            out!("  {at} {} epoch={}: {}", h.store, h.epoch, h.summary);
        }
    }
}

/// `msgx status --json` (docs/reference.md): the status row's fields, then the heals, the
/// lease and the stalled stages, each a typed part.
#[derive(serde::Serialize)]
struct StatusDoc<'a> {
    #[serde(flatten)]
    status: &'a msgx::store::pg::Status,
    heals: HealsDoc<'a>,
    /// The open requests to the AODB (#41), and how many of them a heal made.
    requests: RequestsDoc,
    lease: LeaseDoc<'a>,
    stalled: Vec<StalledDoc<'a>>,
    /// The `msgx rules apply` jobs not finished (#65).
    rules_jobs: Vec<JobDoc>,
}

#[derive(serde::Serialize)]
struct JobDoc {
    job_id: i64,
    since: i64,
    rules: u32,
    state: &'static str,
    requested_ms: i64,
}

#[derive(serde::Serialize)]
struct HealsDoc<'a> {
    last_hour: usize,
    per_hour: u32,
    recent: Vec<HealDoc<'a>>,
}

#[derive(serde::Serialize)]
struct HealDoc<'a> {
    at_ms: i64,
    store: &'static str,
    epoch: i64,
    summary: &'a str,
}

#[derive(serde::Serialize)]
struct RequestsDoc {
    awaiting_heal: usize,
    open: Vec<OpenDoc>,
}

#[derive(serde::Serialize)]
struct OpenDoc {
    req_id: i64,
    req_type: String,
    req_key: String,
    state: msgx::requests::ReqState,
    origin: String,
    created_ms: i64,
}

#[derive(serde::Serialize)]
struct LeaseDoc<'a> {
    held: bool,
    host: Option<&'a str>,
    pid: Option<i32>,
    epoch: i64,
    since_ms: Option<i64>,
    renewed_at_ms: Option<i64>,
}

#[derive(serde::Serialize)]
struct StalledDoc<'a> {
    stage: &'a str,
    store: &'a str,
    for_ms: u64,
}

fn print_json(
    s: &msgx::store::pg::Status,
    r: &Running,
    heals: &Heals,
    open: &[msgx::requests::Request],
    awaited: usize,
    jobs: &[msgx::ports::RulesJob],
) {
    let recent: Vec<HealDoc> = heals
        .recent
        .iter()
        .map(|h| HealDoc {
            at_ms: msgx::clock::unix_millis(h.at),
            store: h.store.name(),
            epoch: h.epoch,
            summary: &h.summary,
        })
        .collect();
    let doc = StatusDoc {
        status: s,
        heals: HealsDoc { last_hour: recent.len(), per_hour: heals.per_hour, recent },
        requests: RequestsDoc {
            awaiting_heal: awaited,
            open: open
                .iter()
                .map(|r| OpenDoc {
                    req_id: r.req_id,
                    req_type: r.req_type.clone(),
                    req_key: r.req_key.clone(),
                    state: r.state,
                    origin: r.origin.clone(),
                    created_ms: msgx::clock::unix_millis(r.created_at),
                })
                .collect(),
        },
        lease: LeaseDoc {
            held: !r.holder.free,
            host: r.holder.host.as_deref(),
            pid: r.holder.pid,
            epoch: r.holder.epoch,
            since_ms: r.holder.since.map(msgx::clock::unix_millis),
            renewed_at_ms: r.holder.renewed_at.map(msgx::clock::unix_millis),
        },
        stalled: r
            .stalled
            .iter()
            .map(|(stage, store, d)| StalledDoc { stage, store, for_ms: d.as_millis() as u64 })
            .collect(),
        rules_jobs: jobs
            .iter()
            .map(|j| JobDoc {
                job_id: j.job_id,
                since: j.since,
                rules: j.rules,
                state: j.state.name(),
                requested_ms: msgx::clock::unix_millis(j.requested_at),
            })
            .collect(),
    };
    // Through a `Value`, whose keys are sorted: the text is the one the document always had.
    let v = serde_json::to_value(&doc).expect("status serialises");
    out!("{}", serde_json::to_string_pretty(&v).expect("status serialises"));
}

/// The lease holder and the stages it reported stalled.
fn print_lease(r: &Running) {
    match (&r.holder.free, &r.holder.since) {
        (false, since) => out!("lease: held by {} since {}", who(&r.holder), since.map_or("?".into(), time)),
        (true, _) => out!("lease: free (no instance running; last epoch {})", r.holder.epoch),
    }
    if r.stalled.is_empty() {
        out!("stalled stages: none");
    }
    for (stage, store, d) in &r.stalled {
        out!("stalled stage: {stage} on {store} for {}", msgx::stage::human(*d));
    }
}

/// The watermark, messages per state and the FIFO head.
fn print_messages(s: &msgx::store::pg::Status) {
    out!("watermark: {}", s.watermark);
    out!("messages:");
    for (state, n) in &s.states {
        match state.as_str() {
            "DEAD" if s.dead_dismissed > 0 => out!("  {state:<10} {n} ({} dismissed)", s.dead_dismissed),
            _ => out!("  {state:<10} {n}"),
        }
    }
    match &s.head {
        None => out!("head: none (nothing unfinished)"),
        Some(h) => out!(
            "head: msg_id={} state={} attempts={} age={} class={} error={:?}",
            h.msg_id,
            h.state,
            h.attempts,
            msgx::stage::human(std::time::Duration::from_millis(h.age_ms as u64)),
            h.error_class.as_deref().unwrap_or("-"),
            h.last_error.as_deref().unwrap_or("-")
        ),
    }
}

/// The outbox, the marks owed and abandoned, the seasonal plans.
fn print_outbox(s: &msgx::store::pg::Status) {
    out!("outbox:");
    for (target, state, n) in &s.events {
        out!("  {target:<11} {state:<8} {n}");
    }
    for r in &s.refused {
        out!(
            "  {} holds at event_id={} msg_id={} attempts={}: the broker refuses it ({}); nothing behind it is delivered until it takes it or `msgx park --ids {} --note …`",
            r.target,
            r.event_id,
            r.msg_id.unwrap_or(0),
            r.attempts,
            one_line(r.last_error.as_deref().unwrap_or("refused")),
            r.event_id
        );
    }
    out!("backfill owed: {}", s.backfill_owed);
    out!("backfill abandoned, awaiting reconciliation: {}", s.abandoned_count);
    for a in &s.abandoned {
        out!("  msg_id={} state={} reason={}", a.msg_id, a.state, a.reason);
    }
    if s.abandoned_count > s.abandoned.len() as i64 {
        out!(
            "  … and {} more (msgx status --json lists the first 100)",
            s.abandoned_count - s.abandoned.len() as i64
        );
    }
    out!("seasonal plans held: {}", s.seasons.len());
    for x in &s.seasons {
        out!(
            "  {} airport={} {}..{} flights={} from msg_id={}",
            x.season,
            x.airport.as_deref().unwrap_or("-"),
            x.start.as_deref().unwrap_or("?"),
            x.end.as_deref().unwrap_or("?"),
            x.flights,
            x.msg_id
        );
    }
}
