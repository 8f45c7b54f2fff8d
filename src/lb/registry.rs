//! Every cluster's balancer, as workers read them, and the control-side builder that keeps
//! them in step with the configuration.
//!
//! The builder runs on the control runtime: for each published configuration it rebuilds
//! the balancers whose cluster or endpoints changed (reusing per-endpoint stats) and
//! publishes the map with one `ArcSwap::store`. The map is persistent (`imbl::HashMap`):
//! replacing one cluster's balancer shares every other entry, so a publication costs what
//! changed. Workers load the map once per request and keep their own [`Picker`]s,
//! refreshed by pointer comparison.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::balancer::ClusterLb;
use super::stats_registry::StatsRegistry;
use crate::config::cluster::ProxyLbPolicy;
use crate::config::{Cluster, ClusterLoadAssignment};
use crate::telemetry::{ClusterStats, Stats};

/// A cluster or its endpoints as the configuration snapshot holds them: the builder keeps
/// what each balancer was built from by sharing it, not by a copy.
pub type Shared<T> = Arc<dyn AsRef<T> + Send + Sync>;

/// Balancers by cluster name, as published.
pub type BalancerMap = imbl::HashMap<String, Arc<ClusterLb>>;

/// The published balancers, by cluster name.
#[derive(Debug)]
pub struct Balancers {
    current: ArcSwap<BalancerMap>,
    /// How many maps were published: a worker whose picker saw this publication needs no
    /// look-up in the map (see `proxy::clusters`). Written once per publication, read by
    /// every request: a cache line that stays shared.
    publications: AtomicU64,
    published: watch::Sender<u64>,
    /// The generation of the latest configuration snapshot the balancers were built from.
    built_from: watch::Sender<u64>,
}

impl Default for Balancers {
    fn default() -> Self {
        Self {
            current: ArcSwap::default(),
            publications: AtomicU64::new(0),
            published: watch::Sender::new(0),
            built_from: watch::Sender::new(0),
        }
    }
}

impl Balancers {
    /// A receiver woken on every publication.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.published.subscribe()
    }

    pub fn get(&self, cluster: &str) -> Option<Arc<ClusterLb>> {
        self.current.load().get(cluster).cloned()
    }

    /// Every published balancer (for the admin server and weight updates).
    pub fn all(&self) -> Arc<BalancerMap> {
        self.current.load_full()
    }

    /// Records that the balancers now reflect the configuration snapshot `generation`.
    pub fn mark_built_from(&self, generation: u64) {
        self.built_from.send_if_modified(|built| {
            let newer = generation > *built;
            *built = (*built).max(generation);
            newer
        });
    }

    /// Waits until the balancers reflect snapshot `generation` (or a later one), at most
    /// `limit`; returns whether they do.
    pub async fn wait_built_from(&self, generation: u64, limit: std::time::Duration) -> bool {
        let mut built = self.built_from.subscribe();
        tokio::time::timeout(limit, built.wait_for(|built| *built >= generation)).await.is_ok_and(|r| r.is_ok())
    }

    /// How many maps were published so far. A reader that sees a count sees at least the
    /// map published with it (the map is stored before the count moves).
    pub fn publications(&self) -> u64 {
        self.publications.load(Ordering::Acquire)
    }

    fn publish(&self, map: BalancerMap) {
        self.current.store(Arc::new(map));
        self.publications.fetch_add(1, Ordering::Release);
        self.published.send_modify(|n| *n += 1);
    }
}

/// What a balancer was built from, to tell whether it must be rebuilt.
struct Built {
    cluster: Shared<Cluster>,
    assignment: Shared<ClusterLoadAssignment>,
    lb: Arc<ClusterLb>,
}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Built").field("cluster", &(*self.cluster).as_ref().name).field("lb", &self.lb).finish()
    }
}

impl Built {
    /// A new balancer from what this one was built from (its hosts' health or ejection changed).
    fn rebuild(&mut self, registry: &mut StatsRegistry, now: Instant) {
        self.lb = Arc::new(ClusterLb::build((*self.cluster).as_ref(), (*self.assignment).as_ref(), registry, now));
    }
}

