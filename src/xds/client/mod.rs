//! The ADS client: one gRPC stream (SotW or Delta) that keeps the store current.
//!
//! It subscribes to LDS and CDS by wildcard and to RDS, EDS and SDS by the names that the
//! accepted listeners and clusters refer to, ACKs what it accepts and NACKs (with each
//! rejected resource and field path) what it refuses, and reconnects with backoff,
//! resuming with the versions it holds. While the control plane is away, the last good
//! configuration keeps being served.

mod delta;
mod node;
mod sds;
mod session;
mod sotw;
mod stats;
pub mod status;
mod timers;
mod transport;
mod validate;
mod workloads;

use std::sync::Arc;

use crate::config::Address;
use crate::config::bootstrap::{AdsConfig, ApiType, Bootstrap, SourceSettings};
use crate::config::cluster::DiscoveryType;
use crate::config::{ConfigError, ResourceType};
use crate::core::backoff::Backoff;
use crate::core::shutdown::Signal;
use crate::pb::envoy::config::core::v3 as core;
use crate::store::{ConfigState, Store, WarmingTimeouts, WorkloadIndex};
use session::Session;
use status::Recovery;

/// Everything the client needs to know about its control plane.
#[derive(Debug, Clone)]
pub struct AdsClientConfig {
    pub api_type: ApiType,
    /// Where the control plane listens (the static cluster's first endpoint).
    pub server: Address,
    pub node: core::Node,
    pub set_node_on_first_message_only: bool,
    pub lds: Option<SourceSettings>,
    pub cds: Option<SourceSettings>,
    /// Seed for the reconnect jitter.
    pub seed: u64,
    /// Where istiod's workload metadata (WDS) goes, when the bootstrap asks for it: the
    /// stream subscribes to it by wildcard (Delta only, as Istio; see `workloads`).
    pub workloads: Option<Arc<WorkloadIndex>>,
}

/// The index istiod's workload metadata fills, when the bootstrap asks for it over Delta.
/// Istio asks for it only with Delta ADS (its agent turns it off for SotW); a SotW stream
/// does not subscribe, and the peer metadata filter's `workload_discovery` finds no one.
fn workload_index(bootstrap: &Bootstrap, api_type: ApiType) -> Option<Arc<WorkloadIndex>> {
    if !bootstrap.workload_discovery {
        return None;
    }
    if api_type == ApiType::Sotw {
        tracing::warn!("workload metadata discovery needs Delta ADS (DELTA_GRPC); not subscribed");
        return None;
    }
    Some(Arc::default())
}

impl AdsClientConfig {
    /// The client configuration a bootstrap asks for, if it has `dynamic_resources`.
    pub fn from_bootstrap(bootstrap: &Bootstrap) -> Result<Option<Self>, ConfigError> {
        let Some(AdsConfig { api_type, cluster_name, set_node_on_first_message_only, lds, cds }) = &bootstrap.ads
        else {
            return Ok(None);
        };
        let cluster = bootstrap.static_clusters.iter().find(|c| &c.name == cluster_name);
        let server = cluster
            .filter(|c| !matches!(c.discovery, DiscoveryType::Eds(_)))
            .and_then(|c| c.load_assignment.as_ref())
            .and_then(|cla| cla.endpoints().next())
            .map(|e| e.address.clone())
            .ok_or_else(|| {
                ConfigError::new(
                    "dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name",
                    format!("static cluster {cluster_name:?} has no endpoint"),
                )
            })?;
        Ok(Some(Self {
            api_type: *api_type,
            server,
            node: node::node_proto(&bootstrap.node),
            set_node_on_first_message_only: *set_node_on_first_message_only,
            lds: *lds,
            cds: *cds,
            seed: seed_from(&bootstrap.node.id),
            workloads: workload_index(bootstrap, *api_type),
        }))
    }

    /// The types that must arrive before the configuration is complete.
    pub fn awaited(&self) -> Vec<ResourceType> {
        let mut awaited = Vec::new();
        if self.cds.is_some() {
            awaited.push(ResourceType::Cluster);
        }
        if self.lds.is_some() {
            awaited.push(ResourceType::Listener);
        }
        awaited
    }

    /// Warming timeouts for listeners. Envoy takes RDS's own `initial_fetch_timeout`;
    /// Outrider takes LDS's, which Istio sets to the same value.
    pub fn warming_timeouts(&self) -> WarmingTimeouts {
        WarmingTimeouts { rds: self.lds.and_then(|l| l.initial_fetch_timeout) }
    }
}

/// A deterministic seed per node, so that jitter differs between proxies but a test run
/// is repeatable.
fn seed_from(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The running client. Owns the accepted configuration; publishes into the store.
pub struct AdsClient {
    config: AdsClientConfig,
    session: Session,
}

impl AdsClient {
    /// A client that will publish into `store`; its SDS streams end with `shutdown`.
    pub fn new(config: AdsClientConfig, state: ConfigState, store: Arc<Store>, shutdown: Signal) -> Self {
        let session = Session::new(state, store, &config, shutdown);
        Self { config, session }
    }

    /// Counts updates and the stream's state in `stats` (Envoy's `cluster_manager.cds.*`,
    /// `listener_manager.lds.*`, `control_plane.connected_state`, …).
    pub fn with_stats(mut self, stats: Arc<crate::telemetry::Stats>) -> Self {
        self.session.stats = stats::XdsStats::new(stats);
        self
    }

    /// Runs until `shutdown` or until the control plane refuses this client for good.
    pub async fn run(mut self, shutdown: Signal) {
        let mut backoff = Backoff::xds(self.config.seed);
        self.session.publish();
        loop {
            let outcome = tokio::select! {
                outcome = self.stream_once(&mut backoff) => outcome,
                _ = shutdown.clone().triggered() => return,
            };
            match outcome {
                Ok(()) => tracing::info!(server = %self.config.server, "ADS stream closed by the control plane"),
                Err(status) => match status::recovery(status.code()) {
                    Recovery::Retry => {
                        tracing::warn!(server = %self.config.server, code = ?status.code(), message = status.message(), "ADS stream failed; reconnecting")
                    }
                    Recovery::GiveUp => {
                        tracing::error!(server = %self.config.server, code = ?status.code(), message = status.message(), "the control plane refuses this client; serving the last good configuration without updates");
                        return;
                    }
                },
            }
            let delay = backoff.next_delay();
            let wake = tokio::time::Instant::now() + delay;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(wake) => break,
                    _ = shutdown.clone().triggered() => return,
                    () = self.session.background() => {}
                }
            }
        }
    }

    async fn stream_once(&mut self, backoff: &mut Backoff) -> Result<(), tonic::Status> {
        let channel = transport::connect(&self.config.server)
            .await
            .map_err(|e| tonic::Status::unavailable(format!("cannot connect: {e}")))?;
        tracing::info!(server = %self.config.server, api = ?self.config.api_type, "ADS stream connecting");
        let connected = self.session.stats.control_plane.connected_state.clone();
        connected.set(1);
        let result = match self.config.api_type {
            ApiType::Sotw => sotw::run(&mut self.session, &self.config, channel, backoff).await,
            ApiType::Delta => delta::run(&mut self.session, &self.config, channel, backoff).await,
        };
        connected.set(0);
        result
    }
}
