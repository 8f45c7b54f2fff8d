//! The composition root: reads the bootstrap, wires the store, the ADS client and the admin
//! server onto the control runtime, and owns start-up and shutdown.

#[cfg(feature = "testkit")]
pub mod demo;
pub mod envoy_mode;
#[cfg(feature = "testkit")]
pub mod lab;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admin::{self, AdminState, KeptDocument, ServerInfo};
use crate::config::Address;
use crate::config::bootstrap::{Bootstrap, BootstrapError, TraceCollector, TracingConfig};
use crate::config::filters::peer_metadata::{LocalNode, WorkloadMetadata};
use crate::core::shutdown::{self, InboundDrain, Trigger};
use crate::core::supervisor::Supervisor;
use crate::proxy::WorkerOptions;
use crate::proxy::observe::ProxyTelemetry;
use crate::store::{ConfigState, Store, WarmingTimeouts};
use crate::telemetry::logging::LogControl;
use crate::telemetry::{ServerStats, Stats, Tracing};
use crate::xds::client::{AdsClient, AdsClientConfig};

/// Envoy's default `--drain-time-s`.
pub const DEFAULT_DRAIN_TIME: Duration = Duration::from_secs(600);

/// `outrider run` options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub config: PathBuf,
    /// Worker threads; `None` means every CPU this process may use (cgroup quota included).
    pub concurrency: Option<usize>,
    /// How long a drain waits for open connections before closing them.
    pub drain_time: Duration,
    /// The process's logger, for `/logging`.
    pub logging: Option<LogControl>,
    /// Where to write the admin address once it listens (Envoy's `--admin-address-path`).
    pub admin_address_path: Option<PathBuf>,
    /// Do pilot-agent's job in this process (`outrider sidecar --istio-agent`): serve the
    /// bootstrap's SDS and xDS sockets from istiod's CA and discovery.
    pub agent: Option<crate::agent::AgentSettings>,
}

/// How an in-process Outrider starts.
#[derive(Debug, Clone)]
pub struct StartOptions {
    pub concurrency: usize,
    pub drain_time: Duration,
    pub logging: Option<LogControl>,
    /// Seeds the workers' random draws (weighted clusters, random picks, sampling, retry
    /// jitter) for a reproducible run. `None`, the default, seeds each worker from the
    /// operating system, so that a fleet of sidecars does not draw in lockstep.
    pub rng_seed: Option<u64>,
    /// The admin server's connection cap and header-read timeout.
    pub admin_limits: crate::core::control_server::ServerLimits,
}

