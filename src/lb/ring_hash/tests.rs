//! Golden values from Envoy's `ring_hash_lb_test.cc` (the expectations, not the code):
//! the same hosts and hashes must reach the same host as in Envoy.

use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;

use super::*;
use crate::config::cluster::HashKeySource;
use crate::lb::hashing::test_host;

fn ports(ports: std::ops::Range<u16>) -> Vec<Arc<Host>> {
    ports.map(|p| test_host(&format!("127.0.0.1:{p}"), "", None)).collect()
}

fn config(min: u64, max: u64) -> RingHashConfig {
    RingHashConfig { minimum_ring_size: min, maximum_ring_size: max, ..RingHashConfig::default() }
}

fn ring(hosts: &[Arc<Host>], weights: &[f64], config: &RingHashConfig) -> RingHash {
    RingHash::new(hosts, weights, config)
}

fn ones(n: usize) -> Vec<f64> {
    vec![1.0; n]
}

/// Envoy's `Basic`: six hosts, minimum ring 12 → two entries each, at these positions.
#[test]
fn basic_ring_matches_envoy() {
    let hosts = ports(90..96);
    let ring = ring(&hosts, &ones(6), &config(12, 8_388_608));
    assert_eq!(ring.len(), 12);
    assert_eq!(ring.hashes_per_host(), (2, 2));
    let expected: [(u64, usize); 12] = [
        (833437586790550860, 4),
        (928266305478181108, 2),
        (1033482794131418490, 0),
        (3551244743356806947, 5),
        (3851675632748031481, 3),
        (5583722120771150861, 1),
        (6311230543546372928, 1),
        (7700377290971790572, 3),
        (13144177310400110813, 5),
        (13444792449719432967, 2),
        (15516499411664133160, 4),
        (16117243373044804889, 0),
    ];
    assert_eq!(ring.entries().collect::<Vec<_>>(), expected);
    assert_eq!(ring.choose(0, 0), Some(4));
    assert_eq!(ring.choose(u64::MAX, 0), Some(4));
    assert_eq!(ring.choose(3551244743356806947, 0), Some(5));
    assert_eq!(ring.choose(3551244743356806948, 0), Some(3));
    assert_eq!(ring.choose(16117243373044804880, 0), Some(0));
}

/// Envoy's `BasicWithRetryHostPredicate`: attempt k moves k entries along the ring.
#[test]
fn retries_walk_the_ring_like_envoy() {
    let hosts = ports(90..96);
    let ring = ring(&hosts, &ones(6), &config(12, 8_388_608));
    assert_eq!(ring.choose(0, 0), Some(4));
    assert_eq!(ring.choose(0, 1), Some(2));
    assert_eq!(ring.choose(0, 2), Some(0));
    assert_eq!(ring.choose(0, 13), Some(2));
}

/// Envoy's `BasicWithHostname` and `BasicWithMetadataHashKey`: keys "90".."95".
#[test]
fn hostname_and_metadata_keys_match_envoy() {
    let by_hostname: Vec<_> = (90..96).map(|p| test_host(&format!("127.0.0.1:{p}"), &p.to_string(), None)).collect();
    let by_metadata: Vec<_> =
        (90..96).map(|p| test_host(&format!("127.0.0.1:{p}"), "", Some(&p.to_string()))).collect();
    let hostname_config = RingHashConfig { hash_key: HashKeySource::Hostname, ..config(12, 8_388_608) };
    for ring in [ring(&by_hostname, &ones(6), &hostname_config), ring(&by_metadata, &ones(6), &config(12, 8_388_608))] {
        assert_eq!(ring.hashes_per_host(), (2, 2));
        assert_eq!(ring.entries().next(), Some((1975508444536362413, 5)));
        assert_eq!(ring.entries().last(), Some((15364271037087512980, 4)));
        assert_eq!(ring.choose(0, 0), Some(5));
        assert_eq!(ring.choose(u64::MAX, 0), Some(5));
        assert_eq!(ring.choose(7225015537174310577, 0), Some(2));
        assert_eq!(ring.choose(6803900775736438537, 0), Some(3));
    }
    // With the address as key, the hostname is not used.
    let by_address = ring(&by_hostname, &ones(6), &config(12, 8_388_608));
    assert_eq!(by_address.choose(0, 0), Some(4));
}

/// Envoy's `UnevenHosts`: two hosts, minimum 3 → four entries.
#[test]
fn uneven_hosts_match_envoy() {
    let ring1 = ring(&ports(80..82), &ones(2), &config(3, 8_388_608));
    assert_eq!(
        ring1.entries().collect::<Vec<_>>(),
        [(5454692015285649509, 0), (7859399908942313493, 1), (13838424394637650569, 0), (16064866803292627174, 1)]
    );
    let ring2 = ring(&ports(81..83), &ones(2), &config(3, 8_388_608));
    assert_eq!(
        ring2.entries().collect::<Vec<_>>(),
        [(7859399908942313493, 0), (8241336090459785962, 1), (12882406409176325258, 1), (16064866803292627174, 0)]
    );
    assert_eq!(ring2.choose(0, 0), Some(0));
}

