//! One cluster's balancer: the shared immutable part ([`ClusterLb`], built off the hot
//! path on every membership, health or ejection change) and the per-worker [`Picker`].
//!
//! A pick follows Envoy's `LoadBalancerBase::hostSourceToUse`: choose a priority level by
//! the per-level load (by the request hash for ring hash and maglev, so a key sticks to its
//! level); use all of the level's hosts if it is in panic; else, with locality weighting,
//! choose a locality; then let the policy choose within that host set.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::cswrr::Cswrr;
use super::host::Host;
use super::original_dst::{DestinationCache, OriginalDst};
use super::pick_context::PickContext;
use super::policy::{Cursor, SharedPolicy};
use super::priority::{Availability, LevelCounts, PriorityLoad};
use super::resources::ClusterResources;
use super::stats_registry::StatsRegistry;
use crate::config::cluster::lb_policy::DEFAULT_HEALTHY_PANIC_THRESHOLD;
use crate::config::cluster::{LbPolicy, RoundRobinConfig};
use crate::config::endpoint::HealthStatus;
use crate::config::{Cluster, ClusterLoadAssignment};
use crate::telemetry::ClusterStats;

/// How many times a pick is redrawn to avoid hosts this request already tried (Envoy's
/// `host_selection_retry_max_attempts` default is 1; Outrider redraws a few times more,
/// since a redraw costs nanoseconds and a retry on the same failing host costs a request).
pub const PREVIOUS_HOST_REDRAWS: u32 = 3;

/// Hosts and the policy's shared part over them.
#[derive(Debug)]
pub struct HostSet {
    pub hosts: Vec<Arc<Host>>,
    pub policy: SharedPolicy,
}

#[derive(Debug)]
struct Level {
    all: usize,
    healthy: usize,
    degraded: usize,
    /// With locality weighting: (locality weight × availability, healthy set, degraded set).
    localities: Vec<LocalitySets>,
}

#[derive(Debug)]
struct LocalitySets {
    healthy_weight: f64,
    degraded_weight: f64,
    healthy: usize,
    degraded: usize,
}

/// The shared, immutable balancer of one cluster.
#[derive(Debug)]
pub struct ClusterLb {
    pub cluster: String,
    /// What [`Self::policy`] returns.
    policy: Option<LbPolicy>,
    sets: Vec<HostSet>,
    levels: Vec<Level>,
    load: PriorityLoad,
    hash_based: bool,
    hosts: Vec<Arc<Host>>,
    /// Set for ORIGINAL_DST clusters, whose hosts are made per destination.
    original_dst: Option<OriginalDst>,
    /// Circuit-breaker counts, shared by every build of this cluster's balancer.
    resources: Arc<ClusterResources>,
    /// The cluster's stats (kept across rebuilds by the registry).
    pub stats: Arc<ClusterStats>,
}

