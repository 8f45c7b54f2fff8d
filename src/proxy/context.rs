//! What every task of one worker shares, built by the worker (`worker`) and lent to each
//! of its connections.
//!
//! Everything it holds is defined in modules that do not use it: the code that takes a
//! context (listeners, connections, the connection manager, the TCP proxy) sits above it,
//! and what the context holds and that must reach upstreams on its own (filters' callouts,
//! the gRPC access loggers, shadows) goes through `clusters`, below it.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use rand::rngs::SmallRng;

use super::chain_drain::ChainDrains;
use super::clusters::WorkerClusters;
use super::connection_limit::WorkerLimits;
use super::drain::Connections;
use super::filters::FilterChains;
use super::observe::WorkerTelemetry;
use super::original_dst::ListenerIndex;
use super::overload::OverloadState;
use super::shadow::ShadowSlots;
use crate::core::server_fail_flag::HealthCheckFailed;
use crate::core::shutdown::Signal;

/// What every task of one worker shares. Not `Send`: it never leaves its thread.
pub struct WorkerContext {
    pub id: usize,
    /// The worker's way to upstream clusters and what they are read from: the published
    /// configuration (`clusters.store`), the balancers, its pickers and pools, and its TLS
    /// cache and handshake counts for both directions (`clusters.tls`).
    pub clusters: Rc<WorkerClusters>,
    pub rng: RefCell<SmallRng>,
    /// Listeners by address, for `use_original_dst` hand-offs.
    pub listener_index: RefCell<ListenerIndex>,
    pub telemetry: WorkerTelemetry,
    /// Accepted connections not yet ended (a drain waits for them).
    pub connections: Rc<Connections>,
    /// Triggered when the worker drains: HTTP connections close once their requests are
    /// answered.
    pub draining: Signal,
    /// Triggered when the worker drains its inbound listeners, or all of them: HTTP
    /// connections of INBOUND listeners close once their requests are answered.
    pub draining_inbound: Signal,
    /// The drain signal of each current filter chain: an LDS update that changes or removes
    /// a chain drains the connections it serves.
    pub chain_drains: RefCell<ChainDrains>,
    /// How long a drained connection may take to end before it is closed (`--drain-time-s`).
    pub drain_time: std::time::Duration,
    /// The connection limit filters' counters (shared with the other workers).
    pub connection_limits: WorkerLimits,
    /// The runtime of every filter chain (shared with the other workers).
    pub filters: Arc<FilterChains>,
    /// Mirrored requests in flight (bounded per worker).
    pub shadows: ShadowSlots,
    /// Set by `POST /healthcheck/fail`: health checks answer 503.
    pub health_check_failed: HealthCheckFailed,
    /// The overload manager's actions in force and the global connection count.
    pub overload: Arc<OverloadState>,
    /// The inbound counts of the load reported to mesh callers; `None`: reports are off.
    pub inbound_load: Option<Arc<super::load_report::InboundLoad>>,
    /// This worker's copy of the current report.
    pub load_report: super::load_report::WorkerReport,
}
