//! What a worker reports to: stats handles resolved once per listener and connection
//! manager and cached in the worker (so a connection finds them without touching the
//! stats store's lock), and the cluster stats of requests that found no host.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use std::rc::Rc;

use super::access_log::grpc::GrpcLogBuffer;
use super::access_log::otel::{NodeLabels, OtelLogBuffer};
use super::access_log::{ActiveLog, LogOutput};
use super::clusters::WorkerClusters;
use super::tracers::Tracers;
use crate::config::Listener;
use crate::config::filters::peer_metadata::LocalNode;
use crate::config::listener::HttpConnectionManager;
use crate::config::listener::http_connection_manager::{AccessLog, AccessLogSink};
use crate::config::tracing::TracingConfig;
use crate::store::{Store, WorkloadIndex};
use crate::telemetry::line_writer::FLUSH_INTERVAL;
use crate::telemetry::stats::Scope;
use crate::telemetry::{HttpStats, LineWriters, ListenerStats, LogSink, Stats, Tracing, WorkerLineBuffer};

/// Shared by every worker.
#[derive(Debug, Clone, Default)]
pub struct ProxyTelemetry {
    pub stats: Arc<Stats>,
    pub line_writers: Arc<LineWriters>,
    /// The tracer, when one is configured (bootstrap or `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub tracing: Option<Tracing>,
    /// This proxy's node as Istio's telemetry filters name it.
    pub node: Arc<LocalNode>,
    /// The workloads istiod's metadata discovery names, by address (when the bootstrap asks
    /// for it): Istio's peer metadata filter's `workload_discovery`.
    pub workloads: Option<Arc<WorkloadIndex>>,
    /// The connection managers' own providers (`tracing.provider`).
    pub tracers: Arc<Tracers>,
    /// This proxy's node, for the OpenTelemetry access logger's built-in labels.
    pub node_labels: NodeLabels,
}

impl ProxyTelemetry {
    /// Must be called on the control runtime, which carries the providers' exports.
    pub fn new(stats: Arc<Stats>, tracing: Option<Tracing>) -> Self {
        let tracers = Arc::new(Tracers::on_current_runtime());
        Self {
            line_writers: Arc::new(LineWriters::new(stats.clone())),
            stats,
            tracing,
            tracers,
            node: Arc::default(),
            workloads: None,
            node_labels: NodeLabels::default(),
        }
    }

    /// The node Istio's metadata exchange announces and `istio.stats` reports as.
    pub fn with_node(self, node: LocalNode) -> Self {
        Self { node: Arc::new(node), ..self }
    }

    /// Where peers without metadata headers are looked up by address.
    pub fn with_workloads(self, workloads: Option<Arc<WorkloadIndex>>) -> Self {
        Self { workloads, ..self }
    }
}

/// One worker's cache of resolved handles.
#[derive(Debug, Default)]
pub struct WorkerTelemetry {
    shared: ProxyTelemetry,
    http: RefCell<HashMap<String, Arc<HttpStats>>>,
    listeners: RefCell<HashMap<String, Arc<ListenerStats>>>,
    writers: RefCell<HashMap<AccessLogSink, LogOutput>>,
    providers: RefCell<HashMap<TracingConfig, Tracing>>,
}

impl WorkerTelemetry {
    pub fn new(shared: ProxyTelemetry) -> Self {
        Self { shared, ..Self::default() }
    }

    /// This proxy's node cluster and id.
    pub fn local_node(&self) -> super::headers::LocalNodeNames<'_> {
        let labels = &self.shared.node_labels;
        super::headers::LocalNodeNames { cluster: &labels.cluster_name, id: &labels.node_name }
    }

    /// The tracer of a connection manager with a `tracing` block: its own provider's,
    /// else the bootstrap's. Found once per connection.
    pub fn tracer(&self, manager: &HttpConnectionManager, store: &Arc<Store>) -> Option<Tracing> {
        let tracing = manager.tracing.as_ref()?;
        let Some(provider) = &tracing.provider else { return self.shared.tracing.clone() };
        if let Some(tracer) = self.providers.borrow().get(provider.as_ref()) {
            return Some(tracer.clone());
        }
        let tracer = self.shared.tracers.get(provider, store)?;
        self.providers.borrow_mut().insert(provider.as_ref().clone(), tracer.clone());
        Some(tracer)
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

    /// `outrider.listener.<address>.accept_backoff`: accepts that failed for want of
    /// descriptors or memory and made the accept loop back off.
    pub fn accept_backoffs(&self, listener: &Listener) -> crate::telemetry::Counter {
        let address = listener.address.to_string().replace(':', "_");
        let scope = Scope::outrider().child("listener").tagged("envoy_listener_address", &address);
        self.shared.stats.counter(scope.name("accept_backoff"))
    }

    /// A connection manager's access logs with this worker's buffers (none when it has
    /// none). `clusters` is the worker's, for the gRPC loggers' streams.
    pub fn access_logs(&self, logs: &[AccessLog], clusters: &Rc<WorkerClusters>) -> Arc<[ActiveLog]> {
        logs.iter()
            .filter_map(|log| {
                let out = self.writer(&log.sink, clusters)?;
                Some(ActiveLog { format: log.format.clone(), filter: log.filter.clone(), out })
            })
            .collect()
    }

    /// This worker's buffer for `sink`, created (with its flush timer on the worker's
    /// runtime) the first time.
    fn writer(&self, sink: &AccessLogSink, clusters: &Rc<WorkerClusters>) -> Option<LogOutput> {
        if let Some(writer) = self.writers.borrow().get(sink) {
            return Some(writer.clone());
        }
        if let AccessLogSink::Grpc(config) = sink {
            let dropped = self.shared.stats.counter(Scope::outrider().child("access_log").name("grpc_dropped_entries"));
            let out = LogOutput::Grpc(GrpcLogBuffer::start(clusters, config, dropped));
            self.writers.borrow_mut().insert(sink.clone(), out.clone());
            return Some(out);
        }
        if let AccessLogSink::OpenTelemetry(config) = sink {
            let dropped = self.shared.stats.counter(Scope::outrider().child("access_log").name("otel_dropped_entries"));
            let out =
                LogOutput::OpenTelemetry(OtelLogBuffer::start(clusters, config, &self.shared.node_labels, dropped));
            self.writers.borrow_mut().insert(sink.clone(), out.clone());
            return Some(out);
        }
        let target = match sink {
            AccessLogSink::Stdout => LogSink::Stdout,
            AccessLogSink::Stderr => LogSink::Stderr,
            AccessLogSink::File(path) => LogSink::File(path.clone()),
            AccessLogSink::Grpc(_) | AccessLogSink::OpenTelemetry(_) => return None,
        };
        match self.shared.line_writers.get(&target) {
            Ok(writer) => {
                let buffer = Arc::new(WorkerLineBuffer::new(writer));
                // Only connection tasks ask for writers, and they run on the worker's
                // LocalSet: the timer lives there too, and ends with the buffer.
                let timer = Arc::downgrade(&buffer);
                tokio::task::spawn_local(async move {
                    let mut interval = tokio::time::interval(FLUSH_INTERVAL);
                    loop {
                        interval.tick().await;
                        let Some(buffer) = timer.upgrade() else { break };
                        buffer.flush();
                    }
                });
                let out = LogOutput::Lines(buffer);
                self.writers.borrow_mut().insert(sink.clone(), out.clone());
                Some(out)
            }
            Err(error) => {
                tracing::warn!(?sink, %error, "cannot open the access log");
                None
            }
        }
    }
}
