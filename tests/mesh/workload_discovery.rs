//! Istio's workload metadata discovery, as a sidecar with ambient enabled is configured: the
//! bootstrap's `istio.workload.BootstrapExtension` has the Delta ADS stream subscribe to
//! `istio.workload.Workload` (WDS), and the inbound peer metadata filter's
//! `workload_discovery` names a caller whose request carried no peer headers (an ambient
//! workload behind ztunnel, whose HBONE tunnel carries none) by the workload at its address.
//! `istio.stats` then reports that workload as the source, where without WDS it reports
//! `unknown`. A resource that does not decode is NACKed by name; the others are applied.

use crate::common;
use crate::istio_stats::{Sidecar, hcm, header_backend, node_metadata, route, total};
use crate::tls_support::{free_port, yaml};

use outrider::config::ResourceType;
use outrider::pb::google::protobuf::Any;
use outrider::pb::istio_workload::{Workload, WorkloadType};
use outrider::store::WORKLOAD_TYPE;
use serde_json::{Value, json};

/// The bootstrap extension istio-agent's template adds when metadata discovery is on.
const METADATA_DISCOVERY: &str = r#"
bootstrap_extensions:
- name: metadata_discovery
  typed_config:
    "@type": type.googleapis.com/udpa.type.v1.TypedStruct
    type_url: type.googleapis.com/istio.workload.BootstrapExtension
    value: { config_source: { ads: {} } }
"#;

/// A workload resource as istiod sends it.
fn workload(name: &str, addresses: Vec<Vec<u8>>) -> (String, Any) {
    let workload = Workload {
        name: format!("{name}-7d9f8c6b5-x2k4q"),
        namespace: "shop".into(),
        addresses,
        canonical_name: name.into(),
        canonical_revision: "v2".into(),
        workload_type: WorkloadType::Deployment as i32,
        workload_name: name.into(),
        cluster_id: "Kubernetes".into(),
    };
    let resource = Any { type_url: WORKLOAD_TYPE.into(), value: prost::Message::encode_to_vec(&workload) };
    (format!("Kubernetes//Pod/shop/{name}"), resource)
}

/// A sidecar whose inbound listener on `port` has Istio's metadata exchange (headers, then
/// workload discovery) and `istio.stats`, in front of an HTTP application.
async fn sidecar(port: u16, extra: &str) -> Sidecar {
    let application = header_backend().await;
    let chain = yaml::chain("http", json!({}), Value::Null, hcm(json!([route("/", "inbound|9080||")]), true));
    let inbound = yaml::listener("virtualInbound", port, false, vec![chain], json!({ "traffic_direction": "INBOUND" }));
    let clusters = [yaml::cluster("inbound|9080||", application, yaml::Http::Downstream, Value::Null, Value::Null)];
    Sidecar::start_with(
        "sidecar~10.0.0.2~reviews-v1-5d8c7f9b6-x2k4q.bookinfo~bookinfo.svc.cluster.local",
        node_metadata("reviews-v1", "reviews", "bookinfo"),
        [(&[], ResourceType::Secret), (&clusters, ResourceType::Cluster), (&[inbound], ResourceType::Listener)],
        extra,
    )
    .await
}

/// One plain GET from 127.0.0.1, with no peer headers; its status.
async fn get(port: u16) -> u16 {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let uri = format!("http://127.0.0.1:{port}/reviews/1");
    let response = tokio::time::timeout(common::WAIT, client.get(uri.parse().unwrap())).await.unwrap().unwrap();
    response.status().as_u16()
}

#[tokio::test]
async fn a_caller_without_peer_headers_is_the_workload_at_its_address() {
    let port = free_port();
    let sidecar = sidecar(port, METADATA_DISCOVERY).await;
    let server = &sidecar.control_plane.server;
    let mut requests = server.requests();
    // The caller's workload at 127.0.0.1, and one whose second address is 3 bytes long.
    server.set_resources(
        WORKLOAD_TYPE,
        vec![
            workload("ambient", vec![vec![127, 0, 0, 1]]),
            workload("broken", vec![vec![10, 0, 0, 9], vec![10, 0, 0]]),
        ],
    );
    // (An empty response may come first, when the stream subscribed: ACKed.)
    let detail = common::wait::until("the workloads NACKed", async || {
        loop {
            let request = requests.recv().await.ok()?;
            if request.type_url == WORKLOAD_TYPE
                && let Some(detail) = request.error_detail
            {
                return Some(detail.message);
            }
        }
    })
    .await;
    assert_eq!(detail, "Kubernetes//Pod/shop/broken: addresses[1]: 3 bytes are not an IP address");

    assert_eq!(get(port).await, 200);
    let scrape = sidecar.prometheus().await;
    let from_ambient = [
        ("reporter", "destination"),
        ("source_workload", "ambient"),
        ("source_workload_namespace", "shop"),
        ("source_app", "ambient"),
        ("source_version", "v2"),
        ("source_canonical_service", "ambient"),
        ("source_canonical_revision", "v2"),
        ("source_cluster", "Kubernetes"),
        ("destination_workload", "reviews-v1"),
    ];
    assert_eq!(total(&scrape, "istio_requests_total", &from_ambient), 1.0, "{:#?}", scrape.samples);
    sidecar.outrider.stop();
}

#[tokio::test]
async fn without_workload_discovery_such_a_caller_is_unknown() {
    let port = free_port();
    let sidecar = sidecar(port, "").await;
    sidecar.control_plane.server.set_resources(WORKLOAD_TYPE, vec![workload("ambient", vec![vec![127, 0, 0, 1]])]);
    assert_eq!(get(port).await, 200);
    let scrape = sidecar.prometheus().await;
    let unknown = [("reporter", "destination"), ("source_workload", "unknown"), ("destination_workload", "reviews-v1")];
    assert_eq!(total(&scrape, "istio_requests_total", &unknown), 1.0, "{:#?}", scrape.samples);
    // The stream never subscribed to the type.
    let journal = sidecar.control_plane.server.journal();
    assert!(!format!("{journal:?}").contains("istio.workload.Workload"), "subscribed without being asked");
    sidecar.outrider.stop();
}
