//! What both stream flavours share: the accepted state, publication, initial-fetch timers
//! and the names each type should be subscribed to.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use super::AdsClientConfig;
use super::sds::{SdsStreams, SdsUpdate};
use super::stats::XdsStats;
use super::timers::Timers;
use super::validate::{Incoming, Verdict, validate_kept};
use crate::config::{Ignored, Resource, ResourceType};
use crate::core::shutdown::Signal;
use crate::pb::pgv::Kept;
use crate::store::{ConfigState, Store, Versioned};

pub struct Session {
    pub state: ConfigState,
    store: Arc<Store>,
    pub timers: Timers,
    /// Ignored fields already logged.
    pub warned: HashSet<Ignored>,
    /// LDS and CDS, when the bootstrap makes them dynamic.
    wildcard_types: Vec<ResourceType>,
    /// Streams for secrets served by other clusters than the ADS server.
    sds: SdsStreams,
    pub stats: XdsStats,
    /// What this client last ACKed, per type: Envoy's subscription state, which a NACK
    /// does not advance even when part of the response was applied. Requests and resumed
    /// streams carry it, not the versions of what is held.
    pub acked: BTreeMap<ResourceType, Acked>,
    /// The constraint validators of recent responses, and when they are dropped: kept while
    /// updates keep coming, released once they stop.
    checks: Kept,
    checks_until: Option<tokio::time::Instant>,
    /// The `ConfigState::references` the dependants were last armed for.
    armed_for: Option<u64>,
}

/// Responses of at least this many resources drop the validators and return the
/// allocator's free pages after their conversion (see `Session::validate`).
const LARGE_RESPONSE: usize = 1000;
/// Or this many bytes of resources (one route configuration of a mesh's virtual hosts).
const LARGE_RESPONSE_BYTES: usize = 1 << 20;

/// How long the constraint validators outlive the last response they checked: long enough
/// for the responses of one push (istiod sends CDS, then EDS, LDS and RDS within a second
/// or two) to share one decoding of the descriptor sets (about 13 ms,
/// `bench/RESULTS.md`), short enough that a proxy between pushes does not hold them: they
/// are about 12 MiB resident, more than half of an idle sidecar (60 s kept them through
/// the idle measurements that follow traffic: 35.6 MiB where 23.6 once released).
const KEEP_CHECKS: std::time::Duration = std::time::Duration::from_secs(3);

/// The last ACKed state of one type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acked {
    /// SotW: the `version_info` of the last ACKed response.
    pub version_info: String,
    /// Delta: the version of each resource as of the ACKed responses (sent back as
    /// `initial_resource_versions` when a stream resumes).
    pub resources: BTreeMap<String, String>,
}

impl Session {
    pub fn new(state: ConfigState, store: Arc<Store>, config: &AdsClientConfig, shutdown: Signal) -> Self {
        let mut timers = Timers::default();
        let mut wildcard_types = Vec::new();
        for (resource_type, source) in [(ResourceType::Cluster, config.cds), (ResourceType::Listener, config.lds)] {
            if let Some(source) = source {
                wildcard_types.push(resource_type);
                if let Some(timeout) = source.initial_fetch_timeout {
                    timers.arm(resource_type, "", timeout);
                }
            }
        }
        let sds = SdsStreams::new(config.node.clone(), shutdown, config.seed);
        let mut session = Self {
            state,
            store,
            timers,
            warned: HashSet::new(),
            wildcard_types,
            sds,
            stats: XdsStats::default(),
            acked: BTreeMap::new(),
            checks: Kept::default(),
            checks_until: None,
            armed_for: None,
        };
        session.arm_dependants();
        session
    }

    /// See [`ConfigState::references`].
    pub fn references(&self) -> u64 {
        self.state.references()
    }

    /// Whether this client subscribes to `resource_type` by wildcard.
    pub fn is_wildcard_subscribed(&self, resource_type: ResourceType) -> bool {
        self.wildcard_types.contains(&resource_type)
    }

    /// The names `resource_type` should be subscribed to now (empty for wildcard types).
    pub fn wanted(&self, resource_type: ResourceType) -> BTreeSet<String> {
        self.state.wanted(resource_type)
    }

    /// Applies what a response's verdict accepted (`accepted`, `removed`) and publishes the
    /// resulting snapshot. `whole` says the response was accepted whole (it is then ACKed);
    /// otherwise it is NACKed and counts as rejected, as Envoy counts it, even though its
    /// valid resources were applied.
    pub fn accept(
        &mut self,
        resource_type: ResourceType,
        version_info: &str,
        accepted: Vec<Versioned<Resource>>,
        removed: &[String],
        whole: bool,
    ) {
        let count = accepted.len();
        // What arrived stops its initial-fetch timer (a type's first response, its own).
        self.timers.disarm(resource_type, "");
        for resource in &accepted {
            self.timers.disarm(resource_type, resource.resource.name());
        }
        if whole {
            self.stats.accepted(resource_type, version_info, &accepted, removed);
        } else {
            self.stats.rejected(resource_type);
            self.stats.applied_endpoints(resource_type, &accepted, removed);
        }
        let applied = self.state.apply(resource_type, version_info, accepted, removed, false);
        tracing::info!(
            resource = resource_type.short_name(),
            version = version_info,
            updated = count,
            removed = removed.len(),
            changed = applied,
            whole,
            "accepted"
        );
        self.arm_dependants();
        self.publish();
    }

