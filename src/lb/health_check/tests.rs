use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::*;
use crate::config::cluster::{HealthCheck, HealthChecker, TcpHealthCheck};

const MS: Duration = Duration::from_millis(1);

fn config() -> HealthCheck {
    HealthCheck {
        timeout: 1000 * MS,
        interval: 100 * MS,
        initial_jitter: Duration::ZERO,
        interval_jitter: Duration::ZERO,
        interval_jitter_percent: 0,
        unhealthy_threshold: 3,
        healthy_threshold: 2,
        alt_port: None,
        reuse_connection: true,
        no_traffic_interval: 60_000 * MS,
        no_traffic_healthy_interval: 50_000 * MS,
        unhealthy_interval: 200 * MS,
        unhealthy_edge_interval: 300 * MS,
        healthy_edge_interval: 400 * MS,
        checker: HealthChecker::Tcp(TcpHealthCheck::default()),
    }
}

/// A session over a new host of a cluster with one check.
fn new_host(counters: &Arc<HealthCheckStats>) -> (Arc<EndpointStats>, Session) {
    let stats = Arc::new(EndpointStats::new(Instant::now()).failed_by_health_checks(1));
    let session = Session::new(0, stats.clone(), counters.clone(), 2, 3);
    (stats, session)
}

const PASS: ProbeResult = ProbeResult::Passed { degraded: false };
const NETWORK: ProbeResult = ProbeResult::Failed { kind: FailureKind::Network, retriable: false };
const TIMEOUT: ProbeResult = ProbeResult::Failed { kind: FailureKind::Timeout, retriable: false };
const ACTIVE: ProbeResult = ProbeResult::Failed { kind: FailureKind::Active, retriable: false };
const RETRIABLE: ProbeResult = ProbeResult::Failed { kind: FailureKind::Active, retriable: true };

#[test]
fn a_new_host_starts_failed_and_its_first_pass_makes_it_healthy() {
    let counters = Arc::new(HealthCheckStats::default());
    let (stats, mut session) = new_host(&counters);
    assert!(stats.health().failed());
    assert_eq!(counters.healthy.get(), 0);
    assert_eq!(session.on_result(PASS), Transition::Changed, "healthy_threshold 2 does not apply to the first check");
    assert!(!stats.health().failed());
    assert_eq!(counters.healthy.get(), 1);
    assert_eq!(counters.success.get(), 1);
}

#[test]
fn a_first_failure_leaves_a_new_host_failed_and_then_the_threshold_applies() {
    let counters = Arc::new(HealthCheckStats::default());
    let (stats, mut session) = new_host(&counters);
    assert_eq!(session.on_result(NETWORK), Transition::Unchanged);
    assert_eq!(session.on_result(PASS), Transition::ChangePending);
    assert!(stats.health().failed());
    assert_eq!(session.on_result(PASS), Transition::Changed);
    assert!(!stats.health().failed());
}

#[test]
fn network_failures_and_timeouts_count_towards_the_unhealthy_threshold() {
    let counters = Arc::new(HealthCheckStats::default());
    let (stats, mut session) = new_host(&counters);
    session.on_result(PASS);
    assert_eq!(session.on_result(NETWORK), Transition::ChangePending);
    assert_eq!(session.on_result(TIMEOUT), Transition::ChangePending);
    assert!(!stats.health().failed());
    assert!(!stats.health().timed_out(), "only a failed host shows the timeout flag");
    assert_eq!(session.on_result(TIMEOUT), Transition::Changed);
    assert!(stats.health().failed());
    assert!(stats.health().timed_out());
    assert_eq!((counters.failure.get(), counters.network_failure.get()), (3, 3));
    assert_eq!(counters.healthy.get(), 0);
    assert_eq!(session.on_result(NETWORK), Transition::Unchanged);
    assert!(!stats.health().timed_out(), "failing by another reason clears it");
}

#[test]
fn a_pass_resets_the_failure_count() {
    let counters = Arc::new(HealthCheckStats::default());
    let (stats, mut session) = new_host(&counters);
    session.on_result(PASS);
    session.on_result(NETWORK);
    session.on_result(NETWORK);
    session.on_result(PASS);
    session.on_result(NETWORK);
    session.on_result(NETWORK);
    assert!(!stats.health().failed());
}

#[test]
fn an_unexpected_answer_fails_at_once_unless_retriable() {
    let counters = Arc::new(HealthCheckStats::default());
    let (stats, mut session) = new_host(&counters);
    session.on_result(PASS);
    assert_eq!(session.on_result(RETRIABLE), Transition::ChangePending);
    assert_eq!(session.on_result(RETRIABLE), Transition::ChangePending);
    assert_eq!(session.on_result(RETRIABLE), Transition::Changed);
    session.on_result(PASS);
    session.on_result(PASS);
    assert!(!stats.health().failed());
    assert_eq!(session.on_result(ACTIVE), Transition::Changed, "a 503 or NOT_SERVING fails a healthy host at once");
    assert!(stats.health().failed());
    assert_eq!(counters.network_failure.get(), 0);
}

#[test]
fn degraded_answers_flip_the_degraded_flag() {
    let counters = Arc::new(HealthCheckStats::default());
    let (stats, mut session) = new_host(&counters);
    assert_eq!(session.on_result(ProbeResult::Passed { degraded: true }), Transition::Changed);
    assert!(stats.health().degraded());
    assert_eq!(counters.degraded.get(), 1);
    assert_eq!(session.on_result(ProbeResult::Passed { degraded: true }), Transition::Unchanged);
    assert_eq!(session.on_result(PASS), Transition::Changed);
    assert!(!stats.health().degraded());
    assert_eq!(counters.degraded.get(), 0);
}

