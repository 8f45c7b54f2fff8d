//! The xDS server against the real Envoy 1.40: Envoy must ACK every type it is served
//! (listener, route, EDS cluster, endpoints) over ADS, in SotW and in Delta, and ACK a push.
//! Envoy is found through `$OUTRIDER_ENVOY`, `PATH` or `bench/.envoy/bin/envoy`; without it
//! the test says so and passes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use outrider::config::ResourceType;
use outrider::xds::server::{Journal, XdsServer, files};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

use crate::common::skip::{Tool, skipped};
use common::differential::envoy_binary;

const WAIT: Duration = Duration::from_secs(60);

const RESOURCES: &str = r#"
resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: ingress
  address: {socket_address: {address: 127.0.0.1, port_value: 0}}
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: ingress
        rds: {route_config_name: local_route, config_source: {ads: {}, resource_api_version: V3}}
        http_filters:
        - name: envoy.filters.http.router
          typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
- "@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
  name: local_route
  virtual_hosts:
  - {name: backend, domains: ["*"], routes: [{match: {prefix: /}, route: {cluster: backend}}]}
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: backend
  type: EDS
  connect_timeout: 1s
  eds_cluster_config: {eds_config: {ads: {}, resource_api_version: V3}}
- "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
  cluster_name: backend
  endpoints:
  - lb_endpoints:
    - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 18080}}}
"#;

fn bootstrap(api_type: &str, xds_port: u16) -> String {
    format!(
        r#"
node: {{id: envoy-acks-test, cluster: outrider-test}}
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}}}
dynamic_resources:
  ads_config:
    api_type: {api_type}
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services: [{{envoy_grpc: {{cluster_name: xds}}}}]
  lds_config: {{ads: {{}}, resource_api_version: V3}}
  cds_config: {{ads: {{}}, resource_api_version: V3}}
static_resources:
  clusters:
  - name: xds
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: xds
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {xds_port}}}}}}}
"#
    )
}

/// An Envoy process owned by the test: killed when dropped.
struct Envoy {
    child: Child,
    log: PathBuf,
}

impl Envoy {
    fn start(binary: &Path, dir: &Path, api_type: &str, xds_port: u16) -> Envoy {
        let config = dir.join("bootstrap.yaml");
        std::fs::write(&config, bootstrap(api_type, xds_port)).unwrap();
        let log = dir.join("envoy.log");
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .args(["--use-dynamic-base-id", "--disable-hot-restart", "--concurrency", "1", "--log-level", "info"])
            .arg("--log-path")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Envoy { child, log }
    }

    /// Waits until `done` holds for the journal, failing early if Envoy exits.
    async fn wait_until(&mut self, server: &XdsServer, what: &str, done: impl FnMut(&Journal) -> bool) {
        tokio::select! {
            waited = server.wait_until(WAIT, done) => {
                if waited.is_err() {
                    panic!("{what}: not seen\njournal: {:#?}\nenvoy log:\n{}", server.journal(), self.log_tail());
                }
            }
            status = self.child.wait() => panic!("envoy exited ({status:?}) before {what}:\n{}", self.log_tail()),
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<_> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }
}

const TYPES: [ResourceType; 4] = [
    ResourceType::Listener,
    ResourceType::RouteConfiguration,
    ResourceType::Cluster,
    ResourceType::ClusterLoadAssignment,
];

async fn envoy_acks_every_type(api_type: &str) {
    let Some(binary) = envoy_binary() else {
        skipped(Tool::Envoy, "Envoy's ACK of every type", "envoy not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let resources_path = dir.path().join("resources.yaml");
    std::fs::write(&resources_path, RESOURCES).unwrap();
    let server = XdsServer::new();
    for (resource_type, resources) in files::load(&resources_path).unwrap() {
        server.set_resources(resource_type.type_url(), resources);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let xds_port = listener.local_addr().unwrap().port();
    let serving = server.serve(listener);
    let mut envoy = Envoy::start(&binary, dir.path(), api_type, xds_port);

    let all_acked = |j: &Journal| TYPES.iter().all(|t| j.is_acked(t.type_url()));
    envoy.wait_until(&server, "ACKs of every type", all_acked).await;

    // A push of new endpoints is ACKed too, at its own version.
    let eds = ResourceType::ClusterLoadAssignment.type_url();
    let updated = RESOURCES.replace(
        "port_value: 18080}}}",
        "port_value: 18080}}}\n    - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 18081}}}",
    );
    std::fs::write(&resources_path, updated).unwrap();
    let mut source = files::FileSource::new(&resources_path, server.clone());
    assert!(source.reload().unwrap());
    let pushed = server.resources(eds)["backend"].version.clone();
    let push_acked = |j: &Journal| {
        j.last_response(eds).is_some_and(|r| r.version == pushed && r.resources == ["backend"]) && j.is_acked(eds)
    };
    envoy.wait_until(&server, "ACK of the endpoints push", push_acked).await;

    let journal = server.journal();
    for t in TYPES {
        assert!(journal.nacks(t.type_url()).is_empty(), "NACKs: {:#?}", journal.nacks(t.type_url()));
    }
    assert!(journal.requests.iter().all(|r| r.node_id == "envoy-acks-test"));

    // Restart the control plane on the same port: Envoy reconnects and ends up in step
    // again; over Delta it says which versions it already has.
    serving.shutdown().await.unwrap();
    let serving = server.serve(TcpListener::bind(("127.0.0.1", xds_port)).await.unwrap());
    let resubscribed = |j: &Journal| {
        TYPES
            .iter()
            .all(|t| j.is_acked(t.type_url()) && j.requests.iter().any(|r| r.stream > 1 && r.type_url == t.type_url()))
    };
    envoy.wait_until(&server, "resubscription after a restart", resubscribed).await;
    if api_type == "DELTA_GRPC" {
        let journal = server.journal();
        let first_eds = journal.requests.iter().find(|r| r.stream > 1 && r.type_url == eds).unwrap();
        assert_eq!(first_eds.initial_resource_versions.get("backend"), Some(&pushed));
    }
    drop(envoy);
    serving.shutdown().await.unwrap();
}

#[tokio::test]
async fn envoy_acks_sotw() {
    envoy_acks_every_type("GRPC").await;
}

#[tokio::test]
async fn envoy_acks_delta() {
    envoy_acks_every_type("DELTA_GRPC").await;
}
