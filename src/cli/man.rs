//! `msgx man`: the man page msgx(1), generated from the command line (clap), then what clap
//! cannot say: files, environment, exit codes.

use super::*;

/// msgx(1): generated from the command line (clap), then what clap cannot say: files,
/// environment, exit codes.
pub(super) fn man() -> ExitCode {
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
        Ok(()) => Exit::Ok.into(),
        Err(e) => {
            error!("cannot write the man page: {e}");
            Exit::Failed.into()
        }
    }
}

/// Text safe in roff: backslashes and hyphens escaped, no line starting a request.
pub(super) fn roff(s: &str) -> String {
    let t = s.replace('\\', "\\e").replace('-', "\\-");
    t.lines()
        .map(|l| if l.starts_with(['.', '\'']) { format!("\\&{l}") } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n")
}

/// COMMANDS: each visible subcommand with its about text and its options.
pub(super) fn man_commands(cmd: &clap::Command) -> String {
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
MSGX_PG_URL, MSGX_MYSQL_URL, MSGX_REDIS_URL, MSGX_REDIS_SENTINEL_PASSWORD, MSGX_METRICS_TOKEN, MSGX_KAFKA_BROKERS and MSGX_LOG_FILE override their keys of the file; RUST_LOG sets the log level.
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
