//! The immutable view of configuration that workers, the admin server and balancers read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

use crate::config::{Cluster, ClusterLoadAssignment, Listener, ResourceType, RouteConfiguration, Secret};

/// A resource as accepted from the control plane (or the bootstrap), with what
/// `/config_dump` shows about it.
#[derive(Debug, Clone)]
pub struct Versioned<T> {
    pub resource: T,
    /// The version the control plane gave it (Delta: the resource version; SotW: the
    /// response's `version_info`). Empty for static resources.
    pub version: String,
    pub last_updated: SystemTime,
    /// The protobuf bytes as received, for `/config_dump`.
    pub raw: Bytes,
}

/// The last accepted `version_info` of a resource type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypeVersion {
    pub version_info: String,
    pub last_updated: Option<SystemTime>,
}

/// Everything the data path serves, at one instant. Never mutated once published.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Increases by one with every publication.
    pub generation: u64,
    /// True once the first complete configuration has been applied (initial LDS and CDS
    /// received, every listener and cluster warm): `/ready` answers 200 from then on.
    pub ready: bool,
    pub listeners: BTreeMap<String, Arc<Versioned<Listener>>>,
    pub routes: BTreeMap<String, Arc<Versioned<RouteConfiguration>>>,
    pub clusters: BTreeMap<String, Arc<Versioned<Cluster>>>,
    /// Endpoints by cluster name. Every served cluster has an entry; a cluster whose EDS
    /// resource never came (initial fetch timed out) has an empty one.
    pub endpoints: BTreeMap<String, Arc<Versioned<ClusterLoadAssignment>>>,
    pub secrets: BTreeMap<String, Arc<Versioned<Secret>>>,
    /// Listeners and clusters accepted but not yet served, waiting for RDS or EDS.
    pub warming_listeners: BTreeMap<String, Arc<Versioned<Listener>>>,
    pub warming_clusters: BTreeMap<String, Arc<Versioned<Cluster>>>,
    pub versions: BTreeMap<ResourceType, TypeVersion>,
}
