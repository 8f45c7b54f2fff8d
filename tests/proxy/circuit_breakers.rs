//! Circuit breakers `max_connections`, `max_pending_requests` and `max_requests` (cluster and per host)
//! through the proxy, against backends that hold their responses until the test releases
//! them, so every limit is reached deterministically.

use crate::common;

use common::backends::{self, Held};
use common::lab::{self, Lab, get};
use common::wait;
use http::StatusCode;
use outrider::lb::resources::{ClusterResources, Priority};
use std::sync::Arc;
use std::sync::atomic::Ordering;

const H2: &str = r#"
typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config: { http2_protocol_options: {} }
"#;

fn resources(lab: &Lab) -> Arc<ClusterResources> {
    lab.outrider.balancers.get("backend").unwrap().resources().clone()
}

fn spawn_get(lab: &Lab) -> tokio::task::JoinHandle<lab::Answer> {
    let port = lab.proxy_port;
    tokio::spawn(async move { get(port, "/").await.unwrap() })
}

async fn wait_arrived(held: &Held, n: usize) {
    let seen = held.backend.seen.clone();
    wait::until_sync("requests at the backend", || seen.requests() >= n).await;
}

async fn wait_pending(resources: &Arc<ClusterResources>, n: u32) {
    wait::until_sync("pending requests", || resources.pending_requests(Priority::Default) == n).await;
}

#[tokio::test]
async fn max_connections_makes_requests_wait_for_a_connection_instead_of_opening_one() {
    let held = backends::held().await;
    let breakers = "circuit_breakers: { thresholds: [{ max_connections: 1 }] }\n";
    let lab = lab::start_default(&[held.backend.port], breakers).await;
    let resources = resources(&lab);

    let first = spawn_get(&lab);
    wait_arrived(&held, 1).await;
    let second = spawn_get(&lab);
    wait_pending(&resources, 1).await;
    assert_eq!(held.backend.seen.connections(), 1, "no second connection past max_connections");
    assert_eq!(resources.active_connections(Priority::Default), 1);
    assert!(resources.cx_overflow.load(Ordering::SeqCst) >= 1);

    // The first response hands its connection back; the pending request takes it.
    held.release(2);
    assert!(first.await.unwrap().ok());
    assert!(second.await.unwrap().ok());
    assert_eq!(held.backend.seen.requests(), 2);
    assert_eq!(held.backend.seen.connections(), 1);
    assert_eq!(resources.pending_requests(Priority::Default), 0);
    assert!(lab::stat(&lab.outrider, "cluster.backend.upstream_cx_overflow").unwrap() >= 1.0);
    lab.outrider.stop();
}

/// `max_requests` bounds requests on connections, not the ones pending for a connection:
/// as in Envoy's pools, which take the request slot when they attach a request to a ready
/// connection. With HTTP/1.1, `max_connections` already bounds the active requests, so
/// requests queued behind it do not overflow (a burst of twice Envoy's default 1 024 in
/// flight got 503 for about half its requests before).
#[tokio::test]
async fn max_requests_counts_requests_on_connections_not_pending_ones() {
    let held = backends::held().await;
    let breakers =
        "circuit_breakers: { thresholds: [{ max_connections: 1, max_pending_requests: 5, max_requests: 1 }] }\n";
    let lab = lab::start_default(&[held.backend.port], breakers).await;
    let resources = resources(&lab);

    let first = spawn_get(&lab);
    wait_arrived(&held, 1).await;
    let (second, third) = (spawn_get(&lab), spawn_get(&lab));
    wait_pending(&resources, 2).await;
    assert_eq!(resources.rq_pending_overflow.load(Ordering::SeqCst), 0, "pending requests are not active ones");

    held.release(3);
    for answer in [first, second, third] {
        assert!(answer.await.unwrap().ok());
    }
    assert_eq!(held.backend.seen.requests(), 3);
    assert_eq!(lab::stat(&lab.outrider, "cluster.backend.upstream_rq_pending_overflow"), Some(0.0));
    lab.outrider.stop();
}

