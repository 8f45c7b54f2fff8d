//! Workers: `--concurrency` threads, each a current-thread tokio runtime with its own
//! listener sockets (SO_REUSEPORT: the kernel spreads connections over workers), its own
//! upstream pools and its own balancer cursors. Nothing here is shared between workers
//! except the published snapshot, the published balancers and per-endpoint stats.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::watch;

use super::clusters::WorkerClusters;
use super::connection_limit::{ConnectionLimits, WorkerLimits};
use super::context::WorkerContext;
use super::filters::FilterChains;
use super::internal_listener;
use super::listener::{self, ListenerManager};
use super::observe::{ProxyTelemetry, WorkerTelemetry};
use super::overload::OverloadState;
use super::shadow::ShadowSlots;
use super::transport::{HandshakeStats, WorkerTls};
use super::upstream::Upstreams;
use crate::core::shutdown::{self, InboundDrain, Signal};
use crate::core::supervisor::Supervisor;
use crate::lb::Balancers;
use crate::store::Store;

/// How long a worker waits for the balancers of a new snapshot before serving it anyway.
const BALANCERS_WAIT: Duration = Duration::from_secs(5);

/// How workers run and stop.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Stop accepting and close connections gracefully (`/drain_listeners`, or the first
    /// step of shutdown); the process keeps running.
    pub drain: Signal,
    /// Drain only the INBOUND listeners (`/drain_listeners?inboundonly`).
    pub inbound_drain: watch::Receiver<InboundDrain>,
    /// Drain (if not yet), wait for open connections up to `drain_time`, then stop.
    pub shutdown: Signal,
    pub drain_time: Duration,
    pub telemetry: ProxyTelemetry,
    /// TLS handshakes completed and refused, by reason, summed over workers.
    pub tls: Arc<HandshakeStats>,
    /// A fixed seed for reproducible draws (worker `i` uses `seed + i`); `None` seeds each
    /// worker from the operating system.
    pub rng_seed: Option<u64>,
    /// Told when a worker's main loop panics.
    pub supervisor: Supervisor,
    /// Set by `POST /healthcheck/fail`: health checks answer 503.
    pub health_check_failed: crate::core::server_fail_flag::HealthCheckFailed,
    /// The overload manager's state (shared by every worker and its refresh loop).
    pub overload: Arc<OverloadState>,
    /// The inbound counts load reports are made from; `None`: no reports.
    pub inbound_load: Option<Arc<super::load_report::InboundLoad>>,
    /// What each direction of an internal connection buffers (`buffer_size_kb`).
    pub internal_buffer_bytes: usize,
}

/// The running workers.
#[derive(Debug)]
pub struct Workers {
    threads: Vec<JoinHandle<()>>,
    synced: Arc<watch::Sender<Vec<u64>>>,
}

