//! The `msgx` binary: argument parsing, logging set-up and exit codes. Everything else is in
//! the library; this is the only place where errors become `anyhow`-style messages.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use log::{error, info};

use msgx::clock::{Clock, SystemClock};
use msgx::codec;
use msgx::config::{self, Config};
use msgx::daemon;
use msgx::store::kafka::producer_settings;
use msgx::store::mailbox::{MysqlMailbox, MysqlOutbound};
use msgx::store::pg::{migrate, Pg};

/// Exit codes (docs/reference.md).
#[path = "cli/consistency.rs"]
mod consistency_cli;

mod exit {
    pub const OK: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
}

const DEFAULT_CONFIG: &str = "/etc/msgx/msgx.toml";

#[derive(Parser)]
#[command(name = "msgx", version, about = "Upstream message-processing middleware for airport operations")]
struct Cli {
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

fn main() -> ExitCode {
    msgx::logpipe::start();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .format(|buf, record| {
            use std::io::Write;
            // No secret in any line, whatever a driver echoed (#21 item 3).
            let text = record.args().to_string();
            let text = msgx::secret::scrub(&text);
            if !msgx::logline::json() {
                // env_logger's own shape: `[time LEVEL target] message`.
                let ts = buf.timestamp_millis();
                return writeln!(buf, "[{ts} {:<5} {}] {text}", record.level(), record.target());
            }
            let thread = std::thread::current();
            let line = msgx::logline::render(
                &buf.timestamp_millis().to_string(),
                record.level().as_str(),
                record.target(),
                thread.name().unwrap_or("main"),
                &text,
            );
            writeln!(buf, "{line}")
        })
        // A log file, never a terminal: no colours to add, none to strip per line.
        .write_style(env_logger::WriteStyle::Never)
        .target(env_logger::Target::Pipe(Box::new(msgx::logpipe::LogPipe)))
        .init();
    let code = run_cli();
    msgx::logpipe::flush();
    code
}

fn run_cli() -> ExitCode {
    // Panics go to the log file operators watch, with the thread (stage) that panicked.
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let backtrace = std::backtrace::Backtrace::capture();
        error!("panic thread={} {info}\n{backtrace}", thread.name().unwrap_or("?"));
        msgx::logpipe::flush();
    }));
    // The connection strings' passwords are scrubbed from every line from here on, the
    // environment's before the configuration is even read.
    for name in msgx::config::CONNECTION_ENV {
        if let Ok(v) = std::env::var(name) {
            msgx::secret::remember_in(&v);
        }
    }
    if let Ok(p) = std::env::var("MSGX_REDIS_SENTINEL_PASSWORD") {
        msgx::secret::remember(&p);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::ConfigDefaults => {
            print!("{}", config::render_default_file());
            ExitCode::from(exit::OK)
        }
        Command::Man => man(),
        Command::Decode { ref files, decide, from_redis } => match load_config(cli.config.as_deref()) {
            Ok(cfg) => decode(&cfg, files, decide, from_redis),
            Err(code) => code,
        },
        ref cmd => {
            let cfg = match load_config(cli.config.as_deref()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let result = match cmd {
                Command::Run => run(&cfg),
                Command::Migrate => migrate_cmd(&cfg),
                Command::Check => check(&cfg),
                Command::Status { check: true, .. } => return health_check(&cfg),
                Command::Status { json, .. } => status(&cfg, *json),
                Command::Replay { ids, range, class, limit, events, skipped } => {
                    let of = match (*events, *skipped) {
                        (true, _) => ReplayOf::Events,
                        (_, true) => ReplayOf::Skipped,
                        _ => ReplayOf::Failures,
                    };
                    replay(&cfg, ids, range.as_deref(), class.as_deref(), *limit, of)
                }
                Command::Reconcile { ids, note } => reconcile(&cfg, ids, note),
                Command::Dismiss { ids, note } => dismiss(&cfg, ids, note),
                Command::Resend { target, since, from_event, yes } => {
                    resend(&cfg, target, since.as_deref(), *from_event, *yes)
                }
                Command::ResetWatermark { to, yes } => reset_watermark(&cfg, *to, *yes),
                Command::Verify { sample, json } => consistency_cli::verify(&cfg, *sample, *json),
                Command::RebuildFlights { flid, yes } => consistency_cli::rebuild_flights(&cfg, flid, *yes),
                Command::Decode { .. } | Command::ConfigDefaults | Command::Man => {
                    unreachable!("handled above")
                }
            };
            match result {
                Ok(()) => ExitCode::from(exit::OK),
                Err((code, e)) => {
                    error!("{e:#}");
                    ExitCode::from(code)
                }
            }
        }
    }
}