impl ClusterLb {
    /// Builds the balancer of `cluster` over `assignment`, reusing per-endpoint stats from
    /// `registry`. Hosts failed by an active health check or ejected by outlier detection
    /// count as unhealthy at `now` (see [`Host::coarse_health`]).
    pub fn build(
        cluster: &Cluster,
        assignment: &ClusterLoadAssignment,
        registry: &mut StatsRegistry,
        now: Instant,
    ) -> Self {
        let default_policy = LbPolicy::RoundRobin(RoundRobinConfig::default());
        let (received, locality_weighted, panic_threshold) = match &cluster.load_balancing {
            Some(lb) => (&lb.policy, lb.locality_weighted, lb.healthy_panic_threshold),
            None => (&default_policy, false, DEFAULT_HEALTHY_PANIC_THRESHOLD),
        };
        // The proxy-wide choice replaces a policy the control plane left at a default (a
        // cluster without balancing, ORIGINAL_DST's, has no policy to replace).
        let replaced = registry
            .proxy_lb()
            .filter(|_| cluster.load_balancing.is_some())
            .and_then(|choice| choice.replacing(received));
        let policy = replaced.as_ref().unwrap_or(received);
        let hash_based = SharedPolicy::is_hash_based(policy);
        // With `random_subsetting` the rest of the endpoints are not this sidecar's at all:
        // no host, no stats, no health checks, no connections.
        let subset;
        let assignment = match cluster.load_balancing.as_ref().and_then(|lb| lb.subset_size) {
            Some(size) => {
                subset = super::subset::subset(assignment, size, registry.subset_seed());
                &subset
            }
            None => assignment,
        };
        let health_checked = !cluster.health_checks.is_empty();
        registry.set_health_checks(cluster.health_checks.len());
        // Not collected in place: that would keep the `Host`-sized buffer for the `Arc`s.
        let mut hosts: Vec<Arc<Host>> = Vec::with_capacity(assignment.endpoint_count());
        hosts.extend(registry.hosts(assignment, now).into_iter().map(Arc::new));
        let locality_weights = locality_weights(assignment);

        let mut by_level: BTreeMap<u32, Vec<Arc<Host>>> = BTreeMap::new();
        for host in &hosts {
            by_level.entry(host.priority).or_default().push(host.clone());
        }
        let top = by_level.keys().next_back().copied().unwrap_or(0);
        let mut sets = Vec::new();
        let mut levels = Vec::new();
        let mut counts = Vec::new();
        for priority in 0..=top {
            let all = by_level.remove(&priority).unwrap_or_default();
            let usable = |h: &&Arc<Host>, status: HealthStatus| h.coarse_health(now, health_checked) == status;
            let healthy: Vec<_> = all.iter().filter(|h| usable(h, HealthStatus::Healthy)).cloned().collect();
            let degraded: Vec<_> = all.iter().filter(|h| usable(h, HealthStatus::Degraded)).cloned().collect();
            counts.push(if assignment.weighted_priority_health {
                let weight = |hosts: &[Arc<Host>]| hosts.iter().map(|h| u64::from(h.weight())).sum();
                LevelCounts { healthy: weight(&healthy), degraded: weight(&degraded), total: weight(&all) }
            } else {
                LevelCounts { healthy: healthy.len() as u64, degraded: degraded.len() as u64, total: all.len() as u64 }
            });
            let localities = if locality_weighted && !hash_based {
                locality_sets(
                    &all,
                    &healthy,
                    &degraded,
                    priority,
                    &locality_weights,
                    assignment.overprovisioning_factor,
                )
            } else {
                Vec::new()
            };
            // A list equal to `all` (every host healthy, the usual case; one locality; every
            // host degraded) shares its set, and so do empty lists: a ring, table or
            // least-request list is built once per distinct list, as Envoy builds it, not
            // once per list (3 × `maximum_ring_size` entries per level otherwise, and four
            // sets for a one-locality cluster with locality weighting, as Istio sends it).
            let first = sets.len();
            let all = push_set(&mut sets, policy, all, locality_weighted, &locality_weights, now);
            // A set's policy depends only on its hosts: any equal list of this level shares it.
            let mut share_or_push = |hosts: Vec<Arc<Host>>| match sets
                .get(first..)
                .and_then(|level| level.iter().position(|set| same_hosts(&set.hosts, &hosts)))
            {
                Some(found) => first + found,
                None => push_set(&mut sets, policy, hosts, locality_weighted, &locality_weights, now),
            };
            let healthy = share_or_push(healthy);
            let degraded = share_or_push(degraded);
            let localities = localities
                .into_iter()
                .map(|(hw, dw, h, d)| LocalitySets {
                    healthy_weight: hw,
                    degraded_weight: dw,
                    healthy: share_or_push(h),
                    degraded: share_or_push(d),
                })
                .collect();
            levels.push(Level { all, healthy, degraded, localities });
        }
        sets.shrink_to_fit();
        levels.shrink_to_fit();
        let load = PriorityLoad::compute(&counts, assignment.overprovisioning_factor, panic_threshold);
        let original_dst = cluster.original_dst.as_ref().map(|c| OriginalDst::new(registry.original_dst_hosts(), c));
        let resources = registry.resources();
        let stats = registry.cluster_stats().clone();
        let usable = |status: HealthStatus| {
            hosts.iter().filter(|h| h.coarse_health(now, health_checked) == status).count() as i64
        };
        stats.membership_healthy.set(usable(HealthStatus::Healthy));
        stats.membership_degraded.set(usable(HealthStatus::Degraded));
        stats.membership_total.set(hosts.len() as i64);
        let policy = cluster.load_balancing.as_ref().map(|_| policy.clone());
        Self {
            cluster: cluster.name.clone(),
            policy,
            sets,
            levels,
            load,
            hash_based,
            hosts,
            original_dst,
            resources,
            stats,
        }
    }

