//! `random_subsetting`: the endpoints this sidecar uses of a large cluster, so that each
//! sidecar connects to a bounded number of endpoints while the endpoints' load stays even.
//!
//! Rendezvous hashing, as gRPC's A68 does it: per priority level, every endpoint gets the
//! score xxHash64(key, seed) — its key as ring hash places it (the `envoy.lb` `hash_key`, else
//! the address) — and the `subset_size` lowest scores are the subset. Endpoints EDS marks
//! unhealthy, draining or timed out rank after every usable one, so they are only chosen
//! when a level has too few usable endpoints (and then serve as a panic would use them).
//!
//! Why this and not the SRE book's deterministic subsetting: that algorithm hands out
//! subsets by a dense client index (client 0, 1, 2, …) that a sidecar does not have, and it
//! reshuffles every client's subset when one endpoint comes or goes. Rendezvous hashing
//! needs only a distinct identity, and when one endpoint is added or removed a sidecar's
//! subset changes by at most that endpoint. Evenness is that of independent choices: with C
//! sidecars, N endpoints and subsets of k, an endpoint serves C·k/N sidecars on average,
//! closer to even the larger C·k/N is.
//!
//! The one difference from gRPC: the seed is the sidecar's node id, hashed, not a random
//! salt drawn at start, so a restarted pod comes back to the same endpoints (its peers'
//! connection counts do not move) and the choice is reproducible from the configuration.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use xxhash_rust::xxh64::xxh64;

use super::hashing::endpoint_key;
use crate::config::cluster::HashKeySource;
use crate::config::endpoint::{ClusterLoadAssignment, HealthStatus, LbEndpoint, LocalityLbEndpoints};

/// An endpoint as a level ranks it: (EDS says it takes no traffic, its score, it).
type Ranked<'a> = (bool, u64, &'a Arc<LbEndpoint>);

/// The seed of a sidecar whose node id is `node_id`.
pub fn identity_seed(node_id: &str) -> u64 {
    xxh64(node_id.as_bytes(), 0)
}

/// `assignment` with only the chosen endpoints of each priority level: at most `size` per
/// level, the lowest rendezvous scores for `seed`. Localities keep their place and weight,
/// even when none of their endpoints is chosen. Endpoints are shared, not copied.
pub fn subset(assignment: &ClusterLoadAssignment, size: u32, seed: u64) -> ClusterLoadAssignment {
    let mut by_level: BTreeMap<u32, Vec<Ranked<'_>>> = BTreeMap::new();
    for group in &assignment.localities {
        let level = by_level.entry(group.priority).or_default();
        for endpoint in &group.endpoints {
            let unusable = endpoint.health == HealthStatus::Unhealthy;
            let score = xxh64(endpoint_key(endpoint, HashKeySource::Address).as_bytes(), seed);
            level.push((unusable, score, endpoint));
        }
    }
    let mut chosen: HashSet<*const LbEndpoint> = HashSet::new();
    for level in by_level.values_mut() {
        // Ties (equal scores: the same key listed twice) fall back to the address, so the
        // choice never depends on the order EDS listed the endpoints in.
        level.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then_with(|| a.2.address.cmp(&b.2.address)));
        chosen.extend(level.iter().take(size as usize).map(|(_, _, e)| Arc::as_ptr(e)));
    }
    let localities = assignment
        .localities
        .iter()
        .map(|group| LocalityLbEndpoints {
            locality: group.locality.clone(),
            priority: group.priority,
            load_balancing_weight: group.load_balancing_weight,
            endpoints: group.endpoints.iter().filter(|e| chosen.contains(&Arc::as_ptr(e))).cloned().collect(),
        })
        .collect();
    ClusterLoadAssignment {
        cluster_name: assignment.cluster_name.clone(),
        localities,
        overprovisioning_factor: assignment.overprovisioning_factor,
        weighted_priority_health: assignment.weighted_priority_health,
    }
}

#[cfg(test)]
mod tests;
