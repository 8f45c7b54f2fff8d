//! Golden values from Envoy's `bounded_load_hlb_test.cc` (the expectations, not the code).
//! A hot key spilling over a real ring is in `ring_hash`'s tests.

use std::sync::Arc;
use std::time::Instant;

use super::*;
use crate::lb::InFlight;
use crate::lb::hashing;
use crate::lb::test_hosts::start;

fn cluster_hosts(n: usize) -> Vec<Arc<Host>> {
    crate::lb::test_hosts::cluster_hosts(n, Instant::now())
}

fn equal(hosts: &[Arc<Host>], factor: u32) -> BoundedLoad {
    BoundedLoad::new(factor, &hashing::normalize(&vec![1.0; hosts.len()], hosts.len()), hosts.len())
}

/// Only on the host: the cluster's gauge is left where the test sets it.
fn start_on_host(host: &Arc<Host>, n: usize) -> Vec<InFlight> {
    (0..n).map(|_| host.stats.start(Instant::now())).collect()
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
