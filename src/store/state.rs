//! Everything accepted from the control plane and the bootstrap, and the rules that turn it
//! into the served [`Snapshot`]: warming, static-over-dynamic, endpoint reconciliation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::reconcile::reconcile_endpoints;
use super::snapshot::{Snapshot, TypeVersion, Versioned};
use crate::config::cluster::DiscoveryType;
use crate::config::tls::{SdsSecretConfig, SdsSource};
use crate::config::{Cluster, ClusterLoadAssignment, Listener, Resource, ResourceType, RouteConfiguration, Secret};

type Map<T> = BTreeMap<String, Arc<Versioned<T>>>;

/// How long listeners wait for their route configurations before being served without
/// them. `None` waits forever (Envoy's `initial_fetch_timeout: 0s`, which Istio uses).
#[derive(Debug, Clone, Copy, Default)]
pub struct WarmingTimeouts {
    pub rds: Option<Duration>,
}

/// The accepted configuration and the snapshot-building rules.
#[derive(Debug, Default)]
pub struct ConfigState {
    static_listeners: Map<Listener>,
    static_clusters: Map<Cluster>,
    static_secrets: Map<Secret>,
    listeners: Map<Listener>,
    routes: Map<RouteConfiguration>,
    clusters: Map<Cluster>,
    endpoints: Map<ClusterLoadAssignment>,
    secrets: Map<Secret>,
    versions: BTreeMap<ResourceType, TypeVersion>,
    /// Types whose first response arrived (or whose initial fetch timed out).
    initialized: BTreeSet<ResourceType>,
    /// Which types must initialize before the configuration is complete (LDS and CDS when
    /// they come from ADS).
    awaited: BTreeSet<ResourceType>,
    /// EDS/RDS names whose initial fetch timed out: their dependants are served without them.
    expired: BTreeSet<(ResourceType, String)>,
    timeouts: WarmingTimeouts,
    /// What was served last, so an updated listener or cluster that is warming again keeps
    /// its previous version in service.
    served_listeners: Map<Listener>,
    served_clusters: Map<Cluster>,
    generation: u64,
    ready: bool,
    last_reconcile_operations: usize,
}

impl ConfigState {
    /// A state holding the bootstrap's static resources. `awaited` lists the types that
    /// come from ADS and must arrive before the configuration counts as complete.
    pub fn new(
        listeners: Vec<Listener>,
        clusters: Vec<Cluster>,
        secrets: Vec<Secret>,
        awaited: impl IntoIterator<Item = ResourceType>,
        timeouts: WarmingTimeouts,
    ) -> Self {
        fn statics<T>(items: Vec<T>, name: impl Fn(&T) -> String) -> Map<T> {
            let now = SystemTime::now();
            items
                .into_iter()
                .map(|r| {
                    let versioned =
                        Versioned { version: String::new(), last_updated: now, raw: Default::default(), resource: r };
                    (name(&versioned.resource), Arc::new(versioned))
                })
                .collect()
        }
        Self {
            static_listeners: statics(listeners, |l| l.name.clone()),
            static_clusters: statics(clusters, |c| c.name.clone()),
            static_secrets: statics(secrets, |s| s.name.clone()),
            awaited: awaited.into_iter().collect(),
            timeouts,
            ..Default::default()
        }
    }

    /// Refuses resources that would replace a static one, as Envoy does.
    pub fn check(&self, resource: &Resource) -> Result<(), String> {
        let clash = match resource {
            Resource::Listener(l) => self.static_listeners.contains_key(&l.name),
            Resource::Cluster(c) => self.static_clusters.contains_key(&c.name),
            Resource::Secret(s) => self.static_secrets.contains_key(&s.name),
            _ => false,
        };
        if clash { Err(format!("{} is a static resource and cannot be updated", resource.name())) } else { Ok(()) }
    }

