use std::time::Duration;

use http::HeaderMap;

use super::{Decision, Outcome, RetryState};
use crate::config::route::{HeaderMatch, HeaderMatcher, RetryBackOff, RetryOn, RetryOnSet, RetryPolicy, StringMatcher};

fn policy(retry_on: &[RetryOn]) -> RetryPolicy {
    RetryPolicy {
        retry_on: retry_on.iter().copied().collect::<RetryOnSet>(),
        num_retries: 1,
        per_try_timeout: None,
        per_try_idle_timeout: None,
        avoid_previous_hosts: false,
        host_selection_retry_max_attempts: 1,
        retriable_status_codes: vec![429],
        retriable_headers: vec![HeaderMatcher {
            name: "x-retry-me".into(),
            rule: HeaderMatch::Value(StringMatcher::Exact { value: "yes".into(), ignore_case: false }),
            invert_match: false,
            treat_missing_header_as_empty: false,
        }],
        retriable_request_headers: Vec::new(),
        back_off: RetryBackOff::default(),
    }
}

fn retries(retry_on: &[RetryOn], outcome: &Outcome<'_>) -> bool {
    let policy = policy(retry_on);
    matches!(RetryState::new(Some(&policy), 7).on_outcome(outcome), Decision::Retry { .. })
}

fn response(status: u16, headers: &HeaderMap) -> Outcome<'_> {
    Outcome::Response { status, grpc_status: None, headers }
}

#[test]
fn decision_table() {
    use RetryOn::*;
    let empty = HeaderMap::new();
    let mut marked = HeaderMap::new();
    marked.insert("x-retry-me", "yes".parse().unwrap());
    let grpc = |code| Outcome::Response { status: 200, grpc_status: Some(code), headers: &empty };
    // (conditions, outcome, retried)
    let table: Vec<(&[RetryOn], Outcome<'_>, bool)> = vec![
        (&[FiveXx], response(500, &empty), true),
        (&[FiveXx], response(503, &empty), true),
        (&[FiveXx], response(404, &empty), false),
        (&[FiveXx], response(200, &empty), false),
        (&[FiveXx], Outcome::Reset, true),
        (&[FiveXx], Outcome::ConnectFailure, true),
        (&[FiveXx], Outcome::Timeout, true),
        (&[FiveXx], Outcome::RefusedStream, true),
        (&[FiveXx], Outcome::Overflow, false),
        (&[GatewayError], response(500, &empty), false),
        (&[GatewayError], response(502, &empty), true),
        (&[GatewayError], response(503, &empty), true),
        (&[GatewayError], response(504, &empty), true),
        (&[GatewayError], Outcome::Reset, true),
        (&[Reset], Outcome::Reset, true),
        (&[Reset], Outcome::Timeout, true),
        (&[Reset], Outcome::ConnectFailure, true),
        (&[Reset], response(503, &empty), false),
        (&[ConnectFailure], Outcome::ConnectFailure, true),
        (&[ConnectFailure], Outcome::Reset, false),
        (&[ConnectFailure], Outcome::Timeout, false),
        (&[ConnectFailure], response(503, &empty), false),
        (&[ResetBeforeRequest], Outcome::ResetBeforeRequest, true),
        (&[ResetBeforeRequest], Outcome::ConnectFailure, true),
        (&[ResetBeforeRequest], Outcome::Reset, false),
        (&[RefusedStream], Outcome::RefusedStream, true),
        (&[RefusedStream], Outcome::Reset, false),
        (&[Retriable4xx], response(409, &empty), true),
        (&[Retriable4xx], response(429, &empty), false),
        (&[RetriableStatusCodes], response(429, &empty), true),
        (&[RetriableStatusCodes], response(500, &empty), false),
        (&[RetriableHeaders], response(200, &marked), true),
        (&[RetriableHeaders], response(200, &empty), false),
        (&[FiveXx], response(200, &marked), false),
        (&[Cancelled], grpc(1), true),
        (&[DeadlineExceeded], grpc(4), true),
        (&[ResourceExhausted], grpc(8), true),
        (&[Internal], grpc(13), true),
        (&[Unavailable], grpc(14), true),
        (&[Unavailable], grpc(13), false),
        (&[Cancelled, DeadlineExceeded, Internal, ResourceExhausted, Unavailable], grpc(0), false),
        (&[Cancelled, DeadlineExceeded, Internal, ResourceExhausted, Unavailable], grpc(5), false),
        (&[], response(503, &empty), false),
        (&[], Outcome::Reset, false),
    ];
    for (on, outcome, expected) in &table {
        assert_eq!(retries(on, outcome), *expected, "{on:?} on {outcome:?}");
    }
}

#[test]
fn rate_limited_responses_only_retry_under_envoy_ratelimited() {
    let mut limited = HeaderMap::new();
    limited.insert("x-envoy-ratelimited", "true".parse().unwrap());
    assert!(!retries(&[RetryOn::FiveXx, RetryOn::GatewayError], &response(503, &limited)));
    assert!(retries(&[RetryOn::EnvoyRateLimited], &response(429, &limited)));
    assert!(!retries(&[RetryOn::EnvoyRateLimited], &response(429, &HeaderMap::new())));
}

#[test]
fn no_policy_never_retries() {
    let mut state = RetryState::new(None, 1);
    assert!(!state.enabled());
    assert_eq!(state.on_outcome(&Outcome::Reset), Decision::Done);
}

#[test]
fn num_retries_is_exhausted() {
    let mut p = policy(&[RetryOn::FiveXx]);
    p.num_retries = 3;
    let mut state = RetryState::new(Some(&p), 42);
    let headers = HeaderMap::new();
    for attempt in 2..=4 {
        assert!(matches!(state.on_outcome(&response(503, &headers)), Decision::Retry { .. }));
        assert_eq!(state.attempts(), attempt);
    }
    assert_eq!(state.retries_left(), 0);
    assert_eq!(state.on_outcome(&response(503, &headers)), Decision::Done);
    assert_eq!(state.attempts(), 4);
}

