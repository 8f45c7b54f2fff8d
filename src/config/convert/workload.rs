//! `istio.workload.Workload` (istiod's metadata discovery, WDS) → the workload facts Istio's
//! telemetry reports for a peer, and the addresses it is found by.
//!
//! As Istio's proxy reads them: the pod's name, namespace, cluster, the workload it belongs
//! to (its owner's kind from `workload_type`), and its canonical service and revision, which
//! also stand for the `app` and `version` labels.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::config::error::{ConfigError, Result};
use crate::config::filters::peer_metadata::WorkloadMetadata;
use crate::pb::istio_workload::{Workload, WorkloadType};

/// A workload and the addresses its peers are seen from.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscoveredWorkload {
    pub metadata: WorkloadMetadata,
    pub addresses: Vec<IpAddr>,
}

pub fn workload(proto: Workload) -> Result<DiscoveredWorkload> {
    let mut addresses = Vec::with_capacity(proto.addresses.len());
    for (i, bytes) in proto.addresses.iter().enumerate() {
        let address = match bytes.len() {
            4 => <[u8; 4]>::try_from(bytes.as_slice()).map(IpAddr::from).ok(),
            16 => <[u8; 16]>::try_from(bytes.as_slice()).map(IpAddr::from).ok(),
            _ => None,
        };
        let address = address.ok_or_else(|| {
            ConfigError::new(format!("addresses[{i}]"), format!("{} bytes are not an IP address", bytes.len()))
        })?;
        addresses.push(address);
    }
    let kind = WorkloadType::try_from(proto.workload_type)
        .map_err(|_| ConfigError::new("workload_type", format!("unknown workload type {}", proto.workload_type)))?;
    let (api, kind) = match kind {
        WorkloadType::Deployment => ("apps/v1", "deployments"),
        WorkloadType::Cronjob => ("batch/v1", "cronjobs"),
        WorkloadType::Pod => ("v1", "pods"),
        WorkloadType::Job => ("batch/v1", "jobs"),
    };
    let owner = format!("kubernetes://apis/{api}/namespaces/{}/{kind}/{}", proto.namespace, proto.workload_name);
    let mut labels = BTreeMap::new();
    for (key, value) in [
        ("app", &proto.canonical_name),
        ("version", &proto.canonical_revision),
        ("service.istio.io/canonical-name", &proto.canonical_name),
        ("service.istio.io/canonical-revision", &proto.canonical_revision),
    ] {
        if !value.is_empty() {
            labels.insert(key.to_owned(), value.clone());
        }
    }
    let metadata = WorkloadMetadata {
        name: proto.name,
        namespace: proto.namespace,
        owner,
        workload_name: proto.workload_name,
        cluster_id: proto.cluster_id,
        labels,
        ..WorkloadMetadata::default()
    };
    Ok(DiscoveredWorkload { metadata, addresses })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ambient() -> Workload {
        Workload {
            name: "ambient-7d9f-x2".into(),
            namespace: "shop".into(),
            addresses: vec![vec![10, 0, 0, 7], vec![0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]],
            canonical_name: "ambient".into(),
            canonical_revision: "v2".into(),
            workload_type: WorkloadType::Deployment as i32,
            workload_name: "ambient".into(),
            cluster_id: "Kubernetes".into(),
        }
    }

    #[test]
    fn a_workload_is_what_istios_telemetry_reports() {
        let found = workload(ambient()).unwrap();
        assert_eq!(found.addresses, ["10.0.0.7".parse::<IpAddr>().unwrap(), "fd00::7".parse().unwrap()]);
        let peer = &found.metadata;
        assert_eq!((peer.name.as_str(), peer.namespace.as_str()), ("ambient-7d9f-x2", "shop"));
        assert_eq!(peer.owner, "kubernetes://apis/apps/v1/namespaces/shop/deployments/ambient");
        assert_eq!((peer.app(), peer.version()), ("ambient", "v2"));
        assert_eq!((peer.canonical_name(), peer.canonical_revision()), ("ambient", "v2"));
        assert_eq!(peer.cluster_id, "Kubernetes");
        let job = workload(Workload { workload_type: WorkloadType::Job as i32, ..ambient() }).unwrap();
        assert_eq!(job.metadata.owner, "kubernetes://apis/batch/v1/namespaces/shop/jobs/ambient");
    }

    #[test]
    fn what_is_no_address_or_kind_is_refused_with_its_path() {
        let mut bad = ambient();
        bad.addresses.push(vec![1, 2, 3]);
        assert_eq!(workload(bad).unwrap_err().path(), "addresses[2]");
        let error = workload(Workload { workload_type: 9, ..ambient() }).unwrap_err();
        assert_eq!(error.path(), "workload_type");
    }
}
