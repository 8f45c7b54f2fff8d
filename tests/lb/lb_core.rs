//! The balancer core with seeded RNGs and explicit time: round robin, least request,
//! random, priorities, panic, locality weighting, slow start, EDS health, previous hosts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outrider::config::endpoint::{ClusterLoadAssignment, HealthStatus, LbEndpoint, Locality, LocalityLbEndpoints};
use outrider::config::{Address, Cluster, Resource, ResourceType, Warnings};
use outrider::lb::{ClusterLb, Host, PickContext, Picker, StatsRegistry};
use proptest::prelude::*;
use prost::Message;
use serde_json::{Value, json};

fn cluster(extra: Value) -> Cluster {
    let mut value = json!({ "name": "c", "type": "EDS", "eds_cluster_config": { "eds_config": { "ads": {} } } });
    value.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (proto, _): (outrider::pb::envoy::config::cluster::v3::Cluster, _) =
        outrider::pb::json::from_value("envoy.config.cluster.v3.Cluster", value).unwrap();
    match outrider::config::convert::decode_resource(
        ResourceType::Cluster,
        &proto.encode_to_vec(),
        &mut Warnings::new(),
    )
    .unwrap()
    {
        Resource::Cluster(c) => c,
        other => panic!("{other:?}"),
    }
}

/// One endpoint: (port, weight, health).
type Ep = (u16, u32, HealthStatus);

fn endpoint((port, weight, health): Ep) -> Arc<LbEndpoint> {
    Arc::new(LbEndpoint {
        address: Address::Socket(([10, 0, 0, 1], port).into()),
        weight,
        health,
        hash_key: None,
        transport_socket_match: Default::default(),
        hostname: String::new(),
        health_check: None,
        additional_addresses: Box::default(),
        metadata: None,
    })
}

/// Localities of (zone, priority, locality weight, endpoints).
fn assignment(groups: &[(&str, u32, Option<u32>, &[Ep])]) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        localities: groups
            .iter()
            .map(|(zone, priority, weight, endpoints)| LocalityLbEndpoints {
                locality: Locality { region: "r".into(), zone: (*zone).into(), sub_zone: String::new() },
                priority: *priority,
                load_balancing_weight: *weight,
                endpoints: endpoints.iter().copied().map(endpoint).collect(),
            })
            .collect(),
        ..ClusterLoadAssignment::empty("c")
    }
}

const H: HealthStatus = HealthStatus::Healthy;
const D: HealthStatus = HealthStatus::Degraded;
const U: HealthStatus = HealthStatus::Unhealthy;

fn port(host: &Host) -> u16 {
    match host.address() {
        Address::Socket(addr) => addr.port(),
        other => panic!("{other:?}"),
    }
}

/// Picks `n` times and counts picks per port.
fn shares(picker: &mut Picker, n: usize, now: Instant) -> HashMap<u16, usize> {
    let mut counts = HashMap::new();
    for _ in 0..n {
        let host = picker.pick(&PickContext::at(now)).expect("a host");
        *counts.entry(port(host)).or_default() += 1;
    }
    counts
}

fn build(cluster: &Cluster, assignment: &ClusterLoadAssignment, now: Instant) -> Arc<ClusterLb> {
    Arc::new(ClusterLb::build(cluster, assignment, &mut StatsRegistry::default(), now))
}

#[test]
fn round_robin_equal_weights_rotates_from_a_random_start() {
    let now = Instant::now();
    let lb = build(&cluster(json!({})), &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, H), (3, 1, H)])]), now);
    let counts = shares(&mut Picker::new(lb.clone(), 1), 300, now);
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [100, 100, 100]);
    let starts: std::collections::BTreeSet<u16> =
        (0..16).map(|seed| port(Picker::new(lb.clone(), seed).pick(&PickContext::at(now)).unwrap())).collect();
    assert!(starts.len() > 1, "workers start at different hosts");
}

