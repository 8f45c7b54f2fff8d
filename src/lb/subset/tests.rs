//! Subsets over simulated sidecars: evenness across 1 000 of them, stability under endpoint
//! churn, independence from EDS order.

use std::collections::BTreeSet;

use super::*;
use crate::config::Address;
use crate::config::endpoint::Locality;

fn endpoint(i: usize, health: HealthStatus) -> Arc<LbEndpoint> {
    Arc::new(LbEndpoint {
        address: Address::Socket(format!("10.1.{}.{}:8080", i / 250, i % 250).parse().unwrap()),
        weight: 1,
        health,
        hash_key: None,
        transport_socket_match: Default::default(),
        hostname: String::new(),
        health_check: None,
        additional_addresses: Box::default(),
        metadata: None,
    })
}

fn group(priority: u32, zone: &str, endpoints: Vec<Arc<LbEndpoint>>) -> LocalityLbEndpoints {
    let locality = Locality { zone: zone.into(), ..Locality::default() };
    LocalityLbEndpoints { locality, priority, load_balancing_weight: Some(1), endpoints }
}

fn assignment(groups: Vec<LocalityLbEndpoints>) -> ClusterLoadAssignment {
    ClusterLoadAssignment { localities: groups, ..ClusterLoadAssignment::empty("c") }
}

fn healthy(range: std::ops::Range<usize>) -> Vec<Arc<LbEndpoint>> {
    range.map(|i| endpoint(i, HealthStatus::Healthy)).collect()
}

/// Istio's node id for sidecar `i`.
fn node(i: usize) -> u64 {
    identity_seed(&format!("sidecar~10.2.{}.{}~client-{i}.default~default.svc.cluster.local", i / 250, i % 250))
}

fn chosen(assignment: &ClusterLoadAssignment) -> BTreeSet<Address> {
    assignment.localities.iter().flat_map(|g| g.endpoints.iter().map(|e| e.address.clone())).collect()
}

/// 1 000 sidecars, 100 endpoints, subsets of 10: every endpoint serves 100 sidecars on
/// average, none more than 1.35× or fewer than 0.65× that (independent choices: the spread
/// is binomial, σ ≈ 9.5; these identities give 73 to 131), and every sidecar has exactly 10.
#[test]
fn load_stays_even_over_a_thousand_sidecars() {
    let cluster = assignment(vec![group(0, "a", healthy(0..100))]);
    let mut served: std::collections::BTreeMap<Address, usize> = Default::default();
    for client in 0..1000 {
        let mine = chosen(&subset(&cluster, 10, node(client)));
        assert_eq!(mine.len(), 10);
        for address in mine {
            *served.entry(address).or_default() += 1;
        }
    }
    assert_eq!(served.len(), 100, "every endpoint serves someone");
    let (least, most) = (served.values().min().copied().unwrap(), served.values().max().copied().unwrap());
    assert!((65..=135).contains(&least) && (65..=135).contains(&most), "least {least}, most {most}");
}

/// Removing one endpoint changes only the subsets that held it, each by that endpoint;
/// adding one changes a subset by at most one endpoint, and only about k/N of them.
#[test]
fn endpoint_churn_moves_at_most_one_endpoint_per_sidecar() {
    let before = assignment(vec![group(0, "a", healthy(0..100))]);
    let mut fewer = healthy(0..100);
    let gone = fewer.remove(37).address.clone();
    let fewer = assignment(vec![group(0, "a", fewer)]);
    let more = assignment(vec![group(0, "a", healthy(0..101))]);
    let mut changed_by_adding = 0;
    for client in 0..1000 {
        let seed = node(client);
        let was = chosen(&subset(&before, 10, seed));
        let now = chosen(&subset(&fewer, 10, seed));
        if was.contains(&gone) {
            assert_eq!(was.difference(&now).collect::<Vec<_>>(), vec![&gone]);
            assert_eq!(now.difference(&was).count(), 1);
        } else {
            assert_eq!(was, now, "sidecar {client} did not hold the removed endpoint");
        }
        let grown = chosen(&subset(&more, 10, seed));
        let moved = was.difference(&grown).count();
        assert!(moved <= 1, "sidecar {client}: {moved} endpoints moved");
        changed_by_adding += moved;
    }
    // k/N of 1 000 sidecars rank the new endpoint among their 10: about 99.
    assert!((50..=150).contains(&changed_by_adding), "{changed_by_adding} subsets took the new endpoint");
}

#[test]
fn the_subset_does_not_depend_on_eds_order_or_localities() {
    let seed = node(7);
    let one = assignment(vec![group(0, "a", healthy(0..40))]);
    let mut reversed = healthy(0..40);
    reversed.reverse();
    let split = assignment(vec![group(0, "b", reversed[..25].to_vec()), group(0, "a", reversed[25..].to_vec())]);
    assert_eq!(chosen(&subset(&one, 6, seed)), chosen(&subset(&split, 6, seed)));
    // Another sidecar, another subset.
    assert_ne!(chosen(&subset(&one, 6, seed)), chosen(&subset(&one, 6, node(8))));
}

/// Each priority level gets its own subset; localities keep their place and weight.
#[test]
fn each_priority_level_has_its_own_subset() {
    let cluster =
        assignment(vec![group(0, "a", healthy(0..20)), group(0, "b", healthy(20..40)), group(1, "c", healthy(40..60))]);
    let mine = subset(&cluster, 5, node(3));
    assert_eq!(mine.localities.len(), 3);
    let per_level = |p: u32| mine.localities.iter().filter(|g| g.priority == p).map(|g| g.endpoints.len()).sum();
    assert_eq!((per_level(0), per_level(1)), (5, 5));
    assert!(mine.localities.iter().all(|g| g.load_balancing_weight == Some(1)));
}

/// Unhealthy endpoints rank last: chosen only to fill a level that has too few others.
#[test]
fn unhealthy_endpoints_fill_only_what_healthy_ones_cannot() {
    let mut endpoints = healthy(0..4);
    endpoints.extend((4..30).map(|i| endpoint(i, HealthStatus::Unhealthy)));
    let mine = subset(&assignment(vec![group(0, "a", endpoints)]), 6, node(1));
    let all: Vec<_> = mine.localities.iter().flat_map(|g| &g.endpoints).collect();
    assert_eq!(all.len(), 6);
    assert_eq!(all.iter().filter(|e| e.health == HealthStatus::Healthy).count(), 4);
}

#[test]
fn a_small_cluster_is_used_whole() {
    let cluster = assignment(vec![group(0, "a", healthy(0..3))]);
    assert_eq!(subset(&cluster, 10, node(0)), cluster);
}
