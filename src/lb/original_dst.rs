//! ORIGINAL_DST clusters (Envoy's `CLUSTER_PROVIDED` balancing): the upstream host is where
//! the downstream connection was going before iptables redirected it to the proxy (or the
//! address an HTTP header names). Such a cluster has no endpoints of its own: a host is
//! created the first time a destination is asked for, and a sweep every
//! `cleanup_interval` removes the hosts nothing picked since the previous sweep.
//!
//! The hosts of a cluster are shared by every worker (one [`EndpointStats`] per
//! destination, as for EDS endpoints). Each worker keeps its own cache of them, so a pick
//! for a destination the worker has seen is a hash lookup and one relaxed store. The shared
//! map is copy-on-write behind an `ArcSwap`: a worker meeting a destination for the first
//! time reads it without a lock and, if the host is missing, publishes a copy with it
//! (compare-and-swap, retried if another worker published first). No lock is shared by
//! workers on the request path; a copy per new destination is cheap because the sweep keeps
//! the map to the destinations of one `cleanup_interval`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use std::time::{Duration, Instant};

use super::endpoint::EndpointStats;
use super::host::Host;
use crate::config::Address;
use crate::config::cluster::OriginalDstConfig;
use crate::config::endpoint::{HealthStatus, LbEndpoint};
use crate::telemetry::ClusterStats;

/// The balancing part of one ORIGINAL_DST cluster.
#[derive(Debug)]
pub struct OriginalDst {
    pub hosts: Arc<OriginalDstHosts>,
    /// `upstream_port_override`: replaces the destination's port.
    pub port_override: Option<u16>,
    pub cleanup_interval: Duration,
}

impl OriginalDst {
    pub fn new(hosts: Arc<OriginalDstHosts>, config: &OriginalDstConfig) -> Self {
        Self { hosts, port_override: config.upstream_port_override, cleanup_interval: config.cleanup_interval }
    }

    /// Where a connection for `destination` goes, after the port override.
    pub fn upstream_address(&self, destination: SocketAddr) -> SocketAddr {
        match self.port_override {
            Some(port) => SocketAddr::new(destination.ip(), port),
            None => destination,
        }
    }
}

/// A host created for one destination, and whether it was picked since the last sweep.
#[derive(Debug)]
pub struct DestinationHost {
    pub host: Arc<Host>,
    used: AtomicBool,
}

/// The hosts of one ORIGINAL_DST cluster, shared by every worker. Kept across balancer
/// rebuilds (by the cluster's stats registry), like the stats of EDS endpoints.
#[derive(Debug, Default)]
pub struct OriginalDstHosts {
    hosts: ArcSwap<HashMap<SocketAddr, Arc<DestinationHost>>>,
    /// The cluster's stats, which its hosts count into.
    cluster_stats: Arc<ClusterStats>,
    /// Bumped by every sweep that removes a host: workers then drop their cached copies.
    removals: AtomicU64,
}

impl OriginalDstHosts {
    pub fn new(cluster_stats: Arc<ClusterStats>) -> Self {
        Self { cluster_stats, ..Self::default() }
    }

    /// The host for `address`, created if it is new.
    pub fn get_or_create(&self, address: SocketAddr, now: Instant) -> Arc<DestinationHost> {
        if let Some(host) = self.hosts.load().get(&address) {
            host.used.store(true, Ordering::Relaxed);
            return host.clone();
        }
        let created = Arc::new(DestinationHost::new(address, &self.cluster_stats, now));
        // Keeps the host another worker may have published meanwhile: one per destination.
        let previous = self.hosts.rcu(|hosts| {
            if hosts.contains_key(&address) {
                return hosts.clone();
            }
            let mut copy = HashMap::clone(hosts);
            copy.insert(address, created.clone());
            Arc::new(copy)
        });
        let host = previous.get(&address).cloned().unwrap_or(created);
        host.used.store(true, Ordering::Relaxed);
        host
    }

    /// Removes every host not picked since the previous sweep and clears the marks of the
    /// others (Envoy's cleanup timer). Returns how many were removed. Connections already
    /// made to a removed host finish normally; the next pick for it creates a new host.
    pub fn sweep(&self) -> usize {
        // Marks are cleared once, outside the copy-on-write retry below.
        let unused: Vec<SocketAddr> = self
            .hosts
            .load()
            .iter()
            .filter(|(_, host)| !host.used.swap(false, Ordering::Relaxed))
            .map(|(address, _)| *address)
            .collect();
        if unused.is_empty() {
            return 0;
        }
        let mut removed = 0;
        self.hosts.rcu(|hosts| {
            removed = 0; // counted again if the swap is retried
            let mut copy = HashMap::clone(hosts);
            for address in &unused {
                // A host picked since its mark was read stays.
                if copy.get(address).is_some_and(|host| !host.used.load(Ordering::Relaxed)) {
                    copy.remove(address);
                    removed += 1;
                }
            }
            Arc::new(copy)
        });
        if removed > 0 {
            self.removals.fetch_add(1, Ordering::Release);
        }
        removed
    }

    /// The current hosts, sorted by address (for admin views and tests).
    pub fn hosts(&self) -> Vec<Arc<Host>> {
        let mut all: Vec<Arc<Host>> = self.hosts.load().values().map(|h| h.host.clone()).collect();
        all.sort_by_key(|h| h.address().to_string());
        all
    }

