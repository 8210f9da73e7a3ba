//! The log's way to the file: formatted lines go through a bounded channel to one writer
//! thread that writes them in batches and flushes whenever it has caught up. A stage never
//! waits for a write syscall per line (one per message at thousands of messages a second), and
//! no line is ever dropped: when the channel is full, the logging thread waits.
//!
//! The writer writes to standard error, or to `msgx.log-file`, which it opens itself (append)
//! and opens again on [`reopen`] (SIGHUP, after logrotate moved it away): every line before the
//! reopen is in the old file, every line after in the new one, none lost.

use std::io::Write;
use std::sync::OnceLock;
use std::thread;

use crossbeam_channel::{bounded, Receiver, Sender};

enum Item {
    Line(Vec<u8>),
    /// Write to this file from now on (opened by the sender, append mode).
    To(std::fs::File, std::path::PathBuf),
    /// Open the file again under its name (log rotation).
    Reopen,
    /// Everything before this is written and flushed; then the sender is told.
    Flush(Sender<()>),
}

static PIPE: OnceLock<Sender<Item>> = OnceLock::new();

/// Line buffers the writer has written, back to the loggers. A line freed by the writer thread
/// stays in that thread's cache of the allocator, so each new line was a fresh allocation: half
/// of what a lifecycle line cost the pump (#23). Bounded in number and in size.
static SPARE: OnceLock<Spare> = OnceLock::new();
type Spare = (Sender<Vec<u8>>, Receiver<Vec<u8>>);
const SPARE_LINES: usize = 256;
/// A buffer grown past this by a long line is freed, not kept.
const SPARE_LINE_BYTES: usize = 1024;

fn spare() -> &'static Spare {
    SPARE.get_or_init(|| bounded(SPARE_LINES))
}

/// A `Write` for the logger: each write is one formatted record.
pub struct LogPipe;

impl Write for LogPipe {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match PIPE.get() {
            Some(tx) => {
                let mut line =
                    spare().1.try_recv().unwrap_or_else(|_| Vec::with_capacity(buf.len().max(256)));
                line.extend_from_slice(buf);
                if tx.send(Item::Line(line)).is_err() {
                    std::io::stderr().write_all(buf)?;
                }
            }
            // No writer (tests, or after it ended): straight to stderr.
            _ => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where the lines go.
struct Sink {
    out: std::io::BufWriter<Box<dyn Write + Send>>,
    path: Option<std::path::PathBuf>,
}

impl Sink {
    fn to(&mut self, file: std::fs::File, path: std::path::PathBuf) {
        let _ = self.out.flush();
        self.out = std::io::BufWriter::with_capacity(64 * 1024, Box::new(file));
        self.path = Some(path);
    }

    /// Opens the file again under its name; if that fails the old one is kept and says why.
    fn reopen(&mut self) {
        let Some(path) = self.path.clone() else { return };
        match open(&path) {
            Ok(f) => self.to(f, path),
            Err(e) => {
                let _ =
                    writeln!(self.out, "[log] cannot reopen {} ({e}); still writing here", path.display());
            }
        }
    }
}

/// A log file msgx creates is its owner's and its group's to read (0640, less the umask), as
/// logrotate's `create 0640 msgx msgx` makes the next one: a message's text may name people.
fn open(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().create(true).append(true).mode(0o640).open(path)
}

fn writer(rx: Receiver<Item>) {
    let mut sink =
        Sink { out: std::io::BufWriter::with_capacity(64 * 1024, Box::new(std::io::stderr())), path: None };
    for item in rx.iter() {
        let mut next = Some(item);
        while let Some(item) = next.take() {
            match item {
                Item::Line(mut l) => {
                    let _ = sink.out.write_all(&l);
                    if l.capacity() <= SPARE_LINE_BYTES {
                        l.clear();
                        let _ = spare().0.try_send(l);
                    }
                }
                Item::To(file, path) => sink.to(file, path),
                Item::Reopen => sink.reopen(),
                Item::Flush(done) => {
                    let _ = sink.out.flush();
                    let _ = done.send(());
                }
            }
            next = rx.try_recv().ok();
        }
        // Caught up: what was logged is in the file now.
        let _ = sink.out.flush();
    }
}

/// From now on the lines go to `path` (created if need be, appended to). Refused when it cannot
/// be opened, naming the file.
pub fn to_file(path: &std::path::Path) -> std::io::Result<()> {
    let f = open(path)?;
    if let Some(tx) = PIPE.get() {
        let _ = tx.send(Item::To(f, path.to_path_buf()));
    }
    Ok(())
}

/// Opens the log file again under its name (SIGHUP): after logrotate renamed it, the next line
/// goes to a new file. Lines logged before are in the old one.
pub fn reopen() {
    if let Some(tx) = PIPE.get() {
        let _ = tx.send(Item::Reopen);
    }
}

/// Starts the writer thread (once).
pub fn start() {
    let (tx, rx) = bounded(16_384);
    if PIPE.set(tx).is_ok() {
        let _ = thread::Builder::new().name("log".into()).spawn(move || writer(rx));
    }
}

/// Waits until every line logged so far is written (before the process exits).
pub fn flush() {
    if let Some(tx) = PIPE.get() {
        let (done, wait) = bounded(1);
        if tx.send(Item::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(std::time::Duration::from_secs(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn regression_the_log_file_is_created_0640_like_the_ones_logrotate_creates() {
        let path = std::env::temp_dir().join(format!("msgx-logpipe-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&path);
        drop(super::open(&path).unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        std::fs::remove_file(&path).unwrap();
        assert_eq!(mode & !0o640, 0, "no one but the owner and its group reads it: {mode:o}");
        assert_eq!(mode & 0o600, 0o600, "the owner writes it: {mode:o}");
    }
}
