//! Keeps the published balancers in step with the served configuration: a control-runtime
//! task that rebuilds a cluster's balancer whenever its cluster or endpoints change, or a
//! host's health changes (outlier detection, active health checks).
//!
//! It does work for what changed: each snapshot's change record names the clusters whose
//! cluster or endpoints differ, and only those are compared, rebuilt, and synced with the
//! outlier detectors, health checkers and ORCA streams. Periodic work (weight updates,
//! original destination clean-ups) waits in a schedule holding only the clusters that
//! have it. Only when the record is missing (a snapshot made by hand, or too many
//! generations skipped) is every cluster compared.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use super::outlier_sweeps::OutlierDetectors;
use super::schedule::Schedule;
use crate::config::bootstrap::Node;
use crate::config::{Cluster, ClusterLoadAssignment};
use crate::core::shutdown::Signal;
use crate::health::{HealthCheckers, HealthEvent};
use crate::lb::{BalancerBuilder, Balancers, Shared};
use crate::store::{Snapshot, Store};
use crate::telemetry::Stats;

/// Rebuilds balancers on every published snapshot, and recomputes client-side weighted
/// round robin weights from the endpoints' load reports, until `shutdown`.
/// `node` is the sidecar's: its id chooses `random_subsetting` subsets, its metadata's
/// `OUTRIDER_LB` the policy that replaces the defaults (`ProxyLbPolicy`).
pub async fn keep_balancers(
    store: Arc<Store>,
    balancers: Arc<Balancers>,
    stats: Arc<Stats>,
    node: Node,
    shutdown: Signal,
) {
    let builder = BalancerBuilder::new(stats.clone()).with_identity(&node.id).with_proxy_lb(node.lb_policy);
    let (mut keeper, mut health_events) = Keeper::new(builder, Some(stats));
    let mut changes = store.subscribe();
    let outlier_events = keeper.builder.outlier_wake();
    keeper.follow(&store, &balancers, &shutdown);
    loop {
        let wake = keeper.next_wake().unwrap_or_else(|| tokio::time::Instant::now() + IDLE);
        // Clusters whose balancer must be rebuilt after this turn (each once).
        let mut refresh: BTreeSet<String> = BTreeSet::new();
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                keeper.follow(&store, &balancers, &shutdown);
            }
            _ = tokio::time::sleep_until(wake) => {}
            _ = outlier_events.notified() => {}
            Some(event) = health_events.recv() => {
                on_health_events(event, &mut health_events, &mut keeper.outliers, &mut refresh);
            }
            _ = shutdown.clone().triggered() => return,
        }
        refresh.extend(keeper.outliers.run());
        keeper.refresh(&store.load(), refresh, &balancers, &shutdown);
        keeper.run_due(&balancers);
    }
}

/// What the balancing task keeps between turns.
pub struct Keeper {
    builder: BalancerBuilder,
    /// The generation the balancers were last brought in step with.
    seen: Option<u64>,
    oob: super::oob::OobStreams,
    outliers: OutlierDetectors,
    checkers: HealthCheckers,
    /// When each client-side weighted round robin cluster recomputes its weights next.
    weights: Schedule,
    /// When each ORIGINAL_DST cluster sweeps its on-demand hosts next.
    cleanups: Schedule,
    visited: usize,
}

impl Keeper {
    /// A keeper building with `builder`, registering health check stats in `stats`; and
    /// the receiver of the health checkers' events.
    pub fn new(builder: BalancerBuilder, stats: Option<Arc<Stats>>) -> (Self, UnboundedReceiver<HealthEvent>) {
        let (checkers, health_events) = HealthCheckers::new(stats);
        let keeper = Self {
            builder,
            seen: None,
            oob: Default::default(),
            outliers: Default::default(),
            checkers,
            weights: Schedule::default(),
            cleanups: Schedule::default(),
            visited: 0,
        };
        (keeper, health_events)
    }

    /// Brings the balancers, and everything that follows them, in step with the store's
    /// current snapshot: the clusters its change records name since the last call, or
    /// every cluster when they do not say. Must run on the control runtime.
    pub fn follow(&mut self, store: &Store, balancers: &Balancers, shutdown: &Signal) {
        let snapshot = store.load();
        let changes = self.seen.and_then(|seen| store.changes_since(seen, snapshot.generation));
        let names: Vec<String> = match changes {
            Some(changes) => {
                let names: Vec<String> = changes.balanced_clusters().cloned().collect();
                let served = names.iter().map(|name| (name.as_str(), served(&snapshot, name)));
                self.builder.update_clusters(served, balancers, Instant::now());
                names
            }
            None => {
                update(&mut self.builder, &snapshot, balancers);
                self.every_name(balancers)
            }
        };
        self.seen = Some(snapshot.generation);
        balancers.mark_built_from(snapshot.generation);
        self.sync(&snapshot, balancers, &names, shutdown);
    }

    /// Rebuilds the balancers of `clusters` (their hosts' health or ejections changed).
    fn refresh(&mut self, snapshot: &Snapshot, clusters: BTreeSet<String>, balancers: &Balancers, shutdown: &Signal) {
        let names: Vec<String> =
            clusters.into_iter().filter(|c| self.builder.refresh_cluster(c, balancers, Instant::now())).collect();
        if !names.is_empty() {
            self.sync(snapshot, balancers, &names, shutdown);
        }
    }