impl Workers {
    /// Starts `count` workers serving the store's listeners until `shutdown`.
    pub fn start(
        count: usize,
        store: Arc<Store>,
        balancers: Arc<Balancers>,
        options: WorkerOptions,
    ) -> std::io::Result<Self> {
        let count = count.max(1);
        crate::telemetry::shards::set_workers(count);
        let synced = Arc::new(watch::Sender::new(vec![0; count]));
        let limits = Arc::new(ConnectionLimits::new(options.telemetry.stats.clone()));
        let filters = Arc::new(
            FilterChains::new(options.telemetry.stats.clone())
                .with_node(options.telemetry.node.clone())
                .with_workloads(options.telemetry.workloads.clone()),
        );
        let mut threads = Vec::with_capacity(count);
        for id in 0..count {
            let (store, balancers, options, synced, limits, filters) =
                (store.clone(), balancers.clone(), options.clone(), synced.clone(), limits.clone(), filters.clone());
            let thread = std::thread::Builder::new().name(format!("outrider-worker-{id}")).spawn(move || {
                // A panic in the worker's own loop (not in a connection's task, which tokio
                // contains) would silently stop its share of the traffic.
                let _supervised = options.supervisor.guard(format!("worker {id}"));
                crate::telemetry::shards::enter_worker(id);
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        tracing::error!(worker = id, error = %e, "cannot start worker runtime");
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, run(id, store, balancers, options, synced, Shared { limits, filters }));
            })?;
            threads.push(thread);
        }
        Ok(Self { threads, synced })
    }

    /// The snapshot generation each worker last applied to its listeners: once every entry
    /// reaches a generation, its listeners accept connections on every worker.
    pub fn synced(&self) -> watch::Receiver<Vec<u64>> {
        self.synced.subscribe()
    }

    /// Waits for every worker to stop (after shutdown was triggered).
    pub fn join(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// What all workers share besides the store and balancers.
struct Shared {
    limits: Arc<ConnectionLimits>,
    filters: Arc<FilterChains>,
}

/// One worker: follows the store's listeners until drained, then waits for shutdown.
async fn run(
    id: usize,
    store: Arc<Store>,
    balancers: Arc<Balancers>,
    options: WorkerOptions,
    synced: Arc<watch::Sender<Vec<u64>>>,
    shared: Shared,
) {
    let seed = match options.rng_seed {
        Some(seed) => seed.wrapping_add(id as u64),
        None => rand::random(),
    };
    let (drain, draining) = shutdown::channel();
    let (drain_inbound, draining_inbound) = shutdown::channel();
    let clusters = Rc::new(WorkerClusters::new(
        store.clone(),
        balancers,
        Upstreams::with_tls_stats(options.tls.clone()).on_local_set(),
        WorkerTls::new(options.tls.clone()),
        seed,
    ));
    let context = Rc::new(WorkerContext {
        id,
        clusters,
        rng: RefCell::new(SmallRng::seed_from_u64(seed ^ 0xa5a5)),
        listener_index: RefCell::default(),
        telemetry: WorkerTelemetry::new(options.telemetry.clone()),
        connections: Rc::default(),
        draining,
        draining_inbound,
        chain_drains: RefCell::default(),
        drain_time: options.drain_time,
        connection_limits: WorkerLimits::new(shared.limits),
        filters: shared.filters,
        shadows: ShadowSlots::default(),
        health_check_failed: options.health_check_failed.clone(),
        overload: options.overload.clone(),
        inbound_load: options.inbound_load.clone(),
        load_report: Default::default(),
    });
    // Connections this worker opens to internal listeners are served here, by this worker.
    let weak = Rc::downgrade(&context);
    internal_listener::install(options.internal_buffer_bytes, move |stream, name, carried| {
        let context = weak.upgrade().ok_or("the worker is stopping")?;
        listener::accept_internal(stream, name, carried, &context)
    });
    let mut listeners = ListenerManager::default();
    let mut changes = store.subscribe();
    let mut shutting_down = false;
    let mut inbound_drain = options.inbound_drain.clone();
    // Whether an inbound drain was asked for, and when a graceful one closes the listeners.
    let mut inbound_draining = false;
    let mut close_inbound_at: Option<tokio::time::Instant> = None;
    // The generation whose listeners and pools this worker applied last.
    let mut applied: Option<u64> = None;
    loop {
        let snapshot = store.load();
        // The control runtime builds the balancers of a snapshot's clusters just after it
        // is published. A listener that started accepting before them would answer "no
        // healthy upstream" for clusters that have hosts (Envoy starts listeners after its
        // clusters initialise); the bound only keeps a stalled control runtime from
        // holding the listeners back forever.
        if !context.clusters.balancers.wait_built_from(snapshot.generation, BALANCERS_WAIT).await {
            tracing::warn!(
                worker = id,
                generation = snapshot.generation,
                "balancers not built in time; serving anyway"
            );
        }
        // Only what changed since the snapshot applied last: listener changes are rare, and
        // an EDS push of one cluster drains nothing but that cluster's removed endpoints.
        let changed = applied.and_then(|from| store.changes_since(from, snapshot.generation));
        let drained = match &changed {
            Some(changes) => {
                let names: Vec<String> = changes.listeners.iter().cloned().collect();
                listeners.sync_listeners(&snapshot, &names, &context);
                context.clusters.forget_removed(&snapshot, Some(changes.clusters.iter()));
                context.clusters.upstreams.drain_removed_of(&snapshot, changes.balanced_clusters())
            }
            None => {
                listeners.sync(&snapshot, &context);
                context.clusters.forget_removed(&snapshot, None::<std::iter::Empty<&String>>);
                context.clusters.upstreams.drain_removed(&snapshot)
            }
        };
        applied = Some(snapshot.generation);
        if drained > 0 {
            tracing::debug!(worker = id, drained, "drained pooled connections of removed endpoints");
        }
        synced.send_modify(|generations| generations[id] = snapshot.generation);
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { break },
            changed = inbound_drain.changed(), if !inbound_draining => {
                // A dropped sender asks for nothing: no inbound drain can come any more.
                inbound_draining = true;
                if changed.is_ok() && let InboundDrain::Draining { graceful } = *inbound_drain.borrow_and_update() {
                    drain_inbound.trigger();
                    tracing::info!(worker = id, graceful, "draining inbound listeners");
                    if graceful {
                        close_inbound_at = Some(tokio::time::Instant::now() + options.drain_time);
                    } else {
                        listeners.stop_inbound().await;
                    }
                }
            }
            _ = sleep_until(close_inbound_at), if close_inbound_at.is_some() => {
                close_inbound_at = None;
                listeners.stop_inbound().await;
            }
            _ = options.drain.clone().triggered() => break,
            _ = options.shutdown.clone().triggered() => { shutting_down = true; break },
        }
    }
    // Stop accepting first (closing the sockets refuses new connections), then ask open
    // HTTP connections to finish their requests and close.
    listeners.stop_all().await;
    drain.trigger();
    drain_inbound.trigger();
    tracing::info!(worker = id, open = context.connections.count(), "stopped accepting; draining connections");
    if !shutting_down {
        options.shutdown.clone().triggered().await;
    }
    if tokio::time::timeout(options.drain_time, context.connections.all_ended()).await.is_err() {
        tracing::warn!(worker = id, open = context.connections.count(), "drain time over; closing open connections");
    }
    tracing::debug!(worker = id, "worker stopped");
}

/// Sleeps until `at`; never resolves without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
