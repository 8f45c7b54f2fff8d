//! The state of one cluster that outlives its balancers: the stats of each endpoint address
//! (kept across EDS pushes), the hosts an ORIGINAL_DST cluster created on demand and the
//! circuit-breaker counts. A balancer is rebuilt from it at each push.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::endpoint::EndpointStats;
use super::host::Host;
use super::original_dst::OriginalDstHosts;
use super::resources::ClusterResources;
use crate::config::Address;
use crate::config::cluster::ProxyLbPolicy;
use crate::config::endpoint::ClusterLoadAssignment;
use crate::telemetry::ClusterStats;

/// Stats per endpoint address of one cluster, kept across EDS pushes: an endpoint that
/// stays keeps its in-flight count, latency estimate, load report and outlier state.
#[derive(Debug, Default)]
pub struct StatsRegistry {
    /// Sorted by address, without spare capacity: a map's buckets cost more than the
    /// stats handles themselves at a mesh's 10 endpoints per cluster.
    by_address: Box<[(Address, Arc<EndpointStats>)]>,
    /// The hosts an ORIGINAL_DST cluster created on demand, kept across rebuilds.
    original_dst: Option<Arc<OriginalDstHosts>>,
    /// Handed to new endpoints' outlier counters: wakes the cluster's detector.
    outlier_wake: Option<Arc<tokio::sync::Notify>>,
    /// The cluster's circuit-breaker counts, kept across rebuilds.
    resources: Arc<ClusterResources>,
    cluster: Arc<ClusterStats>,
    /// Active health checks of the cluster: new endpoints start failed by each.
    health_checks: usize,
    /// This sidecar's identity, for `random_subsetting` (see [`super::subset`]).
    subset_seed: u64,
    /// The balancing policy chosen for the whole proxy, if any.
    proxy_lb: Option<ProxyLbPolicy>,
}

impl StatsRegistry {
    /// A registry whose hosts count into `cluster` (`Default`: stats registered nowhere).
    pub fn for_cluster(cluster: Arc<ClusterStats>) -> Self {
        Self { cluster, ..Self::default() }
    }

    /// Also wakes `wake` when an endpoint's outlier counters reach a consecutive-failure
    /// threshold.
    pub fn with_outlier_wake(mut self, wake: Arc<tokio::sync::Notify>) -> Self {
        self.outlier_wake = Some(wake);
        self
    }

    /// Chooses `random_subsetting` subsets for the sidecar with this seed
    /// ([`super::subset::identity_seed`]).
    pub fn with_subset_seed(mut self, seed: u64) -> Self {
        self.subset_seed = seed;
        self
    }

    pub fn subset_seed(&self) -> u64 {
        self.subset_seed
    }

    /// Serves the clusters whose policy `policy` replaces with it
    /// ([`ProxyLbPolicy::replacing`]).
    pub fn with_proxy_lb(mut self, policy: Option<ProxyLbPolicy>) -> Self {
        self.proxy_lb = policy;
        self
    }

    pub fn proxy_lb(&self) -> Option<ProxyLbPolicy> {
        self.proxy_lb
    }

    /// The number of active health checks the cluster has now (see [`Self::hosts`]).
    pub fn set_health_checks(&mut self, checks: usize) {
        self.health_checks = checks;
    }

    pub fn cluster_stats(&self) -> &Arc<ClusterStats> {
        &self.cluster
    }

    /// The hosts of `assignment`, reusing the stats of addresses already known and
    /// forgetting addresses that left (new ones start failed by the cluster's active
    /// health checks, if any). Linear in the number of endpoints.
    pub fn hosts(&mut self, assignment: &ClusterLoadAssignment, now: Instant) -> Vec<Host> {
        let mut next: Vec<(Address, Arc<EndpointStats>)> = Vec::with_capacity(assignment.endpoint_count());
        // Stats made in this call, for an address listed twice (it shares them).
        let mut made: HashMap<&Address, Arc<EndpointStats>> = HashMap::new();
        let mut hosts = Vec::with_capacity(assignment.endpoint_count());
        let mut locality_index: HashMap<(u32, &crate::config::endpoint::Locality), usize> = HashMap::new();
        for group in &assignment.localities {
            let per_priority = locality_index.iter().filter(|((p, _), _)| *p == group.priority).count();
            let locality = *locality_index.entry((group.priority, &group.locality)).or_insert(per_priority);
            for endpoint in &group.endpoints {
                let stats = match self.known(&endpoint.address) {
                    Some(stats) => stats.clone(),
                    None => made
                        .entry(&endpoint.address)
                        .or_insert_with(|| Arc::new(self.new_stats(now, endpoint.actively_checked())))
                        .clone(),
                };
                next.push((endpoint.address.clone(), stats.clone()));
                hosts.push(Host {
                    endpoint: endpoint.clone(),
                    stats,
                    priority: group.priority,
                    locality,
                    cluster_stats: self.cluster.clone(),
                });
            }
        }
        next.sort_by(|a, b| a.0.cmp(&b.0));
        next.dedup_by(|a, b| a.0 == b.0);
        let changed = next.len() != self.by_address.len() || next.iter().zip(&self.by_address).any(|(a, b)| a.0 != b.0);
        if changed {
            self.cluster.membership_change.inc();
        }
        self.by_address = next.into_boxed_slice();
        hosts
    }

    /// The stats kept for `address`, if it is known.
    fn known(&self, address: &Address) -> Option<&Arc<EndpointStats>> {
        let found = self.by_address.binary_search_by(|(known, _)| known.cmp(address)).ok()?;
        self.by_address.get(found).map(|(_, stats)| stats)
    }

    /// The cluster's circuit-breaker counts (the same across rebuilds).
    pub fn resources(&self) -> Arc<ClusterResources> {
        self.resources.clone()
    }

    /// `checked`: the endpoint does not disable active health checks (those that do are
    /// never probed, so never start failed).
    fn new_stats(&self, now: Instant, checked: bool) -> EndpointStats {
        let stats = match &self.outlier_wake {
            Some(wake) => EndpointStats::with_outlier_wake(now, wake.clone()),
            None => EndpointStats::new(now),
        };
        if self.health_checks > 0 && checked { stats.failed_by_health_checks(self.health_checks) } else { stats }
    }

    /// The on-demand hosts of an ORIGINAL_DST cluster, the same across rebuilds.
    pub fn original_dst_hosts(&mut self) -> Arc<OriginalDstHosts> {
        let cluster = &self.cluster;
        self.original_dst.get_or_insert_with(|| Arc::new(OriginalDstHosts::new(cluster.clone()))).clone()
    }

    pub fn len(&self) -> usize {
        self.by_address.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_address.is_empty()
    }
}