#[test]
fn round_robin_weighted_follows_weights_exactly() {
    let now = Instant::now();
    let lb = build(&cluster(json!({})), &assignment(&[("a", 0, None, &[(1, 1, H), (2, 3, H), (3, 6, H)])]), now);
    let counts = shares(&mut Picker::new(lb, 7), 1000, now);
    assert_eq!((counts[&1], counts[&2], counts[&3]), (100, 300, 600));
}

#[test]
fn random_ignores_weights() {
    let now = Instant::now();
    let lb =
        build(&cluster(json!({ "lb_policy": "RANDOM" })), &assignment(&[("a", 0, None, &[(1, 1, H), (2, 9, H)])]), now);
    let counts = shares(&mut Picker::new(lb, 3), 20_000, now);
    let share = counts[&2] as f64 / 20_000.0;
    assert!((share - 0.5).abs() < 0.02, "{share}");
}

#[test]
fn least_request_prefers_idle_hosts() {
    let now = Instant::now();
    let lb = build(
        &cluster(json!({ "lb_policy": "LEAST_REQUEST" })),
        &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, H), (3, 1, H), (4, 1, H)])]),
        now,
    );
    // Host 1 is busy with 10 requests.
    let busy = lb.hosts().iter().find(|h| port(h) == 1).unwrap().clone();
    let _guards: Vec<_> = (0..10).map(|_| busy.stats.start(Instant::now())).collect();
    let counts = shares(&mut Picker::new(lb, 11), 4000, now);
    // It is chosen only when drawn against itself, which distinct sampling never does.
    assert_eq!(counts.get(&1).copied().unwrap_or(0), 0, "{counts:?}");
    for p in 2..=4 {
        let share = counts[&p] as f64 / 4000.0;
        assert!((share - 1.0 / 3.0).abs() < 0.03, "{p}: {share}");
    }
}

#[test]
fn least_request_ties_do_not_favour_the_first_host() {
    let now = Instant::now();
    let lb = build(
        &cluster(json!({ "lb_policy": "LEAST_REQUEST" })),
        &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, H), (3, 1, H)])]),
        now,
    );
    let counts = shares(&mut Picker::new(lb, 5), 30_000, now);
    for p in 1..=3 {
        let share = counts[&p] as f64 / 30_000.0;
        assert!((share - 1.0 / 3.0).abs() < 0.02, "{p}: {share}");
    }
}

#[test]
fn least_request_unequal_weights_uses_active_request_bias() {
    let now = Instant::now();
    let lb = build(
        &cluster(json!({ "lb_policy": "LEAST_REQUEST" })),
        &assignment(&[("a", 0, None, &[(1, 1, H), (2, 4, H)])]),
        now,
    );
    let counts = shares(&mut Picker::new(lb.clone(), 2), 1000, now);
    assert_eq!((counts[&1], counts[&2]), (200, 800), "idle hosts: plain weights");
    // Host 2 has 3 requests in flight: weight 4 / (3 + 1) = 1, equal to host 1.
    let heavy = lb.hosts().iter().find(|h| port(h) == 2).unwrap().clone();
    let _guards: Vec<_> = (0..3).map(|_| heavy.stats.start(Instant::now())).collect();
    let counts = shares(&mut Picker::new(lb, 2), 1000, now);
    assert!((counts[&1] as i64 - 500).abs() <= 2, "{counts:?}");
}