    /// The policy that runs: the cluster's, or the proxy-wide choice that replaced it;
    /// `None` for a cluster without one (ORIGINAL_DST: the destination is the endpoint).
    pub fn policy(&self) -> Option<&LbPolicy> {
        self.policy.as_ref()
    }

    /// The per-destination hosts of an ORIGINAL_DST cluster; `None` for other clusters.
    pub fn original_dst(&self) -> Option<&OriginalDst> {
        self.original_dst.as_ref()
    }

    /// Every host of the cluster, in assignment order.
    /// The cluster's circuit-breaker counts.
    pub fn resources(&self) -> &Arc<ClusterResources> {
        &self.resources
    }

    /// How many host sets (each with its policy's ring, table or cursor state) the
    /// balancer holds: what its memory grows with besides the hosts.
    pub fn host_sets(&self) -> usize {
        self.sets.len()
    }

    pub fn hosts(&self) -> &[Arc<Host>] {
        &self.hosts
    }

    pub fn priority_load(&self) -> &PriorityLoad {
        &self.load
    }

    /// The CSWRR host sets whose weights the control runtime must recompute every
    /// `weight_update_period` (empty for other policies). Only sets a pick can reach are
    /// listed: panic flags are fixed per build, so a level's all-hosts set is used only in
    /// panic, and that halves the update work of a healthy cluster.
    pub fn weight_updaters(&self) -> Vec<&Cswrr> {
        let mut used = vec![false; self.sets.len()];
        for (priority, level) in self.levels.iter().enumerate() {
            let mut reachable = if self.load.panic.get(priority).copied().unwrap_or(false) {
                vec![level.all]
            } else {
                vec![level.healthy, level.degraded]
            };
            reachable.extend(level.localities.iter().flat_map(|l| [l.healthy, l.degraded]));
            reachable.into_iter().for_each(|set| used[set] = true);
        }
        self.sets
            .iter()
            .zip(used)
            .filter_map(|(set, used)| match &set.policy {
                SharedPolicy::Cswrr(cswrr) if used && !set.hosts.is_empty() => Some(cswrr),
                _ => None,
            })
            .collect()
    }

    /// Recomputes every CSWRR weight of the cluster at `now` (see [`Cswrr::update_weights`]).
    pub fn update_weights(&self, now: Instant) {
        self.weight_updaters().iter().for_each(|cswrr| cswrr.update_weights(now));
    }
}

/// Whether two host lists are the same hosts in the same order.
fn same_hosts(a: &[Arc<Host>], b: &[Arc<Host>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| Arc::ptr_eq(a, b))
}

/// Locality weights by (priority, locality index), as EDS gave them (1 when unset).
fn locality_weights(assignment: &ClusterLoadAssignment) -> BTreeMap<(u32, usize), f64> {
    let mut weights = BTreeMap::new();
    let mut next: BTreeMap<u32, Vec<&crate::config::endpoint::Locality>> = BTreeMap::new();
    for group in &assignment.localities {
        let seen = next.entry(group.priority).or_default();
        let index = seen.iter().position(|l| **l == group.locality).unwrap_or_else(|| {
            seen.push(&group.locality);
            seen.len() - 1
        });
        weights.insert((group.priority, index), f64::from(group.load_balancing_weight.unwrap_or(1)));
    }
    weights
}

/// One locality's (healthy weight, degraded weight, healthy hosts, degraded hosts).
type LocalityHosts = (f64, f64, Vec<Arc<Host>>, Vec<Arc<Host>>);

/// Per locality of a level: effective weights (Envoy: `locality weight × min(1, overprov ×
/// healthy / total)`) and its healthy and degraded hosts. Localities without a weight take
/// no locality-weighted traffic, as in Envoy.
fn locality_sets(
    all: &[Arc<Host>],
    healthy: &[Arc<Host>],
    degraded: &[Arc<Host>],
    priority: u32,
    weights: &BTreeMap<(u32, usize), f64>,
    overprovisioning: u32,
) -> Vec<LocalityHosts> {
    let count = all.iter().map(|h| h.locality + 1).max().unwrap_or(0);
    (0..count)
        .map(|locality| {
            let of = |hosts: &[Arc<Host>]| -> Vec<Arc<Host>> {
                hosts.iter().filter(|h| h.locality == locality).cloned().collect()
            };
            let total = all.iter().filter(|h| h.locality == locality).count() as f64;
            let (h, d) = (of(healthy), of(degraded));
            let weight = weights.get(&(priority, locality)).copied().unwrap_or(0.0);
            let availability = |n: usize| {
                if total == 0.0 { 0.0 } else { (f64::from(overprovisioning) / 100.0 * n as f64 / total).min(1.0) }
            };
            (weight * availability(h.len()), weight * availability(d.len()), h, d)
        })
        .collect()
}