type CmdResult = Result<(), (u8, anyhow::Error)>;

/// msgx(1): generated from the command line (clap), then what clap cannot say: files,
/// environment, exit codes.
fn man() -> ExitCode {
    use clap::CommandFactory;
    use std::io::Write;
    let cmd = Cli::command();
    let page = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    let rendered = (|| -> std::io::Result<()> {
        page.render_title(&mut out)?;
        page.render_name_section(&mut out)?;
        page.render_synopsis_section(&mut out)?;
        page.render_description_section(&mut out)?;
        page.render_options_section(&mut out)?;
        out.extend_from_slice(man_commands(&cmd).as_bytes());
        out.extend_from_slice(MAN_TAIL.as_bytes());
        page.render_version_section(&mut out)?;
        std::io::stdout().write_all(&out)
    })();
    match rendered {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            error!("cannot write the man page: {e}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// Text safe in roff: backslashes and hyphens escaped, no line starting a request.
fn roff(s: &str) -> String {
    let t = s.replace('\\', "\\e").replace('-', "\\-");
    t.lines()
        .map(|l| if l.starts_with(['.', '\'']) { format!("\\&{l}") } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n")
}

/// COMMANDS: each visible subcommand with its about text and its options.
fn man_commands(cmd: &clap::Command) -> String {
    let mut out = String::from(".SH COMMANDS\n");
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        out.push_str(&format!(".TP\n\\fBmsgx {}\\fR\n", roff(sub.get_name())));
        let about = sub.get_long_about().or(sub.get_about()).map(|a| a.to_string()).unwrap_or_default();
        out.push_str(&format!("{}\n", roff(&about)));
        let args: Vec<_> = sub.get_arguments().filter(|a| !a.is_hide_set() && a.get_id() != "help").collect();
        if args.is_empty() {
            continue;
        }
        out.push_str(".RS\n");
        for a in args {
            let name = match a.get_long() {
                Some(l) => format!("\\-\\-{}", roff(l)),
                None => format!("{}...", roff(&a.get_id().to_string().to_uppercase())),
            };
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            out.push_str(&format!(".TP\n\\fB{name}\\fR\n{}\n", roff(&help)));
        }
        out.push_str(".RE\n");
    }
    out
}

const MAN_TAIL: &str = r#".SH FILES
.TP
/etc/msgx/msgx.toml
The configuration (every key with its default: \fBmsgx config\-defaults\fR). Mode 0640, group msgx: it holds passwords.
.TP
/etc/msgx/msgx.env
Optional environment for the systemd unit (MSGX_PG_URL, MSGX_MYSQL_URL, MSGX_REDIS_URL, MSGX_KAFKA_BROKERS, RUST_LOG).
.TP
/var/log/msgx/msgx.log
The log file operators watch (MSGX_LOG_FILE in the unit; rotated by /etc/logrotate.d/msgx, which sends SIGHUP).
.SH ENVIRONMENT
MSGX_PG_URL, MSGX_MYSQL_URL, MSGX_REDIS_URL, MSGX_REDIS_SENTINEL_PASSWORD, MSGX_KAFKA_BROKERS and MSGX_LOG_FILE override their keys of the file; RUST_LOG sets the log level.
.SH EXIT STATUS
.TP
0
success
.TP
1
a stage failed, or this instance was fenced by a newer one; \fBdecode\fR: a file did not decode; \fBreplay\fR, \fBreconcile\fR, \fBdismiss\fR, \fBreset\-watermark\fR: something was refused
.TP
2
usage or configuration error (the message names the key)
.TP
3
schema: run \fBmsgx migrate\fR
.TP
4
a store is unreachable (the message names it)
.TP
6
\fBrun\fR: a store forgot what it acknowledged and the evidence is not enough to heal it (or it forgot again and again); nothing more is written, a person must decide
.TP
0/1/2/3
\fBstatus \-\-check\fR: OK / WARNING / CRITICAL / UNKNOWN (Nagios plugin convention)
.SH SEE ALSO
/usr/share/doc/msgx/reference.md (every key, log line, counter and error class), /usr/share/doc/msgx/monitoring.md, /usr/share/doc/msgx/operations.md
"#;

fn load_config(path: Option<&Path>) -> Result<Config, ExitCode> {
    let result = match path {
        Some(p) => Config::load(p),
        None if Path::new(DEFAULT_CONFIG).exists() => Config::load(Path::new(DEFAULT_CONFIG)),
        None => Config::from_toml_str("", |k| std::env::var(k).ok()),
    };
    let cfg = result.map_err(|e| {
        error!("configuration refused: {e}");
        ExitCode::from(exit::USAGE)
    })?;
    msgx::logline::set_json(cfg.log_json);
    for c in cfg.connection_strings() {
        msgx::secret::remember_in(c);
    }
    if let Some(p) = &cfg.redis.sentinel_password {
        msgx::secret::remember(p);
    }
    Ok(cfg)
}

fn run(cfg: &Config) -> CmdResult {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    if let Some(path) = &cfg.log_file {
        msgx::logpipe::to_file(path).map_err(|e| {
            (exit::USAGE, anyhow::anyhow!("msgx.log-file: cannot open {} for appending: {e}", path.display()))
        })?;
    }
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(|e| (exit::FAILED, anyhow::anyhow!("cannot install signal handlers: {e}")))?;
    let handle = signals.handle();
    let reopens = cfg.log_file.is_some();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                // SIGHUP is log rotation, not a stop (SPEC §7).
                if sig == SIGHUP {
                    if reopens {
                        msgx::logpipe::reopen();
                        info!("signal {sig} received: log file reopened");
                    } else {
                        info!("signal {sig} received: no msgx.log-file to reopen; going on");
                    }
                    continue;
                }
                info!("signal {sig} received: stopping");
                break;
            }
            drop(stop_tx);
        })
        .map_err(|e| (exit::FAILED, e.into()))?;
    let result = daemon::run(cfg, Arc::new(SystemClock), stop_rx);
    handle.close();
    result.map_err(|e| (e.exit_code() as u8, e.into()))
}

