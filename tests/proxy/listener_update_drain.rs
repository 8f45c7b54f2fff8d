//! An LDS update drains the connections of the filter chains it changes, as Envoy drains
//! them, and leaves those of unchanged chains alone. Without it a pooled connection kept
//! the filters it was accepted with for as long as it lived: a tightened policy applied
//! only to new callers (found with istiod and Kubernetes: an AuthorizationPolicy never
//! reached a client whose sidecar kept its connection).
//!
//! One listener, two chains told apart by the client's source address (127.0.0.1 and
//! 127.0.0.2): the update changes only the first.

use crate::common;

use common::lab::free_port;
use common::*;
use outrider::config::ResourceType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The listener: source 127.0.0.1 gets `first` (a direct response status, or a TCP proxy
/// with `first` as stat prefix when `tcp`), source 127.0.0.2 always gets 200.
fn listener(port: u16, first: u16, tcp: Option<u16>) -> String {
    let http = |status: u16| {
        format!(
            r#"[{{ name: envoy.filters.network.http_connection_manager, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: h, route_config: {{ virtual_hosts: [{{ name: all, domains: ["*"], routes: [{{ match: {{ prefix: / }}, direct_response: {{ status: {status} }} }}] }}] }}, http_filters: [{{ name: envoy.filters.http.router, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }} }}] }} }}]"#
        )
    };
    let first_filters = match tcp {
        Some(_) => format!(
            r#"[{{ name: envoy.filters.network.tcp_proxy, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: "t{first}", cluster: backend }} }}]"#
        ),
        None => http(first),
    };
    format!(
        r#"
name: l
address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
filter_chains:
- name: first
  filter_chain_match: {{ source_prefix_ranges: [{{ address_prefix: 127.0.0.1, prefix_len: 32 }}] }}
  filters: {first_filters}
- name: second
  filter_chain_match: {{ source_prefix_ranges: [{{ address_prefix: 127.0.0.2, prefix_len: 32 }}] }}
  filters: {second}
"#,
        second = http(200),
    )
}

/// A connection to the listener from `source`.
async fn connect_from(source: &str, port: u16) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(([127, 0, 0, 1], port).into()).await.unwrap()
}

/// A keep-alive `GET /` on `stream`; the response's status (its head only: no body).
async fn status(stream: &mut TcpStream) -> u16 {
    status_and_connection(stream).await.0
}

/// [`status`], and whether the response said `connection: close`.
async fn status_and_connection(stream: &mut TcpStream) -> (u16, bool) {
    stream.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, stream.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "closed before the response: {}", String::from_utf8_lossy(&head));
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    (head[9..12].parse().unwrap(), head.contains("\r\nconnection: close\r\n"))
}

/// Waits (bounded) until the proxy closes `stream`.
async fn closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(WAIT, stream.read(&mut buf)).await.expect("the connection was not closed");
    assert!(matches!(read, Ok(0) | Err(_)), "read {read:?}");
}

async fn start(listener_yaml: &str) -> (ControlPlane, outrider::app::Running) {
    let control_plane = ControlPlane::start().await;
    control_plane.set(ResourceType::Listener, &[listener_yaml]);
    let outrider = start_outrider(&control_plane, "DELTA_GRPC").await;
    wait_snapshot(&outrider.store, |s| s.listeners.contains_key("l")).await;
    control_plane.wait_acked(ResourceType::Listener).await;
    (control_plane, outrider)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_drains_http_connections_of_the_chain_it_changes_and_keeps_the_others() {
    let port = free_port();
    let (control_plane, outrider) = start(&listener(port, 200, None)).await;
    wait::connect(port).await;
    let (mut first, mut second) = (connect_from("127.0.0.1", port).await, connect_from("127.0.0.2", port).await);
    assert_eq!(status(&mut first).await, 200);
    assert_eq!(status(&mut second).await, 200);

    let before = outrider.store.load().listeners["l"].clone();
    control_plane.set(ResourceType::Listener, &[&listener(port, 403, None)]);
    wait_snapshot(&outrider.store, |s| !std::sync::Arc::ptr_eq(&s.listeners["l"], &before)).await;
    outrider.listeners_ready().await;
    // The changed chain's connection answers its next request as before, with
    // `connection: close` (as Envoy's drain does: an idle connection closed at once races a
    // client sending on it), and closes; a new one gets the new configuration.
    assert_eq!(status_and_connection(&mut first).await, (200, true));
    closed(&mut first).await;
    assert_eq!(status(&mut connect_from("127.0.0.1", port).await).await, 403);
    // The unchanged chain's connection lives on, as it was.
    assert_eq!(status_and_connection(&mut second).await, (200, false));
    outrider.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tcp_connection_of_a_changed_chain_is_closed_after_the_drain_time() {
    let backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_port = backend.local_addr().unwrap().port();
    // The backend echoes, and holds every connection open.
    let echoing = tokio::spawn(async move {
        while let Ok((mut stream, _)) = backend.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    let cluster = format!(
        "name: backend\ntype: STATIC\nconnect_timeout: 1s\nload_assignment: {{ cluster_name: backend, endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {backend_port} }} }} }} }}] }}] }}"
    );
    let port = free_port();
    let control_plane = ControlPlane::start().await;
    control_plane.set(ResourceType::Cluster, &[&cluster]);
    control_plane.set(ResourceType::Listener, &[&listener(port, 1, Some(backend_port))]);
    let outrider = start_outrider(&control_plane, "DELTA_GRPC").await;
    wait_snapshot(&outrider.store, |s| s.listeners.contains_key("l") && s.clusters.contains_key("backend")).await;
    wait::connect(port).await;
    let mut tunnel = connect_from("127.0.0.1", port).await;
    tunnel.write_all(b"hello").await.unwrap();
    let mut echoed = [0u8; 5];
    tokio::time::timeout(WAIT, tunnel.read_exact(&mut echoed)).await.unwrap().unwrap();
    assert_eq!(&echoed, b"hello", "the tunnel is up");

    control_plane.set(ResourceType::Listener, &[&listener(port, 2, Some(backend_port))]);
    control_plane.wait_acked(ResourceType::Listener).await;
    // Open, then closed once the drain time (5 s by default in process) is over.
    closed(&mut tunnel).await;
    outrider.stop();
    echoing.abort();
}