/// The state `cluster` keeps across its balancers, made on first use: its stats registered
/// in `stats`, new endpoints' outlier counters waking `wake`, subsets chosen with the
/// sidecar's seed and policies replaced by its proxy-wide choice (`sidecar`).
/// A function of the builder's fields, not a method, so that a caller can hold another
/// field (the built balancer) at the same time.
fn registry_of<'a>(
    registries: &'a mut HashMap<String, StatsRegistry>,
    stats: &Option<Arc<Stats>>,
    wake: &Arc<tokio::sync::Notify>,
    (seed, proxy_lb): (u64, Option<ProxyLbPolicy>),
    cluster: &str,
) -> &'a mut StatsRegistry {
    registries.entry(cluster.to_owned()).or_insert_with(|| {
        let registry = match stats {
            Some(stats) => StatsRegistry::for_cluster(Arc::new(ClusterStats::register(stats, cluster))),
            None => StatsRegistry::default(),
        };
        registry.with_outlier_wake(wake.clone()).with_subset_seed(seed).with_proxy_lb(proxy_lb)
    })
}

/// Whether `a` and `b` say the same: the same allocation, or equal values.
fn same<T: PartialEq + ?Sized>(a: &Shared<T>, b: &Shared<T>) -> bool {
    Arc::ptr_eq(a, b) || (**a).as_ref() == (**b).as_ref()
}

/// Builds balancers on the control runtime. Owns the per-cluster stats registries.
#[derive(Debug, Default)]
pub struct BalancerBuilder {
    registries: HashMap<String, StatsRegistry>,
    /// Woken by any endpoint's outlier counters reaching a consecutive-failure threshold.
    outlier_wake: Arc<tokio::sync::Notify>,
    built: HashMap<String, Built>,
    /// What was published last (shared with `Balancers` until the next change).
    published: BalancerMap,
    rebuilds: usize,
    compared: usize,
    /// Where cluster stats are registered (`None`: nowhere, for tests).
    stats: Option<Arc<Stats>>,
    /// The sidecar's identity, for `random_subsetting`.
    subset_seed: u64,
    /// The balancing policy chosen for the whole proxy (`node.metadata.OUTRIDER_LB`).
    proxy_lb: Option<ProxyLbPolicy>,
}

impl BalancerBuilder {
    /// A builder that registers each cluster's stats (`cluster.<name>.*`) in `stats`.
    pub fn new(stats: Arc<Stats>) -> Self {
        Self { stats: Some(stats), ..Self::default() }
    }

    /// Chooses `random_subsetting` subsets as the sidecar whose node id is `node_id`.
    pub fn with_identity(mut self, node_id: &str) -> Self {
        self.subset_seed = super::subset::identity_seed(node_id);
        self
    }

    /// Serves the clusters `policy` replaces the policy of with it (see
    /// [`ProxyLbPolicy::replacing`]); what was received stays in the configuration.
    pub fn with_proxy_lb(mut self, policy: Option<ProxyLbPolicy>) -> Self {
        self.proxy_lb = policy;
        self
    }

    fn registry(&mut self, cluster: &str) -> &mut StatsRegistry {
        let sidecar = (self.subset_seed, self.proxy_lb);
        registry_of(&mut self.registries, &self.stats, &self.outlier_wake, sidecar, cluster)
    }

    /// Brings `balancers` in step with `clusters` (every served cluster with its endpoints).
    /// Unchanged clusters keep their balancer; the comparison of endpoint lists is mostly
    /// pointer comparisons, since unchanged endpoints share their allocation. Compares
    /// every cluster: for when what changed is not known.
    pub fn update(
        &mut self,
        clusters: impl IntoIterator<Item = (Shared<Cluster>, Shared<ClusterLoadAssignment>)>,
        balancers: &Balancers,
        now: Instant,
    ) {
        let mut built = HashMap::new();
        for (cluster, assignment) in clusters {
            let name = (*cluster).as_ref().name.clone();
            let previous = self.built.remove(&name);
            let entry = self.settle(previous, cluster, assignment, now);
            built.insert(name, entry);
        }
        self.registries.retain(|name, _| built.contains_key(name));
        self.built = built;
        self.publish_all(balancers);
    }