/// Envoy's `HostWeightedTinyRing`: weights 1, 2, 3 on a ring of exactly 6.
#[test]
fn host_weighted_tiny_ring_matches_envoy() {
    let ring = ring(&ports(90..93), &[1.0, 2.0, 3.0], &config(6, 6));
    assert_eq!(ring.len(), 6);
    assert_eq!(ring.hashes_per_host(), (1, 3));
    for (hash, host) in [
        (928266305478181108, 2),
        (4443673547860492590, 2),
        (5583722120771150861, 1),
        (6311230543546372928, 1),
        (13444792449719432967, 2),
        (16117243373044804889, 0),
    ] {
        assert_eq!(ring.choose(hash, 0), Some(host), "hash {hash}");
    }
}

/// Counts of hosts hit by `n` hashes spread evenly over the u64 range (Envoy's loop).
fn spread(ring: &RingHash, n: u64, hosts: usize) -> Vec<u32> {
    let mut counts = vec![0; hosts];
    for i in 0..n {
        counts[ring.choose(i * (u64::MAX / n), 0).unwrap()] += 1;
    }
    counts
}

/// Envoy's `HostWeightedLargeRing`.
#[test]
fn host_weighted_large_ring_matches_envoy() {
    let ring = ring(&ports(90..93), &[1.0, 2.0, 3.0], &config(6144, 8_388_608));
    assert_eq!(ring.len(), 6144);
    assert_eq!(ring.hashes_per_host(), (1024, 3072));
    assert_eq!(spread(&ring, 6000, 3), [987, 1932, 3081]);
}

/// Envoy's locality normalisation: `w × (lw / Σlw) / Σw_in_locality`, as the balancer
/// computes it.
fn locality_weights(hosts: &[(u32, f64)], locality: &[f64]) -> Vec<f64> {
    let locality_sum: f64 = locality.iter().sum();
    hosts
        .iter()
        .map(|&(l, w)| {
            let in_locality: f64 = hosts.iter().filter(|(m, _)| *m == l).map(|(_, w)| w).sum();
            w * (locality[l as usize] / locality_sum) / in_locality
        })
        .collect()
}

/// Envoy's `LocalityWeightedTinyRing` and `LocalityWeightedLargeRing`: localities weighted
/// 1, 2, 3 and 0, one host each.
#[test]
fn locality_weighted_rings_match_envoy() {
    let weights = locality_weights(&[(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0)], &[1.0, 2.0, 3.0, 0.0]);
    let tiny = ring(&ports(90..94), &weights, &config(6, 6));
    assert_eq!(tiny.len(), 6);
    assert_eq!(tiny.hashes_per_host(), (1, 3));
    for (hash, host) in [
        (928266305478181108, 2),
        (4443673547860492590, 2),
        (5583722120771150861, 1),
        (6311230543546372928, 1),
        (13444792449719432967, 2),
        (16117243373044804889, 0),
    ] {
        assert_eq!(tiny.choose(hash, 0), Some(host), "hash {hash}");
    }
    let large = ring(&ports(90..94), &weights, &config(6144, 8_388_608));
    assert_eq!(large.len(), 6144);
    assert_eq!(large.hashes_per_host(), (1024, 3072));
    assert_eq!(spread(&large, 6000, 4), [987, 1932, 3081, 0]);
}

/// Envoy's `HostAndLocalityWeightedTinyRing` and `...LargeRing`.
#[test]
fn host_and_locality_weighted_rings_match_envoy() {
    let weights = locality_weights(&[(0, 1.0), (0, 2.0), (1, 1.0), (1, 2.0)], &[1.0, 2.0]);
    let tiny = ring(&ports(90..94), &weights, &config(9, 9));
    assert_eq!(tiny.len(), 9);
    assert_eq!(tiny.hashes_per_host(), (1, 4));
    for (hash, host) in [
        (928266305478181108, 2),
        (3851675632748031481, 3),
        (5583722120771150861, 1),
        (6311230543546372928, 1),
        (7700377290971790572, 3),
        (12559126875973811811, 3),
        (13444792449719432967, 2),
        (13784988426630141778, 3),
        (16117243373044804889, 0),
    ] {
        assert_eq!(tiny.choose(hash, 0), Some(host), "hash {hash}");
    }
    let large = ring(&ports(90..94), &weights, &config(9216, 8_388_608));
    assert_eq!(large.len(), 9216);
    assert_eq!(large.hashes_per_host(), (1024, 4096));
    assert_eq!(spread(&large, 9000, 4), [924, 2009, 2053, 4014]);
}

