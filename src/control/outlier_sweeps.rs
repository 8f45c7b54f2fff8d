//! Outlier detection on the control runtime: one [`Detector`] per cluster that configures
//! it, fed by the workers' events (woken at once) and swept every `interval`. A change of
//! ejections rebuilds that cluster's balancer, so workers stop (or resume) picking the host
//! with their next request.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use tokio::time::Instant;

use crate::lb::outlier::Detector;
use crate::lb::{BalancerMap, Balancers, ClusterLb};
use crate::store::Snapshot;

/// The detectors of every cluster with outlier detection.
#[derive(Debug, Default)]
pub struct OutlierDetectors {
    clusters: HashMap<String, Tracked>,
}

#[derive(Debug)]
struct Tracked {
    detector: Detector,
    next_sweep: Instant,
    /// The balancer whose hosts the detector follows (rebuilt balancer ⇒ resync).
    synced: Arc<ClusterLb>,
}

impl OutlierDetectors {
    /// Follows the configuration and the published balancers: detectors appear, change
    /// their configuration, follow membership, and go with their cluster. Visits every
    /// cluster: for when what changed is not known.
    pub fn sync(&mut self, snapshot: &Snapshot, balancers: &Balancers) {
        let all = balancers.all();
        let mut names: BTreeSet<String> = self.clusters.keys().cloned().collect();
        names.extend(all.keys().cloned());
        self.sync_clusters(snapshot, &all, names.iter());
    }

    /// As [`sync`](Self::sync), for the named clusters only (those whose configuration or
    /// balancer changed).
    pub fn sync_clusters<'a>(
        &mut self,
        snapshot: &Snapshot,
        all: &BalancerMap,
        names: impl IntoIterator<Item = &'a String>,
    ) {
        let now = Instant::now();
        for name in names {
            let config = snapshot.clusters.get(name).and_then(|c| c.resource.outlier_detection.as_ref());
            // Hosts made per connection (ORIGINAL_DST): nothing to eject in favour of.
            let (Some(config), Some(lb)) = (config, all.get(name).filter(|lb| lb.original_dst().is_none())) else {
                self.clusters.remove(name);
                continue;
            };
            let tracked = self.clusters.entry(name.clone()).or_insert_with(|| {
                let mut detector = Detector::new(config.clone(), seed(name));
                detector.sync_hosts(lb.hosts());
                Tracked { detector, next_sweep: now + config.interval, synced: lb.clone() }
            });
            if tracked.detector.config() != config {
                if tracked.detector.config().interval != config.interval {
                    tracked.next_sweep = now + config.interval;
                }
                tracked.detector.set_config(config.clone());
            }
            if !Arc::ptr_eq(&tracked.synced, lb) {
                tracked.detector.sync_hosts(lb.hosts());
                tracked.synced = lb.clone();
            }
        }
    }

    /// Handles pending events and the sweeps that came due; returns the clusters whose
    /// ejections changed.
    pub fn run(&mut self) -> Vec<String> {
        let now = Instant::now();
        let mut changed = Vec::new();
        for (name, tracked) in &mut self.clusters {
            let mut any = tracked.detector.on_events(now.into_std());
            if tracked.next_sweep <= now {
                any |= tracked.detector.sweep(now.into_std());
                tracked.next_sweep = now + tracked.detector.config().interval;
            }
            if any {
                changed.push(name.clone());
            }
        }
        changed
    }

    /// The clusters with a detector.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.clusters.keys()
    }

    /// When the next sweep is due, if any cluster has outlier detection.
    pub fn next_sweep(&self) -> Option<Instant> {
        self.clusters.values().map(|t| t.next_sweep).min()
    }

    /// An active health check of `address` in `cluster` passed: unejects it if configured
    /// so; true if the balancer must be rebuilt.
    pub fn on_health_check_pass(&mut self, cluster: &str, address: &crate::config::Address) -> bool {
        self.clusters.get_mut(cluster).is_some_and(|t| t.detector.on_health_check_pass(address))
    }
}

/// A per-cluster seed, stable across runs, so enforcement and jitter draws differ per
/// cluster but are reproducible.
fn seed(name: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    name.hash(&mut hasher);
    hasher.finish()
}
