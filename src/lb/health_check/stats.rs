//! A health-checked cluster's `cluster.<name>.health_check.*` stats, Envoy's names.

use crate::telemetry::{ClusterStats, Counter, Gauge, Stats};

/// `Default` gives cells registered nowhere (for tests).
#[derive(Debug, Default)]
pub struct HealthCheckStats {
    /// Probes started.
    pub attempt: Counter,
    pub success: Counter,
    /// Failed probes, whatever the reason.
    pub failure: Counter,
    /// Failed probes that were connect failures, resets or timeouts.
    pub network_failure: Counter,
    /// Hosts failed by a data-path signal (`x-envoy-immediate-health-check-fail` on a
    /// proxied response); kept for Envoy's name, not counted yet.
    pub passive_failure: Counter,
    /// Hosts the checks find healthy (summed over the cluster's checks, as Envoy's are).
    pub healthy: Gauge,
    pub degraded: Gauge,
}

impl HealthCheckStats {
    pub fn register(stats: &Stats, cluster: &str) -> Self {
        let scope = ClusterStats::scope(cluster).child("health_check");
        let counter = |name: &str| stats.counter(scope.name(name));
        let gauge = |name: &str| stats.gauge(scope.name(name));
        Self {
            attempt: counter("attempt"),
            success: counter("success"),
            failure: counter("failure"),
            network_failure: counter("network_failure"),
            passive_failure: counter("passive_failure"),
            healthy: gauge("healthy"),
            degraded: gauge("degraded"),
        }
    }
}