fn migrate_cmd(cfg: &Config) -> CmdResult {
    let err = |e: migrate::SchemaError| {
        let code = if matches!(e, migrate::SchemaError::Store(_)) { 4 } else { 3 };
        (code, anyhow::Error::from(e))
    };
    let mut pg = Pg::connect(&cfg.pg_url).map_err(|e| (4, e.into()))?;
    let applied = migrate::migrate(pg.client().map_err(|e| (4, e.into()))?).map_err(err)?;
    if applied.is_empty() {
        println!("schema up to date (V{:03})", migrate::MIGRATIONS.len());
    }
    for (v, name) in applied {
        println!("applied V{v:03} {name}");
    }
    Ok(())
}

fn check(cfg: &Config) -> CmdResult {
    println!("configuration: ok");
    for line in cfg.describe() {
        println!("  {line}");
    }
    let d3: Vec<String> = producer_settings(cfg)
        .into_iter()
        .filter(|(k, _)| ["acks", "enable.idempotence", "max.in.flight.requests.per.connection"].contains(k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!("kafka producer (D3): {}", d3.join(" "));
    let mut pg = Pg::connect(&cfg.pg_url).map_err(|e| (4, e.into()))?;
    println!("postgres: reachable");
    let d = pg.durability().map_err(|e| (4, e.into()))?;
    println!("postgres durability: {d}");
    if cfg.require_sync_standby && d.synchronous == 0 {
        return Err((4, anyhow::anyhow!("postgres: datasources.default.require-sync-standby = true and no synchronous standby is attached")));
    }
    migrate::verify(pg.client().map_err(|e| (4, e.into()))?).map_err(|e| (3, e.into()))?;
    println!("schema: up to date (V{:03})", migrate::MIGRATIONS.len());
    let mut mb = MysqlMailbox::connect(&cfg.mysql_url, &cfg.inbound).map_err(|e| (4, e.into()))?;
    mb.check_layout().map_err(|e| (4, anyhow::anyhow!("mailbox layout: {e}")))?;
    println!("mailbox: reachable, table {} with the configured columns", cfg.inbound.table);
    let mut out = MysqlOutbound::connect(&cfg.mysql_url, &cfg.outbound).map_err(|e| (4, e.into()))?;
    out.check_layout().map_err(|e| (4, anyhow::anyhow!("outbound mailbox layout: {e}")))?;
    println!("outbound mailbox: table {} with the configured columns", cfg.outbound.table);
    let mut redis = msgx::store::flights::RedisFlights::connect_to(&cfg.redis, &cfg.redis_prefix)
        .map_err(|e| (4, e.into()))?;
    println!("redis: reachable");
    let role = redis.replication().map_err(|e| (4, e.into()))?;
    println!("redis replication: {role}");
    if role.connected < cfg.redis.wait_replicas as i64 {
        println!(
            "  warning: redis.wait-replicas = {} but {} replica(s) are connected: every apply will wait and stall",
            cfg.redis.wait_replicas, role.connected
        );
    }
    let producer = msgx::store::kafka::KafkaProducer::new(cfg).map_err(|e| (4, e.into()))?;
    let topics = producer
        .topics(&[&cfg.topic_msg, &cfg.topic_schd], std::time::Duration::from_secs(10))
        .map_err(|e| (4, anyhow::anyhow!("kafka at {}: {e}", cfg.kafka_brokers)))?;
    println!("kafka: reachable at {}", cfg.kafka_brokers);
    for t in topics {
        match t.partitions {
            Some(n) => {
                println!(
                    "  topic {}: exists, {n} partition(s), replication factor {}, in sync {}",
                    t.topic, t.replication, t.in_sync
                );
                for w in t.warnings() {
                    println!("  warning: topic {}: {w}", t.topic);
                }
            }
            None => println!(
                "  topic {}: absent; created on first send if the broker auto-creates topics (auto.create.topics.enable), else create it",
                t.topic
            ),
        }
    }
    let r = running(&mut pg, SystemClock.now())?;
    if r.holder.free {
        println!("lease: free (no instance running)");
    } else {
        println!("lease: held by {}", who(&r.holder));
    }
    Ok(())
}

/// Connects to own PostgreSQL and checks its schema, as every command but `migrate` must.
fn own_pg(cfg: &Config) -> Result<Pg, (u8, anyhow::Error)> {
    let mut pg = Pg::connect(&cfg.pg_url).map_err(|e| (4, e.into()))?;
    migrate::verify(pg.client().map_err(|e| (4, e.into()))?).map_err(|e| (3, e.into()))?;
    Ok(pg)
}

/// What `msgx replay` brings back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReplayOf {
    Failures,
    Skipped,
    Events,
}

fn replay(
    cfg: &Config,
    ids: &[i64],
    range: Option<&str>,
    class: Option<&str>,
    limit: usize,
    of: ReplayOf,
) -> CmdResult {
    let events = of == ReplayOf::Events;
    use msgx::error::ErrorClass;
    use msgx::ports::{Operator, ReplaySelection};
    let usage = |m: String| (exit::USAGE, anyhow::anyhow!(m));
    let sel = if let Some(r) = range {
        let (a, b) = r
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse::<i64>().ok()?, b.trim().parse::<i64>().ok()?)))
            .ok_or_else(|| usage(format!("--range {r:?} is not FROM-TO, e.g. 100-200")))?;
        if a > b {
            return Err(usage(format!("--range {r:?}: FROM is after TO")));
        }
        ReplaySelection::Range(a, b)
    } else if let Some(c) = class {
        let c = ErrorClass::parse(c).ok_or_else(|| {
            let all: Vec<_> = ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
            usage(format!("--class {c:?} is not an error class ({})", all.join(", ")))
        })?;
        if !c.is_replayable() && !events {
            return Err(usage(format!(
                "{c} messages are never replayed: the message itself is illegal; have it corrected and resent upstream"
            )));
        }
        ReplaySelection::Class(c)
    } else {
        ReplaySelection::Ids(ids.to_vec())
    };
    let mut pg = own_pg(cfg)?;
    if events {
        return replay_events(&mut pg, &sel, limit);
    }
    let out = match of {
        ReplayOf::Skipped => pg.replay_skipped(&sel, limit, SystemClock.now()),
        _ => pg.replay(&sel, limit, SystemClock.now()),
    }
    .map_err(|e| (4, e.into()))?;
    let lines = out.iter().map(|r| {
        let was = match r.was {
            Some((state, class)) => {
                format!("was={} class={}", state.as_str(), class.map(|c| c.as_str()).unwrap_or("-"))
            }
            None => "was=absent".to_string(),
        };
        (r.msg_id, was, r.verdict.clone())
    });
    print_replay("msg_id", "message", lines.collect(), limit)
}