    /// The held resources of `resource_type` that `names` does not list: what a SotW
    /// LDS/CDS response removes.
    pub fn not_named(&self, resource_type: ResourceType, names: &BTreeSet<String>) -> Vec<String> {
        self.state.held_names(resource_type).filter(|n| !names.contains(n)).collect()
    }

    /// The `version_info` of the last ACKed response of `resource_type`.
    pub fn acked_version(&self, resource_type: ResourceType) -> String {
        self.acked.get(&resource_type).map(|a| a.version_info.clone()).unwrap_or_default()
    }

    /// Drops held resources nobody refers to any more (after an unsubscription).
    pub fn forget(&mut self, resource_type: ResourceType, names: &[String]) {
        if names.is_empty() {
            return;
        }
        let version = self.state.version_info(resource_type).to_owned();
        self.state.apply(resource_type, &version, Vec::new(), names, false);
        self.publish();
    }

    /// Waits for one event besides the ADS stream (an initial fetch timing out, secrets
    /// arriving on an SDS stream) and handles it. Cancel-safe: used in `select!` loops.
    pub async fn background(&mut self) {
        let release_checks = self.checks_until.unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            due = self.timers.fired() => self.expire(due),
            Some(update) = self.sds.updates.recv() => self.accept_secrets(update),
            () = tokio::time::sleep_until(release_checks), if self.checks_until.is_some() => {
                self.checks = Kept::default();
                self.checks_until = None;
                crate::core::allocator::release_free_memory();
            }
        }
    }

    /// Converts and checks the resources of one response (see [`validate_kept`]).
    pub fn validate(&mut self, resource_type: ResourceType, incoming: Vec<Incoming>) -> Verdict {
        let large = incoming.len() >= LARGE_RESPONSE
            || incoming.iter().map(|i| i.bytes.len()).sum::<usize>() >= LARGE_RESPONSE_BYTES;
        let verdict = validate_kept(&mut self.checks, Some(&self.state), resource_type, incoming, &mut self.warned);
        self.checks_until = (!self.checks.is_empty()).then(|| tokio::time::Instant::now() + KEEP_CHECKS);
        if large {
            // A mesh's worth of resources comes at start-up or on a reconnect, not every few
            // seconds: decoding the validators again for the next one costs little beside
            // it, so they go now rather than stay resident for `KEEP_CHECKS`. And decoding
            // and checking leaves pages of freed temporaries among the kept objects; hand
            // them back rather than keep them resident until the next large response.
            self.checks = Kept::default();
            self.checks_until = None;
            crate::core::allocator::release_free_memory();
        }
        verdict
    }

    fn accept_secrets(&mut self, SdsUpdate { version, secrets, whole }: SdsUpdate) {
        self.accept(ResourceType::Secret, &version, secrets, &[], whole);
    }

    /// Initial fetches that timed out: serve what waited for them.
    pub fn expire(&mut self, due: Vec<(ResourceType, String)>) {
        let mut expired = false;
        for (resource_type, name) in due {
            if self.state.arrived(resource_type, &name) {
                continue;
            }
            tracing::warn!(resource = resource_type.short_name(), %name, "initial fetch timed out; serving without it");
            self.state.expire(resource_type, &name);
            expired = true;
        }
        if expired {
            self.publish();
        }
    }

    pub fn publish(&mut self) {
        self.store.publish(self.state.snapshot());
    }

    /// Arms initial-fetch timers for newly referenced EDS, RDS and SDS names, and points
    /// the SDS streams at the secrets now referenced.
    fn arm_dependants(&mut self) {
        // Timers arm once per name and the SDS streams follow references: nothing to do
        // until listeners or clusters change (an EDS push among thousands costs nothing here).
        if self.armed_for == Some(self.state.references()) {
            return;
        }
        self.armed_for = Some(self.state.references());
        for (name, timeout) in self.state.warming_secret_timeouts() {
            self.timers.arm(ResourceType::Secret, &name, timeout);
        }
        let state = &self.state;
        self.sds.sync(state.wanted_sds(), |cluster| state.static_cluster_address(cluster));
        for (name, timeout) in self.state.warming_eds_timeouts() {
            self.timers.arm(ResourceType::ClusterLoadAssignment, &name, timeout);
        }
        if let Some(timeout) = self.state.timeouts().rds {
            for name in self.state.wanted(ResourceType::RouteConfiguration) {
                self.timers.arm(ResourceType::RouteConfiguration, &name, timeout);
            }
        }
    }
}
