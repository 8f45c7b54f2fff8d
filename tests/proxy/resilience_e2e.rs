//! Resilience end to end: outlier detection, circuit breakers and active health checks,
//! through the proxy with a control plane and real backends on loopback.

use crate::common;

use std::time::Instant;

use crate::common::lab::free_port;
use bytes::Bytes;
use common::*;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use outrider::config::ResourceType;
use outrider::core::shutdown;
use outrider::testkit::backends::{BackendBehaviour, serve_backend};

struct Lab {
    _control_plane: ControlPlane,
    outrider: outrider::app::Running,
    proxy_port: u16,
    _backends: shutdown::Trigger,
}

async fn lab(behaviours: Vec<BackendBehaviour>, cluster_extra: &str) -> Lab {
    let (trigger, signal) = shutdown::channel();
    let mut ports = Vec::new();
    for behaviour in behaviours {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        ports.push(listener.local_addr().unwrap().port() as u32);
        tokio::spawn(serve_backend(listener, behaviour, signal.clone()));
    }
    let proxy_port = free_port();
    let control_plane = ControlPlane::start().await;
    control_plane.set(ResourceType::Cluster, &[&format!("{CLUSTER}{cluster_extra}")]);
    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &ports)]);
    control_plane
        .set(ResourceType::Listener, &[&LISTENER.replace("port_value: 0 ", &format!("port_value: {proxy_port} "))]);
    control_plane.set(ResourceType::RouteConfiguration, &[ROUTE]);
    let outrider = outrider::app::start_with(bootstrap(control_plane.port, "DELTA_GRPC"), 1).await.unwrap();
    wait_snapshot(&outrider.store, |s| s.ready).await;
    wait_balancer(&outrider, |lb| lb.hosts().len() == ports.len()).await;
    outrider.listeners_ready().await;
    Lab { _control_plane: control_plane, outrider, proxy_port, _backends: trigger }
}

/// Waits until the published balancer of `backend` satisfies `done`.
async fn wait_balancer(outrider: &outrider::app::Running, mut done: impl FnMut(&outrider::lb::ClusterLb) -> bool) {
    let mut published = outrider.balancers.subscribe();
    let wait = async {
        while !outrider.balancers.get("backend").is_some_and(|lb| done(&lb)) {
            published.changed().await.unwrap();
        }
    };
    tokio::time::timeout(WAIT, wait).await.expect("balancer condition not reached");
}

fn ejected(lb: &outrider::lb::ClusterLb) -> usize {
    lb.hosts().iter().filter(|h| h.stats.is_ejected(Instant::now())).count()
}

async fn get(port: u16, path: &str) -> (StatusCode, http::HeaderMap, String) {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(path).header("host", "example.com").body(Full::new(Bytes::new())).unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, String::from_utf8_lossy(&body).into_owned())
}

fn failing(name: &str) -> BackendBehaviour {
    let mut behaviour = BackendBehaviour::new(name);
    behaviour.error_rate = 1.0;
    behaviour.error_status = StatusCode::INTERNAL_SERVER_ERROR;
    behaviour
}

#[tokio::test]
async fn a_backend_answering_500_is_ejected_then_returns_after_the_ejection_time() {
    let outlier = r#"
outlier_detection: { consecutive_5xx: 3, interval: 0.05s, base_ejection_time: 2s, max_ejection_percent: 50 }
"#;
    let lab = lab(vec![BackendBehaviour::new("a"), BackendBehaviour::new("b"), failing("bad")], outlier).await;
    // Round robin over three hosts: the bad one answers its third 500 within nine requests;
    // the ejection is decided on the control runtime, so a few more requests may reach it.
    let mut failures = 0;
    for _ in 0..30 {
        let (status, _, _) = get(lab.proxy_port, "/").await;
        failures += usize::from(status == StatusCode::INTERNAL_SERVER_ERROR);
        if failures >= 3 {
            break;
        }
    }
    assert_eq!(failures, 3);
    wait_balancer(&lab.outrider, |lb| ejected(lb) == 1).await;
    for _ in 0..20 {
        let (status, _, body) = get(lab.proxy_port, "/").await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    // After base_ejection_time (× 1) the next sweep returns it, and it fails again.
    wait_balancer(&lab.outrider, |lb| ejected(lb) == 0).await;
    let mut saw_it_again = false;
    for _ in 0..3 {
        let (status, _, _) = get(lab.proxy_port, "/").await;
        saw_it_again |= status == StatusCode::INTERNAL_SERVER_ERROR;
    }
    assert!(saw_it_again, "the returned host takes its turn again");
    lab.outrider.stop();
}

#[tokio::test]
async fn max_requests_overflow_answers_503_overloaded() {
    use outrider::lb::resources::Priority;
    let breakers = r#"
circuit_breakers: { thresholds: [{ max_requests: 1 }] }
"#;
    let mut slow = BackendBehaviour::new("slow");
    slow.latency = std::time::Duration::from_secs(15);
    let lab = lab(vec![slow], breakers).await;
    let port = lab.proxy_port;
    let first = tokio::spawn(async move { get(port, "/slow").await });
    let resources = lab.outrider.balancers.get("backend").unwrap().resources().clone();
    wait::until_sync("one active request", || resources.active_requests(Priority::Default) == 1).await;

    let (status, headers, body) = get(lab.proxy_port, "/second").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers.get("x-envoy-overloaded").unwrap(), "true");
    assert_eq!(body, "upstream connect error or disconnect/reset before headers. reset reason: overflow");
    assert_eq!(resources.rq_pending_overflow.load(std::sync::atomic::Ordering::Relaxed), 1);
    first.abort();
    lab.outrider.stop();
}
