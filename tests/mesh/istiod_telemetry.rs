//! Istio's telemetry between two Outrider sidecars configured by a real istiod (file mode):
//! a client workload `sleep` calls the service `app` through its outbound listener; the
//! `app` workload's sidecar terminates Istio's mutual TLS on its inbound port and forwards to
//! the application. istiod renders the telemetry filters itself (peer metadata exchange,
//! `istio.stats`, shaped by a Telemetry resource). After the traffic, each sidecar's
//! Prometheus exposition, parsed by a Prometheus text parser, carries Istio's standard
//! metrics with both workloads named on both sides: the client reports as `source`, the
//! server as `destination`, and each learned the other's identity from the exchange.

use crate::common;

use crate::tls_support;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::differential::{grpc_cluster, raw_http1, stat_value};
use common::istiod::{Istiod, sidecar_node_id};
use common::wait;
use common::{ControlPlane, admin_get, backends};
use http_body_util::Full;
use outrider::app::{self, Running};
use outrider::config::ResourceType;
use outrider::config::bootstrap::Bootstrap;
use tls_support::pki::{self, Ca};
use tls_support::yaml as tls_yaml;

const HOST: &str = "app.default.svc.cluster.local";

/// One workload: its pod, service account, app label and the loopback address it "runs" on.
struct Workload {
    pod: &'static str,
    service_account: &'static str,
    app: &'static str,
    ip: &'static str,
}

const SLEEP: Workload = Workload { pod: "sleep-1", service_account: "sleep", app: "sleep", ip: "127.0.0.1" };
const APP: Workload = Workload { pod: "app-1", service_account: "app", app: "app", ip: "127.0.0.2" };

/// The agent's SDS part for one workload: its certificate (from the mesh's one CA) and the
/// root.
async fn sds_for(ca: &Ca, workload: &Workload) -> ControlPlane {
    let sds = ControlPlane::start().await;
    let leaf = ca.leaf(&pki::spiffe(workload.service_account));
    sds.set(ResourceType::Secret, &[&tls_yaml::certificate_secret(&leaf), &tls_yaml::roots_secret(ca)]);
    sds
}

/// An injected sidecar's bootstrap for `workload`: Istio's node id and metadata (the
/// identity the peer metadata exchange sends), ADS to istiod, SDS from its agent.
fn bootstrap(istiod: &Istiod, sds: &ControlPlane, workload: &Workload) -> Bootstrap {
    let node = sidecar_node_id(workload.ip, workload.pod, "default");
    let clusters = grpc_cluster("xds-grpc", istiod.grpc.port()) + &grpc_cluster("sds-grpc", sds.port);
    let Workload { pod, service_account, app, ip } = workload;
    Bootstrap::parse(&format!(
        r#"
node:
  id: "{node}"
  cluster: {app}.default
  metadata:
    ISTIO_VERSION: "1.29.6"
    CLUSTER_ID: Kubernetes
    NAMESPACE: default
    MESH_ID: cluster.local
    SERVICE_ACCOUNT: {service_account}
    WORKLOAD_NAME: {app}
    NAME: {pod}
    OWNER: kubernetes://apis/apps/v1/namespaces/default/deployments/{app}
    INSTANCE_IPS: {ip}
    INTERCEPTION_MODE: NONE
    LABELS:
      app: {app}
      version: v1
      service.istio.io/canonical-name: {app}
      service.istio.io/canonical-revision: v1
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
dynamic_resources:
  ads_config:
    api_type: GRPC
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services: [{{ envoy_grpc: {{ cluster_name: xds-grpc }} }}]
  lds_config: {{ ads: {{}}, initial_fetch_timeout: 0s, resource_api_version: V3 }}
  cds_config: {{ ads: {{}}, initial_fetch_timeout: 0s, resource_api_version: V3 }}
static_resources:
  clusters:{clusters}
"#
    ))
    .unwrap()
}

/// The mesh: the service `app` (its endpoint is the app sidecar's inbound port, labelled as
/// an injected workload so istiod renders mutual TLS to it), STRICT mutual TLS for `app`,
/// the client's egress, and a Telemetry resource that keeps Istio's metrics but drops
/// `istio_request_bytes` and removes `request_protocol` from the duration histogram.
fn mesh(outbound: u16, inbound: u16, application: u16) -> String {
    common::istiod::sleep_to_app_mesh(outbound, inbound, application, APP.ip)
        + r#"---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: { name: mesh-default, namespace: istio-system }
spec:
  metrics:
  - providers: [{ name: prometheus }]
    overrides:
    - match: { metric: REQUEST_SIZE }
      disabled: true
    - match: { metric: REQUEST_DURATION }
      tagOverrides:
        request_protocol: { operation: REMOVE }
"#
}

async fn get(port: u16, path: &str) -> (u16, String) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: {HOST}\r\nconnection: close\r\n\r\n");
    match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(_) => {
            let (status, _, body) = raw_http1(port, &request).await;
            (status, body)
        }
        Err(_) => (0, String::new()),
    }
}

/// Every xDS type applied and none rejected.
async fn assert_all_accepted(outrider: &Running, who: &str) {
    let (_, body) = admin_get(outrider.admin_address, "/stats").await;
    for prefix in ["listener_manager.lds", "cluster_manager.cds", "outrider.xds.rds", "outrider.xds.eds"] {
        let rejected = stat_value(&body, &format!("{prefix}.update_rejected"));
        assert_eq!(rejected, 0, "{who}: {prefix} rejected an update");
    }
}

