//! Hosts for the policies' unit tests: `10.0.0.<i>:80`, weight 1, healthy, priority 0.

use std::sync::Arc;
use std::time::Instant;

use super::{EndpointStats, Host};
use crate::config::Address;
use crate::config::endpoint::{HealthStatus, LbEndpoint};

pub(crate) fn hosts(n: usize, now: Instant) -> Vec<Arc<Host>> {
    (0..n)
        .map(|i| {
            let endpoint = LbEndpoint {
                address: Address::Socket(format!("10.0.0.{i}:80").parse().unwrap()),
                weight: 1,
                health: HealthStatus::Healthy,
                hash_key: None,
                transport_socket_match: Default::default(),
                hostname: String::new(),
                health_check: None,
                additional_addresses: Box::default(),
                metadata: None,
            };
            Arc::new(Host {
                endpoint: Arc::new(endpoint),
                stats: Arc::new(EndpointStats::new(now)),
                priority: 0,
                locality: 0,
                cluster_stats: Default::default(),
            })
        })
        .collect()
}

/// [`hosts`] of one cluster: they share one `ClusterStats`, so the cluster's
/// `upstream_rq_active` counts what all of them carry.
pub(crate) fn cluster_hosts(n: usize, now: Instant) -> Vec<Arc<Host>> {
    let cluster = Arc::new(crate::telemetry::ClusterStats::default());
    hosts(n, now).into_iter().map(|host| Arc::new(Host { cluster_stats: cluster.clone(), ..(*host).clone() })).collect()
}

/// A request in flight on `host`, as the proxy counts it: on the host and on its cluster.
pub(crate) fn start(host: &Arc<Host>) -> (super::InFlight, crate::telemetry::GaugeGuard) {
    (host.stats.start(Instant::now()), host.cluster_stats.upstream_rq_active.track())
}
