//! The ADS client's stats: each discovery type's accepted and rejected updates and
//! version, EDS updates per cluster, and whether the stream is up (see
//! [`crate::telemetry::control_plane`] for the names).

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Resource, ResourceType};
use crate::store::Versioned;
use crate::telemetry::{ClusterStats, ControlPlaneStats, Counter, Stats, SubscriptionStats};

#[derive(Debug, Default)]
pub struct XdsStats {
    stats: Arc<Stats>,
    by_type: HashMap<ResourceType, SubscriptionStats>,
    pub control_plane: ControlPlaneStats,
    /// `cluster.<name>.update_success`, held while the cluster's endpoints are.
    eds: HashMap<String, Counter>,
}

impl XdsStats {
    pub fn new(stats: Arc<Stats>) -> Self {
        let by_type =
            ResourceType::ALL.into_iter().map(|t| (t, SubscriptionStats::register(&stats, t.short_name()))).collect();
        let control_plane = ControlPlaneStats::register(&stats);
        Self { stats, by_type, control_plane, eds: HashMap::new() }
    }

    pub fn accepted(
        &mut self,
        resource_type: ResourceType,
        version_info: &str,
        accepted: &[Versioned<Resource>],
        removed: &[String],
    ) {
        if let Some(stats) = self.by_type.get(&resource_type) {
            stats.accepted(version_info);
        }
        self.applied_endpoints(resource_type, accepted, removed);
    }

    /// `cluster.<name>.update_success` of each EDS resource applied, whether or not the
    /// rest of its response was: each EDS cluster has its own subscription in Envoy.
    pub fn applied_endpoints(
        &mut self,
        resource_type: ResourceType,
        accepted: &[Versioned<Resource>],
        removed: &[String],
    ) {
        if resource_type == ResourceType::ClusterLoadAssignment {
            removed.iter().for_each(|name| _ = self.eds.remove(name));
            for resource in accepted {
                let name = resource.resource.name();
                let stats = &self.stats;
                let counter = self
                    .eds
                    .entry(name.to_owned())
                    .or_insert_with(|| stats.counter(ClusterStats::scope(name).name("update_success")));
                counter.inc();
            }
        }
    }

    pub fn rejected(&self, resource_type: ResourceType) {
        if let Some(stats) = self.by_type.get(&resource_type) {
            stats.rejected();
        }
    }
}
