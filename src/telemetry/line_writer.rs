//! Access log output. Each worker appends its lines to a buffer of its own
//! ([`WorkerLineBuffer`]) and hands the whole buffer to the destination's writer thread
//! when it reaches [`FLUSH_BYTES`] or when its flush timer fires ([`FLUSH_INTERVAL`], as
//! Envoy's `file_flush_interval` and `file_flush_min_size_kb` defaults do): a request
//! never waits on a write and never wakes the writer thread by itself. When the thread
//! falls behind by more than [`QUEUE_CHUNKS`] buffers, new ones are dropped and their
//! lines counted rather than blocking requests.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::metrics::Counter;
use super::stats::{Scope, Stats};

/// Buffers queued per destination before new ones are dropped.
pub const QUEUE_CHUNKS: usize = 256;

/// A worker's buffer is handed over once it holds this much (Envoy's 64 KiB).
pub const FLUSH_BYTES: usize = 64 * 1024;

/// A worker's buffer is handed over at least this often (Envoy's one second).
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

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
    tx: SyncSender<Vec<u8>>,
    dropped: Counter,
}

impl LineWriter {
    /// Queues `lines` (whole lines, each ending with a newline); never blocks.
    pub fn write(&self, lines: Vec<u8>) {
        if let Err(TrySendError::Full(lines) | TrySendError::Disconnected(lines)) = self.tx.try_send(lines) {
            let count = lines.iter().filter(|&&b| b == b'\n').count();
            self.dropped.add(count as u64);
        }
    }
}

/// One worker's lines for one destination, waiting to be handed to its writer thread.
/// Only its worker (and that worker's flush timer) touch it, so the lock is never
/// contended; it is a lock only because a response body, which writes the line, must be
/// `Send`.
#[derive(Debug)]
pub struct WorkerLineBuffer {
    lines: Mutex<Vec<u8>>,
    writer: LineWriter,
}

impl WorkerLineBuffer {
    pub fn new(writer: LineWriter) -> Self {
        Self { lines: Mutex::new(Vec::with_capacity(FLUSH_BYTES)), writer }
    }

    /// Appends one line written by `write` (which must end it with a newline), handing
    /// the buffer over when it is full.
    pub fn append(&self, write: impl FnOnce(&mut Vec<u8>)) {
        let mut lines = self.lines.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        write(&mut lines);
        if lines.len() >= FLUSH_BYTES {
            let full = std::mem::replace(&mut *lines, Vec::with_capacity(FLUSH_BYTES));
            drop(lines);
            self.writer.write(full);
        }
    }

    /// Hands over whatever is buffered (the flush timer).
    pub fn flush(&self) {
        let mut lines = self.lines.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if lines.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut *lines);
        drop(lines);
        self.writer.write(pending);
    }
}

impl Drop for WorkerLineBuffer {
    /// A worker that stops hands over its last lines.
    fn drop(&mut self) {
        self.flush();
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
        let (tx, rx) = mpsc::sync_channel(QUEUE_CHUNKS);
        std::thread::Builder::new().name("outrider-access-log".to_owned()).spawn(move || drain(rx, out))?;
        let dropped = self.stats.counter(Scope::outrider().child("access_log").name("dropped_lines"));
        let writer = LineWriter { tx, dropped };
        writers.insert(sink.clone(), writer.clone());
        Ok(writer)
    }
}

/// Writes buffers as they come, flushing whenever the queue is empty.
fn drain(rx: Receiver<Vec<u8>>, out: Box<dyn Write + Send>) {
    let mut out = std::io::BufWriter::new(out);
    while let Ok(lines) = rx.recv() {
        let mut ok = out.write_all(&lines).is_ok();
        while let Ok(lines) = rx.try_recv() {
            ok &= out.write_all(&lines).is_ok();
        }
        if !(ok && out.flush().is_ok()) {
            tracing::warn!("access log write failed");
        }
    }
}
