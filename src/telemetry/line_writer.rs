//! Access log output: lines handed to a dedicated thread per destination, so that a
//! worker never waits on a write. When the thread falls behind by more than
//! [`QUEUE_LINES`], new lines are dropped and counted rather than blocking requests.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use super::metrics::Counter;
use super::stats::{Scope, Stats};

/// Lines queued per destination before new ones are dropped.
pub const QUEUE_LINES: usize = 16 * 1024;

/// Where lines go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LogSink {
    Stdout,
    Stderr,
    /// Appended to; created if missing.
    File(PathBuf),
}

/// A handle to one destination's writer thread.
#[derive(Debug, Clone)]
pub struct LineWriter {
    tx: SyncSender<String>,
    dropped: Counter,
}

impl LineWriter {
    /// Queues `line` (which ends with a newline); never blocks.
    pub fn write(&self, line: String) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(line) {
            self.dropped.inc();
        }
    }
}

/// Every destination's writer, each started on first use and kept for the process.
#[derive(Debug, Default)]
pub struct LineWriters {
    writers: Mutex<HashMap<LogSink, LineWriter>>,
    stats: Arc<Stats>,
}

impl LineWriters {
    /// Writers whose dropped lines count in `stats` (`access_log.dropped_lines`).
    pub fn new(stats: Arc<Stats>) -> Self {
        Self { writers: Mutex::default(), stats }
    }

    /// The writer of `sink`, opening the file and starting its thread the first time.
    pub fn get(&self, sink: &LogSink) -> std::io::Result<LineWriter> {
        let mut writers = self.writers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(writer) = writers.get(sink) {
            return Ok(writer.clone());
        }
        let out: Box<dyn Write + Send> = match sink {
            LogSink::Stdout => Box::new(std::io::stdout()),
            LogSink::Stderr => Box::new(std::io::stderr()),
            LogSink::File(path) => Box::new(std::fs::OpenOptions::new().create(true).append(true).open(path)?),
        };
        let (tx, rx) = mpsc::sync_channel(QUEUE_LINES);
        std::thread::Builder::new().name("outrider-access-log".to_owned()).spawn(move || drain(rx, out))?;
        let dropped = self.stats.counter(Scope::outrider().child("access_log").name("dropped_lines"));
        let writer = LineWriter { tx, dropped };
        writers.insert(sink.clone(), writer.clone());
        Ok(writer)
    }
}

/// Writes lines as they come, flushing whenever the queue is empty.
fn drain(rx: Receiver<String>, out: Box<dyn Write + Send>) {
    let mut out = std::io::BufWriter::new(out);
    while let Ok(line) = rx.recv() {
        let mut ok = out.write_all(line.as_bytes()).is_ok();
        while let Ok(line) = rx.try_recv() {
            ok &= out.write_all(line.as_bytes()).is_ok();
        }
        if !(ok && out.flush().is_ok()) {
            tracing::warn!("access log write failed");
        }
    }
}
