//! Everything accepted from the control plane and the bootstrap, and the rules that turn it
//! into the served [`Snapshot`]: warming, static-over-dynamic, endpoint reconciliation.
//!
//! The served maps are kept here and updated in place, name by name: `apply` marks what a
//! change can affect (a cluster, the clusters of an EDS service name, a listener), and
//! `snapshot` settles only those names, records which served entries changed, and shares
//! everything else with the previous snapshot. Only a secret or route configuration that
//! appears or leaves, and an initial fetch of either timing out, settles every listener or
//! cluster again (whether they are warm depends on it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::changes::Changes;
use super::raw::Raw;
use super::reconcile::reconcile_endpoints;
use super::snapshot::{Resources, Snapshot, TypeVersion, Versioned};
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
    routes: Resources<RouteConfiguration>,
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
    /// What the next snapshot serves (shared with the published one until changed). An
    /// updated listener or cluster that is warming again keeps its previous version here.
    served: Served,
    /// Names to settle before the next snapshot, and whether every one must be.
    dirty_clusters: BTreeSet<String>,
    dirty_listeners: BTreeSet<String>,
    all_clusters_dirty: bool,
    all_listeners_dirty: bool,
    /// Served entries changed since the last snapshot (its change record).
    pending: Changes,
    /// The clusters that refer to each EDS service name (configured or still served).
    eds_users: HashMap<String, BTreeSet<String>>,
    /// The EDS service names each cluster is registered under in `eds_users`.
    cluster_services: HashMap<String, Vec<String>>,
    /// Moves whenever what listeners and clusters refer to may have changed (a listener or
    /// cluster changed, or anything was removed): until it does, the names to subscribe to
    /// and the initial-fetch timers to arm stay as they were.
    references: u64,
    generation: u64,
    ready: bool,
    last_reconcile_operations: usize,
    last_settled: usize,
}

/// What a cluster's name serves: its cluster and its endpoints, if served.
type ServedCluster = (Option<Arc<Versioned<Cluster>>>, Option<Arc<Versioned<ClusterLoadAssignment>>>);

