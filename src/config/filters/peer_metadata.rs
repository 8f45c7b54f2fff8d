//! Istio's peer metadata exchange (`io.istio.http.peer_metadata.Config`, istiod's
//! `istio.metadata_exchange` HTTP filter): how a sidecar learns which workload is at the
//! other end of a request, and tells that workload who it is. The workload facts are the
//! node metadata keys Istio exchanges ([`WorkloadMetadata`]).

use std::collections::BTreeMap;

/// The filter's settings. Discovery reads (and removes) the peer's headers; propagation
/// adds this proxy's own.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PeerMetadata {
    /// `downstream_discovery` has `istio_headers`: the request's `x-envoy-peer-metadata`.
    pub downstream_discovery: bool,
    /// `downstream_discovery` has `workload_discovery`: a request whose headers named no
    /// peer is from the workload at the connection's peer address, as istiod's workload
    /// metadata (WDS) names it (an ambient workload behind ztunnel; over HBONE, the tunnel's
    /// source). Headers are consulted first, as istiod lists them.
    pub downstream_workload_discovery: bool,
    /// `upstream_discovery` has `istio_headers`: the response's `x-envoy-peer-metadata`.
    pub upstream_discovery: bool,
    /// `downstream_propagation` has `istio_headers`: this proxy's metadata on the response,
    /// when the request carried the peer's.
    pub downstream_propagation: bool,
    /// `upstream_propagation` has `istio_headers`: this proxy's metadata on every request
    /// sent upstream.
    pub upstream_propagation: bool,
    /// `additional_labels`: node labels exchanged besides Istio's standard ones.
    pub additional_labels: Vec<String>,
    /// `shared_with_upstream`: the downstream peer found here crosses to an internal
    /// listener with the request (a waypoint's `connect_terminate` hands the tunnel's
    /// caller to `main_internal`, whose telemetry names it).
    pub shared_with_upstream: bool,
    /// The older form (the built-in `envoy.wasm.metadata_exchange` plugin): both
    /// discoveries, and propagation by the listener's direction — upstream unless
    /// inbound, downstream unless outbound. The four flags above are then unused.
    pub by_direction: bool,
}

impl PeerMetadata {
    /// The settings on a listener that is `inbound` or not.
    pub fn for_direction(&self, inbound: bool) -> Self {
        if !self.by_direction {
            return self.clone();
        }
        Self {
            downstream_discovery: true,
            downstream_workload_discovery: false,
            upstream_discovery: true,
            downstream_propagation: inbound,
            upstream_propagation: !inbound,
            additional_labels: self.additional_labels.clone(),
            shared_with_upstream: false,
            by_direction: false,
        }
    }
}

/// A workload as Istio's metadata exchange describes it: the node metadata keys Istio
/// keeps (`extractNodeFlatBufferFromStruct`), nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct WorkloadMetadata {
    /// `NAME`: the pod.
    pub name: String,
    pub namespace: String,
    /// `OWNER`: `kubernetes://apis/apps/v1/namespaces/<ns>/deployments/<name>`.
    pub owner: String,
    pub workload_name: String,
    pub istio_version: String,
    pub mesh_id: String,
    pub cluster_id: String,
    /// `LABELS`: `app`, `version`, `service.istio.io/canonical-name`, …
    pub labels: BTreeMap<String, String>,
    pub platform_metadata: BTreeMap<String, String>,
    /// `APP_CONTAINERS`, comma-separated on the wire.
    pub app_containers: Vec<String>,
}

impl WorkloadMetadata {
    /// Reads the Istio keys of a node's metadata (the bootstrap's `node.metadata`); other
    /// keys are not exchanged. `additional_labels` are taken from `LABELS` too when set.
    pub fn from_node_metadata(metadata: &serde_json::Map<String, serde_json::Value>) -> Self {
        let text = |key: &str| metadata.get(key).and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
        let map = |key: &str| -> BTreeMap<String, String> {
            metadata
                .get(key)
                .and_then(serde_json::Value::as_object)
                .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
                .unwrap_or_default()
        };
        let containers = text("APP_CONTAINERS");
        Self {
            name: text("NAME"),
            namespace: text("NAMESPACE"),
            owner: text("OWNER"),
            workload_name: text("WORKLOAD_NAME"),
            istio_version: text("ISTIO_VERSION"),
            mesh_id: text("MESH_ID"),
            cluster_id: text("CLUSTER_ID"),
            labels: map("LABELS"),
            platform_metadata: map("PLATFORM_METADATA"),
            app_containers: if containers.is_empty() {
                Vec::new()
            } else {
                containers.split(',').map(str::to_owned).collect()
            },
        }
    }

    fn label(&self, key: &str) -> &str {
        self.labels.get(key).map_or("", String::as_str)
    }

    /// The `app` label.
    pub fn app(&self) -> &str {
        self.label("app")
    }

    /// The `version` label.
    pub fn version(&self) -> &str {
        self.label("version")
    }

    /// `service.istio.io/canonical-name`.
    pub fn canonical_name(&self) -> &str {
        self.label("service.istio.io/canonical-name")
    }

    /// `service.istio.io/canonical-revision`.
    pub fn canonical_revision(&self) -> &str {
        self.label("service.istio.io/canonical-revision")
    }

    /// The workload's kind as Istio's peer object names it, from the owner's resource
    /// (`…/deployments/<name>` is `deployment`); a pod without an owner Istio knows is `pod`.
    pub fn workload_type(&self) -> &'static str {
        let mut segments = self.owner.rsplit('/');
        let kind = segments.nth(1).unwrap_or_default();
        match kind {
            "deployments" => "deployment",
            "cronjobs" => "cronjob",
            "jobs" => "job",
            _ => "pod",
        }
    }
}

/// This proxy as its peers learn it: the node's `id` (`x-envoy-peer-metadata-id`) and
/// its workload metadata.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LocalNode {
    pub id: String,
    pub workload: WorkloadMetadata,
}
