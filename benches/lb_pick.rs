//! The hot path of balancing: one pick, per policy, at 8 to 10 000 endpoints, on one
//! thread and with two threads picking at once (each its own `Picker` over the same
//! `Arc<ClusterLb>`, as two workers do); and the control-path CSWRR weight update.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use outrider::config::convert::decode_resource;
use outrider::config::{Cluster, ClusterLoadAssignment, Resource, ResourceType, Warnings};
use outrider::lb::cswrr::Weights;
use outrider::lb::load::LoadReport;
use outrider::lb::{ClusterLb, PickContext, Picker, StatsRegistry};
use prost::Message;
use serde_json::{Value, json};

const SIZES: [usize; 4] = [8, 100, 1_000, 10_000];
const CSWRR: &str = "type.googleapis.com/envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin";

fn cluster(balancing: Value) -> Cluster {
    let mut value = json!({"name": "c", "type": "EDS", "eds_cluster_config": {"eds_config": {"ads": {}}}});
    value.as_object_mut().unwrap().append(&mut balancing.as_object().unwrap().clone());
    let (proto, _) = outrider::pb::json::from_value::<outrider::pb::envoy::config::cluster::v3::Cluster>(
        "envoy.config.cluster.v3.Cluster",
        value,
    )
    .unwrap();
    match decode_resource(ResourceType::Cluster, &proto.encode_to_vec(), &mut Warnings::new()).unwrap() {
        Resource::Cluster(cluster) => cluster,
        other => panic!("{other:?}"),
    }
}

fn typed(name: &str, typed_config: Value) -> Value {
    json!({"load_balancing_policy": {"policies": [{"typed_extension_config": {"name": name, "typed_config": typed_config}}]}})
}

fn policies() -> Vec<(&'static str, Cluster)> {
    vec![
        ("round_robin", cluster(json!({"lb_policy": "ROUND_ROBIN"}))),
        ("random", cluster(json!({"lb_policy": "RANDOM"}))),
        ("least_request", cluster(json!({"lb_policy": "LEAST_REQUEST"}))),
        ("cswrr", cluster(typed("cswrr", json!({"@type": CSWRR})))),
        (
            "peak_ewma",
            cluster(typed(
                "outrider.load_balancing_policies.peak_ewma",
                json!({"@type": "type.googleapis.com/google.protobuf.Struct", "value": {}}),
            )),
        ),
    ]
}

fn assignment(n: usize) -> ClusterLoadAssignment {
    let endpoints: Vec<Value> = (0..n)
        .map(|i| {
            json!({"endpoint": {"address": {"socket_address": {
                "address": format!("10.{}.{}.{}", i / 65536, i / 256 % 256, i % 256), "port_value": 80}}}})
        })
        .collect();
    let value = json!({"cluster_name": "c", "endpoints": [{"lb_endpoints": endpoints}]});
    let (proto, _) =
        outrider::pb::json::from_value::<outrider::pb::envoy::config::endpoint::v3::ClusterLoadAssignment>(
            "envoy.config.endpoint.v3.ClusterLoadAssignment",
            value,
        )
        .unwrap();
    match decode_resource(ResourceType::ClusterLoadAssignment, &proto.encode_to_vec(), &mut Warnings::new()).unwrap() {
        Resource::ClusterLoadAssignment(assignment) => assignment,
        other => panic!("{other:?}"),
    }
}

/// A load report giving endpoint `i` a weight between 100 and 400.
fn report(i: usize) -> LoadReport {
    LoadReport { rps_fractional: 100.0 + (i * 37 % 300) as f64, application_utilization: 1.0, ..Default::default() }
}

/// A balancer with state that makes each policy do its real work: RTT samples (peak-EWMA),
/// a few requests in flight (least request), valid and unequal ORCA weights (CSWRR).
fn balancer(cluster: &Cluster, n: usize, t0: Instant) -> (Arc<ClusterLb>, Instant) {
    let lb = Arc::new(ClusterLb::build(cluster, &assignment(n), &mut StatsRegistry::default(), t0));
    for (i, host) in lb.hosts().iter().enumerate() {
        host.stats.record(t0, Duration::from_millis(5 + (i % 50) as u64), true);
        host.stats.record_load(report(i), t0);
    }
    let now = t0 + Duration::from_secs(11);
    lb.update_weights(now);
    (lb, now)
}