/// The maps of the served snapshot.
#[derive(Debug, Default, Clone)]
struct Served {
    listeners: Resources<Listener>,
    clusters: Resources<Cluster>,
    endpoints: Resources<ClusterLoadAssignment>,
    secrets: Resources<Secret>,
    warming_listeners: Resources<Listener>,
    warming_clusters: Resources<Cluster>,
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
        let mut state = Self {
            static_listeners: statics(listeners, |l| l.name.clone()),
            static_clusters: statics(clusters, |c| c.name.clone()),
            static_secrets: statics(secrets, |s| s.name.clone()),
            awaited: awaited.into_iter().collect(),
            timeouts,
            ..Default::default()
        };
        state.dirty_clusters = state.static_clusters.keys().cloned().collect();
        state.dirty_listeners = state.static_listeners.keys().cloned().collect();
        state.pending.secrets = state.static_secrets.keys().cloned().collect();
        state
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
                Resource::Listener(l) => {
                    self.references += 1;
                    self.dirty_listeners.insert(l.name.clone());
                    put!(listeners, l)
                }
                Resource::RouteConfiguration(r) => {
                    // Listeners wait for a route configuration's presence, not its content.
                    self.all_listeners_dirty |= !self.routes.contains_key(&r.name);
                    self.pending.routes.insert(r.name.clone());
                    put!(routes, r)
                }
                Resource::Cluster(c) => {
                    self.references += 1;
                    self.dirty_clusters.insert(c.name.clone());
                    put!(clusters, c)
                }
                Resource::Secret(s) => {
                    self.secret_presence_changes(!self.secrets.contains_key(&s.name));
                    self.pending.secrets.insert(s.name.clone());
                    put!(secrets, s)
                }
                Resource::ClusterLoadAssignment(mut cla) => {
                    if let Some(previous) = self.endpoints.get(&cla.cluster_name) {
                        self.last_reconcile_operations += reconcile_endpoints(&previous.resource, &mut cla);
                    }
                    self.endpoints_changed(&cla.cluster_name);
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
    fn held_raw(&self, resource_type: ResourceType, name: &str) -> Option<&Raw> {
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
        match resource_type {
            ResourceType::Listener | ResourceType::Cluster => _ = self.initialized.insert(resource_type),
            ResourceType::RouteConfiguration => self.all_listeners_dirty = true,
            ResourceType::Secret => self.secret_presence_changes(true),
            ResourceType::ClusterLoadAssignment => self.endpoints_changed(name),
        }
        if !resource_type.is_wildcard() {
            self.expired.insert((resource_type, name.to_owned()));
        }
    }

    /// A secret appeared, left or stopped being waited for: whether listeners and clusters
    /// that refer to it are warm may have changed.
    fn secret_presence_changes(&mut self, changes: bool) {
        self.all_clusters_dirty |= changes;
        self.all_listeners_dirty |= changes;
    }

    /// The endpoints of EDS service `service_name` changed: its clusters settle again.
    fn endpoints_changed(&mut self, service_name: &str) {
        if let Some(users) = self.eds_users.get(service_name) {
            self.dirty_clusters.extend(users.iter().cloned());
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
        fn versions<'a, T: 'a>(
            map: impl IntoIterator<Item = (&'a String, &'a Arc<Versioned<T>>)>,
        ) -> BTreeMap<String, String> {
            map.into_iter().map(|(name, v)| (name.clone(), v.version.clone())).collect()
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

    /// Listener and cluster names the last `snapshot` settled (tests pin that a change
    /// settles what it affects, not everything).
    pub fn last_settled(&self) -> usize {
        self.last_settled
    }

    /// Builds the next snapshot to publish: settles the names changes could affect, and
    /// shares the rest with the previous snapshot.
    pub fn snapshot(&mut self) -> Snapshot {
        self.generation += 1;
        for name in std::mem::take(&mut self.pending.secrets) {
            let next = self.static_secrets.get(&name).or_else(|| self.secrets.get(&name)).cloned();
            let previous = match next {
                Some(secret) => self.served.secrets.insert(name.clone(), secret),
                None => self.served.secrets.remove(&name),
            };
            let now = self.served.secrets.get(&name);
            if !same(previous.as_ref(), now) {
                self.pending.secrets.insert(name);
            }
        }
        let clusters = match std::mem::take(&mut self.all_clusters_dirty) {
            true => self.every_cluster_name(),
            false => std::mem::take(&mut self.dirty_clusters),
        };
        let listeners = match std::mem::take(&mut self.all_listeners_dirty) {
            true => self.every_listener_name(),
            false => std::mem::take(&mut self.dirty_listeners),
        };
        self.dirty_clusters.clear();
        self.dirty_listeners.clear();
        self.last_settled = clusters.len() + listeners.len();
        clusters.into_iter().for_each(|name| self.settle_cluster(name));
        listeners.into_iter().for_each(|name| self.settle_listener(name));

        let complete = self.awaited.is_subset(&self.initialized)
            && self.served.warming_clusters.is_empty()
            && self.served.warming_listeners.is_empty();
        self.ready |= complete;
        let changes = Changes { since: Some(self.generation - 1), ..std::mem::take(&mut self.pending) };
        let Served { listeners, clusters, endpoints, secrets, warming_listeners, warming_clusters } =
            self.served.clone();
        Snapshot {
            generation: self.generation,
            ready: self.ready,
            listeners,
            routes: self.routes.clone(),
            clusters,
            endpoints,
            secrets,
            warming_listeners,
            warming_clusters,
            versions: self.versions.clone(),
            changes: Arc::new(changes),
        }
    }

    fn every_cluster_name(&self) -> BTreeSet<String> {
        let held = self.static_clusters.keys().chain(self.clusters.keys());
        let served = self.served.clusters.keys().chain(self.served.warming_clusters.keys());
        held.chain(served).cloned().chain(self.dirty_clusters.iter().cloned()).collect()
    }

    fn every_listener_name(&self) -> BTreeSet<String> {
        let held = self.static_listeners.keys().chain(self.listeners.keys());
        let served = self.served.listeners.keys().chain(self.served.warming_listeners.keys());
        held.chain(served).cloned().chain(self.dirty_listeners.iter().cloned()).collect()
    }

    /// Brings the served entry of cluster `name` in step with what is held, and records
    /// whether its cluster or endpoints changed.
    fn settle_cluster(&mut self, name: String) {
        let held = self.static_clusters.get(&name).or_else(|| self.clusters.get(&name)).cloned();
        let before = (self.served.clusters.get(&name).cloned(), self.served.endpoints.get(&name).cloned());
        let served = match &held {
            None => {
                self.served.warming_clusters.remove(&name);
                None
            }
            Some(cluster) => match self.cluster_endpoints(cluster, &before) {
                Some(endpoints) => {
                    self.served.warming_clusters.remove(&name);
                    Some((cluster.clone(), endpoints))
                }
                None => {
                    self.served.warming_clusters.insert(name.clone(), cluster.clone());
                    let previous = before.0.clone().filter(|previous| !Arc::ptr_eq(previous, cluster));
                    previous.and_then(|p| self.cluster_endpoints(&p, &before).map(|e| (p, e)))
                }
            },
        };
        match &served {
            Some((cluster, endpoints)) => {
                self.served.clusters.insert(name.clone(), cluster.clone());
                self.served.endpoints.insert(name.clone(), endpoints.clone());
            }
            None => {
                self.served.clusters.remove(&name);
                self.served.endpoints.remove(&name);
            }
        }
        let services = [held.as_ref(), served.as_ref().map(|(c, _)| c)]
            .into_iter()
            .flatten()
            .filter_map(|c| c.resource.eds_service_name())
            .map(str::to_owned)
            .collect();
        self.register_services(&name, services);
        if !same(before.0.as_ref(), served.as_ref().map(|(c, _)| c)) {
            self.pending.clusters.insert(name.clone());
        }
        if !same(before.1.as_ref(), served.as_ref().map(|(_, e)| e)) {
            self.pending.endpoints.insert(name);
        }
    }

    /// Records that cluster `name` follows the endpoints of `services` (and no others).
    fn register_services(&mut self, name: &str, mut services: Vec<String>) {
        services.dedup();
        let previous = match services.is_empty() {
            true => self.cluster_services.remove(name),
            false => self.cluster_services.insert(name.to_owned(), services.clone()),
        };
        for service in previous.unwrap_or_default() {
            if services.contains(&service) {
                continue;
            }
            if let Some(users) = self.eds_users.get_mut(&service) {
                users.remove(name);
                if users.is_empty() {
                    self.eds_users.remove(&service);
                }
            }
        }
        for service in services {
            self.eds_users.entry(service).or_default().insert(name.to_owned());
        }
    }

    /// Brings the served entry of listener `name` in step with what is held.
    fn settle_listener(&mut self, name: String) {
        let held = self.static_listeners.get(&name).or_else(|| self.listeners.get(&name)).cloned();
        let before = self.served.listeners.get(&name).cloned();
        match held {
            None => {
                self.served.warming_listeners.remove(&name);
                self.served.listeners.remove(&name);
            }
            Some(listener) if self.listener_warm(&listener.resource) => {
                self.served.warming_listeners.remove(&name);
                self.served.listeners.insert(name.clone(), listener);
            }
            Some(listener) => {
                // The version served before (if any) stays in service meanwhile.
                self.served.warming_listeners.insert(name.clone(), listener);
            }
        }
        if !same(before.as_ref(), self.served.listeners.get(&name)) {
            self.pending.listeners.insert(name);
        }
    }

    /// The endpoints a cluster is served with, or `None` while it is warming (waiting for
    /// its endpoints or its secrets).
    /// `served` is what the cluster's name serves now: an endpoint list made here (not from
    /// EDS) is kept while the cluster stays the same, so it does not count as changed.
    fn cluster_endpoints(
        &self,
        versioned: &Arc<Versioned<Cluster>>,
        served: &ServedCluster,
    ) -> Option<Arc<Versioned<ClusterLoadAssignment>>> {
        let cluster = &versioned.resource;
        if !self.secrets_ready(cluster.sds_secret_configs().into_iter()) {
            return None;
        }
        let kept = match served {
            (Some(c), Some(e)) if Arc::ptr_eq(c, versioned) => Some(e),
            _ => None,
        };
        match &cluster.discovery {
            DiscoveryType::Eds(eds) => self.endpoints.get(&eds.service_name).cloned().or_else(|| {
                let expired = self.expired.contains(&(ResourceType::ClusterLoadAssignment, eds.service_name.clone()));
                let empty = kept.filter(|e| e.resource.localities.is_empty()).cloned();
                expired.then(|| empty.unwrap_or_else(|| Arc::new(empty_assignment(&cluster.name))))
            }),
            _ if kept.is_some() => kept.cloned(),
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

    /// See the field `references`.
    pub fn references(&self) -> u64 {
        self.references
    }

    /// Removes a held resource; returns whether it was held.
    fn remove(&mut self, resource_type: ResourceType, name: &str) -> bool {
        let held = self.remove_held(resource_type, name);
        if held {
            self.references += 1;
        }
        held
    }

    fn remove_held(&mut self, resource_type: ResourceType, name: &str) -> bool {
        // A removed listener or cluster stops being served at once (no previous version
        // stays in service for one that comes back warming).
        match resource_type {
            ResourceType::Listener => {
                let held = self.listeners.remove(name).is_some();
                if held {
                    if self.served.listeners.remove(name).is_some() {
                        self.pending.listeners.insert(name.to_owned());
                    }
                    self.dirty_listeners.insert(name.to_owned());
                }
                held
            }
            ResourceType::RouteConfiguration => {
                let held = self.routes.remove(name).is_some();
                if held {
                    self.pending.routes.insert(name.to_owned());
                    self.all_listeners_dirty = true;
                }
                held
            }
            ResourceType::Cluster => {
                let held = self.clusters.remove(name).is_some();
                if held {
                    if self.served.clusters.remove(name).is_some() {
                        self.pending.clusters.insert(name.to_owned());
                    }
                    if self.served.endpoints.remove(name).is_some() {
                        self.pending.endpoints.insert(name.to_owned());
                    }
                    self.dirty_clusters.insert(name.to_owned());
                }
                held
            }
            ResourceType::ClusterLoadAssignment => {
                let held = self.endpoints.remove(name).is_some();
                if held {
                    self.endpoints_changed(name);
                }
                held
            }
            ResourceType::Secret => {
                let held = self.secrets.remove(name).is_some();
                if held {
                    self.pending.secrets.insert(name.to_owned());
                    self.secret_presence_changes(true);
                }
                held
            }
        }
    }
}

/// Whether two served entries are the same allocation (or both absent).
fn same<T>(a: Option<&Arc<T>>, b: Option<&Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
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
