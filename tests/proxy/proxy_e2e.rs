//! End to end through the proxy, real sockets everywhere: a control plane over ADS, demo
//! backends on loopback, Outrider's worker forwarding HTTP/1.1, HTTP/2 and gRPC.

use crate::common;

use std::collections::HashMap;

use crate::common::lab::free_port;
use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use outrider::config::ResourceType;
use outrider::core::shutdown;
use outrider::testkit::backends::{BackendBehaviour, serve_backend};

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

#[tokio::test]
async fn orca_reports_from_real_responses_steer_cswrr() {
    use outrider::testkit::backends::OrcaMode;
    let cswrr = r#"
load_balancing_policy:
  policies:
  - typed_extension_config:
      name: envoy.load_balancing_policies.client_side_weighted_round_robin
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin
        blackout_period: 0s
"#;
    // Same speed; "small" serves 2 at a time, "large" 100: the same load is 50× more of
    // small's capacity, and its ORCA reports say so.
    let small = BackendBehaviour { capacity: 2, orca: Some(OrcaMode::TextHeader), ..BackendBehaviour::new("small") };
    let large = BackendBehaviour { capacity: 100, orca: Some(OrcaMode::BinHeader), ..BackendBehaviour::new("large") };
    let lab = lab(vec![small, large], cswrr).await;
    for _ in 0..40 {
        let (status, _) = get_h1(lab.proxy_port, "/").await;
        assert_eq!(status, 200);
    }
    let lb = lab.outrider.balancers.get("backend").unwrap();
    for host in lb.hosts() {
        assert!(host.stats.load_report().is_some(), "an ORCA report reached {}", host.address());
    }
    lb.update_weights(std::time::Instant::now());
    let mut picker = outrider::lb::Picker::new(lb.clone(), 1);
    let now = std::time::Instant::now();
    let mut large_share = 0;
    for _ in 0..1000 {
        let host = picker.pick(&outrider::lb::PickContext::at(now)).unwrap();
        let port = host.address().to_string();
        let is_large = lb.hosts().iter().position(|h| h.address().to_string() == port) == Some(1);
        large_share += usize::from(is_large);
    }
    assert!(large_share > 800, "the backend with room takes most picks: {large_share} of 1000");
    lab.outrider.stop();
}

#[tokio::test]
async fn eds_churn_under_load_fails_no_request() {
    let lab = lab(vec![BackendBehaviour::new("a"), BackendBehaviour::new("b"), BackendBehaviour::new("c")], "").await;
    let ports: Vec<u32> = lab
        .outrider
        .balancers
        .get("backend")
        .unwrap()
        .hosts()
        .iter()
        .map(|h| h.address().to_string().rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (stop, port) = (stop.clone(), lab.proxy_port);
        clients.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0usize, 0usize);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match tokio::time::timeout(WAIT, get_h1(port, "/")).await {
                    Ok((200, _)) => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        }));
    }
    // Ten pushes a second for three seconds, each a different subset (never empty).
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    for round in 0..30usize {
        tick.tick().await;
        let subset: Vec<u32> =
            ports.iter().enumerate().filter(|(i, _)| (round + i) % 3 != 0).map(|(_, p)| *p).collect();
        lab.control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &subset)]);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for client in clients {
        let (o, f) = client.await.unwrap();
        ok += o;
        failed += f;
    }
    assert!(ok > 0);
    assert_eq!(failed, 0, "{failed} of {} requests failed during EDS churn", ok + failed);
    lab.outrider.stop();
}

#[tokio::test]
async fn tcp_proxy_copies_bytes_both_ways() {
    let lab = lab(vec![BackendBehaviour::new("tcp")], "").await;
    let tcp_port = free_port();
    let tcp_listener = format!(
        r#"
name: tcp
address: {{ socket_address: {{ address: 127.0.0.1, port_value: {tcp_port} }} }}
filter_chains:
- filters:
  - name: envoy.filters.network.tcp_proxy
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
      stat_prefix: tcp
      cluster: backend
"#
    );
    let http_listener = LISTENER.replace("port_value: 0 ", &format!("port_value: {} ", lab.proxy_port));
    lab.control_plane.set(ResourceType::Listener, &[&http_listener, &tcp_listener]);
    wait_snapshot(&lab.outrider.store, |s| s.listeners.contains_key("tcp")).await;
    lab.outrider.listeners_ready().await;
    let (status, body) = tokio::time::timeout(WAIT, get_h1(tcp_port, "/raw")).await.unwrap();
    assert_eq!((status, body.starts_with("tcp:")), (200, true), "{body}");
    lab.outrider.stop();
}

#[tokio::test]
async fn a_changed_listener_keeps_established_connections() {
    let lab = lab(vec![BackendBehaviour::new("keep")], "").await;
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", lab.proxy_port)).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = || http::Request::get("/").header("host", "x").body(Full::new(Bytes::new())).unwrap();
    assert_eq!(sender.send_request(request()).await.unwrap().status(), 200);

    // LDS changes the listener (same address): a new socket takes new connections.
    let changed = LISTENER
        .replace("port_value: 0 ", &format!("port_value: {} ", lab.proxy_port))
        .replace("stat_prefix: http", "stat_prefix: changed");
    lab.control_plane.set(ResourceType::Listener, &[&changed]);
    lab.control_plane.wait_acked(ResourceType::Listener).await;
    lab.outrider.listeners_ready().await;

    // The established connection still works, and so do new ones.
    let response = tokio::time::timeout(WAIT, sender.send_request(request())).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(get_h1(lab.proxy_port, "/").await.0, 200);
    lab.outrider.stop();
}
