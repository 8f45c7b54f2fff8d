//! Black-box tests of the ADS client: a real ADS server on loopback (SotW and Delta),
//! Outrider started in-process, and the served snapshot observed through the store.

use crate::common;

use common::*;
use outrider::config::ResourceType;
use outrider::xds::server::Protocol;

const SOTW: &str = "GRPC";
const DELTA: &str = "DELTA_GRPC";

async fn serve_everything(control_plane: &ControlPlane) {
    control_plane.set(ResourceType::Cluster, &[CLUSTER]);
    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[8001, 8002])]);
    control_plane.set(ResourceType::Listener, &[LISTENER]);
    control_plane.set(ResourceType::RouteConfiguration, &[ROUTE]);
}

fn complete(snapshot: &outrider::store::Snapshot) -> bool {
    snapshot.ready
        && snapshot.listeners.contains_key("http")
        && snapshot.routes.contains_key("local_route")
        && snapshot.endpoints.get("backend").is_some_and(|e| e.resource.endpoint_count() == 2)
}

async fn initial_sync(api_type: &str, protocol: Protocol) {
    let control_plane = ControlPlane::start().await;
    serve_everything(&control_plane).await;
    let outrider = start_outrider(&control_plane, api_type).await;
    let snapshot = wait_snapshot(&outrider.store, complete).await;

    assert!(snapshot.clusters.contains_key("backend"));
    assert!(snapshot.clusters.contains_key("xds-grpc"), "static clusters are served too");
    for resource_type in [
        ResourceType::Cluster,
        ResourceType::ClusterLoadAssignment,
        ResourceType::Listener,
        ResourceType::RouteConfiguration,
    ] {
        control_plane.wait_acked(resource_type).await;
    }
    let journal = control_plane.server.journal();
    assert!(journal.requests.iter().all(|r| r.protocol == protocol));
    assert!(
        journal.requests.iter().all(|r| r.node_id.starts_with("sidecar~10.0.0.1~")),
        "node sent on the first message"
    );
    // RDS and EDS are subscribed by the names that listeners and clusters refer to.
    let subscribed = |type_url: &str| -> Vec<String> {
        journal
            .requests
            .iter()
            .filter(|r| r.type_url == type_url)
            .flat_map(|r| r.resource_names.iter().chain(&r.subscribe).cloned())
            .collect()
    };
    assert!(subscribed(ResourceType::RouteConfiguration.type_url()).contains(&"local_route".to_owned()));
    assert!(subscribed(ResourceType::ClusterLoadAssignment.type_url()).contains(&"backend".to_owned()));

    // The balancers follow: the cluster's balancer has both endpoints.
    let mut published = outrider.balancers.subscribe();
    let balanced = async {
        while outrider.balancers.get("backend").is_none_or(|lb| lb.hosts().len() != 2) {
            published.changed().await.unwrap();
        }
    };
    tokio::time::timeout(WAIT, balanced).await.unwrap();
    outrider.stop();
}

#[tokio::test]
async fn initial_sync_of_every_type_sotw() {
    initial_sync(SOTW, Protocol::Sotw).await;
}

#[tokio::test]
async fn initial_sync_of_every_type_delta() {
    initial_sync(DELTA, Protocol::Delta).await;
}

#[tokio::test]
async fn acks_carry_the_version_and_nonce_of_the_response() {
    let control_plane = ControlPlane::start().await;
    serve_everything(&control_plane).await;
    let outrider = start_outrider(&control_plane, SOTW).await;
    wait_snapshot(&outrider.store, complete).await;
    control_plane.wait_acked(ResourceType::Cluster).await;

    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[8001, 8002, 8003])]);
    control_plane.wait_acked(ResourceType::ClusterLoadAssignment).await;
    let journal = control_plane.server.journal();
    let response = journal.last_response(ResourceType::ClusterLoadAssignment.type_url()).unwrap();
    let ack = journal.requests.iter().find(|r| r.acks(response)).unwrap();
    assert_eq!(ack.version_info, response.version);
    assert_eq!(ack.response_nonce, response.nonce);
    assert!(ack.error_detail.is_none());
    let snapshot = wait_snapshot(&outrider.store, |s| s.endpoints["backend"].resource.endpoint_count() == 3).await;
    assert_eq!(snapshot.versions[&ResourceType::ClusterLoadAssignment].version_info, response.version);
    outrider.stop();
}

