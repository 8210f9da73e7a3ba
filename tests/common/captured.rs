//! The log of the daemons a test runs in its own process (`start_daemon_with`): kept, so that a
//! test waits on a line and checks what was said as it does for a daemon in a process of its own
//! (`Instance::log_text`). Nextest runs each test in a process of its own, so the log is that
//! test's alone. Each line is printed too (shown with a failing test), and what is kept is
//! bounded.

use std::sync::{Mutex, OnceLock};

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

/// This process's log, captured from now on (the first call installs the logger; the process
/// must not have one yet).
pub fn log() -> &'static Captured {
    static LOG: OnceLock<&'static Captured> = OnceLock::new();
    LOG.get_or_init(|| {
        let captured: &'static Captured = Box::leak(Box::new(Captured { lines: Mutex::new(Vec::new()) }));
        log::set_logger(captured).expect("no logger installed before the capture");
        log::set_max_level(log::LevelFilter::Info);
        captured
    })
}