    /// Applies the accepted resources of one response; returns whether anything changed.
    /// `full_state` (SotW LDS/CDS) removes every resource of the type that `updated` does
    /// not list. A resource whose bytes equal the held one is left as it is (its version
    /// and time included), as Envoy skips an unchanged listener, cluster or route
    /// configuration. The type's `version_info` (what `/config_dump` shows) moves only
    /// when something changed, as Envoy's LDS and CDS move theirs.
    pub fn apply(
        &mut self,
        resource_type: ResourceType,
        version_info: &str,
        updated: Vec<Versioned<Resource>>,
        removed: &[String],
        full_state: bool,
    ) -> bool {
        let now = SystemTime::now();
        let mut changed = false;
        if full_state {
            let keep: BTreeSet<&str> = updated.iter().map(|u| u.resource.name()).collect();
            let stale: Vec<String> = self.names(resource_type).filter(|n| !keep.contains(n.as_str())).collect();
            for name in stale {
                changed |= self.remove(resource_type, &name);
            }
        }
        for name in removed {
            changed |= self.remove(resource_type, name);
        }
        self.last_reconcile_operations = 0;
        for Versioned { resource, version, last_updated, raw } in updated {
            if !raw.is_empty() && self.held_raw(resource_type, resource.name()).is_some_and(|held| *held == raw) {
                continue;
            }
            changed = true;
            macro_rules! put {
                ($map:ident, $value:expr) => {{
                    let value = $value;
                    self.$map.insert(
                        resource_name(&value),
                        Arc::new(Versioned { resource: value, version, last_updated, raw }),
                    );
                }};
            }
            match resource {
                Resource::Listener(l) => put!(listeners, l),
                Resource::RouteConfiguration(r) => put!(routes, r),
                Resource::Cluster(c) => put!(clusters, c),
                Resource::Secret(s) => put!(secrets, s),
                Resource::ClusterLoadAssignment(mut cla) => {
                    if let Some(previous) = self.endpoints.get(&cla.cluster_name) {
                        self.last_reconcile_operations += reconcile_endpoints(&previous.resource, &mut cla);
                    }
                    put!(endpoints, cla)
                }
            }
        }
        if changed {
            self.versions
                .insert(resource_type, TypeVersion { version_info: version_info.to_owned(), last_updated: Some(now) });
        }
        self.initialized.insert(resource_type);
        changed
    }

    /// The held listeners, static ones first, with whether each is static.
    pub fn held_listeners(&self) -> impl Iterator<Item = (&Listener, bool)> {
        let statics = self.static_listeners.values().map(|l| (&l.resource, true));
        statics.chain(self.listeners.values().map(|l| (&l.resource, false)))
    }