/// Envoy's `SmallFractionalScale` and `LargeFractionalScale`.
#[test]
fn fractional_scales_match_envoy() {
    let small = ring(&ports(90..94), &ones(4), &config(2, 2));
    assert_eq!(small.len(), 2);
    assert_eq!(small.hashes_per_host(), (0, 1));
    let counts = spread(&small, 1024, 4);
    assert_eq!(counts.iter().filter(|&&c| c == 0).count(), 2);
    assert_eq!(counts.iter().sum::<u32>(), 1024);

    let large = ring(&ports(90..92), &ones(2), &config(1023, 1023));
    assert_eq!(large.len(), 1023);
    assert_eq!(large.hashes_per_host(), (511, 512));
    assert_eq!(spread(&large, 1023, 2), [526, 497]);
}

/// Envoy's `LopsidedWeightSmallScale`: 1 heavy host (locality weight 127) and 1023 light
/// ones (locality weight 1) on a ring of exactly 1024.
#[test]
fn lopsided_weights_match_envoy() {
    let hosts = ports(0..1024);
    let layout: Vec<(u32, f64)> = (0..1024).map(|i| (u32::from(i != 0), 1.0)).collect();
    let weights = locality_weights(&layout, &[127.0, 1.0]);
    let ring = ring(&hosts, &weights, &config(1024, 1024));
    assert_eq!(ring.len(), 1024);
    assert_eq!(ring.hashes_per_host(), (0, 1016));
    for (hash, host) in [
        (11664790346325243808, 1),
        (15894554872961148518, 128),
        (13958138884277627155, 256),
        (15803774069438192949, 384),
        (3829253010855396576, 512),
        (17918147347826565154, 640),
        (6442769608292299103, 768),
        (5881074926069334434, 896),
    ] {
        assert_eq!(ring.choose(hash, 0), Some(host), "hash {hash}");
    }
}

/// Envoy's `ZeroLocalityWeights` and `NoHost`: nothing to pick.
#[test]
fn no_usable_host_picks_nothing() {
    let mut rng = rand::SeedableRng::seed_from_u64(1);
    let zero = ring(&ports(90..92), &[0.0, 0.0], &RingHashConfig::default());
    assert!(zero.is_empty());
    assert_eq!(zero.pick(&[], &mut rng, &PickContext::at(std::time::Instant::now())), None);
    assert!(ring(&[], &[], &RingHashConfig::default()).is_empty());
}

/// Envoy's `BasicFailover` ring: one host, minimum 12 → 12 entries.
#[test]
fn single_host_fills_the_minimum() {
    let ring = ring(&ports(82..83), &ones(1), &config(12, 8_388_608));
    assert_eq!((ring.len(), ring.hashes_per_host()), (12, (12, 12)));
}

/// The default sizes: three equal hosts get `ceil(1024 / 3)` = 342 entries each
/// (`ceil(⅓ × 1024) / ⅓` rounds to exactly 1026.0 in f64), a ring of 1026.
#[test]
fn default_ring_of_three_equal_hosts() {
    let ring = ring(&ports(90..93), &ones(3), &RingHashConfig::default());
    assert_eq!((ring.len(), ring.hashes_per_host()), (1026, (342, 342)));
}

#[test]
fn no_hash_picks_a_random_host() {
    let mut rng = rand::SeedableRng::seed_from_u64(7);
    let ring = ring(&ports(90..96), &ones(6), &config(12, 8_388_608));
    let ctx = PickContext::at(std::time::Instant::now());
    let mut seen = [false; 6];
    for _ in 0..200 {
        seen[ring.pick(&[], &mut rng, &ctx).unwrap()] = true;
    }
    assert!(seen.iter().all(|s| *s));
}

/// One hot key on a ring of five: its requests stay on its host up to the bound and the
/// excess moves; keys placed on the other hosts keep their hosts throughout.
#[test]
fn a_hot_keys_excess_moves_while_other_keys_stay_put() {
    let hosts = crate::lb::test_hosts::cluster_hosts(5, Instant::now());
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
        held.push(crate::lb::test_hosts::start(&hosts[host]));
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
    held.extend([crate::lb::test_hosts::start(&hosts[home]), crate::lb::test_hosts::start(&hosts[home])]);
    let cold_on_home: Vec<u64> =
        keys.iter().zip(&placed).skip(1).filter(|(_, h)| **h == home).map(|(k, _)| *k).collect();
    assert!(!cold_on_home.is_empty());
    assert!(cold_on_home.iter().all(|&k| pick(&mut rng, k) != home));
    drop(held);
    assert!(cold_on_home.iter().all(|&k| pick(&mut rng, k) == home));
}