fn push_set(
    sets: &mut Vec<HostSet>,
    policy: &LbPolicy,
    hosts: Vec<Arc<Host>>,
    locality_weighted: bool,
    locality_weights: &BTreeMap<(u32, usize), f64>,
    now: Instant,
) -> usize {
    let weights = effective_weights(&hosts, locality_weighted, locality_weights);
    let policy = SharedPolicy::build(policy, &hosts, &weights, now);
    sets.push(HostSet { hosts, policy });
    sets.len() - 1
}

/// Host weights as ring hash and maglev use them: with locality weighting,
/// `host_w × (locality_w / Σ locality_w) / Σ host_w in its locality` (Envoy's
/// normalisation); otherwise the host weights.
fn effective_weights(
    hosts: &[Arc<Host>],
    locality_weighted: bool,
    locality_weights: &BTreeMap<(u32, usize), f64>,
) -> Vec<f64> {
    if !locality_weighted {
        return hosts.iter().map(|h| f64::from(h.weight())).collect();
    }
    let mut per_locality: BTreeMap<(u32, usize), f64> = BTreeMap::new();
    for host in hosts {
        *per_locality.entry((host.priority, host.locality)).or_default() += f64::from(host.weight());
    }
    let locality_total: f64 = per_locality.keys().map(|k| locality_weights.get(k).copied().unwrap_or(0.0)).sum();
    hosts
        .iter()
        .map(|h| {
            let key = (h.priority, h.locality);
            let locality = locality_weights.get(&key).copied().unwrap_or(0.0);
            let in_locality = per_locality.get(&key).copied().unwrap_or(1.0);
            if locality_total == 0.0 || in_locality == 0.0 {
                0.0
            } else {
                f64::from(h.weight()) * (locality / locality_total) / in_locality
            }
        })
        .collect()
}

/// A worker's picker for one cluster: cursors per host set and the worker's own RNG.
#[derive(Debug)]
pub struct Picker {
    lb: Arc<ClusterLb>,
    rng: SmallRng,
    cursors: Vec<Option<Cursor>>,
    /// Smooth weighted round robin state over localities, per level.
    locality_current: Vec<Vec<f64>>,
    /// This worker's copies of an ORIGINAL_DST cluster's hosts.
    destinations: DestinationCache,
}

impl Picker {
    pub fn new(lb: Arc<ClusterLb>, seed: u64) -> Self {
        let mut picker = Self {
            lb,
            rng: SmallRng::seed_from_u64(seed),
            cursors: Vec::new(),
            locality_current: Vec::new(),
            destinations: DestinationCache::default(),
        };
        picker.reset();
        picker
    }

    /// The balancer picks are made from.
    pub fn balancer(&self) -> &Arc<ClusterLb> {
        &self.lb
    }

    /// Switches to a rebuilt balancer if `lb` is not the one in use (a pointer comparison).
    pub fn refresh(&mut self, lb: &Arc<ClusterLb>) {
        if !Arc::ptr_eq(&self.lb, lb) {
            self.lb = lb.clone();
            self.reset();
        }
    }

    fn reset(&mut self) {
        self.cursors = (0..self.lb.sets.len()).map(|_| None).collect();
        self.locality_current = self.lb.levels.iter().map(|l| vec![0.0; l.localities.len()]).collect();
        self.destinations = DestinationCache::default();
    }

    /// The host of an ORIGINAL_DST cluster for `destination` (the downstream connection's
    /// original destination, or the address its request header names); `None` when the
    /// cluster is of another type.
    pub fn pick_destination(&mut self, destination: SocketAddr, now: Instant) -> Option<Arc<Host>> {
        let cluster = self.lb.original_dst.as_ref()?;
        Some(self.destinations.pick(cluster, destination, now))
    }