fn pick(c: &mut Criterion) {
    let t0 = Instant::now();
    for (name, cluster) in policies() {
        let mut group = c.benchmark_group(format!("pick/{name}"));
        for n in SIZES {
            let (lb, now) = balancer(&cluster, n, t0);
            let ctx = PickContext::at(now);
            let _busy: Vec<_> = lb.hosts().iter().step_by(3).map(|h| h.stats.start(Instant::now())).collect();
            group.bench_with_input(BenchmarkId::new("1_thread", n), &n, |b, _| {
                let mut picker = Picker::new(lb.clone(), 1);
                b.iter(|| black_box(picker.pick(&ctx)).is_some());
            });
            group.bench_with_input(BenchmarkId::new("2_threads", n), &n, |b, _| {
                b.iter_custom(|iters| two_threads(&lb, iters, |picker| black_box(picker.pick(&ctx)).is_some()));
            });
            if name == "least_request" {
                // The pick as it was before it borrowed its host: an `Arc` clone (and drop)
                // per pick, whose reference count both threads write.
                group.bench_with_input(BenchmarkId::new("1_thread_arc_clone", n), &n, |b, _| {
                    let mut picker = Picker::new(lb.clone(), 1);
                    b.iter(|| black_box(picker.pick(&ctx).cloned()));
                });
                group.bench_with_input(BenchmarkId::new("2_threads_arc_clone", n), &n, |b, _| {
                    b.iter_custom(|iters| two_threads(&lb, iters, |picker| black_box(picker.pick(&ctx).cloned())));
                });
            }
        }
        group.finish();
    }
}

/// `iters` runs of `run` on each of two threads at once, each with its own picker over
/// `lb`; the slower thread's time.
fn two_threads<T>(lb: &Arc<ClusterLb>, iters: u64, run: impl Fn(&mut Picker) -> T + Sync) -> Duration {
    let barrier = Barrier::new(2);
    let thread = |seed: u64| {
        let mut picker = Picker::new(lb.clone(), seed);
        barrier.wait();
        let start = Instant::now();
        for _ in 0..iters {
            black_box(run(&mut picker));
        }
        start.elapsed()
    };
    std::thread::scope(|scope| {
        let other = scope.spawn(|| thread(2));
        let mine = thread(3);
        mine.max(other.join().unwrap())
    })
}

/// What the request path does per pick under least request: the pick, then the request
/// counted in flight on the host and released (one request at a time per thread). With
/// two threads the in-flight counters are written by both, as two workers write them.
fn pick_and_request(c: &mut Criterion) {
    let t0 = Instant::now();
    let cluster = cluster(json!({"lb_policy": "LEAST_REQUEST"}));
    let mut group = c.benchmark_group("pick_and_request/least_request");
    for n in SIZES {
        let (lb, now) = balancer(&cluster, n, t0);
        let ctx = PickContext::at(now);
        group.bench_with_input(BenchmarkId::new("1_thread", n), &n, |b, _| {
            let mut picker = Picker::new(lb.clone(), 1);
            b.iter(|| black_box(picker.pick(&ctx).map(|host| host.stats.start(Instant::now()))));
        });
        group.bench_with_input(BenchmarkId::new("2_threads", n), &n, |b, _| {
            b.iter_custom(|iters| {
                two_threads(&lb, iters, |picker| {
                    black_box(picker.pick(&ctx).map(|host| host.stats.start(Instant::now())))
                })
            });
        });
    }
    group.finish();
}

/// CSWRR's periodic update over 10 000 endpoints, each with a fresh report.
fn update_weights(c: &mut Criterion) {
    let t0 = Instant::now();
    let cluster = cluster(typed("cswrr", json!({"@type": CSWRR})));
    let (lb, start) = balancer(&cluster, 10_000, t0);
    let mut now = start;
    let mut fresh_reports = |lb: &ClusterLb| {
        now += Duration::from_secs(1);
        for (i, host) in lb.hosts().iter().enumerate() {
            host.stats.record_load(report(i + now.duration_since(t0).as_secs() as usize), now);
        }
        now
    };
    let one = lb.weight_updaters().into_iter().find(|u| matches!(*u.weights(), Weights::Stride(_))).unwrap();
    let mut group = c.benchmark_group("cswrr_update_weights");
    group.bench_function("one_host_set/10000", |b| {
        b.iter_batched(|| fresh_reports(&lb), |now| one.update_weights(now), BatchSize::PerIteration);
    });
    group.bench_function("cluster/10000", |b| {
        b.iter_batched(|| fresh_reports(&lb), |now| lb.update_weights(now), BatchSize::PerIteration);
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = pick, pick_and_request, update_weights
}
criterion_main!(benches);