/// One series of a scrape: its labels and value.
#[derive(Debug)]
struct Series {
    labels: BTreeMap<String, String>,
    value: prometheus_parse::Value,
}

/// The sidecar's `/stats/prometheus`, parsed, by family.
async fn scrape(outrider: &Running) -> BTreeMap<String, Vec<Series>> {
    let (status, body) = admin_get(outrider.admin_address, "/stats/prometheus").await;
    assert_eq!(status, 200);
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let mut families: BTreeMap<String, Vec<Series>> = BTreeMap::new();
    for sample in scrape.samples {
        let labels = sample.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        families.entry(sample.metric).or_default().push(Series { labels, value: sample.value });
    }
    families
}

/// The series of `family` whose labels include all of `want`.
fn find<'a>(families: &'a BTreeMap<String, Vec<Series>>, family: &str, want: &[(&str, &str)]) -> Vec<&'a Series> {
    families
        .get(family)
        .map(|series| {
            series
                .iter()
                .filter(|s| want.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
                .collect()
        })
        .unwrap_or_default()
}

fn counter(series: &Series) -> f64 {
    match series.value {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("not a counter: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_metrics_name_both_workloads_on_both_sides() {
    let Some(binary) = Istiod::binary("istio_metrics_name_both_workloads_on_both_sides") else { return };
    let application = backends::http(|_request: http::Request<hyper::body::Incoming>| async move {
        http::Response::new(Full::new(Bytes::from_static(b"app")))
    })
    .await;
    let (outbound, inbound) = (tls_support::free_port(), tls_support::free_port());
    let istiod = Istiod::start(&binary, &[("mesh.yaml", &mesh(outbound, inbound, application.port))]).await;
    let ca = Ca::new("cluster.local");
    let (client_sds, server_sds) = (sds_for(&ca, &SLEEP).await, sds_for(&ca, &APP).await);
    let server = app::start(bootstrap(&istiod, &server_sds, &APP)).await.unwrap();
    let client = app::start(bootstrap(&istiod, &client_sds, &SLEEP)).await.unwrap();
    wait::until_true("the client's outbound listener reaches the app", async || get(outbound, "/").await.0 == 200)
        .await;

    const REQUESTS: usize = 20;
    for i in 0..REQUESTS {
        assert_eq!(get(outbound, &format!("/r{i}")).await, (200, "app".to_owned()));
    }
    assert_all_accepted(&client, "client").await;
    assert_all_accepted(&server, "server").await;

    let workloads = [
        ("source_workload", "sleep"),
        ("source_workload_namespace", "default"),
        ("source_app", "sleep"),
        ("source_canonical_service", "sleep"),
        ("source_canonical_revision", "v1"),
        ("destination_workload", "app"),
        ("destination_workload_namespace", "default"),
        ("destination_app", "app"),
        ("destination_canonical_service", "app"),
        ("destination_service_name", "app"),
        ("destination_service_namespace", "default"),
        ("response_code", "200"),
        ("request_protocol", "http"),
    ];
    let client_metrics = scrape(&client).await;
    let server_metrics = scrape(&server).await;
    for (side, reporter, metrics) in [("client", "source", &client_metrics), ("server", "destination", &server_metrics)]
    {
        let mut want = workloads.to_vec();
        want.push(("reporter", reporter));
        // The client names the service by its cluster's name, the server by its inbound
        // cluster's `istio.services` metadata.
        want.push(("destination_service", HOST));
        let requests = find(metrics, "istio_requests_total", &want);
        let families: Vec<_> = metrics.keys().filter(|k| k.starts_with("istio")).collect();
        assert_eq!(
            requests.len(),
            1,
            "{side}: istio_requests_total with {want:?}; istio families: {families:?}; series: {:?}",
            metrics.get("istio_requests_total")
        );
        // The readiness probe's requests count too: at least the test's own.
        assert!(counter(requests[0]) >= (REQUESTS + 1) as f64, "{side}: {:?}", requests[0]);
        assert!(!find(metrics, "istio_request_duration_milliseconds", &[("reporter", reporter)]).is_empty(), "{side}");
        assert!(!find(metrics, "istio_response_bytes", &[("reporter", reporter)]).is_empty(), "{side}");
        // The Telemetry resource's overrides: request sizes dropped, the protocol tag
        // removed from the duration histogram.
        assert!(metrics.get("istio_request_bytes").is_none(), "{side}: istio_request_bytes is disabled");
        assert!(
            find(metrics, "istio_request_duration_milliseconds", &[])
                .iter()
                .all(|s| !s.labels.contains_key("request_protocol")),
            "{side}: request_protocol is removed from the duration"
        );
    }
    // Both principals come from the mutual TLS hop's certificates: the server reports
    // mutual TLS, the client's principal and its own; the client its own and the server's.
    let server_view = find(
        &server_metrics,
        "istio_requests_total",
        &[
            ("connection_security_policy", "mutual_tls"),
            ("source_principal", "spiffe://cluster.local/ns/default/sa/sleep"),
            ("destination_principal", "spiffe://cluster.local/ns/default/sa/app"),
        ],
    );
    assert_eq!(server_view.len(), 1, "server: {:?}", server_metrics.get("istio_requests_total"));
    let client_view = find(
        &client_metrics,
        "istio_requests_total",
        &[
            ("source_principal", "spiffe://cluster.local/ns/default/sa/sleep"),
            ("destination_principal", "spiffe://cluster.local/ns/default/sa/app"),
        ],
    );
    assert_eq!(client_view.len(), 1, "client: {:?}", client_metrics.get("istio_requests_total"));
}