#[test]
fn only_usable_hosts_are_picked_and_degraded_ones_are_a_fallback() {
    let now = Instant::now();
    let c = cluster(json!({}));
    // 3 of 4 healthy: 140 × 3/4 ≥ 100 %, the degraded host takes nothing.
    let lb = build(&c, &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, H), (3, 1, H), (4, 1, D)])]), now);
    let counts = shares(&mut Picker::new(lb, 1), 1000, now);
    assert_eq!(counts.keys().copied().collect::<std::collections::BTreeSet<_>>(), [1, 2, 3].into());
    // 2 healthy, 1 degraded, 1 unhealthy: 70 % healthy, 30 % degraded, never the unhealthy one.
    let lb = build(&c, &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, H), (3, 1, U), (4, 1, D)])]), now);
    assert_eq!((lb.priority_load().healthy.clone(), lb.priority_load().degraded.clone()), (vec![70], vec![30]));
    let counts = shares(&mut Picker::new(lb, 1), 1000, now);
    assert_eq!(counts.keys().copied().collect::<std::collections::BTreeSet<_>>(), [1, 2, 4].into());
    assert!((counts[&4] as i64 - 300).abs() < 40, "{counts:?}");
    // 1 healthy of 4: 140 × 1/4 = 35 % healthy load, 35 % degraded, the rest spills back.
    let lb = build(&c, &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, D), (3, 1, U), (4, 1, U)])]), now);
    assert_eq!(lb.priority_load().healthy, [50]);
    assert_eq!(lb.priority_load().degraded, [50]);
    assert_eq!(lb.priority_load().panic, [false]);
}

#[test]
fn failover_to_the_next_priority_and_panic() {
    let now = Instant::now();
    let c = cluster(json!({}));
    // P0 2 of 4 healthy: 70 % stays, 30 % goes to P1.
    let lb = build(
        &c,
        &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, H), (3, 1, U), (4, 1, U)]), ("a", 1, None, &[(5, 1, H)])]),
        now,
    );
    let counts = shares(&mut Picker::new(lb, 9), 10_000, now);
    let p1 = counts[&5] as f64 / 10_000.0;
    assert!((p1 - 0.30).abs() < 0.02, "{p1}");
    // One level, 1 of 4 healthy: panic, every host takes traffic.
    let lb = build(&c, &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, U), (3, 1, U), (4, 1, U)])]), now);
    assert_eq!(lb.priority_load().panic, [true]);
    assert_eq!(shares(&mut Picker::new(lb, 9), 400, now).len(), 4);
    // Panic disabled: only the healthy host.
    let strict = cluster(json!({ "common_lb_config": { "healthy_panic_threshold": { "value": 0 } } }));
    let lb = build(&strict, &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, U), (3, 1, U), (4, 1, U)])]), now);
    assert_eq!(shares(&mut Picker::new(lb, 9), 100, now).keys().copied().collect::<Vec<_>>(), [1]);
}

#[test]
fn locality_weighting_splits_by_locality_weight_and_health() {
    let now = Instant::now();
    let c = cluster(json!({ "common_lb_config": { "locality_weighted_lb_config": {} } }));
    let lb =
        build(&c, &assignment(&[("a", 0, Some(1), &[(1, 1, H), (2, 1, H)]), ("b", 0, Some(3), &[(3, 1, H)])]), now);
    let counts = shares(&mut Picker::new(lb, 4), 4000, now);
    assert_eq!(counts[&3], 3000, "{counts:?}");
    assert_eq!(counts[&1] + counts[&2], 1000);
    // Without locality_weighted_lb_config, EDS locality weights are ignored (as in Envoy).
    let lb = build(
        &cluster(json!({})),
        &assignment(&[("a", 0, Some(1), &[(1, 1, H), (2, 1, H)]), ("b", 0, Some(3), &[(3, 1, H)])]),
        now,
    );
    let counts = shares(&mut Picker::new(lb, 4), 3000, now);
    assert_eq!(counts[&3], 1000);
}