    /// Brings the balancers of the named clusters in step with what each is now served with
    /// (`None`: no longer served), leaving every other balancer as it is; publishes once.
    /// Returns the clusters whose balancer was built, replaced or removed.
    pub fn update_clusters<'a>(
        &mut self,
        clusters: impl IntoIterator<Item = (&'a str, Option<(Shared<Cluster>, Shared<ClusterLoadAssignment>)>)>,
        balancers: &Balancers,
        now: Instant,
    ) -> Vec<String> {
        let mut changed = Vec::new();
        for (name, served) in clusters {
            let previous = self.built.remove(name);
            let Some((cluster, assignment)) = served else {
                self.registries.remove(name);
                if previous.is_some() {
                    self.published.remove(name);
                    changed.push(name.to_owned());
                }
                continue;
            };
            let before = previous.as_ref().map(|p| p.lb.clone());
            let entry = self.settle(previous, cluster, assignment, now);
            if before.is_none_or(|lb| !Arc::ptr_eq(&lb, &entry.lb)) {
                self.published.insert(name.to_owned(), entry.lb.clone());
                changed.push(name.to_owned());
            }
            self.built.insert(name.to_owned(), entry);
        }
        if !changed.is_empty() {
            balancers.publish(self.published.clone());
        }
        changed
    }

    /// `previous` if it was built from `cluster` and `assignment`, else a new balancer.
    fn settle(
        &mut self,
        previous: Option<Built>,
        cluster: Shared<Cluster>,
        assignment: Shared<ClusterLoadAssignment>,
        now: Instant,
    ) -> Built {
        self.compared += 1;
        match previous {
            Some(mut previous) if same(&previous.cluster, &cluster) && same(&previous.assignment, &assignment) => {
                // Equal values: hold the snapshot's, so the older copies can go.
                (previous.cluster, previous.assignment) = (cluster, assignment);
                previous
            }
            _ => {
                self.rebuilds += 1;
                let registry = self.registry(&(*cluster).as_ref().name);
                let lb = Arc::new(ClusterLb::build((*cluster).as_ref(), (*assignment).as_ref(), registry, now));
                Built { cluster, assignment, lb }
            }
        }
    }

    /// Rebuilds every balancer from what it was built from (health or ejection changed).
    pub fn refresh(&mut self, balancers: &Balancers, now: Instant) {
        let mut built = std::mem::take(&mut self.built);
        for (name, entry) in &mut built {
            let registry = self.registry(name);
            entry.rebuild(registry, now);
        }
        self.built = built;
        self.rebuilds += self.built.len();
        self.publish_all(balancers);
    }

    /// Rebuilds the balancer of one cluster (its hosts' health or ejection changed);
    /// returns whether it has one.
    pub fn refresh_cluster(&mut self, name: &str, balancers: &Balancers, now: Instant) -> bool {
        let Some(entry) = self.built.get_mut(name) else { return false };
        let sidecar = (self.subset_seed, self.proxy_lb);
        let registry = registry_of(&mut self.registries, &self.stats, &self.outlier_wake, sidecar, name);
        entry.rebuild(registry, now);
        self.rebuilds += 1;
        self.published.insert(name.to_owned(), entry.lb.clone());
        balancers.publish(self.published.clone());
        true
    }

    /// Publishes every built balancer (after a pass over all of them).
    fn publish_all(&mut self, balancers: &Balancers) {
        self.published = self.built.iter().map(|(name, entry)| (name.clone(), entry.lb.clone())).collect();
        balancers.publish(self.published.clone());
    }

    /// What the detectors wait on: notified when a worker raises an outlier event.
    pub fn outlier_wake(&self) -> Arc<tokio::sync::Notify> {
        self.outlier_wake.clone()
    }

    /// Balancers built so far (tests pin that unchanged clusters are not rebuilt).
    pub fn rebuilds(&self) -> usize {
        self.rebuilds
    }

    /// Clusters compared with what their balancer was built from, so far (tests pin that
    /// an update compares what changed, not every cluster).
    pub fn compared(&self) -> usize {
        self.compared
    }
}
