//! The heavy control-path operation: decode, convert and publish one xDS update.
//!
//! One EDS update of 10 000 endpoints and one CDS update of 5 000 clusters, from protobuf
//! bytes to a published snapshot, exactly the steps the ADS client runs per response; and
//! one EDS change among 5 000 served clusters, through to the rebuilt balancers, which
//! must cost what changed rather than what exists.
//! Besides time, it reports the heap each update keeps alive, per endpoint / per cluster,
//! measured by a counting allocator (the only unsafe code in the repository: a
//! `GlobalAlloc` must be an `unsafe impl`).
#![allow(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::SystemTime;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use outrider::config::convert::decode_resource;
use outrider::config::{Resource, ResourceType, Warnings};
use outrider::control::balancing::update;
use outrider::lb::{BalancerBuilder, Balancers};
use outrider::store::{ConfigState, Store, Versioned};
use prost::Message;
use serde_json::json;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const ENDPOINTS: usize = 10_000;
const CLUSTERS: usize = 5_000;

/// A ClusterLoadAssignment of `n` endpoints spread over 3 zones, as istiod sends them,
/// each with load-balancing `weight`.
fn eds_bytes(n: usize, weight: u32) -> Vec<u8> {
    eds_bytes_for("outbound|8080||big.default.svc.cluster.local", n, weight)
}

fn eds_bytes_for(cluster_name: &str, n: usize, weight: u32) -> Vec<u8> {
    let zones: Vec<_> = (0..3)
        .map(|z| {
            let endpoints: Vec<_> = (z..n)
                .step_by(3)
                .map(|i| {
                    json!({
                        "endpoint": { "address": { "socket_address": {
                            "address": format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256), "port_value": 8080 } } },
                        "health_status": "HEALTHY",
                        "load_balancing_weight": weight,
                    })
                })
                .collect();
            json!({ "locality": { "region": "r", "zone": format!("z{z}") }, "lb_endpoints": endpoints })
        })
        .collect();
    let value = json!({ "cluster_name": cluster_name, "endpoints": zones });
    let (cla, _): (outrider::pb::envoy::config::endpoint::v3::ClusterLoadAssignment, _) =
        outrider::pb::json::from_value("envoy.config.endpoint.v3.ClusterLoadAssignment", value).unwrap();
    cla.encode_to_vec()
}

/// `n` EDS clusters shaped like an Istio sidecar's outbound clusters.
fn cluster_name(i: usize) -> String {
    format!("outbound|8080||svc-{i}.default.svc.cluster.local")
}

fn cds_bytes(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let name = cluster_name(i);
            let value = json!({
                "name": name,
                "type": "EDS",
                "eds_cluster_config": { "eds_config": { "ads": {}, "initial_fetch_timeout": "0s" }, "service_name": name },
                "connect_timeout": "10s",
                "lb_policy": "LEAST_REQUEST",
                "circuit_breakers": { "thresholds": [{ "max_connections": 4294967295u32, "max_pending_requests": 4294967295u32,
                    "max_requests": 4294967295u32, "max_retries": 4294967295u32 }] },
                "common_lb_config": { "locality_weighted_lb_config": {} },
            });
            let (cluster, _): (outrider::pb::envoy::config::cluster::v3::Cluster, _) =
                outrider::pb::json::from_value("envoy.config.cluster.v3.Cluster", value).unwrap();
            cluster.encode_to_vec()
        })
        .collect()
}

/// What the ADS client does with one accepted response.
fn apply(state: &mut ConfigState, store: &Store, resource_type: ResourceType, items: &[Vec<u8>], version: &str) {
    let mut warnings = Warnings::new();
    // As the ADS client does: one validator of the typed configs for the whole response.
    let accepted: Vec<Versioned<Resource>> = outrider::pb::pgv::with_extension_checks(|| {
        items
            .iter()
            .map(|bytes| Versioned {
                resource: decode_resource(resource_type, bytes, &mut warnings).unwrap(),
                version: version.to_owned(),
                last_updated: SystemTime::now(),
                raw: bytes.as_slice().into(),
            })
            .collect()
    });
    state.apply(resource_type, version, accepted, &[], resource_type.is_wildcard());
    store.publish(state.snapshot());
}