    /// Syncs the detectors, checkers, ORCA streams and schedules of `names` with their
    /// (possibly rebuilt) balancers.
    fn sync(&mut self, snapshot: &Snapshot, balancers: &Balancers, names: &[String], shutdown: &Signal) {
        let mut names = names.to_vec();
        // A removed health check rebuilds the balancer, which the others then follow.
        for _ in 0..2 {
            let all = balancers.all();
            self.visited += names.len();
            self.outliers.sync_clusters(snapshot, &all, &names);
            let unchecked = self.checkers.sync_clusters(snapshot, &all, &names);
            self.oob.sync_clusters(&all, &names, shutdown);
            let now = tokio::time::Instant::now();
            for name in &names {
                match all.get(name) {
                    Some(lb) if !lb.weight_updaters().is_empty() => self.weights.set_if_absent(name, now),
                    _ => self.weights.remove(name),
                }
                match all.get(name).and_then(|lb| lb.original_dst()) {
                    Some(original_dst) => self.cleanups.set_if_absent(name, now + original_dst.cleanup_interval),
                    None => self.cleanups.remove(name),
                }
            }
            names =
                unchecked.into_iter().filter(|c| self.builder.refresh_cluster(c, balancers, Instant::now())).collect();
            if names.is_empty() {
                break;
            }
        }
    }

    /// Every cluster anything here follows.
    fn every_name(&self, balancers: &Balancers) -> Vec<String> {
        let mut names: BTreeSet<String> = balancers.all().keys().cloned().collect();
        names.extend(self.outliers.names().cloned());
        names.extend(self.checkers.names().cloned());
        names.extend(self.weights.names().cloned());
        names.extend(self.cleanups.names().cloned());
        names.into_iter().collect()
    }

    /// When the next weight update, clean-up or outlier sweep is due.
    fn next_wake(&self) -> Option<tokio::time::Instant> {
        [self.weights.next(), self.cleanups.next(), self.outliers.next_sweep()].into_iter().flatten().min()
    }

    /// Runs the weight updates and clean-ups that came due, and schedules their next.
    pub fn run_due(&mut self, balancers: &Balancers) {
        let now = tokio::time::Instant::now();
        let (due_weights, due_cleanups) = (self.weights.take_due(now), self.cleanups.take_due(now));
        if due_weights.is_empty() && due_cleanups.is_empty() {
            return;
        }
        let all = balancers.all();
        for name in due_weights {
            let Some(lb) = all.get(&name) else { continue };
            let updaters = lb.weight_updaters();
            let Some(period) = updaters.iter().map(|c| c.config().weight_update_period).min() else { continue };
            updaters.iter().for_each(|cswrr| cswrr.update_weights(now.into_std()));
            self.weights.set(&name, now + period);
        }
        for name in due_cleanups {
            let Some(original_dst) = all.get(&name).and_then(|lb| lb.original_dst()) else { continue };
            let removed = original_dst.hosts.sweep();
            if removed > 0 {
                tracing::debug!(cluster = %name, removed, "original destination hosts cleaned up");
            }
            self.cleanups.set(&name, now + original_dst.cleanup_interval);
        }
    }

    /// Cluster visits by the syncs so far (tests pin that a change visits what changed).
    pub fn visited(&self) -> usize {
        self.visited
    }

    /// The builder, for its counters.
    pub fn builder(&self) -> &BalancerBuilder {
        &self.builder
    }
}

/// What `name` is served with in `snapshot`, if it is served.
fn served(snapshot: &Snapshot, name: &str) -> Option<(Shared<Cluster>, Shared<ClusterLoadAssignment>)> {
    let cluster = snapshot.clusters.get(name)?;
    let endpoints = snapshot.endpoints.get(name)?;
    Some((cluster.clone(), endpoints.clone()))
}

/// Takes `event` and every other health event already queued: a host whose health changed
/// rebuilds its cluster's balancer; a pass may return a host outlier detection ejected.
fn on_health_events(
    event: HealthEvent,
    queued: &mut UnboundedReceiver<HealthEvent>,
    outliers: &mut OutlierDetectors,
    refresh: &mut BTreeSet<String>,
) {
    let mut next = Some(event);
    while let Some(event) = next {
        let unejected = event.passed && outliers.on_health_check_pass(&event.cluster, &event.address);
        if event.changed || unejected {
            refresh.insert(event.cluster);
        }
        next = queued.try_recv().ok();
    }
}

/// How long the task sleeps when no cluster needs periodic work.
const IDLE: Duration = Duration::from_secs(3600);

/// One pass over every served cluster with its endpoints (when what changed is unknown).
pub fn update(builder: &mut BalancerBuilder, snapshot: &Snapshot, balancers: &Balancers) {
    let clusters = snapshot.clusters.iter().filter_map(|(name, cluster)| {
        snapshot.endpoints.get(name).map(|e| (cluster.clone() as Shared<Cluster>, e.clone() as Shared<_>))
    });
    builder.update(clusters, balancers, Instant::now());
    balancers.mark_built_from(snapshot.generation);
}