    fn removals(&self) -> u64 {
        self.removals.load(Ordering::Acquire)
    }
}

impl DestinationHost {
    fn new(address: SocketAddr, cluster_stats: &Arc<ClusterStats>, now: Instant) -> Self {
        let endpoint = LbEndpoint {
            address: Address::Socket(address),
            weight: 1,
            health: HealthStatus::Healthy,
            hash_key: None,
            transport_socket_match: Default::default(),
            hostname: String::new(),
            health_check: None,
            additional_addresses: Box::default(),
            metadata: None,
        };
        let host = Host {
            endpoint: Arc::new(endpoint),
            stats: Arc::new(EndpointStats::new(now)),
            priority: 0,
            locality: 0,
            cluster_stats: cluster_stats.clone(),
        };
        Self { host: Arc::new(host), used: AtomicBool::new(true) }
    }
}

/// One worker's copies of an ORIGINAL_DST cluster's hosts.
#[derive(Debug, Default)]
pub struct DestinationCache {
    hosts: HashMap<SocketAddr, Arc<DestinationHost>>,
    /// The shared map's removal count these copies were taken at.
    removals: u64,
}

impl DestinationCache {
    /// The host for `destination` (after the cluster's port override).
    pub fn pick(&mut self, cluster: &OriginalDst, destination: SocketAddr, now: Instant) -> Arc<Host> {
        let address = cluster.upstream_address(destination);
        let removals = cluster.hosts.removals();
        if removals != self.removals {
            self.hosts.clear();
            self.removals = removals;
        }
        if let Some(cached) = self.hosts.get(&address) {
            cached.used.store(true, Ordering::Relaxed);
            return cached.host.clone();
        }
        let shared = cluster.hosts.get_or_create(address, now);
        let host = shared.host.clone();
        self.hosts.insert(address, shared);
        host
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn cluster(port_override: Option<u16>) -> OriginalDst {
        let config = OriginalDstConfig {
            use_http_header: false,
            http_header_name: String::new(),
            upstream_port_override: port_override,
            metadata_key: None,
            cleanup_interval: Duration::from_secs(5),
        };
        OriginalDst::new(Arc::default(), &config)
    }

    #[test]
    fn a_destination_gets_one_host_shared_by_workers() {
        let cluster = cluster(None);
        let now = Instant::now();
        let (mut worker1, mut worker2) = (DestinationCache::default(), DestinationCache::default());
        let a: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let first = worker1.pick(&cluster, a, now);
        let again = worker2.pick(&cluster, a, now);
        assert!(Arc::ptr_eq(&first.stats, &again.stats), "one stats per destination");
        assert_eq!(*first.address(), Address::Socket(a));
        let other = worker1.pick(&cluster, "[2001:db8::1]:443".parse().unwrap(), now);
        assert!(!Arc::ptr_eq(&first.stats, &other.stats));
        assert_eq!(cluster.hosts.hosts().len(), 2);
    }

    #[test]
    fn workers_meeting_a_destination_at_once_share_one_host() {
        let cluster = cluster(None);
        let now = Instant::now();
        let destinations: Vec<SocketAddr> = (0..200).map(|i| SocketAddr::from(([10, 0, 0, 1], 1000 + i))).collect();
        let picked: Vec<Vec<Arc<Host>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        let mut cache = DestinationCache::default();
                        destinations.iter().map(|d| cache.pick(&cluster, *d, now)).collect::<Vec<_>>()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(cluster.hosts.hosts().len(), destinations.len());
        for worker in &picked[1..] {
            for (mine, first) in worker.iter().zip(&picked[0]) {
                assert!(Arc::ptr_eq(&mine.stats, &first.stats), "one host per destination across workers");
            }
        }
    }

    #[test]
    fn port_override_replaces_the_destination_port() {
        let cluster = cluster(Some(8080));
        let host = DestinationCache::default().pick(&cluster, "10.0.0.1:80".parse().unwrap(), Instant::now());
        assert_eq!(host.address().to_string(), "10.0.0.1:8080");
    }

    #[test]
    fn sweeps_remove_hosts_unused_for_a_whole_interval() {
        let cluster = cluster(None);
        let now = Instant::now();
        let mut worker = DestinationCache::default();
        let (a, b): (SocketAddr, SocketAddr) = ("10.0.0.1:80".parse().unwrap(), "10.0.0.2:80".parse().unwrap());
        worker.pick(&cluster, a, now);
        worker.pick(&cluster, b, now);
        // Both were picked since the last sweep: kept, marks cleared.
        assert_eq!(cluster.hosts.sweep(), 0);
        // Only `a` is picked again (from the worker's cache): `b` goes.
        worker.pick(&cluster, a, now);
        assert_eq!(cluster.hosts.sweep(), 1);
        let remaining: Vec<String> = cluster.hosts.hosts().iter().map(|h| h.address().to_string()).collect();
        assert_eq!(remaining, ["10.0.0.1:80"]);
        // The worker notices the removal and does not keep serving its stale copy of `b`.
        let old_b = worker.hosts.get(&b).unwrap().host.clone();
        let new_b = worker.pick(&cluster, b, now);
        assert!(!Arc::ptr_eq(&old_b.stats, &new_b.stats));
        assert_eq!(cluster.hosts.hosts().len(), 2);
    }
}
