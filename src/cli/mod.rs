//! The `msgx` subcommands: the command line (clap), one file per subcommand, and what they
//! share — the configuration, own PostgreSQL with its schema checked, the lease holder. Each
//! subcommand is `fn(cfg, args) -> CmdResult`; the exit codes are [`msgx::exit::Exit`].

/// Prints a line to standard output with every remembered secret masked, as the log is
/// (#42): whatever a driver put in an error a command shows.
macro_rules! out {
    () => { println!() };
    ($($t:tt)*) => { println!("{}", msgx::secret::scrub(&format!($($t)*))) };
}

mod check;
mod consistency;
mod dead;
mod decode;
mod dismiss;
mod flight;
mod man;
mod migrate_schema;
mod reconcile;
mod replay;
mod request;
mod resend;
mod reset_watermark;
mod rules;
mod run;
mod status;
mod trace;

pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::process::ExitCode;
pub(crate) use std::sync::Arc;

pub(crate) use clap::{Parser, Subcommand};
pub(crate) use log::{error, info};

pub(crate) use msgx::clock::{Clock, SystemClock};
pub(crate) use msgx::codec;
pub(crate) use msgx::config::{self, Config};
pub(crate) use msgx::daemon;
pub(crate) use msgx::exit::Exit;
pub(crate) use msgx::store::kafka::producer_settings;
pub(crate) use msgx::store::mailbox::{MysqlMailbox, MysqlOutbound};
pub(crate) use msgx::store::pg::{migrate, Pg};

