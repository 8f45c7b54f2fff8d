//! Golden tables from Envoy's `maglev_lb_test.cc` (the expectations, not the code).

use std::sync::Arc;

use super::*;
use crate::config::cluster::HashKeySource;
use crate::lb::hashing::test_host;

fn ports(ports: std::ops::Range<u16>) -> Vec<Arc<Host>> {
    ports.map(|p| test_host(&format!("127.0.0.1:{p}"), "", None)).collect()
}

fn config(table_size: u64) -> MaglevConfig {
    MaglevConfig { table_size, ..MaglevConfig::default() }
}

/// Which host hashes 0..M map to (Envoy's tests look the table up this way).
fn lookups(maglev: &Maglev, size: u64) -> Vec<usize> {
    (0..size).map(|h| maglev.choose(h, 0).unwrap()).collect()
}

/// Envoy's `Basic` and `BasicStability`: six hosts, table of 7.
#[test]
fn basic_table_matches_envoy() {
    let hosts = ports(90..96);
    let maglev = Maglev::new(&hosts, &[1.0; 6], &config(7));
    assert_eq!(maglev.entries_per_host(), (1, 2));
    assert_eq!(maglev.table().collect::<Vec<_>>(), [2, 4, 0, 1, 5, 0, 3]);
    // Hashes past the table size wrap around it.
    assert_eq!(maglev.choose(7 + 4, 0), Some(5));

    // The host-set order does not matter: hosts are sorted by key.
    let mut shuffled = hosts.clone();
    shuffled.reverse();
    shuffled.swap(1, 4);
    let again = Maglev::new(&shuffled, &[1.0; 6], &config(7));
    let by_port = |set: &[Arc<Host>], i: usize| set[i].address().to_string();
    for hash in 0..21 {
        assert_eq!(
            by_port(&shuffled, again.choose(hash, 0).unwrap()),
            by_port(&hosts, maglev.choose(hash, 0).unwrap())
        );
    }
}

/// Envoy's `BasicWithHostName` and `BasicWithMetadataHashKey`: keys "90".."95".
#[test]
fn hostname_and_metadata_keys_match_envoy() {
    let by_hostname: Vec<_> = (90..96).map(|p| test_host(&format!("127.0.0.1:{p}"), &p.to_string(), None)).collect();
    let by_metadata: Vec<_> =
        (90..96).map(|p| test_host(&format!("127.0.0.1:{p}"), "", Some(&p.to_string()))).collect();
    let hostname =
        Maglev::new(&by_hostname, &[1.0; 6], &MaglevConfig { hash_key: HashKeySource::Hostname, ..config(7) });
    let metadata = Maglev::new(&by_metadata, &[1.0; 6], &config(7));
    for maglev in [hostname, metadata] {
        assert_eq!(maglev.entries_per_host(), (1, 2));
        assert_eq!(lookups(&maglev, 7), [2, 5, 0, 3, 4, 1, 0]);
    }
}

/// Envoy's `BasicWithRetryHostPredicate`: attempt k XORs the hash with `~0 − k + 1`.
#[test]
fn retries_match_envoy() {
    let maglev = Maglev::new(&ports(90..96), &[1.0; 6], &config(7));
    assert_eq!(maglev.choose(10, 0), Some(1));
    assert_eq!(maglev.choose(10, 1), Some(0));
    assert_eq!(maglev.choose(10, 2), Some(5));
}

/// Envoy's `Weighted`: weights 1 and 2, table of 17.
#[test]
fn weighted_table_matches_envoy() {
    let maglev = Maglev::new(&ports(90..92), &[1.0, 2.0], &config(17));
    assert_eq!(maglev.entries_per_host(), (6, 11));
    assert_eq!(lookups(&maglev, 17), [1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1]);
}

/// Envoy's `SingleHost` and `WeightedSingleHost`: one host takes every hash.
#[test]
fn single_host_takes_everything() {
    let maglev = Maglev::new(&ports(90..91), &[7.0], &config(17));
    assert_eq!(maglev.entries_per_host(), (1, 1));
    assert!((0..17).all(|h| maglev.choose(h, 0) == Some(0) && maglev.choose(h, 3) == Some(0)));
}

/// Envoy's `LocalityWeightedSameLocalityWeights` and `LocalityWeightedGlobalPanic`: hosts
/// of weight 1 and 2 in two localities of weight 1: `w × (1/2) / w` = ½ each.
#[test]
fn equal_locality_weights_match_envoy() {
    let weights = [1.0 * (1.0 / 2.0) / 1.0, 2.0 * (1.0 / 2.0) / 2.0];
    let maglev = Maglev::new(&ports(90..92), &weights, &config(17));
    assert_eq!(maglev.entries_per_host(), (8, 9));
    assert_eq!(lookups(&maglev, 17), [1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 1]);
}

/// Envoy's `LocalityWeightedDifferentLocalityWeights`: localities A=8, B=0, C=2 holding
/// :90 (w 1), :92 (w 3) and :91 (w 2).
#[test]
fn different_locality_weights_match_envoy() {
    let weights = [1.0 * (8.0 / 10.0) / 1.0, 2.0 * (2.0 / 10.0) / 2.0, 0.0];
    let maglev = Maglev::new(&ports(90..93), &weights, &config(17));
    assert_eq!(maglev.entries_per_host(), (4, 13));
    assert_eq!(lookups(&maglev, 17), [1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0]);
}

/// Envoy's `LocalityWeightedAllZeroLocalityWeights` and `NoHost`.
#[test]
fn no_usable_host_picks_nothing() {
    let mut rng = rand::SeedableRng::seed_from_u64(1);
    let ctx = PickContext::at(std::time::Instant::now());
    assert_eq!(Maglev::new(&ports(90..91), &[0.0], &config(17)).pick(&[], &mut rng, &ctx), None);
    assert_eq!(Maglev::new(&[], &[], &config(7)).pick(&[], &mut rng, &ctx), None);
}

/// Envoy's `LocalityWeightedLopsided`: one host of locality weight 127, 1023 of locality
/// weight 1, the default table: each light host gets one slot, the heavy one the rest.
#[test]
fn lopsided_locality_weights_match_envoy() {
    let hosts = ports(0..1024);
    let light = 1.0 * (1.0 / 128.0) / 1023.0;
    let weights: Vec<f64> = (0..1024).map(|i| if i == 0 { 127.0 / 128.0 } else { light }).collect();
    let maglev = Maglev::new(&hosts, &weights, &MaglevConfig::default());
    assert_eq!(maglev.entries_per_host(), (1, 65537 - 1023));
    let mut counts = vec![0_u32; 1024];
    for host in maglev.table() {
        counts[host] += 1;
    }
    assert!(counts[1..].iter().all(|&c| c == 1));
    assert_eq!(counts[0], 65537 - 1023);
}

#[test]
fn no_hash_picks_a_random_host() {
    let mut rng = rand::SeedableRng::seed_from_u64(7);
    let maglev = Maglev::new(&ports(90..96), &[1.0; 6], &config(65537));
    let ctx = PickContext::at(std::time::Instant::now());
    let mut seen = [false; 6];
    for _ in 0..200 {
        seen[maglev.pick(&[], &mut rng, &ctx).unwrap()] = true;
    }
    assert!(seen.iter().all(|s| *s));
}

#[test]
fn a_table_that_is_not_prime_still_fills() {
    let maglev = Maglev::new(&ports(90..96), &[1.0; 6], &config(8));
    assert_eq!(maglev.table().filter(|&h| h < 6).count(), 8);
}
