//! The `msgx` binary: logging set-up, the panic hook and the secrets to scrub, then the
//! subcommand ([`cli`]). Everything else is in the library; the binary is the only place where
//! errors become `anyhow`-style messages.

use std::process::ExitCode;

use clap::Parser;
use log::error;

mod cli;

/// jemalloc, not glibc's malloc: every stage allocates small short-lived pieces (a message's
/// tree and records, a round's rows, a log line), many freed on another thread than the one that
/// made them, and glibc's allocator was a third of the process thread's samples. jemalloc took
/// a fifth off msgx's own CPU per message in the e2e bench (22 to 18 ms per 1000, medians of 15
/// runs) for 1 MiB more peak RSS at 20 K and 3-5 at 100 K (#23, docs/performance.md); mimalloc
/// took nothing off and tripled the RSS. It is linked unprefixed, so librdkafka's C code
/// allocates from the same heap. The library does not choose one: its tests keep the system
/// allocator; the e2e and decode benches take this one, to measure what the daemon runs.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` (its `malloc_conf`, which jemalloc declares weak so a
/// program can set it; `MALLOC_CONF` in the environment is read after it and wins). One arena:
/// the default of four per core kept each thread's freed pages apart, and the 100 K backlog's
/// peak RSS went from 45-46 MiB to 41-43 (the 48 MiB goal of #23) at no measured CPU cost —
/// every thread's own cache takes nearly all of its allocations before the arena does.
#[export_name = "malloc_conf"]
static MALLOC_CONF: &[u8; 10] = msgx::ALLOCATOR_OPTIONS;

/// One log line: `text` scrubbed of every secret, whatever a driver echoed (#21 item 3), in
/// env_logger's own shape (`[time LEVEL target] message`) or the JSON one.
fn write_line(buf: &mut env_logger::fmt::Formatter, record: &log::Record, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let text = msgx::secret::scrub(text);
    if !msgx::logline::json() {
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
}

fn main() -> ExitCode {
    msgx::logpipe::start();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .format(|buf, record| {
            use std::fmt::Write as _;
            thread_local! {
                // The message as written, before scrubbing: one buffer per thread, reused, so
                // a line costs no allocation of its own beyond the copy the log thread gets.
                static TEXT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
            }
            TEXT.with(|cell| match cell.try_borrow_mut() {
                Ok(mut text) => {
                    text.clear();
                    let _ = write!(text, "{}", record.args());
                    let written = write_line(buf, record, &text);
                    if text.capacity() > 64 * 1024 {
                        *text = String::new(); // one long line does not stay held per thread
                    }
                    written
                }
                // A line written while this thread formats another (a value's Display that
                // logs): it gets a buffer of its own rather than a panic.
                Err(_) => write_line(buf, record, &record.args().to_string()),
            })
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
    for name in ["MSGX_REDIS_SENTINEL_PASSWORD", "MSGX_METRICS_TOKEN"] {
        if let Ok(p) = std::env::var(name) {
            msgx::secret::remember(&p);
        }
    }
    cli::main(cli::Cli::parse())
}
