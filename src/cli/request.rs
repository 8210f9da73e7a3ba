//! `msgx request …` and `msgx requests` (#41, SPEC §4.11): ask the AODB, and see what was asked
//! and what answered it. A request is a row in `REQ_TRACK` and an outbox event to `COUTMSGS`,
//! written in one transaction; the running instance delivers it, so no lease is needed here.

use super::*;
use msgx::ports::Requests;
use msgx::requests::{self, Ask, NewRequest, Origin, Request};

/// What `msgx request` asks for.
#[derive(Subcommand)]
pub(super) enum AskArgs {
    /// The flights scheduled in a window (RQFD, or RQDF-DFTM in the platform dialect),
    /// answered by a snapshot of it.
    Flights {
        /// Window start, local airport time (yyyy-MM-ddTHH:mm).
        #[arg(long)]
        from: String,
        /// Window end, local airport time (yyyy-MM-ddTHH:mm).
        #[arg(long)]
        to: String,
        /// Do it (without: show the text and refuse).
        #[arg(long)]
        yes: bool,
    },
    /// One reference list (RQRD; SLST, GLST, …), answered by its RESP. SIS dialect only.
    Reference {
        /// The reference type.
        rtype: String,
        /// Do it (without: show the text and refuse).
        #[arg(long)]
        yes: bool,
    },
    /// One flight (RQDF-FLID), answered by a DFOE carrying the request's MGID. Platform
    /// dialect only.
    Flight {
        /// The FLID.
        flid: String,
        /// Do it (without: show the text and refuse).
        #[arg(long)]
        yes: bool,
    },
}

pub(super) fn request(cfg: &Config, args: &AskArgs) -> CmdResult {
    let usage = |e: String| (Exit::Usage, anyhow::anyhow!(e));
    let (ask, yes) = match args {
        AskArgs::Flights { from, to, yes } => (Ask::flights(from, to), *yes),
        AskArgs::Reference { rtype, yes } => (Ask::reference(rtype), *yes),
        AskArgs::Flight { flid, yes } => (Ask::flight(flid), *yes),
    };
    let ask = ask.map_err(|e| usage(e.to_string()))?;
    let policy = &cfg.requests;
    ask.check(policy.dialect).map_err(|e| usage(e.to_string()))?;
    let zone = &cfg.outbound.zone;
    let new = NewRequest::first(ask.req_type(policy.dialect), ask.req_key(), Origin::Operator);
    let now = SystemClock.now();
    if !yes {
        let preview = requests::text(policy, zone, &ask, 0, now);
        out!(
            "would ask the AODB: type={} key={} routing_id={}",
            new.req_type,
            new.req_key,
            preview.routing_id
        );
        out!("{}", preview.xml);
        out!("(SEQN and MGID carry the request's number on the wire, drawn when it is registered); run again with --yes");
        return Err(usage("nothing done without --yes".into()));
    }
    let mut pg = own_pg(cfg)?;
    let text = |seqn| requests::text(policy, zone, &ask, seqn, now);
    match pg.register(&new, &text, now).map_err(unreachable)? {
        Ok(r) => {
            out!(
                "registered req_id={} seqn={} type={} key={} event_id={}: the running instance writes it to {} and waits {} for its answer (msgx requests)",
                r.req_id,
                r.wire_seqn(),
                r.req_type,
                r.req_key,
                r.event_id.unwrap_or_default(),
                cfg.outbound.table,
                config::format_duration(policy.timeout)
            );
            Ok(())
        }
        Err(open) => Err((
            Exit::Failed,
            anyhow::anyhow!(
                "a {} request for {} is open: req_id={} state={} since {}; one open request per type and key",
                open.req_type,
                open.req_key,
                open.req_id,
                open.state,
                time(open.created_at)
            ),
        )),
    }
}

/// A request as `msgx requests --json` prints it.
#[derive(serde::Serialize)]
struct Listed<'a> {
    req_id: i64,
    req_type: &'a str,
    req_key: &'a str,
    state: msgx::requests::ReqState,
    origin: &'a str,
    event_id: Option<i64>,
    coutmsgs_id: Option<i64>,
    mgid: Option<&'a str>,
    answer_msg_id: Option<i64>,
    created_at: String,
    updated_at: String,
    expires_at: Option<String>,
    seqn: i64,
    tries: u16,
    dismissed_at: Option<String>,
    dismissed_note: Option<&'a str>,
}

