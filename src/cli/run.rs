//! `msgx run`: the daemon until SIGTERM/SIGINT; SIGHUP reopens the log file.

use super::*;

pub(super) fn run(cfg: &Config) -> CmdResult {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    if let Some(path) = &cfg.log_file {
        msgx::logpipe::to_file(path).map_err(|e| {
            (Exit::Usage, anyhow::anyhow!("msgx.log-file: cannot open {} for appending: {e}", path.display()))
        })?;
    }
    let notifier = Arc::new(notifier()?);
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(|e| (Exit::Failed, anyhow::anyhow!("cannot install signal handlers: {e}")))?;
    let handle = signals.handle();
    let reopens = cfg.log_file.is_some();
    let told = notifier.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                // SIGHUP is log rotation, not a stop (SPEC §7).
                if sig == SIGHUP {
                    told.reloading();
                    if reopens {
                        msgx::logpipe::reopen();
                        info!("signal {sig} received: log file reopened");
                    } else {
                        info!("signal {sig} received: no msgx.log-file to reopen; going on");
                    }
                    told.reloaded();
                    continue;
                }
                told.stopping();
                info!("signal {sig} received: stopping");
                break;
            }
            drop(stop_tx);
        })
        .map_err(|e| (Exit::Failed, e.into()))?;
    let result = daemon::run(
        cfg,
        msgx::codec::Rulebook::this_release(),
        Arc::new(SystemClock),
        stop_rx,
        notifier.clone(),
    );
    handle.close();
    if result.is_err() {
        notifier.stopping();
    }
    result.map_err(|e| (e.exit(), e.into()))
}

/// systemd's notification socket and watchdog, from the variables a `Type=notify` unit sets
/// (none: nothing is said).
fn notifier() -> Result<msgx::ops::notify::Notifier, (Exit, anyhow::Error)> {
    use msgx::ops::notify::{Notifier, NotifyEnv};
    let socket = std::env::var_os("NOTIFY_SOCKET");
    let (usec, pid) = (std::env::var("WATCHDOG_USEC").ok(), std::env::var("WATCHDOG_PID").ok());
    let env =
        NotifyEnv { socket: socket.as_deref(), watchdog_usec: usec.as_deref(), watchdog_pid: pid.as_deref() };
    Notifier::new(&env, std::process::id()).map_err(|e| (Exit::Usage, anyhow::anyhow!(e)))
}