#[test]
fn checks_fail_a_host_independently() {
    let counters = Arc::new(HealthCheckStats::default());
    let stats = Arc::new(EndpointStats::new(Instant::now()).failed_by_health_checks(2));
    let mut first = Session::new(0, stats.clone(), counters.clone(), 1, 1);
    let mut second = Session::new(1, stats.clone(), counters.clone(), 1, 1);
    first.on_result(PASS);
    assert!(stats.health().failed(), "the second check has not passed yet");
    second.on_result(PASS);
    assert!(!stats.health().failed());
    assert_eq!(counters.healthy.get(), 2);
    second.on_result(ACTIVE);
    assert!(stats.health().failed());
    assert!(stats.health().keep_checks(1), "dropping the second check returns the host");
    assert!(!stats.health().failed());
}

#[test]
fn dropping_a_session_takes_the_host_out_of_the_gauges() {
    let counters = Arc::new(HealthCheckStats::default());
    let (_stats, mut session) = new_host(&counters);
    session.on_result(ProbeResult::Passed { degraded: true });
    assert_eq!((counters.healthy.get(), counters.degraded.get()), (1, 1));
    drop(session);
    assert_eq!((counters.healthy.get(), counters.degraded.get()), (0, 0));
}

#[test]
fn intervals_follow_traffic_health_and_pending_changes() {
    let c = config();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut next = |traffic, passed, t| next_interval(&c, traffic, passed, t, &mut rng);
    // No traffic yet: the slow intervals.
    assert_eq!(next(false, true, Transition::Unchanged), 50_000 * MS);
    assert_eq!(next(false, true, Transition::Changed), 50_000 * MS);
    assert_eq!(next(false, true, Transition::ChangePending), 60_000 * MS);
    assert_eq!(next(false, false, Transition::Unchanged), 60_000 * MS);
    // With traffic.
    assert_eq!(next(true, true, Transition::Unchanged), 100 * MS);
    assert_eq!(next(true, true, Transition::Changed), 100 * MS);
    assert_eq!(next(true, true, Transition::ChangePending), 400 * MS, "healthy edge");
    assert_eq!(next(true, false, Transition::ChangePending), 300 * MS, "unhealthy edge");
    assert_eq!(next(true, false, Transition::Changed), 200 * MS);
    assert_eq!(next(true, false, Transition::Unchanged), 200 * MS);
}

#[test]
fn jitter_stays_within_its_bounds_and_is_reproducible() {
    let c = HealthCheck { interval_jitter: 30 * MS, interval_jitter_percent: 50, ..config() };
    let draw = |seed| {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..1000).map(|_| next_interval(&c, true, true, Transition::Unchanged, &mut rng)).collect::<Vec<_>>()
    };
    let delays = draw(1);
    // 100 ms + [0, 50) ms of percent jitter + [0, 30) ms of jitter.
    assert!(delays.iter().all(|d| *d >= 100 * MS && *d < 180 * MS), "{delays:?}");
    assert!(delays.iter().any(|d| *d > 150 * MS), "the jitter is used");
    assert_eq!(delays, draw(1), "the same seed, the same schedule");
}

#[test]
fn the_first_probe_waits_a_random_part_of_the_initial_jitter() {
    let mut rng = SmallRng::seed_from_u64(3);
    assert_eq!(initial_delay(&config(), &mut rng), Duration::ZERO);
    let c = HealthCheck { initial_jitter: 500 * MS, interval_jitter_percent: 50, ..config() };
    for _ in 0..1000 {
        let delay = initial_delay(&c, &mut rng);
        assert!(delay >= MS && delay < 500 * MS, "{delay:?}");
    }
}

#[test]
fn the_balancer_takes_out_hosts_failed_by_a_check_but_not_without_checks() {
    use crate::config::Address;
    use crate::config::endpoint::{HealthStatus, LbEndpoint};
    let endpoint = LbEndpoint {
        address: Address::Socket("10.0.0.1:80".parse().unwrap()),
        weight: 1,
        health: HealthStatus::Healthy,
        hash_key: None,
        transport_socket_match: Default::default(),
        hostname: String::new(),
        health_check: None,
        additional_addresses: Box::default(),
        metadata: None,
    };
    let now = Instant::now();
    let host = crate::lb::Host {
        endpoint: Arc::new(endpoint.clone()),
        stats: Arc::new(EndpointStats::new(now).failed_by_health_checks(1)),
        priority: 0,
        locality: 0,
        cluster_stats: Default::default(),
    };
    assert_eq!(host.coarse_health(now, true), HealthStatus::Unhealthy);
    assert_eq!(host.coarse_health(now, false), HealthStatus::Healthy);
    host.stats.health().set_failed(0, false);
    assert_eq!(host.coarse_health(now, true), HealthStatus::Healthy);
    host.stats.health().set_degraded(0, true);
    assert_eq!(host.coarse_health(now, true), HealthStatus::Degraded);
    let eds_unhealthy = crate::lb::Host {
        endpoint: Arc::new(LbEndpoint { health: HealthStatus::Unhealthy, ..endpoint }),
        stats: Arc::new(EndpointStats::new(now)),
        ..host
    };
    assert_eq!(eds_unhealthy.coarse_health(now, true), HealthStatus::Unhealthy, "EDS wins over a passing check");
}
