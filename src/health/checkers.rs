//! The health checkers of every cluster that configures `health_checks`.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

use super::HealthEvent;
use super::session::SessionTask;
use super::transport::Target;
use crate::config::endpoint::EndpointHealthCheck;
use crate::config::{Address, Cluster};
use crate::lb::endpoint::MAX_CHECKS;
use crate::lb::health_check::HealthCheckStats;
use crate::lb::{BalancerMap, Balancers, ClusterLb, EndpointStats};
use crate::store::{Snapshot, Versioned};
use crate::telemetry::Stats;
use crate::tls::TlsCache;

/// Every health-checked cluster's sessions.
#[derive(Debug)]
pub struct HealthCheckers {
    clusters: HashMap<String, Tracked>,
    /// Where `cluster.<name>.health_check.*` is registered (`None`: nowhere).
    stats: Option<Arc<Stats>>,
    events: UnboundedSender<HealthEvent>,
    /// TLS configs of the probes' transport sockets.
    tls: TlsCache,
}

#[derive(Debug)]
struct Tracked {
    cluster: Arc<Versioned<Cluster>>,
    /// The balancer whose hosts the sessions follow (rebuilt balancer ⇒ resync).
    synced: Arc<ClusterLb>,
    hosts: HashMap<Address, HostSessions>,
    counters: Arc<HealthCheckStats>,
}

/// One host's sessions, one per health check; aborted when dropped.
#[derive(Debug)]
struct HostSessions {
    stats: Arc<EndpointStats>,
    /// The endpoint's `health_check_config` the sessions were started with.
    config: Option<Box<EndpointHealthCheck>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for HostSessions {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl HealthCheckers {
    /// Checkers registering their stats in `stats`, and the receiver of their events.
    pub fn new(stats: Option<Arc<Stats>>) -> (Self, UnboundedReceiver<HealthEvent>) {
        let (events, receiver) = unbounded_channel();
        (Self { clusters: HashMap::new(), stats, events, tls: TlsCache::new() }, receiver)
    }

    /// Follows the configuration and the published balancers; must run on the control
    /// runtime (sessions are spawned there). Returns the clusters whose hosts' health
    /// changed here (a health check was removed), whose balancers must be rebuilt. Visits
    /// every cluster: for when what changed is not known.
    pub fn sync(&mut self, snapshot: &Snapshot, balancers: &Balancers) -> Vec<String> {
        let all = balancers.all();
        let mut names: BTreeSet<String> = self.clusters.keys().cloned().collect();
        names.extend(all.keys().cloned());
        self.sync_clusters(snapshot, &all, names.iter())
    }

    /// As [`sync`](Self::sync), for the named clusters only (those whose configuration or
    /// balancer changed).
    pub fn sync_clusters<'a>(
        &mut self,
        snapshot: &Snapshot,
        all: &BalancerMap,
        names: impl IntoIterator<Item = &'a String>,
    ) -> Vec<String> {
        let mut changed = Vec::new();
        for name in names {
            let cluster = snapshot.clusters.get(name).filter(|c| !c.resource.health_checks.is_empty());
            // Hosts made per connection (ORIGINAL_DST): nothing to check ahead of use.
            let (Some(cluster), Some(lb)) = (cluster, all.get(name).filter(|lb| lb.original_dst().is_none())) else {
                self.clusters.remove(name);
                continue;
            };
            let restart = self.clusters.get(name).is_some_and(|t| t.cluster.resource != cluster.resource);
            if restart {
                // A changed cluster starts its sessions again; verdicts stay with the hosts.
                self.clusters.remove(name);
                let checks = cluster.resource.health_checks.len().min(MAX_CHECKS);
                let mut any = false;
                for host in lb.hosts() {
                    any |= host.stats.health().keep_checks(checks); // every host, no short cut
                }
                if any {
                    changed.push(name.clone());
                }
            }
            let tracked = self.clusters.entry(name.clone()).or_insert_with(|| Tracked {
                cluster: cluster.clone(),
                synced: lb.clone(),
                hosts: HashMap::new(),
                counters: Arc::new(match &self.stats {
                    Some(stats) => HealthCheckStats::register(stats, name),
                    None => HealthCheckStats::default(),
                }),
            });
            if tracked.hosts.is_empty() || !Arc::ptr_eq(&tracked.synced, lb) {
                tracked.synced = lb.clone();
                sync_hosts(tracked, lb, snapshot, &mut self.tls, &self.events);
            }
        }
        changed
    }

    /// The clusters being checked.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.clusters.keys()
    }

    /// Sessions running, for tests.
    pub fn sessions(&self) -> usize {
        self.clusters.values().flat_map(|t| t.hosts.values()).map(|h| h.tasks.len()).sum()
    }
}

/// Starts sessions for new hosts (and hosts whose stats were replaced), stops those of
/// hosts that left; a host that stays keeps its sessions.
fn sync_hosts(
    tracked: &mut Tracked,
    lb: &ClusterLb,
    snapshot: &Snapshot,
    tls: &mut TlsCache,
    events: &UnboundedSender<HealthEvent>,
) {
    let mut previous = std::mem::take(&mut tracked.hosts);
    let checks = &tracked.cluster.resource.health_checks;
    let name = &tracked.cluster.resource.name;
    for host in lb.hosts() {
        // `disable_active_health_check`: Envoy does not probe the endpoint at all.
        if !host.endpoint.actively_checked() {
            continue;
        }
        let address = host.address();
        match previous.remove(address) {
            // A changed `health_check_config` probes elsewhere: new sessions (as Envoy
            // makes a new host when the health check address changes).
            Some(sessions)
                if Arc::ptr_eq(&sessions.stats, &host.stats) && sessions.config == host.endpoint.health_check =>
            {
                tracked.hosts.insert(address.clone(), sessions);
            }
            _ => {
                let tasks = checks
                    .iter()
                    .take(MAX_CHECKS)
                    .enumerate()
                    .map(|(check, config)| {
                        let target = Target::new(&tracked.cluster, &host.endpoint, config.alt_port, snapshot, tls);
                        let task = SessionTask {
                            cluster: name.clone(),
                            check,
                            config: config.clone(),
                            host: host.clone(),
                            target,
                            counters: tracked.counters.clone(),
                            events: events.clone(),
                            seed: seed(name, address, check),
                        };
                        tokio::spawn(task.run())
                    })
                    .collect();
                let config = host.endpoint.health_check.clone();
                tracked.hosts.insert(address.clone(), HostSessions { stats: host.stats.clone(), config, tasks });
            }
        }
    }
    if checks.len() > MAX_CHECKS {
        tracing::warn!(cluster = %name, checks = checks.len(), "only the first {MAX_CHECKS} health checks run");
    }
}

/// A per-session seed, stable across runs, so jitter draws differ per host and check but
/// are reproducible.
fn seed(cluster: &str, address: &Address, check: usize) -> u64 {
    let mut hasher = DefaultHasher::new();
    (cluster, address, check).hash(&mut hasher);
    hasher.finish()
}