async fn nack_keeps_last_good(api_type: &str) {
    let control_plane = ControlPlane::start().await;
    serve_everything(&control_plane).await;
    let outrider = start_outrider(&control_plane, api_type).await;
    let before = wait_snapshot(&outrider.store, complete).await;
    control_plane.wait_acked(ResourceType::ClusterLoadAssignment).await;

    // Port 70000 does not exist: the one resource of the update is refused.
    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[8003, 70000])]);
    let type_url = ResourceType::ClusterLoadAssignment.type_url();
    control_plane.server.wait_until(WAIT, |j| !j.nacks(type_url).is_empty()).await.unwrap();
    let journal = control_plane.server.journal();
    let nack = journal.nacks(type_url)[0].clone();
    let detail = nack.error_detail.unwrap();
    // As Envoy: a NACK's error_detail carries INTERNAL.
    assert_eq!(detail.code, tonic::Code::Internal as i32);
    assert!(detail.message.contains("backend"), "names the resource: {}", detail.message);
    assert!(
        detail.message.contains("endpoints[0].lb_endpoints[1].endpoint.address.socket_address.port_value"),
        "names the field path: {}",
        detail.message
    );
    if api_type == SOTW {
        assert_eq!(
            nack.version_info,
            before.versions[&ResourceType::ClusterLoadAssignment].version_info,
            "NACK carries the last accepted version"
        );
    }
    let served = outrider.store.load();
    assert_eq!(served.endpoints["backend"].resource, before.endpoints["backend"].resource, "nothing served changed");

    // A good update afterwards is accepted.
    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[8003, 8004])]);
    wait_snapshot(&outrider.store, |s| {
        s.endpoints["backend"].resource.endpoints().any(|e| e.address.to_string() == "127.0.0.1:8004")
    })
    .await;
    outrider.stop();
}

#[tokio::test]
async fn nack_names_the_field_and_keeps_the_last_good_config_sotw() {
    nack_keeps_last_good(SOTW).await;
}

#[tokio::test]
async fn nack_names_the_field_and_keeps_the_last_good_config_delta() {
    nack_keeps_last_good(DELTA).await;
}

async fn add_update_remove(api_type: &str) {
    let control_plane = ControlPlane::start().await;
    serve_everything(&control_plane).await;
    let outrider = start_outrider(&control_plane, api_type).await;
    wait_snapshot(&outrider.store, complete).await;

    let second = CLUSTER.replace("name: backend", "name: second");
    control_plane.set(ResourceType::Cluster, &[CLUSTER, &second]);
    control_plane.set(
        ResourceType::ClusterLoadAssignment,
        &[&endpoints("backend", &[8001, 8002]), &endpoints("second", &[9001])],
    );
    wait_snapshot(&outrider.store, |s| s.endpoints.get("second").is_some_and(|e| e.resource.endpoint_count() == 1))
        .await;

    control_plane.set(
        ResourceType::ClusterLoadAssignment,
        &[&endpoints("backend", &[8001, 8002]), &endpoints("second", &[9001, 9002])],
    );
    wait_snapshot(&outrider.store, |s| s.endpoints.get("second").is_some_and(|e| e.resource.endpoint_count() == 2))
        .await;

    control_plane.set(ResourceType::Cluster, &[CLUSTER]);
    let snapshot = wait_snapshot(&outrider.store, |s| !s.clusters.contains_key("second")).await;
    assert!(!snapshot.endpoints.contains_key("second"));
    assert!(snapshot.clusters.contains_key("backend"), "the other cluster is untouched");
    if api_type == DELTA {
        let journal = control_plane.server.journal();
        assert!(journal.responses.iter().any(|r| r.removed.contains(&"second".to_owned())));
        // Its endpoints are no longer wanted: unsubscribed.
        control_plane
            .server
            .wait_until(WAIT, |j| j.requests.iter().any(|r| r.unsubscribe.contains(&"second".to_owned())))
            .await
            .unwrap();
    }
    outrider.stop();
}

#[tokio::test]
async fn add_update_remove_sotw() {
    add_update_remove(SOTW).await;
}

#[tokio::test]
async fn add_update_remove_delta() {
    add_update_remove(DELTA).await;
}

async fn control_plane_restart(api_type: &str) {
    let mut control_plane = ControlPlane::start().await;
    serve_everything(&control_plane).await;
    let outrider = start_outrider(&control_plane, api_type).await;
    let before = wait_snapshot(&outrider.store, complete).await;
    control_plane.wait_acked(ResourceType::RouteConfiguration).await;

    control_plane.stop().await;
    // The control plane is away: the last good configuration keeps being served.
    let during = outrider.store.load();
    assert!(complete(&during));
    assert_eq!(during.clusters.keys().collect::<Vec<_>>(), before.clusters.keys().collect::<Vec<_>>());

    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[8005])]);
    control_plane.restart().await;
    let after = wait_snapshot(&outrider.store, |s| {
        s.endpoints["backend"].resource.endpoints().any(|e| e.address.to_string() == "127.0.0.1:8005")
    })
    .await;
    assert!(complete(&after) || after.endpoints["backend"].resource.endpoint_count() == 1);
    assert!(after.listeners.contains_key("http"), "listeners survived the restart");

    let journal = control_plane.server.journal();
    let second_stream: Vec<_> = journal.requests.iter().filter(|r| r.stream > 1).collect();
    assert!(!second_stream.is_empty(), "the client reconnected");
    if api_type == DELTA {
        // Resumed with the versions it holds.
        let cds = second_stream.iter().find(|r| r.type_url == ResourceType::Cluster.type_url()).unwrap();
        assert!(cds.initial_resource_versions.contains_key("backend"), "{cds:?}");
        let eds = second_stream.iter().find(|r| r.type_url == ResourceType::ClusterLoadAssignment.type_url()).unwrap();
        assert!(eds.subscribe.contains(&"backend".to_owned()), "resubscribed: {eds:?}");
    } else {
        let cds = second_stream.iter().find(|r| r.type_url == ResourceType::Cluster.type_url()).unwrap();
        assert_eq!(cds.version_info, before.versions[&ResourceType::Cluster].version_info, "resumed with its version");
    }
    outrider.stop();
}