impl Default for StartOptions {
    /// Every CPU; a 5 s drain (tests and the demo stop quickly).
    fn default() -> Self {
        Self {
            concurrency: default_concurrency(),
            drain_time: Duration::from_secs(5),
            logging: None,
            rng_seed: None,
            admin_limits: Default::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("admin address {0}: {1}")]
    Admin(String, std::io::Error),
    #[error("cannot start the control runtime: {0}")]
    Runtime(std::io::Error),
    #[error("demo: {0}")]
    Demo(String),
    /// A task the process cannot do without died (see `core::supervisor`).
    #[error("{0}")]
    Supervised(crate::core::supervisor::Failure),
    #[error("lab: {0}")]
    Lab(String),
    #[error("agent: {0}")]
    Agent(#[from] crate::agent::AgentError),
}

/// A started Outrider: what tests and the demo need to reach it.
#[derive(Debug)]
pub struct Running {
    pub store: Arc<Store>,
    /// Every cluster's balancer, kept current with the store.
    pub balancers: Arc<crate::lb::Balancers>,
    pub admin_address: SocketAddr,
    /// Notified by `POST /quitquitquit`.
    pub quit: Arc<tokio::sync::Notify>,
    /// Every stat (what `/stats` shows).
    pub stats: Arc<Stats>,
    /// Stops the listeners and drains connections; `/ready` answers 503 from then on.
    drain: Arc<Trigger>,
    /// Drains the INBOUND listeners only (as `/drain_listeners?inboundonly`).
    inbound_drain: Arc<tokio::sync::watch::Sender<InboundDrain>>,
    /// Lets the workers finish once drained.
    stop_workers: Trigger,
    /// TLS handshakes completed and refused, by reason.
    pub tls: Arc<crate::proxy::HandshakeStats>,
    shutdown: Trigger,
    workers: Option<crate::proxy::Workers>,
    tracing: Option<Tracing>,
    /// The ADS client's and the workers' first failure, if one died.
    pub supervisor: Supervisor,
}

impl Running {
    /// Waits until every worker listens as the current snapshot says.
    pub async fn listeners_ready(&self) {
        let Some(workers) = &self.workers else { return };
        let generation = self.store.load().generation;
        let mut synced = workers.synced();
        let _ = synced.wait_for(|g| g.iter().all(|g| *g >= generation)).await;
    }

    /// Stops the workers, the ADS client and the admin server, and waits for the workers.
    pub fn stop(mut self) {
        self.drain.trigger();
        self.stop_workers.trigger();
        self.shutdown.trigger();
        if let Some(workers) = self.workers.take() {
            workers.join();
        }
    }

    /// A terminating pod's sidecar, as pilot-agent ends Envoy: the INBOUND listeners drain
    /// gracefully for `period` — they still accept, and their HTTP connections are asked to
    /// close after their responses — while outbound traffic flows on, so callers that have
    /// not yet dropped this endpoint are served; then [`drain_and_stop`](Self::drain_and_stop).
    pub async fn terminate_as_pod_sidecar(self, period: Duration) {
        InboundDrain::start(&self.inbound_drain, true);
        tracing::info!(?period, "draining inbound listeners before stopping");
        tokio::time::sleep(period).await;
        self.drain_and_stop().await;
    }

    /// The graceful way out: `/ready` turns 503, listeners stop accepting, requests in
    /// flight are answered (up to the drain time), then the control side stops. The admin
    /// server keeps answering while the workers drain.
    pub async fn drain_and_stop(mut self) {
        self.drain.trigger();
        self.stop_workers.trigger();
        if let Some(workers) = self.workers.take() {
            let _ = tokio::task::spawn_blocking(move || workers.join()).await;
        }
        // Off this thread: the export it waits for runs on this runtime.
        if let Some(tracing) = self.tracing.take() {
            let _ = tokio::task::spawn_blocking(move || tracing.flush()).await;
        }
        self.shutdown.trigger();
    }
}

/// Starts the control-plane side on the current tokio runtime (store, ADS client, admin,
/// balancers) and `concurrency` worker threads serving the listeners.
pub async fn start(bootstrap: Bootstrap) -> Result<Running, AppError> {
    start_with(bootstrap, default_concurrency()).await
}

/// [`start`] with an explicit number of workers.
pub async fn start_with(bootstrap: Bootstrap, concurrency: usize) -> Result<Running, AppError> {
    start_with_options(bootstrap, StartOptions { concurrency, ..StartOptions::default() }).await
}

/// [`start`] with every option.
pub async fn start_with_options(bootstrap: Bootstrap, options: StartOptions) -> Result<Running, AppError> {
    let StartOptions { concurrency, drain_time, logging, rng_seed, admin_limits } = options;
    // Before any stat is registered: histograms keep one copy per worker.
    crate::telemetry::shards::set_workers(concurrency);
    let stats = Arc::new(stats_store(&bootstrap.stats));
    let server_stats = ServerStats::register(&stats);
    server_stats.concurrency.set(concurrency as i64);
    for ignored in &bootstrap.ignored {
        tracing::warn!(path = %ignored.path, "bootstrap field ignored: {}", ignored.what);
    }
    let ads = AdsClientConfig::from_bootstrap(&bootstrap)?;
    let awaited = ads.as_ref().map(AdsClientConfig::awaited).unwrap_or_default();
    let timeouts = ads.as_ref().map(AdsClientConfig::warming_timeouts).unwrap_or(WarmingTimeouts::default());
    let mut state = ConfigState::new(
        bootstrap.static_listeners.clone(),
        bootstrap.static_clusters.clone(),
        bootstrap.static_secrets.clone(),
        awaited,
        timeouts,
    );
    let store = Arc::new(Store::new(state.snapshot()));
    let (trigger, signal) = shutdown::channel();

    let admin_listener = match &bootstrap.admin_address {
        Address::Socket(addr) => {
            tokio::net::TcpListener::bind(addr).await.map_err(|e| AppError::Admin(addr.to_string(), e))?
        }
        other => {
            return Err(AppError::Admin(
                other.to_string(),
                std::io::Error::new(std::io::ErrorKind::Unsupported, "the admin server listens on TCP only"),
            ));
        }
    };
    let admin_address =
        admin_listener.local_addr().map_err(|e| AppError::Admin(bootstrap.admin_address.to_string(), e))?;
    let tracing = tracer(&bootstrap)?;
    let quit = Arc::new(tokio::sync::Notify::new());
    let balancers = Arc::new(crate::lb::Balancers::default());
    let (drain, draining) = shutdown::channel();
    let drain = Arc::new(drain);
    let (inbound_drain, inbound_draining) = tokio::sync::watch::channel(InboundDrain::None);
    let inbound_drain = Arc::new(inbound_drain);
    let (stop_workers, workers_stopping) = shutdown::channel();
    let server = ServerInfo {
        started: Instant::now(),
        concurrency,
        drain_time,
        log_level: logging.as_ref().map(LogControl::current).unwrap_or_default(),
        node_id: bootstrap.node.id.clone(),
        node_cluster: bootstrap.node.cluster.clone(),
    };
    let health_check_failed = crate::core::server_fail_flag::HealthCheckFailed::default();
    let admin_state = AdminState {
        store: store.clone(),
        bootstrap: Arc::new(KeptDocument::new(&bootstrap.document)),
        quit: quit.clone(),
        balancers: balancers.clone(),
        stats: stats.clone(),
        server_stats,
        server: Arc::new(server),
        drain_listeners: drain.clone(),
        drain_inbound: inbound_drain.clone(),
        draining: draining.clone(),
        logging,
        health_check_failed: health_check_failed.clone(),
        allow_paths: bootstrap.admin_allow_paths.clone().into(),
        limits: admin_limits,
    };
    tokio::spawn(admin::serve(admin_listener, admin_state, signal.clone()));
    tracing::info!(%admin_address, "admin server listening");

    let node = bootstrap.node.clone();
    tokio::spawn(crate::control::balancing::keep_balancers(
        store.clone(),
        balancers.clone(),
        stats.clone(),
        node,
        signal.clone(),
    ));
    crate::tls::provider::install_default();
    let tls = Arc::new(crate::proxy::HandshakeStats::default());
    let supervisor = Supervisor::default();
    let failures = stats.counter(crate::telemetry::Scope::outrider().child("supervisor").name("failures"));
    let watched = supervisor.clone();
    tokio::spawn(async move {
        watched.failed().await;
        failures.inc();
    });
    let overload_state = crate::control::overload::state(bootstrap.overload.clone(), &stats);
    tokio::spawn(crate::control::overload::refresh(overload_state.clone(), stats.clone(), signal.clone()));
    // The load reported to mesh callers about the application behind this sidecar.
    let inbound_load = bootstrap.node.load_reports.then(|| crate::proxy::load_report::InboundLoad::new(concurrency));
    if let Some(load) = &inbound_load {
        // In a Kubernetes container the cgroup in sight is the sidecar container's own.
        let in_kubernetes = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
        let cpu = bootstrap.node.app_cpu.resolved(in_kubernetes);
        tokio::spawn(crate::proxy::load_report::keep_reporting(load.clone(), cpu, signal.clone()));
    }
    let worker_options = WorkerOptions {
        internal_buffer_bytes: bootstrap
            .internal_listener_buffer_kb
            .map_or(crate::proxy::internal_listener::DEFAULT_BUFFER_BYTES, |kb| kb as usize * 1024),
        inbound_load,
        drain: draining,
        inbound_drain: inbound_draining,
        shutdown: workers_stopping,
        drain_time,
        telemetry: ProxyTelemetry {
            node_labels: crate::proxy::access_log::otel::NodeLabels {
                node_name: bootstrap.node.id.clone(),
                cluster_name: bootstrap.node.cluster.clone(),
                zone_name: bootstrap.node.locality.zone.clone(),
            },
            ..ProxyTelemetry::new(stats.clone(), tracing.clone())
                .with_node(LocalNode {
                    id: bootstrap.node.id.clone(),
                    workload: WorkloadMetadata::from_node_metadata(&bootstrap.node.metadata),
                })
                .with_workloads(ads.as_ref().and_then(|config| config.workloads.clone()))
        },
        tls: tls.clone(),
        rng_seed,
        supervisor: supervisor.clone(),
        health_check_failed: health_check_failed.clone(),
        overload: overload_state,
    };
    let workers = crate::proxy::Workers::start(concurrency, store.clone(), balancers.clone(), worker_options)
        .map_err(AppError::Runtime)?;

    match ads {
        Some(config) => {
            let client = AdsClient::new(config, state, store.clone(), signal.clone()).with_stats(stats.clone());
            supervisor.watch("the ADS client", tokio::spawn(client.run(signal)));
        }
        None => store.publish(state.snapshot()),
    }
    Ok(Running {
        store,
        balancers,
        admin_address,
        quit,
        stats,
        tls,
        drain,
        inbound_drain,
        stop_workers,
        shutdown: trigger,
        workers: Some(workers),
        tracing,
        supervisor,
    })
}

/// The stats store, with the bootstrap's `stats_matcher` and histogram buckets when it has
/// them (none keeps the checks off every registration).
fn stats_store(config: &crate::config::stats::StatsConfig) -> Stats {
    use crate::config::stats::StatsMatcher;
    let stats = match &config.matcher {
        StatsMatcher::AcceptAll => Stats::default(),
        matcher => {
            let matcher = matcher.clone();
            Stats::with_matcher(move |flat| matcher.rejects(flat))
        }
    };
    if config.histogram_buckets.is_empty() {
        return stats;
    }
    let config = config.clone();
    stats.with_histogram_buckets(move |flat| config.buckets_for(flat).map(<[f64]>::to_vec))
}

/// The tracer the bootstrap's `tracing.http` names, else the one
/// `OTEL_EXPORTER_OTLP_ENDPOINT` names, else none.
fn tracer(bootstrap: &Bootstrap) -> Result<Option<Tracing>, AppError> {
    let (endpoint, service) = match &bootstrap.tracing {
        Some(TracingConfig { collector: TraceCollector::Uri(uri), service_name }) => {
            (uri.clone(), service_name.clone())
        }
        Some(TracingConfig { collector: TraceCollector::Cluster(name), service_name }) => {
            let address = bootstrap
                .static_clusters
                .iter()
                .find(|c| &c.name == name)
                .and_then(|c| c.load_assignment.as_ref())
                .and_then(|cla| cla.endpoints().next())
                .map(|e| e.address.clone());
            match address {
                Some(Address::Socket(address)) => (format!("http://{address}"), service_name.clone()),
                Some(Address::Dns { host, port }) => (format!("http://{host}:{port}"), service_name.clone()),
                _ => {
                    return Err(AppError::Config(crate::config::ConfigError::new(
                        "tracing.http.typed_config.grpc_service.envoy_grpc.cluster_name",
                        format!("{name:?} is not a static cluster with a TCP endpoint"),
                    )));
                }
            }
        }
        Some(TracingConfig { collector: TraceCollector::HttpCluster { .. }, .. }) => {
            return Err(AppError::Config(crate::config::ConfigError::new(
                "tracing.http.typed_config.http_service",
                "the bootstrap's tracer exports over gRPC only (a connection manager's provider may use HTTP)",
            )));
        }
        None => match std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Ok(endpoint) if !endpoint.trim().is_empty() => (endpoint, "outrider".to_owned()),
            _ => return Ok(None),
        },
    };
    match Tracing::otlp(&endpoint, &service) {
        Ok(tracing) => {
            tracing::info!(%endpoint, "exporting traces over OTLP/gRPC");
            Ok(Some(tracing))
        }
        Err(error) => {
            tracing::warn!(%error, "traces are not exported");
            Ok(None)
        }
    }
}

/// `outrider run`: blocks until SIGINT, SIGTERM or `POST /quitquitquit`.
pub fn run(options: RunOptions) -> Result<(), AppError> {
    let bootstrap = Bootstrap::load(&options.config)?;
    run_bootstrap(bootstrap, options)
}

/// [`run`] with a bootstrap already loaded (`options.config` only names it in the log).
pub fn run_bootstrap(bootstrap: Bootstrap, options: RunOptions) -> Result<(), AppError> {
    let concurrency = options.concurrency.unwrap_or_else(default_concurrency);
    tracing::info!(config = %options.config.display(), concurrency, "starting");
    let start = StartOptions {
        concurrency,
        drain_time: options.drain_time,
        logging: options.logging,
        ..StartOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("outrider-control")
        .build()
        .map_err(AppError::Runtime)?;
    runtime.block_on(async {
        // The agent's sockets first: the proxy's first xDS and SDS streams go to them.
        let agent = match options.agent {
            Some(settings) => Some(crate::agent::Agent::start(
                settings,
                std::path::Path::new(crate::inject::bootstrap::AGENT_SDS_SOCKET),
                std::path::Path::new(crate::inject::bootstrap::AGENT_XDS_SOCKET),
            )?),
            None => None,
        };
        let running = start_with_options(bootstrap, start).await?;
        if let Some(agent) = &agent {
            agent.serve_status(running.admin_address).await?;
        }
        if let Some(path) = &options.admin_address_path {
            // Written beside and renamed: a reader never sees half an address.
            let staged = path.with_extension("tmp");
            std::fs::write(&staged, running.admin_address.to_string())
                .and_then(|()| std::fs::rename(&staged, path))
                .map_err(|e| AppError::Admin(path.display().to_string(), e))?;
        }
        crate::core::allocator::release_free_memory();
        let supervisor = running.supervisor.clone();
        let (signalled, failure) = tokio::select! {
            _ = terminate() => { tracing::info!("signal received; draining"); (true, None) }
            _ = running.quit.notified() => { tracing::info!("quitquitquit; draining"); (false, None) }
            failure = supervisor.failed() => (false, Some(failure)),
        };
        if signalled && agent.is_some() {
            running.terminate_as_pod_sidecar(options.drain_time).await;
        } else {
            running.drain_and_stop().await;
        }
        if let Some(agent) = agent {
            agent.stop().await;
        }
        tracing::info!("drained; exiting");
        // A dead ADS client or worker ends the process with an error, so that Kubernetes
        // restarts the pod instead of keeping a sidecar that no longer updates or serves.
        failure.map_or(Ok(()), |failure| Err(AppError::Supervised(failure)))
    })
}

/// The CPUs this process may use; `available_parallelism` honours cgroup CPU quotas.
pub fn default_concurrency() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

pub(crate) async fn terminate() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
