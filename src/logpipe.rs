//! The log's way to the file: formatted lines go through a bounded channel to one writer
//! thread that writes them in batches and flushes whenever it has caught up. A stage never
//! waits for a write syscall per line (one per message at thousands of messages a second), and
//! no line is ever dropped: when the channel is full, the logging thread waits.

use std::io::Write;
use std::sync::OnceLock;
use std::thread;

use crossbeam_channel::{bounded, Receiver, Sender};

enum Item {
    Line(Vec<u8>),
    /// Everything before this is written and flushed; then the sender is told.
    Flush(Sender<()>),
}

static PIPE: OnceLock<Sender<Item>> = OnceLock::new();

/// A `Write` for the logger: each write is one formatted record.
pub struct LogPipe;

impl Write for LogPipe {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match PIPE.get() {
            Some(tx) if tx.send(Item::Line(buf.to_vec())).is_ok() => {}
            // No writer (tests, or after it ended): straight to stderr.
            _ => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn writer(rx: Receiver<Item>) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stderr());
    for item in rx.iter() {
        let mut next = Some(item);
        while let Some(item) = next.take() {
            match item {
                Item::Line(l) => {
                    let _ = out.write_all(&l);
                }
                Item::Flush(done) => {
                    let _ = out.flush();
                    let _ = done.send(());
                }
            }
            next = rx.try_recv().ok();
        }
        // Caught up: what was logged is in the file now.
        let _ = out.flush();
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
