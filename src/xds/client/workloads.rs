//! istiod's workload metadata (WDS, `istio.workload.Workload`) on the Delta ADS stream,
//! when the bootstrap's `istio.workload.BootstrapExtension` asks for it: subscribed by
//! wildcard, each response applied to the [`WorkloadIndex`] the peer metadata filter reads,
//! and ACKed, or NACKed naming each resource that does not decode (the others applied).

use crate::config::convert::workload::workload;
use crate::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};
use crate::pb::istio_workload::Workload;
use crate::store::{WORKLOAD_TYPE, WorkloadIndex};

/// The stream's first request for the type: a wildcard subscription, resumed from the
/// versions held.
pub fn subscribe(index: &WorkloadIndex) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: WORKLOAD_TYPE.to_owned(),
        initial_resource_versions: index.versions().into_iter().collect(),
        ..Default::default()
    }
}

/// Applies what is valid of `response`; the NACK's detail when something was not.
pub fn apply(index: &WorkloadIndex, response: &DeltaDiscoveryResponse) -> Option<String> {
    let mut problems = Vec::new();
    let mut added = Vec::with_capacity(response.resources.len());
    for resource in &response.resources {
        let Some(any) = &resource.resource else { continue };
        if any.type_url != WORKLOAD_TYPE {
            problems.push(format!("{}: type {} in a {WORKLOAD_TYPE} response", resource.name, any.type_url));
            continue;
        }
        let decoded = <Workload as prost::Message>::decode(any.value.as_slice())
            .map_err(|e| format!("{}: cannot decode: {e}", resource.name))
            .and_then(|proto| workload(proto).map_err(|e| format!("{}: {}: {}", resource.name, e.path(), e.reason())));
        match decoded {
            Ok(found) => added.push((resource.name.clone(), resource.version.clone(), found)),
            Err(problem) => problems.push(problem),
        }
    }
    index.apply(added, &response.removed_resources);
    tracing::debug!(workloads = index.len(), "workload metadata applied");
    (!problems.is_empty()).then(|| problems.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::service::discovery::v3::Resource;
    use crate::pb::google::protobuf::Any;

    fn resource(name: &str, workload: &Workload) -> Resource {
        Resource {
            name: name.into(),
            version: "1".into(),
            resource: Some(Any { type_url: WORKLOAD_TYPE.into(), value: prost::Message::encode_to_vec(workload) }),
            ..Default::default()
        }
    }

    #[test]
    fn valid_workloads_are_applied_and_the_rest_named() {
        let index = WorkloadIndex::default();
        let good = Workload { name: "a".into(), addresses: vec![vec![10, 0, 0, 1]], ..Workload::default() };
        let bad = Workload { name: "b".into(), addresses: vec![vec![10, 0]], ..Workload::default() };
        let response = DeltaDiscoveryResponse {
            resources: vec![resource("Kubernetes/a", &good), resource("Kubernetes/b", &bad)],
            ..Default::default()
        };
        let detail = apply(&index, &response).unwrap();
        assert_eq!(detail, "Kubernetes/b: addresses[0]: 2 bytes are not an IP address");
        assert_eq!(index.peer("10.0.0.1".parse().unwrap()).unwrap().name, "a");
        assert_eq!(subscribe(&index).initial_resource_versions.get("Kubernetes/a").map(String::as_str), Some("1"));
    }
}
