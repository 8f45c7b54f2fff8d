//! Control-plane and server stats with Envoy's names: the ADS connection
//! (`control_plane.connected_state`), each discovery type's updates
//! (`cluster_manager.cds.*`, `listener_manager.lds.*`: `update_attempt`,
//! `update_success`, `update_rejected`, `version` and `version_text`), and the server's
//! state (`server.state`, `server.live`, `server.concurrency`).
//!
//! Envoy keeps RDS, EDS and SDS update stats per resource, under the connection manager's
//! or cluster's scope; Outrider counts them per type under `outrider.xds.<type>.` (and
//! also per cluster, `cluster.<name>.update_success`, for EDS).

use super::metrics::{Counter, Gauge, TextReadout};
use super::stats::{Scope, Stats};

/// One discovery type's update stats.
#[derive(Debug, Clone, Default)]
pub struct SubscriptionStats {
    pub update_attempt: Counter,
    pub update_success: Counter,
    pub update_rejected: Counter,
    /// A hash of the last accepted `version_info` (xxHash64, as Envoy shows a number).
    pub version: Gauge,
    pub version_text: TextReadout,
}

impl SubscriptionStats {
    /// `short` is the type's short name: `cds`, `lds`, `rds`, `eds`, `sds`.
    pub fn register(stats: &Stats, short: &str) -> Self {
        let scope = match short {
            "cds" => Scope::envoy().child("cluster_manager").child("cds"),
            "lds" => Scope::envoy().child("listener_manager").child("lds"),
            other => Scope::outrider().child("xds").child(other),
        };
        Self {
            update_attempt: stats.counter(scope.name("update_attempt")),
            update_success: stats.counter(scope.name("update_success")),
            update_rejected: stats.counter(scope.name("update_rejected")),
            version: stats.gauge(scope.name("version")),
            version_text: stats.text(scope.name("version_text")),
        }
    }

    pub fn accepted(&self, version_info: &str) {
        self.update_attempt.inc();
        self.update_success.inc();
        self.version_text.set(version_info);
        // The gauge is signed; the hash's bits are kept as they are.
        self.version.set(xxhash_rust::xxh64::xxh64(version_info.as_bytes(), 0) as i64);
    }

    pub fn rejected(&self) {
        self.update_attempt.inc();
        self.update_rejected.inc();
    }
}

/// `control_plane.*`.
#[derive(Debug, Clone, Default)]
pub struct ControlPlaneStats {
    /// 1 while the ADS stream is up.
    pub connected_state: Gauge,
}

impl ControlPlaneStats {
    pub fn register(stats: &Stats) -> Self {
        Self { connected_state: stats.gauge(Scope::envoy().child("control_plane").name("connected_state")) }
    }
}

/// Envoy's `server.state` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    Live = 0,
    Draining = 1,
    PreInitializing = 2,
    /// Waiting for the first complete configuration (Envoy's init manager).
    Initializing = 3,
}

impl ServerState {
    /// Envoy's name, as `/ready` and `/server_info` show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Live => "LIVE",
            Self::Draining => "DRAINING",
            Self::PreInitializing => "PRE_INITIALIZING",
            Self::Initializing => "INITIALIZING",
        }
    }
}

/// `server.*`.
#[derive(Debug, Clone, Default)]
pub struct ServerStats {
    pub state: Gauge,
    /// 1 unless draining.
    pub live: Gauge,
    pub concurrency: Gauge,
    /// `listener_manager.workers_started`: 1 once the workers serve the first complete
    /// configuration (istio-agent's readiness reads it), never reset.
    pub workers_started: Gauge,
}

impl ServerStats {
    pub fn register(stats: &Stats) -> Self {
        let scope = Scope::envoy().child("server");
        let server = Self {
            state: stats.gauge(scope.name("state")),
            live: stats.gauge(scope.name("live")),
            concurrency: stats.gauge(scope.name("concurrency")),
            workers_started: stats.gauge(Scope::envoy().child("listener_manager").name("workers_started")),
        };
        server.set_state(ServerState::PreInitializing);
        // Set, as Envoy sets it at start-up: `/stats?usedonly` (istio-agent's readiness
        // query) shows it while it is still 0.
        server.workers_started.set(0);
        server
    }

    pub fn set_state(&self, state: ServerState) {
        self.state.set(state as i64);
        if state == ServerState::Live {
            self.workers_started.set(1);
        }
        self.live.set(i64::from(state != ServerState::Draining));
    }
}
