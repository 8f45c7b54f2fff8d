//! The admin server: readiness follows the first complete configuration; `/config_dump`
//! and `/clusters` show what was received, shaped like Envoy's.

use crate::common;

use common::*;
use outrider::config::ResourceType;

#[tokio::test]
async fn ready_only_after_the_first_complete_config() {
    let control_plane = ControlPlane::start().await;
    // Clusters arrive, their endpoints do not (yet): not ready.
    control_plane.set(ResourceType::Cluster, &[CLUSTER]);
    control_plane.set(ResourceType::Listener, &[LISTENER]);
    control_plane.set(ResourceType::RouteConfiguration, &[ROUTE]);
    let outrider = start_outrider(&control_plane, "DELTA_GRPC").await;
    wait_snapshot(&outrider.store, |s| s.warming_clusters.contains_key("backend")).await;
    let (status, body) = admin_get(outrider.admin_address, "/ready").await;
    assert_eq!((status, body.trim()), (503, "INITIALIZING"));
    assert_eq!(admin_get(outrider.admin_address, "/healthz").await.0, 200);
    // istio-agent's readiness query, as `pilot/cmd/pilot-agent/status/util/stats.go` sends it.
    let readiness = "/stats?usedonly&filter=^(server\\.state|listener_manager\\.workers_started)";
    let (_, body) = admin_get(outrider.admin_address, readiness).await;
    assert_eq!(body, "listener_manager.workers_started: 0\nserver.state: 3\n");

    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[8001, 8002])]);
    wait_snapshot(&outrider.store, |s| s.ready).await;
    let (status, body) = admin_get(outrider.admin_address, "/ready").await;
    assert_eq!((status, body.trim()), (200, "LIVE"));
    let (_, body) = admin_get(outrider.admin_address, readiness).await;
    assert_eq!(body, "listener_manager.workers_started: 1\nserver.state: 0\n");
    outrider.stop();
}

#[tokio::test]
async fn config_dump_and_clusters_show_what_was_received() {
    let control_plane = ControlPlane::start().await;
    control_plane.set(ResourceType::Cluster, &[CLUSTER]);
    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[8001, 8002])]);
    control_plane.set(ResourceType::Listener, &[LISTENER]);
    control_plane.set(ResourceType::RouteConfiguration, &[ROUTE]);
    let outrider = start_outrider(&control_plane, "GRPC").await;
    let snapshot = wait_snapshot(&outrider.store, |s| s.ready).await;

    let (status, body) = admin_get(outrider.admin_address, "/config_dump").await;
    assert_eq!(status, 200);
    let dump: serde_json::Value = serde_json::from_str(&body).unwrap();
    let configs = dump["configs"].as_array().unwrap();
    let section =
        |suffix: &str| configs.iter().find(|c| c["@type"].as_str().unwrap().ends_with(suffix)).unwrap().clone();

    assert_eq!(section("BootstrapConfigDump")["bootstrap"]["node"]["cluster"], "test");
    let clusters = section("ClustersConfigDump");
    assert_eq!(clusters["version_info"], snapshot.versions[&ResourceType::Cluster].version_info.as_str());
    assert_eq!(clusters["static_clusters"][0]["cluster"]["name"], "xds-grpc");
    let active = &clusters["dynamic_active_clusters"][0];
    assert_eq!(active["cluster"]["name"], "backend");
    assert_eq!(active["cluster"]["@type"], ResourceType::Cluster.type_url());
    assert!(active["last_updated"].as_str().unwrap().ends_with('Z'));
    let listeners = section("ListenersConfigDump");
    assert_eq!(listeners["dynamic_listeners"][0]["name"], "http");
    assert_eq!(
        listeners["dynamic_listeners"][0]["active_state"]["listener"]["address"]["socket_address"]["address"],
        "127.0.0.1"
    );
    assert_eq!(section("RoutesConfigDump")["dynamic_route_configs"][0]["route_config"]["name"], "local_route");
    let endpoints = section("EndpointsConfigDump")["dynamic_endpoint_configs"][0].clone();
    assert_eq!(endpoints["endpoint_config"]["cluster_name"], "backend");
    assert_eq!(endpoints["endpoint_config"]["endpoints"][0]["lb_endpoints"].as_array().unwrap().len(), 2);

    let (status, text) = admin_get(outrider.admin_address, "/clusters").await;
    assert_eq!(status, 200);
    assert!(text.contains("backend::127.0.0.1:8001::health_flags::healthy"), "{text}");
    assert!(text.contains("backend::127.0.0.1:8002::weight::1"), "{text}");
    let (_, json) = admin_get(outrider.admin_address, "/clusters?format=json").await;
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let backend = json["cluster_statuses"].as_array().unwrap().iter().find(|c| c["name"] == "backend").unwrap().clone();
    assert_eq!(backend["host_statuses"].as_array().unwrap().len(), 2);

    assert_eq!(admin_get(outrider.admin_address, "/nope").await.0, 404);
    outrider.stop();
}