fn replay_events(pg: &mut Pg, sel: &msgx::ports::ReplaySelection, limit: usize) -> CmdResult {
    use msgx::ports::Operator;
    let out = pg.replay_events(sel, limit).map_err(|e| (4, e.into()))?;
    let lines = out.iter().map(|r| {
        let was = match &r.was {
            Some((target, state)) => format!("target={target} was={state}"),
            None => "was=absent".to_string(),
        };
        (r.event_id, was, r.verdict.clone())
    });
    print_replay("event_id", "event", lines.collect(), limit)
}

/// One line per row (`replayed …` or `refused … : why`), a summary, exit 1 when any was refused.
fn print_replay(
    id: &str,
    noun: &str,
    rows: Vec<(i64, String, Result<(), String>)>,
    limit: usize,
) -> CmdResult {
    let mut refused = 0;
    for (n, was, verdict) in &rows {
        match verdict {
            Ok(()) => println!("replayed {id}={n} {was} -> PENDING"),
            Err(why) => {
                refused += 1;
                println!("refused  {id}={n} {was}: {why}");
            }
        }
    }
    let more = if rows.len() >= limit { " (limit reached: run again for more)" } else { "" };
    println!("replayed {} {noun}(s), refused {refused}{more}", rows.len() - refused);
    if refused > 0 {
        return Err((exit::FAILED, anyhow::anyhow!("{refused} {noun}(s) not replayed")));
    }
    Ok(())
}

