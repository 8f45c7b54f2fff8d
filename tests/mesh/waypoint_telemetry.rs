//! A waypoint's telemetry across its internal listener: the caller `connect_terminate`
//! learns (there from workload discovery of the tunnel's source; here from its peer
//! metadata header) crosses to `main_internal` with the tunnelled stream when the filter
//! says `shared_with_upstream`, so the Istio metrics `main_internal` reports name it, as
//! Envoy's name it from the connection's filter state.

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common;
use crate::common::differential::{INTERNAL, INTERNAL_LISTENER_EXTENSION, static_cluster};
use crate::common::tunnel::{MAIN_INTERNAL_CLUSTER, connect_terminate_listener};
use crate::tls_support;
use outrider::config::filters::peer_metadata::WorkloadMetadata;

/// The application port `main_internal` serves.
const APP_PORT: u16 = 8080;

/// `connect_terminate` on `terminate` with Istio's `waypoint_downstream_peer_metadata`
/// (`shared_with_upstream` as `shared`) and `connect_authority`; `main_internal` serving
/// `APP_PORT` with `waypoint_upstream_peer_metadata` and `istio.stats` as a waypoint reports.
fn bootstrap(terminate: u16, app: u16, shared: bool) -> String {
    let filters = format!(
        r#"
          - name: waypoint_downstream_peer_metadata
            typed_config:
              "@type": type.googleapis.com/udpa.type.v1.TypedStruct
              type_url: type.googleapis.com/io.istio.http.peer_metadata.Config
              value: {{ downstream_discovery: [{{ istio_headers: {{}} }}], shared_with_upstream: {shared} }}
          - name: connect_authority
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config
              on_request_headers:
              - object_key: envoy.filters.listener.original_dst.local_ip
                format_string: {{ text_format_source: {{ inline_string: "%REQ(:AUTHORITY)%" }} }}
                shared_with_upstream: ONCE"#
    );
    format!(
        r#"{INTERNAL_LISTENER_EXTENSION}node:
  id: waypoint~127.0.0.1~waypoint-0.default~default.svc.cluster.local
  metadata: {{ NAMESPACE: default, WORKLOAD_NAME: waypoint, CLUSTER_ID: Kubernetes }}
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
static_resources:
  listeners:{}
  - name: main_internal{INTERNAL}
    listener_filters:
    - name: envoy.filters.listener.original_dst
      typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst }}
    filter_chains:
    - filter_chain_match: {{ destination_port: {APP_PORT} }}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: inbound_vip
          route_config: {{ virtual_hosts: [{{ name: all, domains: ["*"], routes: [{{ match: {{ prefix: "/" }}, route: {{ cluster: app }} }}] }}] }}
          http_filters:
          - name: waypoint_upstream_peer_metadata
            typed_config:
              "@type": type.googleapis.com/udpa.type.v1.TypedStruct
              type_url: type.googleapis.com/io.istio.http.peer_metadata.Config
              value: {{ upstream_discovery: [{{ istio_headers: {{}} }}] }}
          - name: istio.stats
            typed_config: {{ "@type": type.googleapis.com/stats.PluginConfig, reporter: SERVER_GATEWAY }}
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:{MAIN_INTERNAL_CLUSTER}{}
"#,
        connect_terminate_listener("connect_terminate", terminate, &filters),
        static_cluster("app", app),
    )
}

/// A `CONNECT` to `127.0.0.1:APP_PORT` through `terminate` carrying `peer` as the caller's
/// peer metadata header, then one GET inside the tunnel; the GET's status.
async fn call_as(terminate: u16, peer: &str) -> u16 {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", terminate)).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    let driver = tokio::spawn(connection);
    let request = http::Request::connect(format!("127.0.0.1:{APP_PORT}"))
        .header("x-envoy-peer-metadata", peer)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut tunnel = TokioIo::new(hyper::upgrade::on(response).await.unwrap());
    tunnel.write_all(b"GET / HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(common::WAIT, tunnel.read_to_end(&mut answer)).await;
    drop(sender);
    let _ = tokio::time::timeout(common::WAIT, driver).await;
    let answer = String::from_utf8_lossy(&answer);
    answer.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0)
}

/// The `source_workload` label of the `istio_requests_total` series on `admin`.
async fn source_workloads(admin: std::net::SocketAddr) -> Vec<String> {
    let (_, body) = common::admin_get(admin, "/stats/prometheus").await;
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == "istio_requests_total")
        .filter_map(|s| s.labels.get("source_workload").map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_found_at_the_tunnel_is_named_by_the_internal_listeners_metrics() {
    let app = tls_support::echo_backend().await;
    let caller = WorkloadMetadata {
        workload_name: "productpage-v1".into(),
        namespace: "bookinfo".into(),
        ..WorkloadMetadata::default()
    };
    let peer = outrider::proxy::filters::peer_metadata::wire::encode(&caller);
    for (shared, expected) in [(true, "productpage-v1"), (false, "unknown")] {
        let terminate = tls_support::free_port();
        let bootstrap = outrider::config::bootstrap::Bootstrap::parse(&bootstrap(terminate, app, shared)).unwrap();
        let outrider = outrider::app::start(bootstrap).await.unwrap();
        common::wait::until_true("connect_terminate listening", async || {
            tokio::net::TcpStream::connect(("127.0.0.1", terminate)).await.is_ok()
        })
        .await;
        assert_eq!(call_as(terminate, &peer).await, 200);
        let workloads = source_workloads(outrider.admin_address).await;
        assert_eq!(workloads, [expected], "shared_with_upstream: {shared}");
        outrider.stop();
    }
}