    /// Picks a host, avoiding `ctx.previous` when another usable host exists: the policy
    /// redraws a few times, then the host set is scanned from a random point. The host is
    /// borrowed from the balancer: a pick touches no reference count (with two workers
    /// picking from the same hosts, a count written per pick moves between the cores).
    pub fn pick(&mut self, ctx: &PickContext<'_>) -> Option<&Arc<Host>> {
        let (set, index) = self.pick_untried(ctx)?;
        self.lb.sets.get(set)?.hosts.get(index)
    }

    /// The host set and index of [`pick`](Self::pick)'s host.
    fn pick_untried(&mut self, ctx: &PickContext<'_>) -> Option<(usize, usize)> {
        let tried = |host: &Arc<Host>| ctx.previous.iter().any(|p| Arc::ptr_eq(&p.stats, &host.stats));
        let (mut set, mut index) = self.pick_once(ctx)?;
        if ctx.previous.is_empty() {
            return Some((set, index));
        }
        if !hosts(&self.lb, set).get(index).is_some_and(tried) {
            return Some((set, index));
        }
        for redraw in 1..=PREVIOUS_HOST_REDRAWS {
            // Envoy's host-selection retry: the same hash with the next attempt number
            // (ring hash walks on, maglev perturbs the hash); other policies just redraw.
            let ctx = PickContext { attempt: ctx.attempt + redraw, ..*ctx };
            (set, index) = self.pick_once(&ctx)?;
            if !hosts(&self.lb, set).get(index).is_some_and(tried) {
                return Some((set, index));
            }
        }
        let hosts = hosts(&self.lb, set);
        let start = self.rng.random_range(0..hosts.len().max(1));
        let untried = (0..hosts.len()).map(|i| (start + i) % hosts.len()).find(|&i| !tried(&hosts[i]));
        Some((set, untried.unwrap_or(index)))
    }

    /// One draw: the host set it came from and the host's index in it.
    fn pick_once(&mut self, ctx: &PickContext<'_>) -> Option<(usize, usize)> {
        // Borrow the fields apart: the balancer is read while cursors and RNG change,
        // without touching the `Arc`'s reference count on the hot path.
        let Self { lb, rng, cursors, locality_current, .. } = self;
        let level_hash = match (lb.hash_based, ctx.hash) {
            (true, Some(hash)) => hash,
            _ => rng.random(),
        };
        let (priority, availability) = lb.load.choose(level_hash);
        let level = lb.levels.get(priority)?;
        let by_availability = match availability {
            Availability::Healthy => level.healthy,
            Availability::Degraded => level.degraded,
        };
        let set = if lb.load.panic.get(priority).copied().unwrap_or(false) {
            lb.stats.lb_healthy_panic.inc();
            level.all
        } else if !level.localities.is_empty() {
            let current = locality_current.get_mut(priority)?;
            choose_locality(level, current, availability).unwrap_or(by_availability)
        } else {
            by_availability
        };
        let host_set = lb.sets.get(set)?;
        let cursor = match cursors.get_mut(set) {
            Some(Some(cursor)) => cursor,
            Some(slot) => slot.insert(host_set.policy.cursor(rng)),
            None => return None,
        };
        let index = host_set.policy.pick(&host_set.hosts, cursor, rng, ctx)?;
        (index < host_set.hosts.len()).then_some((set, index))
    }
}

/// The hosts of set `set` (none for a set the balancer does not have).
fn hosts(lb: &ClusterLb, set: usize) -> &[Arc<Host>] {
    lb.sets.get(set).map(|s| s.hosts.as_slice()).unwrap_or_default()
}

/// Smooth weighted round robin over a level's localities (nginx's algorithm: the same
/// long-run shares as Envoy's EDF, interleaved evenly). `current` is the worker's state.
fn choose_locality(level: &Level, current: &mut [f64], availability: Availability) -> Option<usize> {
    let weight = |l: &LocalitySets| match availability {
        Availability::Healthy => l.healthy_weight,
        Availability::Degraded => l.degraded_weight,
    };
    let total: f64 = level.localities.iter().map(weight).sum();
    if total <= 0.0 {
        return None;
    }
    let mut best = None;
    for (i, locality) in level.localities.iter().enumerate() {
        current[i] += weight(locality);
        if weight(locality) > 0.0 && best.is_none_or(|b: usize| current[i] > current[b]) {
            best = Some(i);
        }
    }
    let best = best?;
    current[best] -= total;
    let locality = &level.localities[best];
    Some(match availability {
        Availability::Healthy => locality.healthy,
        Availability::Degraded => locality.degraded,
    })
}