#[tokio::test]
async fn control_plane_restart_reconnects_and_keeps_serving_sotw() {
    control_plane_restart(SOTW).await;
}

#[tokio::test]
async fn control_plane_restart_reconnects_and_keeps_serving_delta() {
    control_plane_restart(DELTA).await;
}

#[tokio::test]
async fn a_cluster_warms_until_its_endpoints_arrive() {
    let control_plane = ControlPlane::start().await;
    control_plane.set(ResourceType::Cluster, &[CLUSTER]);
    control_plane.set(ResourceType::Listener, &[LISTENER]);
    control_plane.set(ResourceType::RouteConfiguration, &[ROUTE]);
    let outrider = start_outrider(&control_plane, DELTA).await;
    control_plane.wait_acked(ResourceType::Cluster).await;
    control_plane
        .server
        .wait_for_request(WAIT, |r| {
            r.type_url == ResourceType::ClusterLoadAssignment.type_url() && r.subscribe.contains(&"backend".to_owned())
        })
        .await
        .unwrap();

    let warming = wait_snapshot(&outrider.store, |s| s.warming_clusters.contains_key("backend")).await;
    assert!(!warming.clusters.contains_key("backend"), "not served before its endpoints");
    assert!(!warming.ready, "not ready while a cluster warms");

    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[8001])]);
    let warm = wait_snapshot(&outrider.store, |s| s.clusters.contains_key("backend")).await;
    assert!(warm.warming_clusters.is_empty());
    assert!(warm.ready);
    outrider.stop();
}

#[tokio::test]
async fn ten_thousand_endpoints_in_one_eds_push() {
    let control_plane = ControlPlane::start().await;
    serve_everything(&control_plane).await;
    let outrider = start_outrider(&control_plane, DELTA).await;
    wait_snapshot(&outrider.store, complete).await;

    let ports: Vec<u32> = (0..10_000).map(|i| 20_000 + i).collect();
    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &ports)]);
    let snapshot = wait_snapshot(&outrider.store, |s| s.endpoints["backend"].resource.endpoint_count() == 10_000).await;
    assert!(snapshot.ready);
    control_plane.wait_acked(ResourceType::ClusterLoadAssignment).await;
    outrider.stop();
}

/// A listener whose HTTP filter chain has an unknown filter before the router.
fn listener_with_unknown_filter(optional: bool) -> String {
    let filter = format!(
        r#"      - name: acme.rewrite
        is_optional: {optional}
        typed_config:
          "@type": type.googleapis.com/udpa.type.v1.TypedStruct
          type_url: type.googleapis.com/acme.filters.Rewrite
          value: {{ prefix: /v2 }}
      - name: envoy.filters.http.router"#
    );
    LISTENER.replace("      - name: envoy.filters.http.router", &filter)
}

/// As Envoy: an HTTP filter Outrider cannot run is refused unless marked `is_optional`,
/// and an optional one is skipped.
#[tokio::test]
async fn a_required_unknown_http_filter_is_nacked_and_an_optional_one_skipped() {
    let control_plane = ControlPlane::start().await;
    serve_everything(&control_plane).await;
    let outrider = start_outrider(&control_plane, DELTA).await;
    let before = wait_snapshot(&outrider.store, complete).await;
    control_plane.wait_acked(ResourceType::Listener).await;

    control_plane.set(ResourceType::Listener, &[&listener_with_unknown_filter(false)]);
    let type_url = ResourceType::Listener.type_url();
    control_plane.server.wait_until(WAIT, |j| !j.nacks(type_url).is_empty()).await.unwrap();
    let detail = control_plane.server.journal().nacks(type_url)[0].clone().error_detail.unwrap();
    assert!(detail.message.contains("http_filters[0]"), "names the field path: {}", detail.message);
    assert!(detail.message.contains("acme.filters.Rewrite"), "names the type: {}", detail.message);
    assert_eq!(outrider.store.load().listeners["http"].resource, before.listeners["http"].resource);

    control_plane.set(ResourceType::Listener, &[&listener_with_unknown_filter(true)]);
    let snapshot =
        wait_snapshot(&outrider.store, |s| s.listeners["http"].resource != before.listeners["http"].resource).await;
    let skipped = format!("{:?}", snapshot.listeners["http"].resource);
    assert!(skipped.contains("acme.rewrite"), "the optional filter is recorded as skipped");
    outrider.stop();
}