#[test]
fn slow_start_ramps_a_new_host_up() {
    let t0 = Instant::now();
    let c = cluster(json!({ "round_robin_lb_config": { "slow_start_config": { "slow_start_window": "60s" } } }));
    let mut registry = StatsRegistry::default();
    let old = assignment(&[("a", 0, None, &[(1, 1, H)])]);
    ClusterLb::build(&c, &old, &mut registry, t0);
    // Host 2 appears 60 s later: host 1 is past its window, host 2 starts at 10 %.
    let t1 = t0 + Duration::from_secs(60);
    let both = assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, H)])]);
    let lb = Arc::new(ClusterLb::build(&c, &both, &mut registry, t1));
    let early = shares(&mut Picker::new(lb.clone(), 1), 1100, t1);
    assert!(early[&2] <= 110, "new host starts near min_weight_percent: {early:?}");
    let late = shares(&mut Picker::new(lb, 1), 1000, t1 + Duration::from_secs(61));
    assert_eq!(late[&2], 500, "full weight after the window");
}

#[test]
fn retries_avoid_previous_hosts() {
    let now = Instant::now();
    let lb =
        build(&cluster(json!({ "lb_policy": "RANDOM" })), &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, H)])]), now);
    let mut picker = Picker::new(lb.clone(), 8);
    let first = lb.hosts()[0].clone();
    for _ in 0..200 {
        let previous = [first.clone()];
        let ctx = PickContext { hash: None, attempt: 1, previous: &previous, now };
        assert_eq!(port(picker.pick(&ctx).unwrap()), 2);
    }
}

#[test]
fn stats_survive_a_rebuild() {
    let now = Instant::now();
    let c = cluster(json!({}));
    let mut registry = StatsRegistry::default();
    let lb = ClusterLb::build(&c, &assignment(&[("a", 0, None, &[(1, 1, H), (2, 1, H)])]), &mut registry, now);
    let _guard = lb.hosts()[0].stats.start(Instant::now());
    let rebuilt = ClusterLb::build(&c, &assignment(&[("a", 0, None, &[(1, 1, H), (3, 1, H)])]), &mut registry, now);
    assert_eq!(rebuilt.hosts()[0].stats.in_flight(), 1, "host 1 kept its in-flight count");
    assert_eq!(registry.len(), 2, "host 2 was forgotten");
}

fn health() -> impl Strategy<Value = HealthStatus> {
    prop_oneof![Just(H), Just(D), Just(U)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(7), ..ProptestConfig::default() })]

    /// Never a non-usable (unhealthy) host while a usable one exists (panic off), never no
    /// host while one is usable, and never a panic, for any endpoint set, weights and policy.
    #[test]
    fn picks_are_always_usable(
        endpoints in proptest::collection::vec((1u32..100, health(), 0u32..3), 0..40),
        policy in prop_oneof![Just("ROUND_ROBIN"), Just("LEAST_REQUEST"), Just("RANDOM"), Just("RING_HASH"), Just("MAGLEV")],
        locality_weighted in any::<bool>(),
        seed in any::<u64>(),
        hash in proptest::option::of(any::<u64>()),
    ) {
        let now = Instant::now();
        let mut extra = json!({ "lb_policy": policy, "common_lb_config": { "healthy_panic_threshold": { "value": 0 } } });
        if locality_weighted {
            extra["common_lb_config"]["locality_weighted_lb_config"] = json!({});
        }
        let c = cluster(extra);
        let eps: Vec<Ep> = endpoints.iter().enumerate().map(|(i, (w, h, _))| (1000 + i as u16, *w, *h)).collect();
        let groups: Vec<(&str, u32, Option<u32>, &[Ep])> = vec![("a", 0, Some(1), &eps[..eps.len() / 2]), ("b", 1, Some(2), &eps[eps.len() / 2..])];
        let a = assignment(&groups);
        let lb = build(&c, &a, now);
        let mut picker = Picker::new(lb, seed);
        for attempt in 0..20 {
            let picked = picker.pick(&PickContext { hash, attempt, previous: &[], now });
            if let Some(host) = picked {
                prop_assert!(host.health() != U, "picked an unhealthy host");
            } else {
                prop_assert!(!eps.iter().any(|(_, _, h)| *h != U), "no pick although usable hosts exist");
            }
        }
    }
}
