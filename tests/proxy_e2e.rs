//! End to end through the proxy, real sockets everywhere: a control plane over ADS, demo
//! backends on loopback, Outrider's worker forwarding HTTP/1.1, HTTP/2 and gRPC.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use outrider::app::backends::{BackendBehaviour, serve_backend};
use outrider::config::ResourceType;
use outrider::core::shutdown;

/// A free loopback port (bound and released: listeners use SO_REUSEPORT, and the port is
/// only taken by this test's proxy).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Lab {
    control_plane: ControlPlane,
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
    let mut published = outrider.balancers.subscribe();
    while outrider.balancers.get("backend").is_none_or(|lb| lb.hosts().len() != ports.len()) {
        published.changed().await.unwrap();
    }
    outrider.listeners_ready().await;
    Lab { control_plane, outrider, proxy_port, _backends: trigger }
}

async fn get_h1(port: u16, path: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(path).header("host", "example.com").body(Full::new(Bytes::new())).unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn http1_requests_are_balanced_over_the_endpoints() {
    let lab = lab(vec![BackendBehaviour::new("a"), BackendBehaviour::new("b")], "").await;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for _ in 0..20 {
        let (status, body) = tokio::time::timeout(WAIT, get_h1(lab.proxy_port, "/hello")).await.unwrap();
        assert_eq!(status, 200, "{body}");
        *seen.entry(body.split(':').next().unwrap().to_owned()).or_default() += 1;
    }
    assert_eq!(seen.get("a"), Some(&10), "{seen:?}");
    assert_eq!(seen.get("b"), Some(&10), "{seen:?}");
    lab.outrider.stop();
    drop(lab.control_plane);
}

#[tokio::test]
async fn http2_prior_knowledge_is_forwarded() {
    let lab = lab(vec![BackendBehaviour::new("h2")], "").await;
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", lab.proxy_port)).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    for _ in 0..5 {
        let request = http::Request::get(format!("http://example.com:{}/x", lab.proxy_port))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
        assert_eq!(response.status(), 200);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(body.starts_with(b"h2:"), "{body:?}");
    }
    lab.outrider.stop();
}

#[tokio::test]
async fn grpc_echo_passes_with_trailers() {
    use outrider::pb::echo::EchoRequest;
    use outrider::pb::echo::echo_client::EchoClient;
    // gRPC needs HTTP/2 upstream (as in Envoy, the cluster says so).
    let h2 = r#"
typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config: { http2_protocol_options: {} }
"#;
    let lab = lab(vec![BackendBehaviour::new("grpc")], h2).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", lab.proxy_port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = EchoClient::new(channel);
    let reply = client.echo(EchoRequest { payload: "ping".into(), ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(reply.payload, "ping");
    assert_eq!(reply.backend, "grpc");
    let failed =
        client.echo(EchoRequest { payload: "x".into(), fail_with_code: 5, ..Default::default() }).await.unwrap_err();
    assert_eq!(failed.code(), tonic::Code::NotFound, "gRPC status from the trailers reaches the client");
    lab.outrider.stop();
}

#[tokio::test]
async fn errors_are_worded_as_envoy_words_them() {
    let mut failing = BackendBehaviour::new("bad");
    failing.error_rate = 1.0;
    let lab = lab(vec![failing], "").await;
    let (status, _) = get_h1(lab.proxy_port, "/").await;
    assert_eq!(status, 503, "the backend's 503 passes through");
    // The only endpoint goes away: no healthy upstream.
    lab.control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[])]);
    let mut published = lab.outrider.balancers.subscribe();
    while lab.outrider.balancers.get("backend").is_none_or(|lb| !lb.hosts().is_empty()) {
        published.changed().await.unwrap();
    }
    let (status, body) = get_h1(lab.proxy_port, "/").await;
    assert_eq!((status, body.as_str()), (503, "no healthy upstream"));
    lab.outrider.stop();
}

#[tokio::test]
async fn a_refused_connection_is_retried_on_another_endpoint() {
    let lab = lab(vec![BackendBehaviour::new("up")], "").await;
    // Add an endpoint nobody listens on; with retry_on connect-failure every request still
    // succeeds, landing on the live endpoint.
    let dead = free_port() as u32;
    let live = lab.outrider.balancers.get("backend").unwrap().hosts()[0].address().to_string();
    let live_port: u32 = live.rsplit(':').next().unwrap().parse().unwrap();
    lab.control_plane.set(
        ResourceType::RouteConfiguration,
        &[&ROUTE.replace(
            "route: { cluster: backend }",
            "route: { cluster: backend, retry_policy: { retry_on: connect-failure, num_retries: 3 } }",
        )],
    );
    lab.control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[live_port, dead])]);
    let mut published = lab.outrider.balancers.subscribe();
    while lab.outrider.balancers.get("backend").is_none_or(|lb| lb.hosts().len() != 2) {
        published.changed().await.unwrap();
    }
    // The ACK is sent once the new routes are published.
    lab.control_plane.wait_acked(ResourceType::RouteConfiguration).await;
    for _ in 0..10 {
        let (status, body) = get_h1(lab.proxy_port, "/").await;
        assert_eq!(status, 200, "{body}");
    }
    lab.outrider.stop();
}