    /// The names of every held dynamic resource of `resource_type`.
    pub fn held_names(&self, resource_type: ResourceType) -> impl Iterator<Item = String> + '_ {
        self.names(resource_type)
    }

    /// The bytes a held dynamic resource arrived as.
    fn held_raw(&self, resource_type: ResourceType, name: &str) -> Option<&bytes::Bytes> {
        match resource_type {
            ResourceType::Listener => self.listeners.get(name).map(|v| &v.raw),
            ResourceType::RouteConfiguration => self.routes.get(name).map(|v| &v.raw),
            ResourceType::Cluster => self.clusters.get(name).map(|v| &v.raw),
            ResourceType::ClusterLoadAssignment => self.endpoints.get(name).map(|v| &v.raw),
            ResourceType::Secret => self.secrets.get(name).map(|v| &v.raw),
        }
    }

    /// Whether `name` of `resource_type` has arrived (for LDS and CDS, `name` is ignored:
    /// whether the type's first response has). An initial-fetch timer that fires after
    /// its resource arrived has nothing to time out.
    pub fn arrived(&self, resource_type: ResourceType, name: &str) -> bool {
        if resource_type.is_wildcard() {
            self.initialized.contains(&resource_type)
        } else {
            self.held_raw(resource_type, name).is_some()
        }
    }

    /// Marks the initial fetch of `name` (of an EDS or RDS resource) as timed out: whatever
    /// waits for it is served without it. For LDS and CDS, `name` is ignored and the type
    /// counts as initialized.
    pub fn expire(&mut self, resource_type: ResourceType, name: &str) {
        if resource_type.is_wildcard() {
            self.initialized.insert(resource_type);
        } else {
            self.expired.insert((resource_type, name.to_owned()));
        }
    }

    /// The names of `resource_type` that accepted listeners and clusters refer to: what
    /// the ADS client subscribes to for RDS, EDS and SDS.
    pub fn wanted(&self, resource_type: ResourceType) -> BTreeSet<String> {
        let listeners = self.static_listeners.values().chain(self.listeners.values()).map(|l| &l.resource);
        let clusters = self.static_clusters.values().chain(self.clusters.values()).map(|c| &c.resource);
        match resource_type {
            ResourceType::RouteConfiguration => {
                listeners.flat_map(|l| l.route_config_names()).map(str::to_owned).collect()
            }
            ResourceType::ClusterLoadAssignment => {
                clusters.filter_map(|c| c.eds_service_name()).map(str::to_owned).collect()
            }
            ResourceType::Secret => {
                self.sds_references().filter(|c| c.source == SdsSource::Ads).map(|c| c.name.clone()).collect()
            }
            ResourceType::Listener | ResourceType::Cluster => BTreeSet::new(),
        }
    }

    /// Secrets fetched over separate SDS streams, by the cluster that serves them (Istio:
    /// its agent's `sds-grpc` Unix socket).
    pub fn wanted_sds(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for config in self.sds_references() {
            if let SdsSource::Grpc { cluster_name, .. } = &config.source {
                wanted.entry(cluster_name.clone()).or_default().insert(config.name.clone());
            }
        }
        wanted
    }

    /// Where a bootstrap cluster's first endpoint is: how an SDS stream reaches its server.
    pub fn static_cluster_address(&self, name: &str) -> Option<crate::config::Address> {
        let cluster = &self.static_clusters.get(name)?.resource;
        cluster.load_assignment.as_ref()?.endpoints().next().map(|e| e.address.clone())
    }

    /// Initial-fetch timeouts of the secrets now missing: (name, timeout).
    pub fn warming_secret_timeouts(&self) -> Vec<(String, Duration)> {
        self.sds_references()
            .filter(|c| !self.secret_present(&c.name))
            .filter_map(|c| c.initial_fetch_timeout.map(|t| (c.name.clone(), t)))
            .collect()
    }

    /// Every SDS reference of every listener and cluster.
    fn sds_references(&self) -> impl Iterator<Item = &SdsSecretConfig> {
        let listeners = self.static_listeners.values().chain(self.listeners.values());
        let clusters = self.static_clusters.values().chain(self.clusters.values());
        listeners
            .flat_map(|l| l.resource.sds_secret_configs())
            .chain(clusters.flat_map(|c| c.resource.sds_secret_configs()))
    }

    fn secret_present(&self, name: &str) -> bool {
        self.static_secrets.contains_key(name) || self.secrets.contains_key(name)
    }

    /// Whether every secret in `configs` arrived (or stopped being waited for).
    fn secrets_ready<'a>(&self, mut configs: impl Iterator<Item = &'a SdsSecretConfig>) -> bool {
        configs.all(|c| self.secret_present(&c.name) || self.expired.contains(&(ResourceType::Secret, c.name.clone())))
    }

    /// How long a newly wanted RDS name may stay missing before its listener is served.
    pub fn timeouts(&self) -> WarmingTimeouts {
        self.timeouts
    }

    /// EDS initial-fetch timeouts of the clusters now warming: (service name, timeout).
    pub fn warming_eds_timeouts(&self) -> Vec<(String, Duration)> {
        self.clusters
            .values()
            .filter_map(|c| match &c.resource.discovery {
                DiscoveryType::Eds(eds) if !self.endpoints.contains_key(&eds.service_name) => {
                    eds.initial_fetch_timeout.map(|t| (eds.service_name.clone(), t))
                }
                _ => None,
            })
            .collect()
    }

    /// The last accepted version of each type, for resuming a stream.
    pub fn version_info(&self, resource_type: ResourceType) -> &str {
        self.versions.get(&resource_type).map_or("", |v| v.version_info.as_str())
    }

    /// The versions of every held resource of `resource_type` (Delta
    /// `initial_resource_versions` on reconnect).
    pub fn resource_versions(&self, resource_type: ResourceType) -> BTreeMap<String, String> {
        fn versions<T>(map: &Map<T>) -> BTreeMap<String, String> {
            map.iter().map(|(name, v)| (name.clone(), v.version.clone())).collect()
        }
        match resource_type {
            ResourceType::Listener => versions(&self.listeners),
            ResourceType::RouteConfiguration => versions(&self.routes),
            ResourceType::Cluster => versions(&self.clusters),
            ResourceType::ClusterLoadAssignment => versions(&self.endpoints),
            ResourceType::Secret => versions(&self.secrets),
        }
    }

    /// Endpoint operations done by the last `apply` while reconciling EDS updates.
    pub fn last_reconcile_operations(&self) -> usize {
        self.last_reconcile_operations
    }

    /// Builds the next snapshot to publish.
    pub fn snapshot(&mut self) -> Snapshot {
        self.generation += 1;
        let mut snapshot =
            Snapshot { generation: self.generation, versions: self.versions.clone(), ..Default::default() };
        snapshot.routes = self.routes.clone();
        snapshot.secrets =
            self.static_secrets.iter().chain(&self.secrets).map(|(k, v)| (k.clone(), v.clone())).collect();

        for (name, cluster) in self.static_clusters.iter().chain(&self.clusters) {
            match self.cluster_endpoints(&cluster.resource) {
                Some(endpoints) => {
                    snapshot.clusters.insert(name.clone(), cluster.clone());
                    snapshot.endpoints.insert(name.clone(), endpoints);
                }
                None => {
                    snapshot.warming_clusters.insert(name.clone(), cluster.clone());
                    if let Some(previous) = self.served_clusters.get(name)
                        && let Some(endpoints) = self.cluster_endpoints(&previous.resource)
                    {
                        snapshot.clusters.insert(name.clone(), previous.clone());
                        snapshot.endpoints.insert(name.clone(), endpoints);
                    }
                }
            }
        }
        for (name, listener) in self.static_listeners.iter().chain(&self.listeners) {
            if self.listener_warm(&listener.resource) {
                snapshot.listeners.insert(name.clone(), listener.clone());
            } else {
                snapshot.warming_listeners.insert(name.clone(), listener.clone());
                if let Some(previous) = self.served_listeners.get(name) {
                    snapshot.listeners.insert(name.clone(), previous.clone());
                }
            }
        }
        self.served_clusters = snapshot.clusters.clone();
        self.served_listeners = snapshot.listeners.clone();

        let complete = self.awaited.is_subset(&self.initialized)
            && snapshot.warming_clusters.is_empty()
            && snapshot.warming_listeners.is_empty();
        self.ready |= complete;
        snapshot.ready = self.ready;
        snapshot
    }

    /// The endpoints a cluster is served with, or `None` while it is warming (waiting for
    /// its endpoints or its secrets).
    fn cluster_endpoints(&self, cluster: &Cluster) -> Option<Arc<Versioned<ClusterLoadAssignment>>> {
        if !self.secrets_ready(cluster.sds_secret_configs().into_iter()) {
            return None;
        }
        match &cluster.discovery {
            DiscoveryType::Eds(eds) => self.endpoints.get(&eds.service_name).cloned().or_else(|| {
                let expired = self.expired.contains(&(ResourceType::ClusterLoadAssignment, eds.service_name.clone()));
                expired.then(|| Arc::new(empty_assignment(&cluster.name)))
            }),
            _ => Some(Arc::new(match &cluster.load_assignment {
                Some(cla) => Versioned {
                    resource: cla.clone(),
                    version: String::new(),
                    last_updated: SystemTime::now(),
                    raw: Default::default(),
                },
                None => empty_assignment(&cluster.name),
            })),
        }
    }

    fn listener_warm(&self, listener: &Listener) -> bool {
        self.secrets_ready(listener.sds_secret_configs().into_iter())
            && listener.route_config_names().into_iter().all(|name| {
                self.routes.contains_key(name)
                    || self.expired.contains(&(ResourceType::RouteConfiguration, name.to_owned()))
            })
    }

    fn names(&self, resource_type: ResourceType) -> Box<dyn Iterator<Item = String> + '_> {
        match resource_type {
            ResourceType::Listener => Box::new(self.listeners.keys().cloned()),
            ResourceType::RouteConfiguration => Box::new(self.routes.keys().cloned()),
            ResourceType::Cluster => Box::new(self.clusters.keys().cloned()),
            ResourceType::ClusterLoadAssignment => Box::new(self.endpoints.keys().cloned()),
            ResourceType::Secret => Box::new(self.secrets.keys().cloned()),
        }
    }

    /// Removes a held resource; returns whether it was held.
    fn remove(&mut self, resource_type: ResourceType, name: &str) -> bool {
        match resource_type {
            ResourceType::Listener => {
                self.served_listeners.remove(name);
                self.listeners.remove(name).is_some()
            }
            ResourceType::RouteConfiguration => self.routes.remove(name).is_some(),
            ResourceType::Cluster => {
                self.served_clusters.remove(name);
                self.clusters.remove(name).is_some()
            }
            ResourceType::ClusterLoadAssignment => self.endpoints.remove(name).is_some(),
            ResourceType::Secret => self.secrets.remove(name).is_some(),
        }
    }
}

fn empty_assignment(cluster_name: &str) -> Versioned<ClusterLoadAssignment> {
    Versioned {
        resource: ClusterLoadAssignment::empty(cluster_name),
        version: String::new(),
        last_updated: SystemTime::now(),
        raw: Default::default(),
    }
}

/// The key a resource is stored under.
fn resource_name<T: Named>(resource: &T) -> String {
    resource.name().to_owned()
}

trait Named {
    fn name(&self) -> &str;
}

impl Named for Listener {
    fn name(&self) -> &str {
        &self.name
    }
}
impl Named for RouteConfiguration {
    fn name(&self) -> &str {
        &self.name
    }
}
impl Named for Cluster {
    fn name(&self) -> &str {
        &self.name
    }
}
impl Named for ClusterLoadAssignment {
    fn name(&self) -> &str {
        &self.cluster_name
    }
}
impl Named for Secret {
    fn name(&self) -> &str {
        &self.name
    }
}