impl<'a> Listed<'a> {
    fn of(r: &'a Request) -> Self {
        Listed {
            req_id: r.req_id,
            req_type: &r.req_type,
            req_key: &r.req_key,
            state: r.state,
            origin: &r.origin,
            event_id: r.event_id,
            coutmsgs_id: r.coutmsgs_id,
            mgid: r.mgid.as_deref(),
            answer_msg_id: r.answer_msg_id,
            created_at: time(r.created_at),
            updated_at: time(r.updated_at),
            expires_at: r.expires_at.map(time),
            seqn: r.wire_seqn(),
            tries: r.tries,
            dismissed_at: r.dismissed.as_ref().map(|(at, _)| time(*at)),
            dismissed_note: r.dismissed.as_ref().map(|(_, n)| n.as_str()),
        }
    }
}

pub(super) fn list(cfg: &Config, open: bool, limit: usize, json: bool) -> CmdResult {
    if limit < 1 {
        return Err((Exit::Usage, anyhow::anyhow!("--limit {limit}: at least 1")));
    }
    let mut pg = own_pg(cfg)?;
    let rows = pg.requests(open, limit).map_err(unreachable)?;
    if json {
        let v: Vec<Listed> = rows.iter().map(Listed::of).collect();
        out!("{}", serde_json::to_string_pretty(&v).expect("a list of objects serialises"));
        return Ok(());
    }
    if rows.is_empty() {
        out!("no {}request", if open { "open " } else { "" });
        return Ok(());
    }
    out!(
        "{:<7} {:<5} {:<34} {:<10} {:<20} {:<20} {:<20} {:>11} {:>10}",
        "req_id",
        "type",
        "key",
        "state",
        "created",
        "updated",
        "expires",
        "coutmsgs_id",
        "answer"
    );
    let dash = || "-".to_string();
    for r in &rows {
        out!(
            "{:<7} {:<5} {:<34} {:<10} {:<20} {:<20} {:<20} {:>11} {:>10}",
            r.req_id,
            r.req_type,
            one_line(&r.req_key),
            r.state.as_str(),
            to_second(r.created_at),
            to_second(r.updated_at),
            r.expires_at.map_or_else(dash, to_second),
            r.coutmsgs_id.map_or_else(dash, |x| x.to_string()),
            r.answer_msg_id.map_or_else(dash, |x| format!("msg {x}")),
        );
    }
    for r in &rows {
        if r.tries > 1 {
            out!("req_id={} is try {} for its window (msgx.requests.heal-tries)", r.req_id, r.tries);
        }
        if let Some((at, note)) = &r.dismissed {
            out!("req_id={} dismissed {}: {}", r.req_id, to_second(*at), one_line(note));
        }
    }
    if rows.len() == limit {
        out!("(the newest {limit}; --limit shows more)");
    }
    Ok(())
}

/// `msgx requests --dismiss ID --note …` (#55): a person's word that the request's window awaits
/// nothing more — msgx stops asking it again and is no longer degraded by it. An answer that
/// comes later still closes it and is processed.
pub(super) fn dismiss(cfg: &Config, req_id: i64, note: Option<&str>) -> CmdResult {
    let note = note.map(str::trim).unwrap_or_default();
    if note.is_empty() {
        return Err((
            Exit::Usage,
            anyhow::anyhow!("--note: say what was decided and why (kept with the request)"),
        ));
    }
    let mut pg = own_pg(cfg)?;
    let Some((r, newly)) = pg.dismiss_request(req_id, note, SystemClock.now()).map_err(unreachable)? else {
        return Err((Exit::Failed, anyhow::anyhow!("no request req_id={req_id} (msgx requests lists them)")));
    };
    if !newly {
        let Some((at, kept)) = r.dismissed else {
            // #68: only a heal's window that awaits the AODB is a person's to dismiss.
            let answered = r.answer_msg_id.map_or_else(String::new, |m| format!(", answered by msg {m}"));
            return Err((
                Exit::Usage,
                anyhow::anyhow!(
                    "req_id={req_id} (origin={} state={}{answered}) is not a heal's window awaiting the AODB: nothing to dismiss (msgx status lists the awaited ones)",
                    r.origin,
                    r.state
                ),
            ));
        };
        out!("req_id={req_id} was dismissed already at {}: {}", time(at), one_line(&kept));
        return Ok(());
    }
    let answered = r.answer_msg_id.map_or_else(String::new, |m| format!(" (answered by msg {m})"));
    out!(
        "dismissed req_id={} type={} key={} state={}{answered}: its window awaits no answer any more; an answer that comes still closes it",
        r.req_id,
        r.req_type,
        r.req_key,
        r.state
    );
    Ok(())
}

/// A time in the table, UTC to the second (the JSON keeps the microseconds).
fn to_second(t: std::time::SystemTime) -> String {
    let ts = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
