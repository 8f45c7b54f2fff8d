//! Endpoints: where a cluster's traffic goes, grouped by locality and priority.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use super::address::Address;

/// Envoy's default overprovisioning factor, in percent (1.4 × 100).
pub const DEFAULT_OVERPROVISIONING_FACTOR: u32 = 140;

/// The endpoints of one cluster (an EDS resource, or a cluster's inline `load_assignment`).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterLoadAssignment {
    pub cluster_name: String,
    pub localities: Vec<LocalityLbEndpoints>,
    /// In percent: 140 means a priority level is considered able to take 1.4× its share.
    pub overprovisioning_factor: u32,
    /// `policy.weighted_priority_health`: count degraded/healthy by weight, not by host.
    pub weighted_priority_health: bool,
}

/// A group of endpoints in one locality at one priority.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalityLbEndpoints {
    pub locality: Locality,
    /// 0 is the highest priority.
    pub priority: u32,
    /// The locality's weight for locality-weighted balancing; `None` when not set.
    pub load_balancing_weight: Option<u32>,
    /// Shared so that an EDS update which leaves an endpoint unchanged keeps the same
    /// allocation: per-endpoint state keyed on it survives (see `store::reconcile`).
    pub endpoints: Vec<Arc<LbEndpoint>>,
}

/// Region / zone / sub-zone. Empty strings mean "not set", as in Envoy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Locality {
    pub region: String,
    pub zone: String,
    pub sub_zone: String,
}

/// One upstream host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LbEndpoint {
    pub address: Address,
    /// `load_balancing_weight`, 1 when unset (Envoy's default); never 0.
    pub weight: u32,
    pub health: HealthStatus,
    /// `metadata.filter_metadata["envoy.lb"].hash_key`: replaces the address as the
    /// endpoint's key on a hash ring.
    pub hash_key: Option<String>,
    /// `metadata.filter_metadata["envoy.transport_socket_match"]` (string values): which of
    /// the cluster's `transport_socket_matches` applies. Istio marks mTLS-capable
    /// endpoints with `tlsMode: istio`.
    pub transport_socket_match: BTreeMap<String, String>,
    pub hostname: String,
    /// `endpoint.health_check_config`, `None` when it sets nothing (Istio sends it empty).
    /// Boxed: at mesh scale almost no endpoint has one.
    pub health_check: Option<Box<EndpointHealthCheck>>,
    /// `endpoint.additional_addresses` (IP addresses, as `address` is then): connections go
    /// to the first of all of them that accepts, by Envoy's happy eyeballs. Istio lists a
    /// dual-stack pod's other address here.
    pub additional_addresses: Box<[SocketAddr]>,
    /// `metadata.filter_metadata` of an endpoint that is an internal address (for the
    /// cluster's internal upstream transport to pass through), as each namespace's JSON
    /// text; `None` for every other endpoint, which nothing passes metadata from.
    pub metadata: Option<Box<EndpointMetadata>>,
}

/// Namespaces of an endpoint's metadata → each one's fields as JSON text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct EndpointMetadata(pub BTreeMap<String, String>);

impl EndpointMetadata {
    /// The fields of `namespace`, if the endpoint has it.
    pub fn namespace(&self, namespace: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
        serde_json::from_str(self.0.get(namespace)?).ok()
    }
}

/// `endpoint.health_check_config`: where and how the cluster's active health checks probe
/// this one endpoint, as Envoy's `resolveHealthCheckAddress` and `hostnameForHealthChecks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct EndpointHealthCheck {
    /// `address` (an IP address): probes go there instead of to the endpoint.
    pub address: Option<SocketAddr>,
    /// `port_value` when not 0: replaces the port of the address probed.
    pub port: Option<u16>,
    /// `hostname` when not empty: the `:authority` of HTTP and gRPC probes, over the
    /// check's own `host` / `authority`.
    pub hostname: String,
    /// `disable_active_health_check`: the endpoint is not probed and active checks never
    /// fail it.
    pub disabled: bool,
}

impl EndpointHealthCheck {
    /// The address to probe for an endpoint at `serving`.
    pub fn probe_address(&self, serving: &Address) -> Address {
        let base = match self.address {
            Some(address) => Address::Socket(address),
            None => serving.clone(),
        };
        match (base, self.port) {
            (Address::Socket(addr), Some(port)) => Address::Socket(SocketAddr::new(addr.ip(), port)),
            (Address::Dns { host, .. }, Some(port)) => Address::Dns { host, port },
            (other, _) => other,
        }
    }
}

impl LbEndpoint {
    /// Every address to connect to, `address` first, when the endpoint has additional
    /// addresses; empty otherwise.
    pub fn connect_addresses(&self) -> Vec<SocketAddr> {
        match (&self.address, self.additional_addresses.is_empty()) {
            (Address::Socket(first), false) => {
                std::iter::once(*first).chain(self.additional_addresses.iter().copied()).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Whether active health checks probe this endpoint (and may fail it).
    pub fn actively_checked(&self) -> bool {
        !self.health_check.as_ref().is_some_and(|h| h.disabled)
    }
}

/// EDS health status, as Envoy sorts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HealthStatus {
    /// UNKNOWN or HEALTHY: takes traffic.
    Healthy,
    /// DEGRADED: takes traffic only when there are not enough healthy hosts.
    Degraded,
    /// UNHEALTHY, DRAINING or TIMEOUT: takes no traffic (unless the cluster is in panic).
    Unhealthy,
}

impl ClusterLoadAssignment {
    /// An assignment with no endpoints (a cluster whose endpoints have not arrived).
    pub fn empty(cluster_name: impl Into<String>) -> Self {
        Self {
            cluster_name: cluster_name.into(),
            localities: Vec::new(),
            overprovisioning_factor: DEFAULT_OVERPROVISIONING_FACTOR,
            weighted_priority_health: false,
        }
    }

    /// Every endpoint, in order of locality then position.
    pub fn endpoints(&self) -> impl Iterator<Item = &Arc<LbEndpoint>> {
        self.localities.iter().flat_map(|l| l.endpoints.iter())
    }

    pub fn endpoint_count(&self) -> usize {
        self.localities.iter().map(|l| l.endpoints.len()).sum()
    }
}