#[test]
fn success_is_done_and_keeps_the_budget() {
    let p = policy(&[RetryOn::FiveXx]);
    let mut state = RetryState::new(Some(&p), 1);
    assert_eq!(state.on_outcome(&response(200, &HeaderMap::new())), Decision::Done);
    assert_eq!(state.retries_left(), 1);
}

fn backoffs(back_off: RetryBackOff, seed: u64, n: u32) -> Vec<Duration> {
    let mut p = policy(&[RetryOn::Reset]);
    p.num_retries = n;
    p.back_off = back_off;
    let mut state = RetryState::new(Some(&p), seed);
    (0..n)
        .map(|_| match state.on_outcome(&Outcome::Reset) {
            Decision::Retry { backoff } => backoff,
            Decision::Done => Duration::MAX,
        })
        .collect()
}

#[test]
fn backoff_is_fully_jittered_exponential_and_capped() {
    let config = RetryBackOff::default(); // 25 ms, max 250 ms
    // The n-th back-off is below 25 × 2^(n-1) ms, capped at 250 ms.
    let limits = [25u64, 50, 100, 200, 250, 250, 250];
    let mut maxima = [0u64; 7];
    let mut sums = [0u64; 7];
    for seed in 0..500 {
        for (i, b) in backoffs(config, seed, 7).into_iter().enumerate() {
            let ms = u64::try_from(b.as_millis()).unwrap();
            assert!(ms < limits[i], "retry {i}: {ms} ms");
            maxima[i] = maxima[i].max(ms);
            sums[i] += ms;
        }
    }
    // The ranges are used in full, so the means grow with them.
    for i in 0..4 {
        assert!(maxima[i] >= limits[i] * 8 / 10, "retry {i} max {}", maxima[i]);
        assert!(sums[i] < sums[i + 1], "mean back-off grows: {sums:?}");
    }
}

#[test]
fn backoff_is_deterministic_per_seed() {
    let config = RetryBackOff { base_interval: Duration::from_millis(100), max_interval: Duration::from_secs(1) };
    assert_eq!(backoffs(config, 9, 5), backoffs(config, 9, 5));
    assert_ne!(backoffs(config, 9, 5), backoffs(config, 10, 5));
}

#[test]
fn host_predicate_settings_are_exposed() {
    let mut p = policy(&[RetryOn::FiveXx]);
    p.avoid_previous_hosts = true;
    p.host_selection_retry_max_attempts = 5;
    let state = RetryState::new(Some(&p), 0);
    assert!(state.avoid_previous_hosts());
    assert_eq!(state.host_selection_retry_max_attempts(), 5);
    let none = RetryState::new(None, 0);
    assert!(!none.avoid_previous_hosts());
    assert_eq!(none.host_selection_retry_max_attempts(), 1);
}

fn request(headers: &[(&str, &str)]) -> http::request::Parts {
    let mut builder = http::Request::builder().method("POST").uri("/x");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap().into_parts().0
}

#[test]
fn request_headers_extend_the_policy() {
    let parts = request(&[
        ("x-envoy-retry-on", "retriable-4xx, bogus"),
        ("x-envoy-retry-grpc-on", "unavailable"),
        ("x-envoy-max-retries", "3"),
        ("x-envoy-retriable-status-codes", "418"),
        ("x-envoy-retriable-header-names", "X-Again"),
    ]);
    let mut state = RetryState::for_request(None, &parts, 1);
    let empty = HeaderMap::new();
    assert!(matches!(state.on_outcome(&response(409, &empty)), Decision::Retry { .. }));
    let grpc = Outcome::Response { status: 200, grpc_status: Some(14), headers: &empty };
    assert!(matches!(state.on_outcome(&grpc), Decision::Retry { .. }));
    // Status codes and header names only count with their condition enabled.
    assert_eq!(state.retries_left(), 1);
    assert_eq!(state.on_outcome(&response(418, &empty)), Decision::Done);

    let parts = request(&[
        ("x-envoy-retry-on", "retriable-status-codes,retriable-headers"),
        ("x-envoy-retriable-status-codes", "418"),
        ("x-envoy-retriable-header-names", "X-Again"),
    ]);
    let mut state = RetryState::for_request(None, &parts, 1);
    assert!(matches!(state.on_outcome(&response(418, &empty)), Decision::Retry { .. }));
    let mut state = RetryState::for_request(None, &parts, 1);
    let mut again = HeaderMap::new();
    again.insert("x-again", "1".parse().unwrap());
    assert!(matches!(state.on_outcome(&response(200, &again)), Decision::Retry { .. }));
}

#[test]
fn retriable_request_headers_gate_retries() {
    let mut p = policy(&[RetryOn::FiveXx]);
    p.retriable_request_headers = vec![HeaderMatcher {
        name: ":method".into(),
        rule: HeaderMatch::Value(StringMatcher::Exact { value: "GET".into(), ignore_case: false }),
        invert_match: false,
        treat_missing_header_as_empty: false,
    }];
    let empty = HeaderMap::new();
    let post = request(&[]);
    assert_eq!(RetryState::for_request(Some(&p), &post, 1).on_outcome(&response(503, &empty)), Decision::Done);
    let get = http::Request::get("/x").body(()).unwrap().into_parts().0;
    assert!(matches!(
        RetryState::for_request(Some(&p), &get, 1).on_outcome(&response(503, &empty)),
        Decision::Retry { .. }
    ));
}
