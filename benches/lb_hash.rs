//! Ring hash and maglev: building the ring / table for a host set (control path, on every
//! membership or health change) and picking a host for a request hash (data path).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use outrider::config::Address;
use outrider::config::cluster::{MaglevConfig, RingHashConfig};
use outrider::config::endpoint::{ClusterLoadAssignment, HealthStatus, LbEndpoint, Locality, LocalityLbEndpoints};
use outrider::lb::maglev::Maglev;
use outrider::lb::ring_hash::RingHash;
use outrider::lb::{Host, PickContext, StatsRegistry};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// `n` hosts `10.x.y.z:8080` of weight 1 in one locality.
fn hosts(n: u32) -> Vec<Arc<Host>> {
    let endpoints = (0..n)
        .map(|i| {
            let ip = Ipv4Addr::from(0x0a00_0000 + i);
            Arc::new(LbEndpoint {
                address: Address::Socket(SocketAddr::new(ip.into(), 8080)),
                weight: 1,
                health: HealthStatus::Healthy,
                hash_key: None,
                transport_socket_match: Default::default(),
                hostname: String::new(),
                health_check: None,
                additional_addresses: Box::default(),
                metadata: None,
            })
        })
        .collect();
    let mut assignment = ClusterLoadAssignment::empty("bench");
    assignment.localities.push(LocalityLbEndpoints {
        locality: Locality::default(),
        priority: 0,
        load_balancing_weight: None,
        endpoints,
    });
    StatsRegistry::default().hosts(&assignment, Instant::now()).into_iter().map(Arc::new).collect()
}

fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("lb_hash_build");
    group.sample_size(20);
    for n in [100, 1_000, 10_000] {
        let hosts = hosts(n);
        let weights = vec![1.0; hosts.len()];
        group.bench_with_input(BenchmarkId::new("ring", n), &n, |b, _| {
            b.iter(|| RingHash::new(black_box(&hosts), &weights, &RingHashConfig::default()))
        });
        group.bench_with_input(BenchmarkId::new("maglev", n), &n, |b, _| {
            b.iter(|| Maglev::new(black_box(&hosts), &weights, &MaglevConfig::default()))
        });
    }
    group.finish();
}

fn pick(c: &mut Criterion) {
    let mut group = c.benchmark_group("lb_hash_pick");
    let now = Instant::now();
    let mut keys = SmallRng::seed_from_u64(1);
    let keys: Vec<u64> = (0..1024).map(|_| keys.random()).collect();
    for n in [8, 100, 1_000, 10_000] {
        let hosts = hosts(n);
        let weights = vec![1.0; hosts.len()];
        let ring = RingHash::new(&hosts, &weights, &RingHashConfig::default());
        let maglev = Maglev::new(&hosts, &weights, &MaglevConfig::default());
        // With `hash_balance_factor` and no host over its bound: the bound is checked per pick.
        let bounded = RingHashConfig { hash_balance_factor: Some(150), ..RingHashConfig::default() };
        let bounded = RingHash::new(&hosts, &weights, &bounded);
        let mut rng = SmallRng::seed_from_u64(2);
        let mut i = 0;
        group.bench_with_input(BenchmarkId::new("ring", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) & 1023;
                let ctx = PickContext { hash: Some(keys[i]), attempt: 0, previous: &[], now };
                ring.pick(&hosts, &mut rng, black_box(&ctx))
            })
        });
        group.bench_with_input(BenchmarkId::new("ring_bounded_load", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) & 1023;
                let ctx = PickContext { hash: Some(keys[i]), attempt: 0, previous: &[], now };
                bounded.pick(&hosts, &mut rng, black_box(&ctx))
            })
        });
        group.bench_with_input(BenchmarkId::new("maglev", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) & 1023;
                let ctx = PickContext { hash: Some(keys[i]), attempt: 0, previous: &[], now };
                maglev.pick(&hosts, &mut rng, black_box(&ctx))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, build, pick);
criterion_main!(benches);
