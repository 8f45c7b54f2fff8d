//! Envoy-format resource files, single and in a directory, and reloading.

use super::*;

const RESOURCES: &str = r#"
version_info: "1"
resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: listener_0
  address: {socket_address: {address: 127.0.0.1, port_value: 10000}}
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
"#;

const ENDPOINTS_JSON: &str = r#"{"resources": [{
  "@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
  "cluster_name": "backend",
  "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 8080}}}}]}]
}]}"#;

fn names(set: &ResourceSet, t: ResourceType) -> Vec<&str> {
    set[&t].iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn a_file_and_a_directory_in_envoy_format() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), RESOURCES).unwrap();
    std::fs::write(dir.path().join("b.json"), ENDPOINTS_JSON).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a resource file").unwrap();

    let one = load(&dir.path().join("a.yaml")).unwrap();
    assert_eq!(names(&one, ResourceType::Listener), ["listener_0"]);
    assert_eq!(names(&one, ResourceType::ClusterLoadAssignment), Vec::<&str>::new());

    let all = load(dir.path()).unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(names(&all, ResourceType::RouteConfiguration), ["local_route"]);
    assert_eq!(names(&all, ResourceType::Cluster), ["backend"]);
    let (_, any) = &all[&ResourceType::ClusterLoadAssignment][0];
    assert_eq!(any.type_url, ResourceType::ClusterLoadAssignment.type_url());
    let cla = <endpoint::ClusterLoadAssignment as prost::Message>::decode(any.value.as_slice()).unwrap();
    assert_eq!(cla.endpoints[0].lb_endpoints.len(), 1);
}

#[test]
fn bad_documents_are_rejected_with_their_path() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("listeners: []", "top-level `resources`"),
        ("resources: [{name: x}]", "resources[0]: missing `@type`"),
        ("resources: [{'@type': type.googleapis.com/envoy.config.core.v3.Node, id: x}]", "unsupported resource type"),
        ("resources: [{'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster}]", "has no name"),
        (
            "resources: [{'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster, connect_timeout: soon, name: c}]",
            "resources[0]",
        ),
        (
            "resources:\n- {'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster, name: c}\n- {'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster, name: c}",
            "resources[1]: duplicate cds `c`",
        ),
    ];
    for (text, expected) in cases {
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, text).unwrap();
        let error = load(&path).unwrap_err().to_string();
        assert!(error.contains(expected) && error.contains("bad.yaml"), "{text}: {error}");
    }
    assert!(matches!(load(&dir.path().join("missing.yaml")), Err(FileError::Io { .. })));
}

#[test]
fn reload_publishes_changes_and_keeps_the_last_good_set() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("xds.yaml");
    std::fs::write(&path, RESOURCES).unwrap();
    let server = XdsServer::new();
    let mut source = FileSource::new(&path, server.clone());
    assert!(source.reload().unwrap());
    assert!(!source.reload().unwrap());
    let version = server.version();
    assert_eq!(server.resources(ResourceType::Cluster.type_url()).len(), 1);

    std::fs::write(&path, "resources: [oops").unwrap();
    assert!(source.reload().is_err());
    assert!(!source.reload().unwrap(), "the same broken content is reported once");
    assert_eq!(server.version(), version);
    assert_eq!(server.resources(ResourceType::Listener.type_url()).len(), 1);

    std::fs::write(&path, RESOURCES.replace("listener_0", "listener_1")).unwrap();
    assert!(source.reload().unwrap());
    assert_eq!(server.resources(ResourceType::Listener.type_url()).keys().collect::<Vec<_>>(), ["listener_1"]);
    assert_eq!(server.resources(ResourceType::Cluster.type_url()).len(), 1);
}

#[tokio::test]
async fn watch_picks_up_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("xds.yaml"), RESOURCES).unwrap();
    let server = XdsServer::new();
    let watcher = FileSource::watch(dir.path(), server.clone());
    let mut changes = server.changes();
    tokio::time::timeout(std::time::Duration::from_secs(5), changes.wait_for(|v| *v > 0)).await.unwrap().unwrap();
    assert_eq!(server.resources(ResourceType::RouteConfiguration.type_url()).len(), 1);
    watcher.abort();
}

/// A cluster with metadata: its `filter_metadata` and `Struct` are protobuf maps, whose
/// encoding order changes from one encoding to the next.
fn with_metadata(endpoints_port: u16) -> String {
    let metadata: String = (0..16).map(|i| format!("k{i}: v{i}, ")).collect();
    format!(
        r#"
resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: backend
  type: EDS
  connect_timeout: 1s
  eds_cluster_config: {{eds_config: {{ads: {{}}, resource_api_version: V3}}}}
  metadata: {{filter_metadata: {{istio: {{ {metadata} }}, a: {{ {metadata} }}, b: {{ {metadata} }} }}}}
- "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
  cluster_name: backend
  endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {endpoints_port}}}}}}}}}]}}]
"#
    )
}

#[test]
fn a_resource_read_again_unchanged_is_not_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("xds.yaml");
    std::fs::write(&path, with_metadata(8080)).unwrap();
    let server = XdsServer::new();
    let mut source = FileSource::new(&path, server.clone());
    assert!(source.reload().unwrap());
    let clusters = server.resources(ResourceType::Cluster.type_url());
    let endpoints = server.resources(ResourceType::ClusterLoadAssignment.type_url());
    // Only the endpoints change: the cluster keeps its version and its bytes.
    std::fs::write(&path, with_metadata(8081)).unwrap();
    assert!(source.reload().unwrap());
    assert_eq!(server.resources(ResourceType::Cluster.type_url()), clusters);
    assert_ne!(server.resources(ResourceType::ClusterLoadAssignment.type_url()), endpoints);
}
