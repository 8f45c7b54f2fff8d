//! Keeps the published balancers in step with the served configuration: a control-runtime
//! task that rebuilds a cluster's balancer whenever its cluster or endpoints change.

use std::sync::Arc;
use std::time::Instant;

use crate::core::shutdown::Signal;
use crate::lb::{BalancerBuilder, Balancers};
use crate::store::{Snapshot, Store};

/// Rebuilds balancers on every published snapshot until `shutdown`.
pub async fn keep_balancers(store: Arc<Store>, balancers: Arc<Balancers>, shutdown: Signal) {
    let mut builder = BalancerBuilder::default();
    let mut changes = store.subscribe();
    loop {
        update(&mut builder, &store.load(), &balancers);
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = shutdown.clone().triggered() => return,
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
}
