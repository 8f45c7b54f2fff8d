//! `envoy.config.cluster.v3.Cluster` → [`Cluster`]. (Placeholder.)

use crate::config::cluster::{Cluster, DiscoveryType, EdsConfig};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::pb::envoy::config::cluster::v3 as proto;

pub fn cluster(proto: proto::Cluster, warnings: &mut Warnings) -> Result<Cluster> {
    use proto::cluster::{ClusterDiscoveryType, DiscoveryType as D};
    if proto.name.is_empty() {
        return Err(ConfigError::new("name", "must not be empty"));
    }
    let discovery = match proto.cluster_discovery_type {
        Some(ClusterDiscoveryType::Type(t)) if t == D::Static as i32 => DiscoveryType::Static,
        Some(ClusterDiscoveryType::Type(t)) if t == D::StrictDns as i32 => DiscoveryType::StrictDns,
        Some(ClusterDiscoveryType::Type(t)) if t == D::OriginalDst as i32 => DiscoveryType::OriginalDst,
        Some(ClusterDiscoveryType::Type(t)) if t == D::Eds as i32 => {
            let service_name = proto
                .eds_cluster_config
                .as_ref()
                .map(|e| e.service_name.clone())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| proto.name.clone());
            DiscoveryType::Eds(EdsConfig { service_name, initial_fetch_timeout: None })
        }
        None => DiscoveryType::Static,
        _ => return Err(ConfigError::new("type", "unsupported discovery type")),
    };
    let load_assignment = proto
        .load_assignment
        .map(|cla| super::endpoint::cluster_load_assignment(cla, warnings))
        .transpose()
        .map_err(|e| e.at("load_assignment"))?;
    Ok(Cluster { name: proto.name, discovery, load_assignment })
}
