//! Golden values from Envoy's `bounded_load_hlb_test.cc` (the expectations, not the code),
//! and a hot key spilling over a real ring.

use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::*;
use crate::config::cluster::RingHashConfig;
use crate::lb::hashing;
use crate::lb::pick_context::PickContext;
use crate::lb::ring_hash::RingHash;
use crate::lb::{EndpointStats, InFlight};
use crate::telemetry::ClusterStats;
use crate::telemetry::GaugeGuard;

/// `n` hosts of one cluster (one `upstream_rq_active` between them).
fn cluster_hosts(n: usize) -> Vec<Arc<Host>> {
    let cluster = Arc::new(ClusterStats::default());
    crate::lb::test_hosts::hosts(n, Instant::now())
        .into_iter()
        .map(|host| {
            let stats = Arc::new(EndpointStats::new(Instant::now()));
            Arc::new(Host { cluster_stats: cluster.clone(), stats, ..(*host).clone() })
        })
        .collect()
}

fn equal(hosts: &[Arc<Host>], factor: u32) -> BoundedLoad {
    BoundedLoad::new(factor, &hashing::normalize(&vec![1.0; hosts.len()], hosts.len()), hosts.len())
}

/// A request in flight on `host`, as the proxy counts it: on the host and on its cluster.
fn start(host: &Arc<Host>) -> (InFlight, GaugeGuard) {
    (host.stats.start(), host.cluster_stats.upstream_rq_active.track())
}

/// Only on the host: the cluster's gauge is left where the test sets it.
fn start_on_host(host: &Arc<Host>, n: usize) -> Vec<InFlight> {
    (0..n).map(|_| host.stats.start()).collect()
}

/// The C++ standard's check of `std::mt19937`: the 10 000th output of the default seed.
#[test]
fn the_twister_is_std_mt19937() {
    let mut twister = Mt::new(5489);
    let last = (0..10_000).map(|_| twister.next_u32()).last();
    assert_eq!(last, Some(4_123_659_995));
}

/// "The random shuffle sequence of 5 elements with seed 2 is 2 1 0 4 3", with 6 it is
/// 4 0 2 3 1 and with 7 it is 0 1 4 3 2.
#[test]
fn shuffles_match_envoys() {
    let shuffle = |seed| Shuffle::new((0..5).collect(), seed).collect::<Vec<_>>();
    assert_eq!(shuffle(2), [2, 1, 0, 4, 3]);
    assert_eq!(shuffle(6), [4, 0, 2, 3, 1]);
    assert_eq!(shuffle(7), [0, 1, 4, 3, 2]);
    // Only the low 32 bits seed the twister.
    assert_eq!(Shuffle::new((0..5).collect(), (1 << 32) | 2).collect::<Vec<_>>(), [2, 1, 0, 4, 3]);
}

/// Envoy's `NoHostEverOverloaded`: every host keeps its own hashes.
#[test]
fn a_host_within_its_bound_is_kept() {
    let hosts = cluster_hosts(5);
    let bounded = equal(&hosts, 150);
    for i in 0..5 {
        assert_eq!(bounded.choose(&hosts, i as u64, i), i);
    }
}

/// Envoy's `ActualHostOverloaded`: factor 1, nothing active in the cluster, two requests on
/// host 2: its bound is one slot, so hash 2 spills to host 1 (its shuffle is 2 1 0 4 3).
#[test]
fn an_overloaded_host_spills_to_the_next_in_the_shuffle() {
    let hosts = cluster_hosts(5);
    let bounded = equal(&hosts, 1);
    assert_eq!(bounded.choose(&hosts, 2, 2), 2);
    let _load = start_on_host(&hosts[2], 2);
    assert_eq!(bounded.choose(&hosts, 2, 2), 1);
}

