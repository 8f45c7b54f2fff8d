use super::*;

#[test]
fn requests_overflow_at_max_requests_and_slots_release_on_drop() {
    let resources = Arc::new(ClusterResources::default());
    let mut limits = CircuitBreakers::default();
    limits.default.max_requests = 1;
    let first = resources.try_request(&limits, Priority::Default).unwrap();
    assert!(resources.try_request(&limits, Priority::Default).is_none());
    assert_eq!(resources.rq_pending_overflow.load(Ordering::Relaxed), 1);
    assert!(resources.try_request(&limits, Priority::High).is_some(), "priorities are apart");
    drop(first);
    assert!(resources.try_request(&limits, Priority::Default).is_some());
}

#[test]
fn the_retry_budget_replaces_max_retries() {
    let resources = Arc::new(ClusterResources::default());
    let mut limits = CircuitBreakers::default();
    limits.default.max_retries = 0;
    assert!(resources.try_retry(&limits, Priority::Default).is_none());
    limits.default.retry_budget = Some(RetryBudget { budget_percent: 20.0, min_retry_concurrency: 1 });
    let requests: Vec<_> = (0..10).map(|_| resources.try_request(&limits, Priority::Default).unwrap()).collect();
    // 20 % of 10 active requests: two retries.
    let retries: Vec<_> = (0..3).filter_map(|_| resources.try_retry(&limits, Priority::Default)).collect();
    assert_eq!(retries.len(), 2);
    drop(requests);
    assert_eq!(budget_limit(limits.default.retry_budget.as_ref().unwrap(), 0), 1, "the floor");
    assert_eq!(resources.rq_retry_overflow.load(Ordering::Relaxed), 2);
}

#[test]
fn pending_requests_overflow_at_max_pending_requests() {
    let resources = Arc::new(ClusterResources::default());
    let mut limits = CircuitBreakers::default();
    limits.default.max_pending_requests = 2;
    let held: Vec<_> = (0..2).map(|_| resources.try_pending(&limits, Priority::Default).unwrap()).collect();
    assert!(resources.try_pending(&limits, Priority::Default).is_none());
    assert_eq!(resources.rq_pending_overflow.load(Ordering::Relaxed), 1);
    assert_eq!(resources.pending_requests(Priority::Default), 2);
    drop(held);
    assert_eq!(resources.pending_requests(Priority::Default), 0);
}

#[test]
fn connections_stop_at_max_connections_unless_the_pool_has_none() {
    let resources = Arc::new(ClusterResources::default());
    let (a, b) = (
        Arc::new(EndpointStats::new(std::time::Instant::now())),
        Arc::new(EndpointStats::new(std::time::Instant::now())),
    );
    let mut limits = CircuitBreakers::default();
    limits.default.max_connections = 1;
    let first = resources.try_connection(&limits, Priority::Default, &a, false).unwrap();
    assert!(resources.try_connection(&limits, Priority::Default, &a, false).is_none());
    assert_eq!(resources.cx_overflow.load(Ordering::Relaxed), 1);
    // A pool without any connection to its host gets one over the limit.
    let forced = resources.try_connection(&limits, Priority::Default, &b, true).unwrap();
    assert_eq!(resources.active_connections(Priority::Default), 2);
    assert_eq!(resources.cx_overflow.load(Ordering::Relaxed), 2);
    drop((first, forced));
    assert_eq!(resources.active_connections(Priority::Default), 0);
    assert_eq!((a.connections(), b.connections()), (0, 0));
}

#[test]
fn the_per_host_limit_counts_the_host_connections() {
    let resources = Arc::new(ClusterResources::default());
    let (a, b) = (
        Arc::new(EndpointStats::new(std::time::Instant::now())),
        Arc::new(EndpointStats::new(std::time::Instant::now())),
    );
    let limits = CircuitBreakers { per_host_max_connections: Some(1), ..CircuitBreakers::default() };
    let held = resources.try_connection(&limits, Priority::Default, &a, false).unwrap();
    assert!(resources.try_connection(&limits, Priority::Default, &a, false).is_none());
    assert_eq!(a.connections(), 1, "a refused connection leaves no count behind");
    let other = resources.try_connection(&limits, Priority::Default, &b, false).unwrap();
    assert_eq!(resources.active_connections(Priority::Default), 2);
    drop((held, other));
    assert_eq!(a.connections(), 0);
}
