//! Outrider started from Istio's own sidecar bootstrap, the way istio-agent starts Envoy:
//! xDS over the agent's Unix socket (Delta), secrets over a second Unix socket on the
//! separate SDS service, never on the ADS stream.

use crate::common;
use crate::tls_support;

use common::*;
use outrider::config::ResourceType;
use outrider::config::bootstrap::Bootstrap;
use outrider::xds::server::XdsServer;
use serde_json::Value;

const OUTBOUND: &str = r#"
name: "outbound|80||reviews.default.svc.cluster.local"
type: EDS
connect_timeout: 10s
eds_cluster_config:
  eds_config: { ads: {}, initial_fetch_timeout: 0s, resource_api_version: V3 }
  service_name: "outbound|80||reviews.default.svc.cluster.local"
transport_socket_matches:
- name: tlsMode-istio
  match: { tlsMode: istio }
  transport_socket:
    name: envoy.transport_sockets.tls
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
      sni: "outbound_.80_._.reviews.default.svc.cluster.local"
      common_tls_context:
        alpn_protocols: [istio-peer-exchange, istio]
        tls_certificate_sds_secret_configs:
        - name: default
          sds_config: { api_config_source: { api_type: GRPC, transport_api_version: V3, grpc_services: [{ envoy_grpc: { cluster_name: sds-grpc } }] }, initial_fetch_timeout: 0s, resource_api_version: V3 }
        combined_validation_context:
          default_validation_context:
            match_typed_subject_alt_names: [{ san_type: URI, matcher: { exact: "spiffe://cluster.local/ns/default/sa/reviews" } }]
          validation_context_sds_secret_config:
            name: ROOTCA
            sds_config: { api_config_source: { api_type: GRPC, transport_api_version: V3, grpc_services: [{ envoy_grpc: { cluster_name: sds-grpc } }] }, initial_fetch_timeout: 0s, resource_api_version: V3 }
- name: tlsMode-disabled
  match: {}
  transport_socket: { name: envoy.transport_sockets.raw_buffer }
"#;

/// Istio's golden bootstrap, pointed at sockets in `dir` and with an ephemeral admin port.
fn istio_bootstrap(dir: &std::path::Path) -> Bootstrap {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio/sidecar-bootstrap.default_golden.json");
    let mut document: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    document["admin"]["address"]["socket_address"]["port_value"] = 0.into();
    for cluster in document["static_resources"]["clusters"].as_array_mut().unwrap() {
        let socket = match cluster["name"].as_str().unwrap() {
            "xds-grpc" => dir.join("XDS"),
            "sds-grpc" => dir.join("sds.sock"),
            _ => continue,
        };
        cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["pipe"]["path"] =
            socket.display().to_string().into();
    }
    Bootstrap::parse(&document.to_string()).unwrap()
}

#[tokio::test]
async fn istio_bootstrap_gets_xds_and_sds_over_the_agent_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let xds = XdsServer::new();
    let _xds_serving = xds.serve_unix(tokio::net::UnixListener::bind(dir.path().join("XDS")).unwrap());
    let sds = XdsServer::new();
    let _sds_serving = sds.serve_unix(tokio::net::UnixListener::bind(dir.path().join("sds.sock")).unwrap());

    let name = "outbound|80||reviews.default.svc.cluster.local";
    let (cluster, any) = pack(ResourceType::Cluster, OUTBOUND);
    xds.set_resources(ResourceType::Cluster.type_url(), vec![(cluster, any)]);
    xds.set_resources(
        ResourceType::ClusterLoadAssignment.type_url(),
        vec![pack(ResourceType::ClusterLoadAssignment, &endpoints(name, &[9080]))],
    );
    xds.set_resources(ResourceType::Listener.type_url(), vec![pack(ResourceType::Listener, LISTENER)]);
    xds.set_resources(ResourceType::RouteConfiguration.type_url(), vec![pack(ResourceType::RouteConfiguration, ROUTE)]);

    let outrider = outrider::app::start(istio_bootstrap(dir.path())).await.unwrap();
    // Clusters, endpoints and routes arrive, the secrets do not: the cluster warms.
    let warming = wait_snapshot(&outrider.store, |s| {
        s.warming_clusters.contains_key(name) && s.routes.contains_key("local_route")
    })
    .await;
    assert!(!warming.clusters.contains_key(name), "a cluster waits for its secrets");
    assert!(!warming.ready);
    let request = sds
        .wait_for_request(WAIT, |r| r.type_url == ResourceType::Secret.type_url() && r.resource_names.len() == 2)
        .await
        .unwrap();
    assert_eq!(request.resource_names, ["ROOTCA", "default"]);
    assert_eq!(request.node_id, "sidecar~1.2.3.4~foo~bar");

    // Real certificates: one that does not load would be refused, as Envoy refuses it.
    let ca = tls_support::pki::Ca::new("cluster.local");
    let leaf = ca.leaf(&tls_support::pki::spiffe("default"));
    sds.set_resources(
        ResourceType::Secret.type_url(),
        vec![
            pack(ResourceType::Secret, &tls_support::yaml::certificate_secret(&leaf)),
            pack(ResourceType::Secret, &tls_support::yaml::roots_secret(&ca)),
        ],
    );
    let ready = wait_snapshot(&outrider.store, |s| s.ready).await;
    assert!(ready.clusters.contains_key(name));
    assert!(ready.secrets.contains_key("default") && ready.secrets.contains_key("ROOTCA"));
    sds.wait_until(WAIT, |j| j.is_acked(ResourceType::Secret.type_url())).await.unwrap();

    let journal = xds.journal();
    assert!(
        journal.requests.iter().all(|r| r.type_url != ResourceType::Secret.type_url()),
        "no secrets asked on the ADS stream"
    );
    assert!(
        journal.requests.iter().all(|r| r.protocol == outrider::xds::server::Protocol::Delta),
        "Istio's bootstrap says DELTA_GRPC"
    );

    // The private key never shows in the admin dump.
    let (_, dump) = admin_get(outrider.admin_address, "/config_dump").await;
    assert!(dump.contains("[redacted]") && !dump.contains("MIIE"), "private key redacted");
    outrider.stop();
}