/// Envoy's `MultipleHostOverloaded`: hosts 0, 1 and 2 over their bound; hash 2 passes over
/// 2, 1 and 0 and lands on 4.
#[test]
fn a_spill_passes_over_every_overloaded_host() {
    let hosts = cluster_hosts(5);
    let bounded = equal(&hosts, 100);
    // 9 active: 10 slots, 2 a host; three on each of hosts 0–2 is over.
    let _load: Vec<_> = hosts[..3].iter().flat_map(|h| (0..3).map(|_| start(h))).collect();
    assert_eq!(bounded.choose(&hosts, 2, 2), 4);
    assert_eq!(bounded.choose(&hosts, 3, 3), 3, "host 3 is within its bound");
}

/// Envoy's `AllHostsOverloaded`: the least overloaded host is used.
#[test]
fn with_every_host_over_the_least_overloaded_wins() {
    let hosts = cluster_hosts(3);
    let bounded = equal(&hosts, 100);
    // The cluster's gauge says 0 (a bound of one slot) while the hosts carry 3, 2 and 4.
    let _load: Vec<_> = [3, 2, 4].iter().zip(&hosts).flat_map(|(&n, h)| start_on_host(h, n)).collect();
    assert_eq!(bounded.choose(&hosts, 0, 0), 1);
}

#[test]
fn no_hosts_keeps_the_first() {
    let bounded = BoundedLoad::new(150, &hashing::normalize(&[], 0), 0);
    assert_eq!(bounded.choose(&[], 9, 0), 0);
}

/// One hot key on a ring of five: its requests stay on its host up to the bound and the
/// excess moves; keys placed on the other hosts keep their hosts throughout.
#[test]
fn a_hot_keys_excess_moves_while_other_keys_stay_put() {
    let hosts = cluster_hosts(5);
    let config = RingHashConfig { hash_balance_factor: Some(150), ..RingHashConfig::default() };
    let ring = RingHash::new(&hosts, &[1.0; 5], &config);
    let mut rng = SmallRng::seed_from_u64(1);
    let now = Instant::now();
    let pick = |rng: &mut SmallRng, hash: u64| {
        ring.pick(&hosts, rng, &PickContext { hash: Some(hash), ..PickContext::at(now) }).unwrap()
    };
    let keys: Vec<u64> = (0..200).map(|k| hashing::xxhash64(format!("key-{k}").as_bytes())).collect();
    let placed: Vec<usize> = keys.iter().map(|&k| pick(&mut rng, k)).collect();
    let hot_key = keys[0];
    let home = placed[0];

    let mut held = Vec::new();
    let mut went = [0_usize; 5];
    for _ in 0..40 {
        let host = pick(&mut rng, hot_key);
        went[host] += 1;
        held.push(start(&hosts[host]));
    }
    // The 40th request saw 39 active: the host's bound was ceil(⌊(40 × 150 + 99) / 100⌋ / 5)
    // = 12 requests besides it.
    assert_eq!(went[home], 13, "the hot key's host took up to its bound: {went:?}");
    assert!(went.iter().filter(|&&n| n > 0).count() >= 3, "the excess spread out: {went:?}");
    assert!(went.iter().all(|&n| n <= 13), "no host above the bound: {went:?}");
    for (&key, &host) in keys.iter().zip(&placed) {
        if host != home {
            assert_eq!(pick(&mut rng, key), host, "a key of another host moved");
        }
    }
    // Keys of the hot host spill while it is over its bound (two more requests put it at 15
    // of 13), and come back once its load is gone.
    held.extend([start(&hosts[home]), start(&hosts[home])]);
    let cold_on_home: Vec<u64> =
        keys.iter().zip(&placed).skip(1).filter(|(_, h)| **h == home).map(|(k, _)| *k).collect();
    assert!(!cold_on_home.is_empty());
    assert!(cold_on_home.iter().all(|&k| pick(&mut rng, k) != home));
    drop(held);
    assert!(cold_on_home.iter().all(|&k| pick(&mut rng, k) == home));
}
