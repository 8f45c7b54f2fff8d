//! Shared pieces of the black-box tests: a real ADS server on loopback, Outrider started
//! in-process against it, and resources written in Envoy's YAML.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use outrider::app::{self, Running};
use outrider::config::ResourceType;
use outrider::config::bootstrap::Bootstrap;
use outrider::pb::google::protobuf::Any;
use outrider::store::{Snapshot, Store};
use outrider::xds::server::{Serving, XdsServer};
use prost::Message;

/// Upper bound for anything a test waits on. Generous: it bounds a failing test, it is
/// never what a passing test measures.
pub const WAIT: Duration = Duration::from_secs(20);

/// A control plane on an ephemeral loopback port.
pub struct ControlPlane {
    pub server: XdsServer,
    pub port: u16,
    serving: Option<Serving>,
}

impl ControlPlane {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = XdsServer::new();
        let serving = Some(server.serve(listener));
        Self { server, port, serving }
    }

    /// Stops serving: every stream ends, as when a control plane restarts.
    pub async fn stop(&mut self) {
        if let Some(serving) = self.serving.take() {
            let _ = serving.shutdown().await;
        }
    }

    /// Serves again on the same port with the same resources.
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        self.serving = Some(self.server.serve(listener));
    }

    /// Replaces every resource of a type with the given YAML documents.
    pub fn set(&self, resource_type: ResourceType, yamls: &[&str]) {
        let items = yamls.iter().map(|y| pack(resource_type, y)).collect();
        self.server.set_resources(resource_type.type_url(), items);
    }

    /// Waits until the last response of `resource_type` was ACKed.
    pub async fn wait_acked(&self, resource_type: ResourceType) {
        self.server.wait_until(WAIT, |j| j.is_acked(resource_type.type_url())).await.unwrap();
    }
}

/// Envoy YAML → (name, Any) of the given type.
pub fn pack(resource_type: ResourceType, yaml: &str) -> (String, Any) {
    let value: serde_json::Value = outrider::config::bootstrap::parse_document(yaml).unwrap();
    let type_url = resource_type.type_url();
    let full_name = type_url.rsplit('/').next().unwrap();
    let name_field = if resource_type == ResourceType::ClusterLoadAssignment { "cluster_name" } else { "name" };
    let name = value[name_field].as_str().unwrap().to_owned();
    let bytes = match resource_type {
        ResourceType::Cluster => encode::<outrider::pb::envoy::config::cluster::v3::Cluster>(full_name, value),
        ResourceType::ClusterLoadAssignment => {
            encode::<outrider::pb::envoy::config::endpoint::v3::ClusterLoadAssignment>(full_name, value)
        }
        ResourceType::Listener => encode::<outrider::pb::envoy::config::listener::v3::Listener>(full_name, value),
        ResourceType::RouteConfiguration => {
            encode::<outrider::pb::envoy::config::route::v3::RouteConfiguration>(full_name, value)
        }
        ResourceType::Secret => {
            encode::<outrider::pb::envoy::extensions::transport_sockets::tls::v3::Secret>(full_name, value)
        }
    };
    (name, Any { type_url: type_url.to_owned(), value: bytes })
}

fn encode<M: Message + Default>(full_name: &str, value: serde_json::Value) -> Vec<u8> {
    // Tests convert resources all the time: keep Envoy's descriptor pool decoded once.
    static DESCRIPTORS: std::sync::OnceLock<std::sync::Arc<prost_reflect::DescriptorPool>> = std::sync::OnceLock::new();
    DESCRIPTORS.get_or_init(|| outrider::pb::json::pool().unwrap());
    let (message, dropped): (M, _) = outrider::pb::json::from_value(full_name, value).unwrap();
    assert!(dropped.is_empty(), "test resource has unknown fields: {dropped:?}");
    message.encode_to_vec()
}

/// A bootstrap that reaches the control plane on `port` over ADS (`GRPC` or `DELTA_GRPC`).
pub fn bootstrap(port: u16, api_type: &str) -> Bootstrap {
    Bootstrap::parse(&bootstrap_text(port, api_type)).unwrap()
}

/// [`bootstrap`]'s text, for a test that adds to it.
pub fn bootstrap_text(port: u16, api_type: &str) -> String {
    format!(
        r#"
node: {{ id: "sidecar~10.0.0.1~app-1.default~default.svc.cluster.local", cluster: test }}
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
dynamic_resources:
  ads_config:
    api_type: {api_type}
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services: [{{ envoy_grpc: {{ cluster_name: xds-grpc }} }}]
  lds_config: {{ ads: {{}}, initial_fetch_timeout: 0s, resource_api_version: V3 }}
  cds_config: {{ ads: {{}}, initial_fetch_timeout: 0s, resource_api_version: V3 }}
static_resources:
  clusters:
  - name: xds-grpc
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: xds-grpc
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#
    )
}

/// Starts Outrider in-process against `control_plane`.
pub async fn start_outrider(control_plane: &ControlPlane, api_type: &str) -> Running {
    app::start(bootstrap(control_plane.port, api_type)).await.unwrap()
}

/// Waits until the served snapshot satisfies `done`, and returns it.
pub async fn wait_snapshot(store: &Arc<Store>, mut done: impl FnMut(&Snapshot) -> bool) -> Arc<Snapshot> {
    let mut changes = store.subscribe();
    let wait = async {
        loop {
            let snapshot = store.load();
            if done(&snapshot) {
                return snapshot;
            }
            changes.changed().await.unwrap();
        }
    };
    match tokio::time::timeout(WAIT, wait).await {
        Ok(snapshot) => snapshot,
        Err(_) => panic!("timed out waiting for the snapshot; last: {:#?}", store.load()),
    }
}

pub const CLUSTER: &str = r#"
name: backend
type: EDS
connect_timeout: 1s
eds_cluster_config: { eds_config: { ads: {}, initial_fetch_timeout: 0s, resource_api_version: V3 } }
"#;

pub fn endpoints(name: &str, ports: &[u32]) -> String {
    let lb: Vec<String> = ports
        .iter()
        .map(|p| {
            format!("{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {p} }} }} }} }}")
        })
        .collect();
    format!("cluster_name: {name}\nendpoints:\n- lb_endpoints: [{}]\n", lb.join(", "))
}

pub const LISTENER: &str = r#"
name: http
address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: http
      rds: { route_config_name: local_route, config_source: { ads: {}, resource_api_version: V3 } }
      http_filters:
      - name: envoy.filters.http.router
        typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
"#;

pub const ROUTE: &str = r#"
name: local_route
virtual_hosts:
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: backend }
"#;

/// A plain HTTP/1.1 GET against the admin server: (status, body).
pub async fn admin_get(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(WAIT, stream.read_to_string(&mut response)).await.unwrap().unwrap();
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

pub mod acceptance;
pub mod backends;
pub mod browser;
pub mod config_gen;
pub mod differential;
pub mod edge;
pub mod istiod;
pub mod jwt;
pub mod lab;
pub mod load;
pub mod otlp;
pub mod peers;
pub mod skip;
pub mod tunnel;
pub mod wait;
