//! Clusters: a named group of upstream endpoints and how to reach and balance them.
//! (Placeholder: the full model arrives with the cluster converter.)

use std::time::Duration;

use super::endpoint::ClusterLoadAssignment;

#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub name: String,
    pub discovery: DiscoveryType,
    /// Endpoints given inline (STATIC, STRICT_DNS); EDS clusters get theirs from EDS.
    pub load_assignment: Option<ClusterLoadAssignment>,
}

/// How a cluster learns its endpoints.
#[derive(Debug, Clone, PartialEq)]
pub enum DiscoveryType {
    Static,
    StrictDns,
    Eds(EdsConfig),
    OriginalDst,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EdsConfig {
    /// The ClusterLoadAssignment name to subscribe to: `eds_cluster_config.service_name`,
    /// or the cluster's own name when that is empty.
    pub service_name: String,
    /// How long the cluster may wait for its endpoints before it is served without them.
    /// `None` (Envoy's `0s`) waits forever.
    pub initial_fetch_timeout: Option<Duration>,
}

impl Cluster {
    /// The EDS resource this cluster needs, if it is an EDS cluster.
    pub fn eds_service_name(&self) -> Option<&str> {
        match &self.discovery {
            DiscoveryType::Eds(eds) => Some(&eds.service_name),
            _ => None,
        }
    }

    /// The SDS secrets this cluster's upstream TLS refers to.
    pub fn secret_names(&self) -> Vec<&str> {
        Vec::new()
    }
}
