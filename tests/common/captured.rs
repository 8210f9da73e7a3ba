//! The log of the daemons a test runs in its own process (`start_daemon_with`): kept, so that a
//! test waits on a line and checks what was said as it does for a daemon in a process of its own
//! (`Instance::log_text`). Nextest runs each test in a process of its own; under `cargo test` the
//! tests that capture take turns ([`Held`]), so the log is each one's alone. Each line is printed too (shown with a failing test), and what is kept is
//! bounded.

use std::sync::{Mutex, MutexGuard, OnceLock};

/// The most lines kept: a test's daemon says far fewer.
const KEEP: usize = 200_000;

pub struct Captured {
    lines: Mutex<Vec<String>>,
}

impl Captured {
    /// Every line said so far, one a line.
    pub fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits until a line contains `pattern`.
    pub fn wait_for(&self, pattern: &str, deadline: std::time::Duration) -> bool {
        super::eventually(deadline, || self.lines.lock().unwrap().iter().any(|l| l.contains(pattern)))
    }
}

impl log::Log for Captured {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }

    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            let line = format!("{} {}] {}", r.level(), r.target(), r.args());
            eprintln!("{line}");
            let mut lines = self.lines.lock().unwrap();
            if lines.len() < KEEP {
                lines.push(line);
            }
        }
    }

    fn flush(&self) {}
}

/// The capture held by one test: under `cargo test`, where tests share a process, a second test
/// that runs a daemon in it waits until the first is done, and starts from an empty log — so
/// neither reads the other's lines.
pub struct Held {
    _turn: MutexGuard<'static, ()>,
    captured: &'static Captured,
}

impl std::ops::Deref for Held {
    type Target = Captured;
    fn deref(&self) -> &Captured {
        self.captured
    }
}

/// This process's log, captured from now on for the calling test alone (the first call installs
/// the logger; the process must not have one yet).
pub fn log() -> Held {
    static LOG: OnceLock<&'static Captured> = OnceLock::new();
    static TURN: Mutex<()> = Mutex::new(());
    let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let captured = *LOG.get_or_init(|| {
        let captured: &'static Captured = Box::leak(Box::new(Captured { lines: Mutex::new(Vec::new()) }));
        log::set_logger(captured).expect("no logger installed before the capture");
        log::set_max_level(log::LevelFilter::Info);
        captured
    });
    captured.lines.lock().unwrap().clear();
    Held { _turn: turn, captured }
}
