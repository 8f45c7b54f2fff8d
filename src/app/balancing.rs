//! Keeps the published balancers in step with the served configuration: a control-runtime
//! task that rebuilds a cluster's balancer whenever its cluster or endpoints change, or a
//! host's health changes (outlier detection, active health checks).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::core::shutdown::Signal;
use crate::health::{HealthCheckers, HealthEvent};
use crate::lb::{BalancerBuilder, Balancers};
use crate::store::{Snapshot, Store};
use crate::telemetry::Stats;

/// Rebuilds balancers on every published snapshot, and recomputes client-side weighted
/// round robin weights from the endpoints' load reports, until `shutdown`.
pub async fn keep_balancers(store: Arc<Store>, balancers: Arc<Balancers>, stats: Arc<Stats>, shutdown: Signal) {
    let mut builder = BalancerBuilder::new(stats.clone());
    let mut changes = store.subscribe();
    let mut next_update: HashMap<String, tokio::time::Instant> = HashMap::new();
    let mut next_cleanup: HashMap<String, tokio::time::Instant> = HashMap::new();
    let mut oob = super::oob::OobStreams::default();
    let mut outliers = super::outlier::OutlierDetectors::default();
    let outlier_events = builder.outlier_wake();
    let (mut checkers, mut health_events) = HealthCheckers::new(Some(stats));
    // Clusters whose balancer must be rebuilt after this turn (each once).
    let mut refresh: BTreeSet<String> = BTreeSet::new();
    update(&mut builder, &store.load(), &balancers);
    oob.sync(&balancers, &shutdown);
    loop {
        outliers.sync(&store.load(), &balancers);
        for cluster in checkers.sync(&store.load(), &balancers) {
            builder.refresh_cluster(&cluster, &balancers, Instant::now());
        }
        let wake = next_update
            .values()
            .chain(next_cleanup.values())
            .chain(outliers.next_sweep().as_ref())
            .min()
            .copied()
            .unwrap_or_else(|| tokio::time::Instant::now() + IDLE);
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                update(&mut builder, &store.load(), &balancers);
                oob.sync(&balancers, &shutdown);
            }
            _ = tokio::time::sleep_until(wake) => {}
            _ = outlier_events.notified() => {}
            Some(event) = health_events.recv() => {
                on_health_events(event, &mut health_events, &mut outliers, &mut refresh);
            }
            _ = shutdown.clone().triggered() => return,
        }
        outliers.sync(&store.load(), &balancers);
        refresh.extend(outliers.run());
        for cluster in std::mem::take(&mut refresh) {
            builder.refresh_cluster(&cluster, &balancers, Instant::now());
        }
        update_weights(&balancers, &mut next_update);
        clean_original_dst_hosts(&balancers, &mut next_cleanup);
    }
}

/// Takes `event` and every other health event already queued: a host whose health changed
/// rebuilds its cluster's balancer; a pass may return a host outlier detection ejected.
fn on_health_events(
    event: HealthEvent,
    queued: &mut UnboundedReceiver<HealthEvent>,
    outliers: &mut super::outlier::OutlierDetectors,
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

/// How long the task sleeps when no cluster needs periodic weight updates.
const IDLE: Duration = Duration::from_secs(3600);

/// Recomputes the weights of every CSWRR cluster whose `weight_update_period` came due,
/// and schedules its next update.
fn update_weights(balancers: &Balancers, next_update: &mut HashMap<String, tokio::time::Instant>) {
    let now = tokio::time::Instant::now();
    let all = balancers.all();
    next_update.retain(|name, _| all.contains_key(name));
    for (name, lb) in all.iter() {
        let updaters = lb.weight_updaters();
        let Some(period) = updaters.iter().map(|c| c.config().weight_update_period).min() else {
            next_update.remove(name);
            continue;
        };
        let due = next_update.get(name).is_none_or(|at| *at <= now);
        if due {
            updaters.iter().for_each(|cswrr| cswrr.update_weights(now.into_std()));
            next_update.insert(name.clone(), now + period);
        }
    }
}

/// Sweeps the on-demand hosts of every ORIGINAL_DST cluster whose `cleanup_interval` came
/// due (the first sweep one interval after the cluster appears), and schedules the next.
fn clean_original_dst_hosts(balancers: &Balancers, next_cleanup: &mut HashMap<String, tokio::time::Instant>) {
    let now = tokio::time::Instant::now();
    let all = balancers.all();
    next_cleanup.retain(|name, _| all.get(name).is_some_and(|lb| lb.original_dst().is_some()));
    for (name, lb) in all.iter() {
        let Some(original_dst) = lb.original_dst() else { continue };
        match next_cleanup.get(name) {
            Some(at) if *at > now => {}
            Some(_) => {
                let removed = original_dst.hosts.sweep();
                if removed > 0 {
                    tracing::debug!(cluster = %name, removed, "original destination hosts cleaned up");
                }
                next_cleanup.insert(name.clone(), now + original_dst.cleanup_interval);
            }
            None => {
                next_cleanup.insert(name.clone(), now + original_dst.cleanup_interval);
            }
        }
    }
}

/// One pass: every served cluster with its endpoints.
pub fn update(builder: &mut BalancerBuilder, snapshot: &Snapshot, balancers: &Balancers) {
    let clusters = snapshot
        .clusters
        .iter()
        .filter_map(|(name, cluster)| snapshot.endpoints.get(name).map(|e| (&cluster.resource, &e.resource)));
    builder.update(clusters, balancers, Instant::now());
    balancers.mark_built_from(snapshot.generation);
}
