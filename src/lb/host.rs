//! A host: an endpoint as the balancers see it, with its shared stats.

use std::sync::Arc;
use std::time::Instant;

use super::endpoint::EndpointStats;
use crate::config::Address;
use crate::config::endpoint::{HealthStatus, LbEndpoint};
use crate::telemetry::ClusterStats;

/// One upstream endpoint of a cluster.
#[derive(Debug, Clone)]
pub struct Host {
    pub endpoint: Arc<LbEndpoint>,
    pub stats: Arc<EndpointStats>,
    pub priority: u32,
    /// Index of its locality within its priority level.
    pub locality: usize,
    /// Its cluster's stats, so that the request path needs no look-up to count.
    pub cluster_stats: Arc<ClusterStats>,
}

impl Host {
    pub fn address(&self) -> &Address {
        &self.endpoint.address
    }

    pub fn weight(&self) -> u32 {
        self.endpoint.weight
    }

    /// The EDS health status.
    pub fn health(&self) -> HealthStatus {
        self.endpoint.health
    }

    /// Envoy's `coarseHealth`: unhealthy when EDS says so, an active health check failed
    /// it (`health_checked`: its cluster has checks, and the endpoint does not disable
    /// them) or outlier detection ejected it at `now`; degraded when EDS or an active check
    /// says so; else healthy.
    pub fn coarse_health(&self, now: Instant, health_checked: bool) -> HealthStatus {
        let health_checked = health_checked && self.endpoint.actively_checked();
        let active = self.stats.health();
        if self.endpoint.health == HealthStatus::Unhealthy
            || (health_checked && active.failed())
            || self.stats.is_ejected(now)
        {
            return HealthStatus::Unhealthy;
        }
        if self.endpoint.health == HealthStatus::Degraded || (health_checked && active.degraded()) {
            return HealthStatus::Degraded;
        }
        HealthStatus::Healthy
    }

    /// The key ring hash and maglev place the host by: `envoy.lb` `hash_key` metadata if
    /// set, else the address as Envoy prints it (`10.0.0.1:80`, `[::1]:80`).
    pub fn hash_key(&self) -> String {
        match &self.endpoint.hash_key {
            Some(key) if !key.is_empty() => key.clone(),
            _ => self.endpoint.address.to_string(),
        }
    }
}