fn fresh() -> (ConfigState, Store) {
    let mut state = ConfigState::new(Vec::new(), Vec::new(), Vec::new(), [], Default::default());
    let store = Store::new(state.snapshot());
    (state, store)
}

/// Live heap kept by one update, divided by `per`.
fn retained_per_item(resource_type: ResourceType, items: &[Vec<u8>], per: usize) -> f64 {
    let (mut state, store) = fresh();
    let before = LIVE.load(Ordering::Relaxed);
    apply(&mut state, &store, resource_type, items, "1");
    let after = LIVE.load(Ordering::Relaxed);
    black_box((&state, &store));
    (after - before) as f64 / per as f64
}

/// A sidecar serving `CLUSTERS` clusters of three endpoints each, balancers built.
fn mesh() -> (ConfigState, Store, BalancerBuilder, Balancers) {
    let (mut state, store) = fresh();
    apply(&mut state, &store, ResourceType::Cluster, &cds_bytes(CLUSTERS), "1");
    let eds: Vec<_> = (0..CLUSTERS).map(|i| eds_bytes_for(&cluster_name(i), 3, 1)).collect();
    apply(&mut state, &store, ResourceType::ClusterLoadAssignment, &eds, "1");
    let (mut builder, balancers) = (BalancerBuilder::default(), Balancers::default());
    update(&mut builder, &store.load(), &balancers);
    assert_eq!(balancers.all().len(), CLUSTERS);
    (state, store, builder, balancers)
}

fn bench(c: &mut Criterion) {
    let eds = vec![eds_bytes(ENDPOINTS, 1)];
    // The same endpoints with new weights: an identical push would be skipped as unchanged,
    // this one is reconciled endpoint by endpoint.
    let eds_reweighted = vec![eds_bytes(ENDPOINTS, 2)];
    let cds = cds_bytes(CLUSTERS);
    eprintln!(
        "retained heap: {:.0} bytes per endpoint (EDS, {ENDPOINTS} endpoints); {:.0} bytes per cluster (CDS, {CLUSTERS} clusters)",
        retained_per_item(ResourceType::ClusterLoadAssignment, &eds, ENDPOINTS),
        retained_per_item(ResourceType::Cluster, &cds, CLUSTERS),
    );

    c.bench_function("eds_10k_endpoints_first_push", |b| {
        b.iter_batched(
            fresh,
            |(mut state, store)| apply(&mut state, &store, ResourceType::ClusterLoadAssignment, &eds, "1"),
            BatchSize::LargeInput,
        )
    });
    c.bench_function("eds_10k_endpoints_repeat_push_reconciled", |b| {
        b.iter_batched(
            || {
                let (mut state, store) = fresh();
                apply(&mut state, &store, ResourceType::ClusterLoadAssignment, &eds, "1");
                (state, store)
            },
            |(mut state, store)| apply(&mut state, &store, ResourceType::ClusterLoadAssignment, &eds_reweighted, "2"),
            BatchSize::LargeInput,
        )
    });
    // One cluster's endpoints change weight back and forth: each push is a real change.
    let (mut state, store, mut builder, balancers) = mesh();
    let one = [vec![eds_bytes_for(&cluster_name(7), 3, 2)], vec![eds_bytes_for(&cluster_name(7), 3, 1)]];
    let mut turn = 0usize;
    c.bench_function("one_eds_change_among_5k_clusters", |b| {
        b.iter(|| {
            turn += 1;
            apply(&mut state, &store, ResourceType::ClusterLoadAssignment, &one[turn % 2], &turn.to_string());
            update(&mut builder, &store.load(), &balancers);
        })
    });
    drop((state, store, builder, balancers));
    c.bench_function("cds_5k_clusters", |b| {
        b.iter_batched(
            fresh,
            |(mut state, store)| apply(&mut state, &store, ResourceType::Cluster, &cds, "1"),
            BatchSize::LargeInput,
        )
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