#[tokio::test]
async fn pending_overflow_answers_503_overloaded_with_the_uo_reason() {
    let held = backends::held().await;
    let breakers = "circuit_breakers: { thresholds: [{ max_connections: 1, max_pending_requests: 1 }] }\n";
    let lab = lab::start_default(&[held.backend.port], breakers).await;
    let resources = resources(&lab);

    let first = spawn_get(&lab);
    wait_arrived(&held, 1).await;
    let second = spawn_get(&lab);
    wait_pending(&resources, 1).await;

    let third = get(lab.proxy_port, "/").await.unwrap();
    assert_eq!(third.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(third.headers.get("x-envoy-overloaded").unwrap(), "true");
    assert_eq!(third.text(), "upstream connect error or disconnect/reset before headers. reset reason: overflow");
    assert_eq!(resources.rq_pending_overflow.load(Ordering::SeqCst), 1);
    assert_eq!(lab::stat(&lab.outrider, "cluster.backend.upstream_rq_pending_overflow"), Some(1.0));
    assert_eq!(held.backend.seen.requests(), 1, "the overflowed request never reached the backend");

    held.release(2);
    assert!(first.await.unwrap().ok());
    assert!(second.await.unwrap().ok());
    // With room again, requests pass.
    held.release(1);
    assert!(get(lab.proxy_port, "/").await.unwrap().ok());
    lab.outrider.stop();
}

#[tokio::test]
async fn a_host_without_a_connection_gets_one_even_past_the_cluster_limit() {
    let (a, b) = (backends::held().await, backends::held().await);
    let breakers = "circuit_breakers: { thresholds: [{ max_connections: 1 }] }\n";
    let lab = lab::start_default(&[a.backend.port, b.backend.port], breakers).await;
    let resources = resources(&lab);

    // Round robin: one request to each host. The second host's pool has no connection,
    // so it opens one although the cluster is at its limit (as Envoy does).
    let first = spawn_get(&lab);
    let second = spawn_get(&lab);
    let (sa, sb) = (a.backend.seen.clone(), b.backend.seen.clone());
    wait::until_sync("one request at each host", || sa.requests() == 1 && sb.requests() == 1).await;
    assert_eq!(resources.active_connections(Priority::Default), 2);
    assert!(resources.cx_overflow.load(Ordering::SeqCst) >= 1);
    a.release(1);
    b.release(1);
    assert!(first.await.unwrap().ok());
    assert!(second.await.unwrap().ok());
    lab.outrider.stop();
}

#[tokio::test]
async fn per_host_max_connections_bounds_each_host() {
    let held = backends::held().await;
    let breakers = "circuit_breakers: { per_host_thresholds: [{ max_connections: 1 }] }\n";
    let lab = lab::start_default(&[held.backend.port], breakers).await;
    let resources = resources(&lab);

    let first = spawn_get(&lab);
    wait_arrived(&held, 1).await;
    let second = spawn_get(&lab);
    let third = spawn_get(&lab);
    wait_pending(&resources, 2).await;
    assert_eq!(held.backend.seen.connections(), 1);
    let host = lab.outrider.balancers.get("backend").unwrap().hosts()[0].stats.clone();
    assert_eq!(host.connections(), 1);

    held.release(3);
    for request in [first, second, third] {
        assert!(request.await.unwrap().ok());
    }
    assert_eq!(held.backend.seen.connections(), 1, "all three went over the one connection");
    lab.outrider.stop();
}

#[tokio::test]
async fn http2_requests_multiplex_on_one_connection_within_max_connections() {
    let held = backends::held().await;
    let breakers = format!("circuit_breakers: {{ thresholds: [{{ max_connections: 1 }}] }}\n{H2}");
    let lab = lab::start_default(&[held.backend.port], &breakers).await;
    let resources = resources(&lab);

    let requests: Vec<_> = (0..8).map(|_| spawn_get(&lab)).collect();
    wait_arrived(&held, 8).await;
    assert_eq!(held.backend.seen.connections(), 1);
    assert_eq!(resources.pending_requests(Priority::Default), 0, "none waits: they share the connection");
    held.release(8);
    for request in requests {
        assert!(request.await.unwrap().ok());
    }
    assert_eq!(resources.rq_pending_overflow.load(Ordering::SeqCst), 0);
    lab.outrider.stop();
}

#[tokio::test]
async fn a_pending_request_waits_no_longer_than_the_route_timeout() {
    let held = backends::held().await;
    let breakers = "circuit_breakers: { thresholds: [{ max_connections: 1 }] }\n";
    let route = common::ROUTE.replace("route: { cluster: backend }", "route: { cluster: backend, timeout: 0.3s }");
    let lab = lab::start(&[held.backend.port], breakers, &route, "DELTA_GRPC").await;
    let resources = resources(&lab);

    let first = spawn_get(&lab);
    wait_arrived(&held, 1).await;
    // The second waits as pending until the route timeout answers it (and the first too).
    let second = get(lab.proxy_port, "/").await.unwrap();
    assert_eq!(second.status, StatusCode::GATEWAY_TIMEOUT, "{}", second.text());
    assert_eq!(resources.pending_requests(Priority::Default), 0, "the slot went with the request");
    let first = first.await.unwrap();
    assert_eq!(first.status, StatusCode::GATEWAY_TIMEOUT);
    held.release(2);
    lab.outrider.stop();
}
