//! The immutable view of configuration that workers, the admin server and balancers read.
//!
//! Its maps are persistent (structurally shared B-trees, `imbl::OrdMap`): the next
//! snapshot is the previous one with the changed entries replaced, so publishing after a
//! one-resource change costs O(log N), not a copy of every name. They iterate in key
//! order, as `/config_dump` and the admin pages expect.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

pub use super::changes::Changes;
use super::raw::Raw;
use crate::config::{Cluster, ClusterLoadAssignment, Listener, ResourceType, RouteConfiguration, Secret};

/// A snapshot's map of resources by name.
pub type Resources<T> = imbl::OrdMap<String, Arc<Versioned<T>>>;

/// A resource as accepted from the control plane (or the bootstrap), with what
/// `/config_dump` shows about it.
#[derive(Debug, Clone)]
pub struct Versioned<T> {
    pub resource: T,
    /// The version the control plane gave it (Delta: the resource version; SotW: the
    /// response's `version_info`). Empty for static resources.
    pub version: String,
    pub last_updated: SystemTime,
    /// The protobuf bytes as received (compressed), for `/config_dump`.
    pub raw: Raw,
}

impl<T> AsRef<T> for Versioned<T> {
    fn as_ref(&self) -> &T {
        &self.resource
    }
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
    pub listeners: Resources<Listener>,
    pub routes: Resources<RouteConfiguration>,
    pub clusters: Resources<Cluster>,
    /// Endpoints by cluster name. Every served cluster has an entry; a cluster whose EDS
    /// resource never came (initial fetch timed out) has an empty one.
    pub endpoints: Resources<ClusterLoadAssignment>,
    pub secrets: Resources<Secret>,
    /// Listeners and clusters accepted but not yet served, waiting for RDS or EDS.
    pub warming_listeners: Resources<Listener>,
    pub warming_clusters: Resources<Cluster>,
    pub versions: BTreeMap<ResourceType, TypeVersion>,
    /// What differs from the snapshot of generation `changes.since`. A snapshot built by
    /// hand says nothing (`since: None`): whoever follows it compares everything.
    pub changes: Arc<Changes>,
}