fn reconcile(cfg: &Config, ids: &[i64], note: &str) -> CmdResult {
    use msgx::ports::Operator;
    if note.trim().is_empty() {
        return Err((exit::USAGE, anyhow::anyhow!("--note must say what was found and agreed")));
    }
    let mut pg = own_pg(cfg)?;
    let out = pg.reconcile(ids, note.trim(), SystemClock.now()).map_err(|e| (4, e.into()))?;
    let mut refused = 0;
    for (id, verdict) in &out {
        match verdict {
            Ok(()) => println!("reconciled msg_id={id}"),
            Err(why) => {
                refused += 1;
                println!("refused    msg_id={id}: {why}");
            }
        }
    }
    if refused > 0 {
        return Err((exit::FAILED, anyhow::anyhow!("{refused} message(s) not reconciled")));
    }
    Ok(())
}

fn resend(cfg: &Config, target: &str, since: Option<&str>, from_event: Option<i64>, yes: bool) -> CmdResult {
    use msgx::domain::Target;
    use msgx::ports::{Operator, ResendFrom};
    let usage = |m: String| (exit::USAGE, anyhow::anyhow!(m));
    let target = match Target::parse(target) {
        Some(t @ (Target::KafkaMsg | Target::KafkaSchd)) => t,
        _ => return Err(usage(format!("--target {target:?}: KAFKA:msg or KAFKA:schd"))),
    };
    let from = match (since, from_event) {
        (Some(s), _) => {
            let t: jiff::Timestamp = s.parse().map_err(|e| {
                usage(format!("--since {s:?} is not an RFC 3339 time such as 2026-12-01T08:00:00Z: {e}"))
            })?;
            let ms = t.as_millisecond().max(0) as u64;
            ResendFrom::Since(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        }
        (None, Some(id)) => ResendFrom::Event(id),
        (None, None) => return Err(usage("--since or --from-event is required".into())),
    };
    let mut pg = own_pg(cfg)?;
    let r = pg.resend(target, from, yes).map_err(|e| (4, e.into()))?;
    let range = match (r.first, r.last) {
        (Some(a), Some(b)) => format!(" (event_id {a}..={b})"),
        _ => String::new(),
    };
    if !yes {
        println!("would resend {} {} event(s){range}; run again with --yes", r.events, target.as_str());
        return Err((exit::USAGE, anyhow::anyhow!("nothing done without --yes")));
    }
    println!(
        "resending {} {} event(s){range}: back in the outbox, delivered in order with their event_key",
        r.events,
        target.as_str()
    );
    Ok(())
}

fn dismiss(cfg: &Config, ids: &[i64], note: &str) -> CmdResult {
    use msgx::ports::Operator;
    if note.trim().is_empty() {
        return Err((exit::USAGE, anyhow::anyhow!("--note must say what was decided and why")));
    }
    let mut pg = own_pg(cfg)?;
    let out = pg.dismiss(ids, note.trim(), SystemClock.now()).map_err(|e| (4, e.into()))?;
    let mut refused = 0;
    for (id, verdict) in &out {
        match verdict {
            Ok(()) => println!("dismissed msg_id={id}"),
            Err(why) => {
                refused += 1;
                println!("refused   msg_id={id}: {why}");
            }
        }
    }
    if refused > 0 {
        return Err((exit::FAILED, anyhow::anyhow!("{refused} message(s) not dismissed")));
    }
    Ok(())
}

fn reset_watermark(cfg: &Config, to: i64, yes: bool) -> CmdResult {
    use msgx::ports::{MailboxScan, Operator};
    if to < 0 {
        return Err((exit::USAGE, anyhow::anyhow!("--to {to}: a watermark is 0 or a mailbox ID")));
    }
    let mut pg = own_pg(cfg)?;
    let was = pg.status(0).map_err(|e| (4, e.into()))?.watermark;
    let mut mb = MysqlMailbox::connect(&cfg.mysql_url, &cfg.inbound).map_err(|e| (4, e.into()))?;
    let (highest, auto) = mb.ids_in_use().map_err(|e| (4, e.into()))?;
    let show = |v: Option<i64>| v.map_or("none".to_string(), |v| v.to_string());
    println!(
        "watermark: {was} -> {to}; mailbox {}: highest ID {}, next ID {}",
        cfg.inbound.table,
        show(highest),
        show(auto)
    );
    if !yes {
        return Err((
            exit::USAGE,
            anyhow::anyhow!("not changed: rows above {to} will be read (again); run with --yes to do it"),
        ));
    }
    match pg.reset_watermark(to, SystemClock.now()).map_err(|e| (4, e.into()))? {
        Ok(old) => {
            println!(
                "watermark moved from {old} to {to}: the poller reads IDs above {to} from its next round"
            );
            info!("watermark reset from {old} to {to} by msgx reset-watermark (PRE-3)");
            Ok(())
        }
        Err(why) => Err((exit::FAILED, anyhow::anyhow!("watermark not moved: {why}"))),
    }
}

/// What `status` shows beyond own PostgreSQL's tables: the lease and the stalled stages the
/// holder reported with its last renewal.
struct Running {
    holder: msgx::ports::LeaseHolder,
    /// (stage, store, stalled for)
    stalled: Vec<(String, String, std::time::Duration)>,
}

fn running(pg: &mut Pg, now: std::time::SystemTime) -> Result<Running, (u8, anyhow::Error)> {
    use msgx::ports::LeaseStore;
    let holder = pg.holder().map_err(|e| (4, e.into()))?;
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

/// `status --check`: exits with the plugin's code, never through `CmdResult`.
fn health_check(cfg: &Config) -> ExitCode {
    use msgx::health::{assess, unknown, Observed};
    let now = SystemClock.now();
    let verdict = match own_pg(cfg).and_then(|mut pg| {
        let s = pg.status(0).map_err(|e| (4, e.into()))?;
        Ok((running(&mut pg, now)?, s))
    }) {
        Err((_, e)) => unknown(&format!("{e:#}")),
        Ok((r, s)) => {
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
                forgotten: consistency_cli::finding(cfg),
            };
            assess(&o, &cfg.health)
        }
    };
    println!("{}", verdict.line);
    ExitCode::from(verdict.level as u8)
}

fn status(cfg: &Config, json: bool) -> CmdResult {
    let mut pg = own_pg(cfg)?;
    let s = pg.status(100).map_err(|e| (4, e.into()))?;
    let r = running(&mut pg, SystemClock.now())?;
    if json {
        let mut v = serde_json::to_value(&s).expect("status serialises");
        v["lease"] = serde_json::json!({
            "held": !r.holder.free,
            "host": r.holder.host, "pid": r.holder.pid, "epoch": r.holder.epoch,
            "since_ms": r.holder.since.map(msgx::clock::unix_millis),
            "renewed_at_ms": r.holder.renewed_at.map(msgx::clock::unix_millis),
        });
        v["stalled"] = r
            .stalled
            .iter()
            .map(|(stage, store, d)| serde_json::json!({"stage": stage, "store": store, "for_ms": d.as_millis() as u64}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).expect("status serialises"));
        return Ok(());
    }
    match (&r.holder.free, &r.holder.since) {
        (false, since) => println!(
            "lease: held by {} since {}",
            who(&r.holder),
            since.map_or("?".into(), |t| msgx::clock::CivilTime::from_system(t).to_rfc3339())
        ),
        (true, _) => println!("lease: free (no instance running; last epoch {})", r.holder.epoch),
    }
    if r.stalled.is_empty() {
        println!("stalled stages: none");
    }
    for (stage, store, d) in &r.stalled {
        println!("stalled stage: {stage} on {store} for {}", msgx::stage::human(*d));
    }
    println!("watermark: {}", s.watermark);
    println!("messages:");
    for (state, n) in &s.states {
        match state.as_str() {
            "DEAD" if s.dead_dismissed > 0 => println!("  {state:<10} {n} ({} dismissed)", s.dead_dismissed),
            _ => println!("  {state:<10} {n}"),
        }
    }
    match &s.head {
        None => println!("head: none (nothing unfinished)"),
        Some(h) => println!(
            "head: msg_id={} state={} attempts={} age={} class={} error={:?}",
            h.msg_id,
            h.state,
            h.attempts,
            msgx::stage::human(std::time::Duration::from_millis(h.age_ms as u64)),
            h.error_class.as_deref().unwrap_or("-"),
            h.last_error.as_deref().unwrap_or("-")
        ),
    }
    println!("outbox:");
    for (target, state, n) in &s.events {
        println!("  {target:<11} {state:<8} {n}");
    }
    println!("backfill owed: {}", s.backfill_owed);
    println!("backfill abandoned, awaiting reconciliation: {}", s.abandoned_count);
    for a in &s.abandoned {
        println!("  msg_id={} state={} reason={}", a.msg_id, a.state, a.reason);
    }
    if s.abandoned_count > s.abandoned.len() as i64 {
        println!(
            "  … and {} more (msgx status --json lists the first 100)",
            s.abandoned_count - s.abandoned.len() as i64
        );
    }
    println!("seasonal plans held: {}", s.seasons.len());
    for x in &s.seasons {
        println!(
            "  {} airport={} {}..{} flights={} from msg_id={}",
            x.season,
            x.airport.as_deref().unwrap_or("-"),
            x.start.as_deref().unwrap_or("?"),
            x.end.as_deref().unwrap_or("?"),
            x.flights,
            x.msg_id
        );
    }
    Ok(())
}

fn decode(cfg: &Config, files: &[PathBuf], decide: bool, from_redis: bool) -> ExitCode {
    use codec::report::{report, Verdict};
    let rules = codec::ignore::IgnoreRules::new(&cfg.pipeline.ignore_rules);
    let mut redis = None;
    if from_redis {
        match msgx::store::flights::RedisFlights::connect_to(&cfg.redis, &cfg.redis_prefix) {
            Ok(r) => redis = Some(r),
            Err(e) => {
                error!("--from-redis: {e}");
                return ExitCode::from(4);
            }
        }
    }
    let mut all_ok = true;
    for f in files {
        let out = match std::fs::read_to_string(f) {
            Err(e) => {
                all_ok = false;
                serde_json::json!({ "file": f, "error": format!("cannot read: {e}") })
            }
            Ok(raw) => {
                let (verdict, mut v) = report(&raw, &rules, cfg.pipeline.include_day_boundary);
                all_ok &= !matches!(verdict, Verdict::Failed { .. });
                if decide && matches!(verdict, Verdict::Decoded { .. }) {
                    match decision(cfg, &raw, redis.as_mut()) {
                        Ok(d) => v["decision"] = d,
                        Err(e) => {
                            error!("--from-redis: {e}");
                            return ExitCode::from(4);
                        }
                    }
                }
                v["file"] = serde_json::json!(f);
                v
            }
        };
        println!("{}", serde_json::to_string(&out).expect("json"));
    }
    ExitCode::from(if all_ok { exit::OK } else { exit::FAILED })
}

/// The decision on `raw` against an empty view, or the flights Redis holds (read only:
/// nothing is forgotten, applied or journalled).
fn decision(
    cfg: &Config,
    raw: &str,
    redis: Option<&mut msgx::store::flights::RedisFlights>,
) -> Result<serde_json::Value, msgx::error::StoreError> {
    use msgx::handlers::{need_of, preview, View};
    use msgx::ports::{FlightStore, RoundNeed};
    let Ok(msg) = codec::decode(raw) else { return Ok(serde_json::Value::Null) };
    let mut view = View::default();
    let against = match redis {
        None => "an empty flight view",
        Some(r) => {
            let need = need_of(&msg);
            let p = r.prepare(
                &RoundNeed { msg_ids: vec![], flids: need.flids, window: need.window },
                &[],
                SystemClock.now(),
            )?;
            view.flights = p.flights;
            view.window = p.window;
            "the flights in Redis now"
        }
    };
    let mut d = preview(&view, &msg, cfg.pipeline.max_event_bytes);
    d["against"] = serde_json::json!(against);
    Ok(d)
}