/// Runs the subcommand `cli` names; its exit code.
pub fn main(cli: Cli) -> ExitCode {
    if !matches!(cli.command, Command::Run) {
        ignore_hangup();
    }
    match cli.command {
        Command::ConfigDefaults => {
            print!("{}", config::render_default_file());
            Exit::Ok.into()
        }
        Command::Man => man::man(),
        Command::Decode { ref files, decide, from_redis } => match load_config(cli.config.as_deref()) {
            Ok(cfg) => decode::decode(&cfg, files, decide, from_redis),
            Err(code) => code,
        },
        ref cmd => {
            let cfg = match load_config(cli.config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            if let Command::Status { check: true, .. } = cmd {
                return status::health_check(&cfg);
            }
            let result = command(cmd, &cfg);
            match result {
                Ok(()) => Exit::Ok.into(),
                Err((code, e)) => {
                    error!("{e:#}");
                    code.into()
                }
            }
        }
    }
}

/// A command that needs the configuration, run on it.
fn command(cmd: &Command, cfg: &Config) -> CmdResult {
    match cmd {
        Command::Run => run::run(cfg),
        Command::Migrate => migrate_schema::migrate_cmd(cfg),
        Command::Check => check::check(cfg),
        Command::Status { check: false, json } => status::status(cfg, *json),
        Command::Status { check: true, .. } => unreachable!("answered before: its exit code is Nagios's"),
        Command::Replay { ids, range, class, limit, events, skipped } => {
            let of = match (*events, *skipped) {
                (true, _) => replay::ReplayOf::Events,
                (_, true) => replay::ReplayOf::Skipped,
                _ => replay::ReplayOf::Failures,
            };
            replay::replay(cfg, ids, range.as_deref(), class.as_deref(), *limit, of)
        }
        Command::Reconcile { ids, note } => reconcile::reconcile(cfg, ids, note),
        Command::Dismiss { ids, note } => dismiss::dismiss(cfg, ids, note),
        Command::Park { ids, note } => dismiss::park(cfg, ids, note),
        Command::Schema { name, registry } => schema(cfg, name.as_deref(), registry.as_deref()),
        Command::Resend { target, since, from_event, yes } => {
            resend::resend(cfg, target, since.as_deref(), *from_event, *yes)
        }
        Command::Trace { msg_id, json } => trace::trace(cfg, *msg_id, *json),
        Command::Flight { flid, field, limit, json } => {
            flight::flight(cfg, flid, field.as_deref(), *limit, *json)
        }
        Command::Dead { class, since, limit, json } => {
            dead::dead(cfg, class.as_deref(), since.as_deref(), *limit, *json)
        }
        Command::ResetWatermark { to, yes } => reset_watermark::reset_watermark(cfg, *to, *yes),
        Command::Request { ask } => request::request(cfg, ask),
        Command::Requests { dismiss: Some(id), note, .. } => request::dismiss(cfg, *id, note.as_deref()),
        Command::Requests { open, limit, json, .. } => request::list(cfg, *open, *limit, *json),
        Command::Verify { sample, json } => consistency::verify(cfg, *sample, *json),
        Command::Rules { action } => rules::rules(cfg, action),
        Command::RebuildFlights { flid, yes } => consistency::rebuild_flights(cfg, flid, *yes),
        Command::Decode { .. } | Command::ConfigDefaults | Command::Man => {
            unreachable!("handled above")
        }
    }
}

const DEFAULT_CONFIG: &str = "/etc/msgx/msgx.toml";

#[derive(Parser)]
#[command(name = "msgx", version, about = "Upstream message-processing middleware for airport operations")]
pub struct Cli {
    /// Configuration file (TOML). Without it, /etc/msgx/msgx.toml if present, else defaults.
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (poll, process, dispatch, backfill) until SIGTERM/SIGINT.
    Run,
    /// Apply pending migrations to own PostgreSQL.
    Migrate,
    /// Check configuration, D3, every store (own PostgreSQL and schema, both mailbox layouts,
    /// Redis, the broker and its topics) and the lease holder; read-only.
    Check,
    /// Show the lease holder, stalled stages, backlog, FIFO head and its age, outbox, abandoned
    /// marks and seasonal plans.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// One line in the Nagios plugin convention, thresholds from `msgx.health.*`: exit 0
        /// OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
        #[arg(long, conflicts_with = "json")]
        check: bool,
    },
    /// Bring FAILED/DEAD messages of a replayable class (CODEC_ERROR, UNSUPPORTED, INFRA,
    /// EXHAUSTED) back to PENDING. MALFORMED and PROTOCOL are never replayed.
    #[command(group(clap::ArgGroup::new("selection").required(true).args(["ids", "range", "class"])))]
    Replay {
        /// MSG_IDs, comma-separated.
        #[arg(long, value_delimiter = ',')]
        ids: Vec<i64>,
        /// An inclusive MSG_ID range, FROM-TO.
        #[arg(long, value_name = "FROM-TO")]
        range: Option<String>,
        /// Every FAILED/DEAD message of this error class.
        #[arg(long)]
        class: Option<String>,
        /// At most this many messages are looked at.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Replay DEAD outbox events (the dead-letter queue) instead; --ids and --range then
        /// name EVENT_IDs.
        #[arg(long, conflicts_with = "skipped")]
        events: bool,
        /// Replay SKIPPED messages of a kind msgx did not process (`not-for-msgx`: a request to
        /// the platform, another platform's document), e.g. after an upgrade that handles it.
        /// Ignore rules' skips and duplicates stay final.
        #[arg(long, conflicts_with = "class")]
        skipped: bool,
    },
    /// Record that abandoned mailbox marks were reconciled with the mailbox owner (C-16);
    /// the rows then leave the abandoned list and may be archived.
    Reconcile {
        /// MSG_IDs, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        ids: Vec<i64>,
        /// What was found and agreed, kept with the row (e.g. "purged by the mailbox owner").
        #[arg(long, required = true)]
        note: String,
    },
    /// Follow one message, oldest first: its mailbox row (received, status, mark), its
    /// PROC_STATE row (or the archived one), its type and the flights it names, and every outbox
    /// event with its event_key, state and delivery. Exit 1 when neither the mailbox nor msgx
    /// knows it. Read only.
    Trace {
        /// The MSG_ID (the mailbox row's id).
        msg_id: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Why does this flight say that: the flight as Redis holds it, each field with the MSG_ID
    /// that set it and when, then the messages that changed it, newest first, with their
    /// changes and where their events landed. Exit 1 when nothing names the flight. Read only.
    Flight {
        /// The FLID.
        flid: String,
        /// One field's story: the message that set it, the element of its text, its event and
        /// offset, and the values before it.
        #[arg(long)]
        field: Option<String>,
        /// At most this many changes.
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List the dead-letter queue: DEAD messages (dismissed ones marked), oldest MSG_ID first,
    /// with their type, error class and text, attempts and since when. Read only.
    Dead {
        /// Only this error class.
        #[arg(long)]
        class: Option<String>,
        /// Only those DEAD (or dismissed) at or after this time (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Record that a person dealt with DEAD messages without replaying them: they leave the
    /// dead-letter queue (and `status --check`) and are archived after `archive-after`.
    Dismiss {
        /// MSG_IDs, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        ids: Vec<i64>,
        /// What was decided and why, kept with the row (e.g. "corrected copy resent as 4711").
        #[arg(long, required = true)]
        note: String,
    },
    /// Park events the broker refuses (#67): a Kafka topic holds at such an event, and nothing
    /// behind it is delivered, until the broker takes it or a person parks it here — DEAD,
    /// with the note, in the dead-letter queue (`msgx replay --events` sends it again). The
    /// topic then moves on.
    Park {
        /// EVENT_IDs, comma-separated (`msgx status` names the event a topic holds at).
        #[arg(long, value_delimiter = ',', required = true)]
        ids: Vec<i64>,
        /// What was decided and why, kept with the event (e.g. "schema fix due in 0.4; consumers told").
        #[arg(long, required = true)]
        note: String,
    },
    /// Print the JSON Schema (2020-12) of a topic's records (msg or schd: key, headers, value),
    /// or write the form a registry-validating broker enforces for the configured topics.
    #[command(group(clap::ArgGroup::new("what").required(true).args(["name", "registry"])))]
    Schema {
        /// msg or schd.
        name: Option<String>,
        /// Write TOPIC.json for kafka.topics.msg and .schd into this directory (Tansu's
        /// --schema-registry file://DIR layout: the value's schema; the key is plain text).
        #[arg(long, value_name = "DIR")]
        registry: Option<PathBuf>,
    },
    /// Deliver again, in order and with their own identities, events already SENT (within
    /// event retention): for a broker or a consumer that lost them. Shows what it would do and
    /// exits 2 without --yes.
    #[command(group(clap::ArgGroup::new("from").required(true).args(["since", "from_event"])))]
    Resend {
        /// KAFKA:msg or KAFKA:schd.
        #[arg(long)]
        target: String,
        /// Events SENT at or after this time (RFC 3339, e.g. 2026-12-01T08:00:00Z).
        #[arg(long)]
        since: Option<String>,
        /// This EVENT_ID and the ones after it.
        #[arg(long, value_name = "EVENT_ID")]
        from_event: Option<i64>,
        /// Do it.
        #[arg(long)]
        yes: bool,
    },
    /// The consistency sentinel by hand (U25): mailbox and marks against PROC_STATE, SUCCEEDED
    /// messages against Redis's journal and field versions, Redis's lease epoch against
    /// PostgreSQL's. Exit 0 clean, 1 findings, 4 a store unreachable. Read only.
    Verify {
        /// The share of SUCCEEDED messages decided again to compare field versions (default
        /// msgx.consistency-check.daily-sample-ratio).
        #[arg(long, value_name = "RATIO")]
        sample: Option<f64>,
        #[arg(long)]
        json: bool,
    },
    /// New rules on old messages (#65): decide the SUCCEEDED messages from a MSG_ID again under
    /// this release's rules and tell every difference as an event (`apply`), and the jobs
    /// asked (`list`).
    Rules {
        #[command(subcommand)]
        action: rules::RulesArgs,
    },
    /// Rebuild the flights in Redis from the mailbox texts of the SUCCEEDED messages, in MSG_ID
    /// order through the same handlers (Redis only: no events). Shows what would change and
    /// exits 2 without --yes; refused while an instance runs.
    RebuildFlights {
        /// Only these FLIDs (comma-separated); default every flight.
        #[arg(long, value_delimiter = ',')]
        flid: Vec<String>,
        /// Do it.
        #[arg(long)]
        yes: bool,
    },
    /// Move the ingress watermark (PRE-3), e.g. after the mailbox's IDs were reset. The
    /// poller reads again above it. Refused without --yes, and while PROC_STATE holds a
    /// message above it.
    ResetWatermark {
        /// The new watermark: the poller reads IDs above it.
        #[arg(long, value_name = "N")]
        to: i64,
        /// Do it (without: show what would change and refuse).
        #[arg(long)]
        yes: bool,
    },
    /// Ask the AODB (SPEC §4.11): the request goes to the outbound mailbox in the dialect of
    /// msgx.requests.dialect and is tracked until answered or msgx.requests.timeout passes.
    /// Shows the text and exits 2 without --yes; exit 1 when the same request is still open.
    Request {
        #[command(subcommand)]
        ask: request::AskArgs,
    },
    /// List the requests to the AODB, newest first: type, key, state, times, the COUTMSGS row
    /// and the message that answered. Read only, unless --dismiss.
    Requests {
        /// A person's word that this request's window awaits no answer any more (a heal's
        /// request the AODB never answered: msgx stops asking, is no longer degraded by it).
        #[arg(long, value_name = "REQ_ID", requires = "note", conflicts_with_all = ["open", "json"])]
        dismiss: Option<i64>,
        /// With --dismiss: what was decided and why, kept with the request.
        #[arg(long, requires = "dismiss")]
        note: Option<String>,
        /// Only the open ones (REGISTERED, SENT, WAITING).
        #[arg(long)]
        open: bool,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Decode message files and print kind, identity, ignore verdict or error class as JSON.
    Decode {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also show the decision: the flight changes and events msgx would emit, against an
        /// empty flight view. Writes nothing anywhere.
        #[arg(long)]
        decide: bool,
        /// With --decide: against the flights as Redis holds them now (read-only).
        #[arg(long, requires = "decide")]
        from_redis: bool,
    },
    /// Print the default configuration file (every key, its default and a comment).
    ConfigDefaults,
    /// Print the man page (roff), generated from this command line; the packages ship it.
    #[command(hide = true)]
    Man,
}

type CmdResult = Result<(), (Exit, anyhow::Error)>;

/// One line per row an operator's command named — `<done> msg_id=…` or `refused msg_id=…:
/// why` — and exit 1 when any was refused.
fn print_verdicts(out: &[(i64, Result<(), String>)], done: &str) -> CmdResult {
    print_verdicts_of(out, done, ("msg_id", "message(s)"))
}

/// One line per id (`label=id`), then exit 1 naming how many `what` were refused.
fn print_verdicts_of(
    out: &[(i64, Result<(), String>)],
    done: &str,
    (label, what): (&str, &str),
) -> CmdResult {
    let w = done.len().max("refused".len());
    let mut refused = 0;
    for (id, verdict) in out {
        match verdict {
            Ok(()) => out!("{done:<w$} {label}={id}"),
            Err(why) => {
                refused += 1;
                out!("{:<w$} {label}={id}: {why}", "refused");
            }
        }
    }
    if refused > 0 {
        return Err((Exit::Failed, anyhow::anyhow!("{refused} {what} not {done}")));
    }
    Ok(())
}

/// `msgx schema`: a record schema printed, or the broker's registry written.
fn schema(cfg: &Config, name: Option<&str>, registry: Option<&std::path::Path>) -> CmdResult {
    if let Some(dir) = registry {
        let written = msgx::schema::write_registry(dir, &cfg.topic_msg, &cfg.topic_schd).map_err(|e| {
            (Exit::Failed, anyhow::anyhow!("cannot write the registry in {}: {e}", dir.display()))
        })?;
        for path in written {
            out!("wrote {}", path.display());
        }
        return Ok(());
    }
    let name = name.unwrap_or_default();
    let target = msgx::schema::named(name).ok_or_else(|| {
        (Exit::Usage, anyhow::anyhow!("no schema named {name:?}: msgx schema msg, or msgx schema schd"))
    })?;
    print!("{}", msgx::schema::of(target).expect("a Kafka target"));
    Ok(())
}

/// A store the command needs did not answer or refused it: exit 4, the error names it.
/// A time as the lineage commands print it: RFC 3339, UTC.
use msgx::clock::rfc3339 as time;

/// An upstream text on one line: a newline in it cannot forge a line of the output.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

fn unreachable(e: impl Into<anyhow::Error>) -> (Exit, anyhow::Error) {
    (Exit::Unreachable, e.into())
}

fn load_config(path: Option<&Path>) -> Result<Config, ExitCode> {
    let result = match path {
        Some(p) => Config::load(p),
        None if Path::new(DEFAULT_CONFIG).exists() => Config::load(Path::new(DEFAULT_CONFIG)),
        None => Config::from_toml_str("", |k| std::env::var(k).ok()),
    };
    let cfg = result.map_err(|e| {
        error!("configuration refused: {e}");
        ExitCode::from(Exit::Usage)
    })?;
    msgx::logline::set_json(cfg.log_json);
    for c in cfg.connection_strings() {
        msgx::secret::remember_in(c);
    }
    for p in cfg.redis.sentinel_password.iter().chain(&cfg.metrics_token).chain(&cfg.console_token) {
        msgx::secret::remember(p);
    }
    Ok(cfg)
}

/// Connects to own PostgreSQL and checks its schema, as every command but `migrate` must.
fn own_pg(cfg: &Config) -> Result<Pg, (Exit, anyhow::Error)> {
    let mut pg = Pg::of(cfg).and_then(Pg::connected).map_err(unreachable)?;
    migrate::verify(pg.client().map_err(unreachable)?).map_err(|e| (Exit::Schema, e.into()))?;
    Ok(pg)
}

/// What `status` shows beyond own PostgreSQL's tables: the lease and the stalled stages the
/// holder reported with its last renewal.
struct Running {
    holder: msgx::ports::LeaseHolder,
    /// (stage, store, stalled for)
    stalled: Vec<(String, String, std::time::Duration)>,
}

fn running(pg: &mut Pg, now: std::time::SystemTime) -> Result<Running, (Exit, anyhow::Error)> {
    use msgx::ports::LeaseStore;
    let holder = pg.holder().map_err(unreachable)?;
    let mut stalled = Vec::new();
    if !holder.free {
        let v: serde_json::Value = serde_json::from_str(&holder.status).unwrap_or_default();
        for s in v["stalled"].as_array().into_iter().flatten() {
            let since =
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(s["since_ms"].as_u64().unwrap_or(0));
            let d = now.duration_since(since).unwrap_or_default();
            stalled.push((
                s["stage"].as_str().unwrap_or("?").to_string(),
                s["store"].as_str().unwrap_or("?").to_string(),
                d,
            ));
        }
    }
    stalled.sort_by_key(|s| std::cmp::Reverse(s.2));
    Ok(Running { holder, stalled })
}

fn who(h: &msgx::ports::LeaseHolder) -> String {
    format!("host={} pid={} epoch={}", h.host.as_deref().unwrap_or("?"), h.pid.unwrap_or(0), h.epoch)
}

/// A command other than `run` goes on through SIGHUP: it is log rotation's signal for the daemon
/// (packaging/logrotate/msgx), and a `rebuild-flights` or `verify` half-way must not die of one
/// meant for someone else, nor of its terminal closing (#42). The flag is never read: the
/// handler only replaces the default action, which ends the process.
fn ignore_hangup() {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGHUP, flag) {
        log::warn!("SIGHUP not ignored ({e}); a hangup ends this command");
    }
}

/// A command-line time (`--since`): RFC 3339, e.g. 2026-12-01T08:00:00Z; a bad one is a usage
/// error naming the flag.
fn time_arg(flag: &str, s: &str) -> Result<std::time::SystemTime, (Exit, anyhow::Error)> {
    let t: jiff::Timestamp = s.parse().map_err(|e| {
        (
            Exit::Usage,
            anyhow::anyhow!("{flag} {s:?} is not an RFC 3339 time such as 2026-12-01T08:00:00Z: {e}"),
        )
    })?;
    Ok(std::time::UNIX_EPOCH + std::time::Duration::from_millis(t.as_millisecond().max(0) as u64))
}
