//! What a worker reports to: stats handles resolved once per listener and connection
//! manager and cached in the worker (so a connection finds them without touching the
//! stats store's lock), and the cluster stats of requests that found no host.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::config::Listener;
use crate::config::listener::http_connection_manager::{AccessLog, AccessLogSink};
use crate::telemetry::{HttpStats, LineWriter, LineWriters, ListenerStats, LogSink, Stats, Tracing};

/// Shared by every worker.
#[derive(Debug, Clone, Default)]
pub struct ProxyTelemetry {
    pub stats: Arc<Stats>,
    pub line_writers: Arc<LineWriters>,
    /// The tracer, when one is configured (bootstrap or `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub tracing: Option<Tracing>,
}

impl ProxyTelemetry {
    pub fn new(stats: Arc<Stats>, tracing: Option<Tracing>) -> Self {
        Self { line_writers: Arc::new(LineWriters::new(stats.clone())), stats, tracing }
    }
}

/// One worker's cache of resolved handles.
#[derive(Debug, Default)]
pub struct WorkerTelemetry {
    shared: ProxyTelemetry,
    http: RefCell<HashMap<String, Arc<HttpStats>>>,
    listeners: RefCell<HashMap<String, Arc<ListenerStats>>>,
    writers: RefCell<HashMap<AccessLogSink, LineWriter>>,
}

impl WorkerTelemetry {
    pub fn new(shared: ProxyTelemetry) -> Self {
        Self { shared, ..Self::default() }
    }

    pub fn tracing(&self) -> Option<&Tracing> {
        self.shared.tracing.as_ref()
    }

    /// `http.<stat_prefix>.*`, resolved on the first connection of this worker.
    pub fn http(&self, stat_prefix: &str) -> Arc<HttpStats> {
        if let Some(stats) = self.http.borrow().get(stat_prefix) {
            return stats.clone();
        }
        let stats = Arc::new(HttpStats::register(&self.shared.stats, stat_prefix));
        self.http.borrow_mut().insert(stat_prefix.to_owned(), stats.clone());
        stats
    }

    /// `listener.<address>.*`, resolved when the worker starts accepting on it.
    pub fn listener(&self, listener: &Listener) -> Arc<ListenerStats> {
        let address = listener.address.to_string();
        if let Some(stats) = self.listeners.borrow().get(&address) {
            return stats.clone();
        }
        let stats = Arc::new(ListenerStats::register(&self.shared.stats, &address));
        self.listeners.borrow_mut().insert(address, stats.clone());
        stats
    }

    /// The writers of a connection manager's access logs (none when it has none).
    pub fn access_logs(&self, logs: &[AccessLog]) -> Vec<LineWriter> {
        logs.iter().filter_map(|log| self.writer(&log.sink)).collect()
    }

    fn writer(&self, sink: &AccessLogSink) -> Option<LineWriter> {
        if let Some(writer) = self.writers.borrow().get(sink) {
            return Some(writer.clone());
        }
        let target = match sink {
            AccessLogSink::Stdout => LogSink::Stdout,
            AccessLogSink::Stderr => LogSink::Stderr,
            AccessLogSink::File(path) => LogSink::File(path.clone()),
        };
        match self.shared.line_writers.get(&target) {
            Ok(writer) => {
                self.writers.borrow_mut().insert(sink.clone(), writer.clone());
                Some(writer)
            }
            Err(error) => {
                tracing::warn!(?sink, %error, "cannot open the access log");
                None
            }
        }
    }
}
