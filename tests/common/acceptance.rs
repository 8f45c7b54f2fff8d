//! What the resource-by-resource acceptance tests share: the resources they push, the
//! Envoy bootstrap beside Outrider's, and what each proxy applied in comparable form.

use std::collections::BTreeMap;

use outrider::config::{Address, ResourceType};
use outrider::store::Snapshot;
use outrider::xds::server::{Journal, ReceivedRequest};
use serde_json::Value;

use super::differential::{Envoy, envoy_binary};
use super::skip::{Tool, skipped};
use super::{ControlPlane, WAIT, admin_get, bootstrap, wait_snapshot};

pub const ENVOY_NODE: &str = "envoy-partial";
pub const OUTRIDER_NODE: &str = "sidecar~10.0.0.1~app-1.default~default.svc.cluster.local";

pub fn static_cluster(name: &str, timeout: &str, address: &str) -> String {
    format!(
        r#"
name: {name}
type: STATIC
connect_timeout: {timeout}
load_assignment:
  cluster_name: {name}
  endpoints:
  - lb_endpoints:
    - endpoint: {{ address: {{ socket_address: {{ address: {address}, port_value: 9000 }} }} }}
"#
    )
}

pub fn eds_cluster(name: &str) -> String {
    format!(
        r#"
name: {name}
type: EDS
connect_timeout: 1s
eds_cluster_config: {{ eds_config: {{ ads: {{}}, resource_api_version: V3 }} }}
"#
    )
}

pub fn assignment(name: &str, address: &str, port: u16) -> String {
    format!(
        "cluster_name: {name}\nendpoints:\n- lb_endpoints:\n  - endpoint: {{ address: {{ socket_address: {{ address: {address}, port_value: {port} }} }} }}\n"
    )
}

/// A listener whose connection manager has `route` (inline `route_config` or `rds`) and
/// `extra_filter` before the router.
pub fn listener(name: &str, stat_prefix: &str, route: &str, extra_filter: &str) -> String {
    format!(
        r#"
name: {name}
address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: {stat_prefix}
      {route}
      http_filters:{extra_filter}
      - name: envoy.filters.http.router
        typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
"#
    )
}

pub const INLINE_ROUTE: &str = "route_config: { name: inline, virtual_hosts: [{ name: all, domains: ['*'], routes: [{ match: { prefix: / }, route: { cluster: keep } }] }] }";

pub fn rds(route: &str) -> String {
    format!("rds: {{ route_config_name: {route}, config_source: {{ ads: {{}}, resource_api_version: V3 }} }}")
}

pub const UNKNOWN_FILTER: &str = r#"
      - name: acme.rewrite
        typed_config:
          "@type": type.googleapis.com/udpa.type.v1.TypedStruct
          type_url: type.googleapis.com/acme.filters.Rewrite
          value: { prefix: /v2 }"#;

pub fn route(name: &str, path_match: &str) -> String {
    format!(
        "name: {name}\nvirtual_hosts:\n- name: all\n  domains: ['*']\n  routes:\n  - match: {path_match}\n    route: {{ cluster: keep }}\n"
    )
}

pub fn envoy_bootstrap(api_type: &str, xds_port: u16) -> String {
    format!(
        r#"
node: {{id: {ENVOY_NODE}, cluster: outrider-test}}
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}}}
dynamic_resources:
  ads_config:
    api_type: {api_type}
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services: [{{envoy_grpc: {{cluster_name: xds-grpc}}}}]
  lds_config: {{ads: {{}}, resource_api_version: V3}}
  cds_config: {{ads: {{}}, resource_api_version: V3}}
static_resources:
  clusters:
  - name: xds-grpc
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: xds-grpc
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {xds_port}}}}}}}
"#
    )
}

/// The streams a node opened.
pub fn streams_of(journal: &Journal, node: &str) -> Vec<u64> {
    let mut streams: Vec<u64> = journal.requests.iter().filter(|r| r.node_id == node).map(|r| r.stream).collect();
    streams.dedup();
    streams
}

/// Whether `node` answered (ACK or NACK) the last response of `type_url` sent to it, and
/// that response carried `version` (the control plane's current one for the type).
pub fn answered(journal: &Journal, node: &str, type_url: &str, version: &str) -> bool {
    let streams = streams_of(journal, node);
    let Some(last) = journal.responses.iter().rev().find(|r| r.type_url == type_url && streams.contains(&r.stream))
    else {
        return false;
    };
    if last.version != version {
        return false;
    }
    journal.requests.iter().any(|r| r.acks(last) || r.nacks(last))
}

pub fn print_journal(journal: &Journal, node: &str) {
    let streams = streams_of(journal, node);
    for r in journal.requests.iter().filter(|r| streams.contains(&r.stream)) {
        println!(
            "[{node}] REQ stream={} type={} version={:?} nonce={:?} names={:?} sub={:?} unsub={:?} initial={:?} error={:?}",
            r.stream,
            r.type_url.rsplit('.').next().unwrap(),
            r.version_info,
            r.response_nonce,
            r.resource_names,
            r.subscribe,
            r.unsubscribe,
            r.initial_resource_versions,
            r.error_detail
        );
    }
    for r in journal.responses.iter().filter(|r| streams.contains(&r.stream)) {
        println!(
            "[{node}] RESP stream={} type={} version={:?} nonce={:?} resources={:?} removed={:?}",
            r.stream,
            r.type_url.rsplit('.').next().unwrap(),
            r.version,
            r.nonce,
            r.resources,
            r.removed
        );
    }
}

pub async fn envoy_dump(envoy: &Envoy) -> Value {
    let (status, body) = admin_get(envoy.admin, "/config_dump?include_eds").await;
    assert_eq!(status, 200);
    serde_json::from_str(&dechunk(&body)).unwrap()
}

/// The body of a chunked HTTP/1.1 response (or the body as it is).
pub fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            return body.to_owned();
        };
        if size == 0 {
            break;
        }
        out.push_str(&tail[..size]);
        rest = &tail[size + 2..];
    }
    out
}

/// What a proxy applied, in comparable form: name → version (listeners: active ones;
/// clusters: dynamic active ones; routes), endpoint ports by cluster, and the
/// `version_info` of LDS and CDS.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Active listeners by name: their connection manager's `stat_prefix`.
    pub listeners: BTreeMap<String, String>,
    pub listener_versions: BTreeMap<String, String>,
    pub clusters: BTreeMap<String, String>,
    pub routes: BTreeMap<String, String>,
    pub endpoints: BTreeMap<String, Vec<u64>>,
    pub lds_version: String,
    pub cds_version: String,
}

pub fn envoy_applied(dump: &Value) -> Applied {
    let mut applied = Applied::default();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    for config in dump["configs"].as_array().unwrap() {
        match config["@type"].as_str().unwrap().rsplit('.').next().unwrap() {
            "ListenersConfigDump" => {
                applied.lds_version = text(&config["version_info"]);
                for l in config["dynamic_listeners"].as_array().into_iter().flatten() {
                    let active = &l["active_state"];
                    if !active.is_null() {
                        let hcm = &active["listener"]["filter_chains"][0]["filters"][0]["typed_config"];
                        applied.listeners.insert(text(&l["name"]), text(&hcm["stat_prefix"]));
                        applied.listener_versions.insert(text(&l["name"]), text(&active["version_info"]));
                    }
                }
            }
            "ClustersConfigDump" => {
                applied.cds_version = text(&config["version_info"]);
                for c in config["dynamic_active_clusters"].as_array().into_iter().flatten() {
                    applied.clusters.insert(text(&c["cluster"]["name"]), text(&c["version_info"]));
                }
            }
            "RoutesConfigDump" => {
                for r in config["dynamic_route_configs"].as_array().into_iter().flatten() {
                    applied.routes.insert(text(&r["route_config"]["name"]), text(&r["version_info"]));
                }
            }
            "EndpointsConfigDump" => {
                for e in config["dynamic_endpoint_configs"].as_array().into_iter().flatten() {
                    let cla = &e["endpoint_config"];
                    let ports = cla["endpoints"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .flat_map(|l| l["lb_endpoints"].as_array().into_iter().flatten())
                        .filter_map(|e| e["endpoint"]["address"]["socket_address"]["port_value"].as_u64())
                        .collect();
                    applied.endpoints.insert(text(&cla["cluster_name"]), ports);
                }
            }
            _ => {}
        }
    }
    applied
}

pub fn port(address: &Address) -> Option<u64> {
    match address {
        Address::Socket(socket) => Some(u64::from(socket.port())),
        _ => None,
    }
}

/// The `stat_prefix` of a listener's (first) connection manager.
pub fn stat_prefix(listener: &outrider::config::Listener) -> String {
    let debug = format!("{listener:?}");
    let (_, rest) = debug.split_once("stat_prefix: \"").unwrap();
    rest.split('"').next().unwrap().to_owned()
}

pub fn outrider_applied(snapshot: &Snapshot) -> Applied {
    let versions = |t: ResourceType| snapshot.versions.get(&t).map(|v| v.version_info.clone()).unwrap_or_default();
    Applied {
        listeners: snapshot.listeners.iter().map(|(n, l)| (n.clone(), stat_prefix(&l.resource))).collect(),
        listener_versions: snapshot.listeners.iter().map(|(n, l)| (n.clone(), l.version.clone())).collect(),
        clusters: snapshot
            .clusters
            .iter()
            .filter(|(n, _)| n.as_str() != "xds-grpc")
            .map(|(n, c)| (n.clone(), c.version.clone()))
            .collect(),
        routes: snapshot.routes.iter().map(|(n, r)| (n.clone(), r.version.clone())).collect(),
        endpoints: snapshot
            .endpoints
            .iter()
            .filter(|(n, _)| n.starts_with("eds_"))
            .map(|(n, cla)| (n.clone(), cla.resource.endpoints().filter_map(|e| port(&e.address)).collect()))
            .collect(),
        lds_version: versions(ResourceType::Listener),
        cds_version: versions(ResourceType::Cluster),
    }
}

pub fn initial(control_plane: &ControlPlane) {
    let clusters = [
        static_cluster("keep", "1s", "127.0.0.1"),
        static_cluster("upd_ok", "1s", "127.0.0.1"),
        static_cluster("upd_bad", "1s", "127.0.0.1"),
        static_cluster("gone", "1s", "127.0.0.1"),
        eds_cluster("eds_a"),
        eds_cluster("eds_b"),
        eds_cluster("eds_c"),
    ];
    let listeners = [
        listener("l_keep", "keep", INLINE_ROUTE, ""),
        listener("l_upd_ok", "v1", INLINE_ROUTE, ""),
        listener("l_upd_bad", "v1", INLINE_ROUTE, ""),
        listener("l_gone", "v1", INLINE_ROUTE, ""),
        listener("l_rds", "rds", &rds("route_a"), ""),
        listener("l_rds2", "rds", &rds("route_b"), ""),
        listener("l_rds3", "rds", &rds("route_c"), ""),
    ];
    let routes =
        [route("route_a", "{ prefix: /a1 }"), route("route_b", "{ prefix: /b1 }"), route("route_c", "{ prefix: /c1 }")];
    let clas = [
        assignment("eds_a", "127.0.0.1", 9001),
        assignment("eds_b", "127.0.0.1", 9002),
        assignment("eds_c", "127.0.0.1", 9003),
    ];
    set(control_plane, ResourceType::Cluster, &clusters);
    set(control_plane, ResourceType::ClusterLoadAssignment, &clas);
    set(control_plane, ResourceType::Listener, &listeners);
    set(control_plane, ResourceType::RouteConfiguration, &routes);
}

/// The version the control plane serves `resource_type` at: the newest of its resources'.
pub fn type_version(control_plane: &ControlPlane, resource_type: ResourceType) -> String {
    let resources = control_plane.server.resources(resource_type.type_url());
    let newest = resources.values().filter_map(|r| r.version.parse::<u64>().ok()).max().unwrap_or(0);
    newest.to_string()
}

pub fn set(control_plane: &ControlPlane, resource_type: ResourceType, yamls: &[String]) {
    let refs: Vec<&str> = yamls.iter().map(String::as_str).collect();
    control_plane.set(resource_type, &refs);
}

pub async fn wait_answered(control_plane: &ControlPlane, nodes: &[&str], resource_type: ResourceType) {
    let type_url = resource_type.type_url();
    let version = type_version(control_plane, resource_type);
    control_plane
        .server
        .wait_until(WAIT * 3, |j| nodes.iter().all(|n| answered(j, n, type_url, &version)))
        .await
        .unwrap_or_else(|_| {
            for n in nodes {
                print_journal(&control_plane.server.journal(), n);
            }
            panic!("not answered: {type_url}")
        });
}

/// The NACKs `node` sent for `resource_type`.
pub fn nacks(journal: &Journal, node: &str, resource_type: ResourceType) -> Vec<ReceivedRequest> {
    let streams = streams_of(journal, node);
    journal.nacks(resource_type.type_url()).into_iter().filter(|r| streams.contains(&r.stream)).cloned().collect()
}

/// The first request of each type on `node`'s newest stream.
pub fn resumed(journal: &Journal, node: &str) -> BTreeMap<String, ReceivedRequest> {
    let stream = streams_of(journal, node).into_iter().max().unwrap();
    let mut first = BTreeMap::new();
    for r in journal.requests.iter().filter(|r| r.stream == stream) {
        first.entry(r.type_url.clone()).or_insert_with(|| r.clone());
    }
    first
}

/// Envoy (when installed) and Outrider pointed at one control plane serving [`initial`]'s
/// resources over `api_type`, Outrider ready.
pub struct SideBySide {
    pub control_plane: ControlPlane,
    pub envoy: Option<Envoy>,
    pub outrider: outrider::app::Running,
    /// The nodes whose answers to compare: Outrider's, then Envoy's when it runs.
    pub nodes: Vec<&'static str>,
}

pub async fn side_by_side(api_type: &str) -> SideBySide {
    let control_plane = ControlPlane::start().await;
    initial(&control_plane);
    let envoy = match envoy_binary() {
        Some(binary) => Some(Envoy::start(&binary, &envoy_bootstrap(api_type, control_plane.port)).await),
        None => {
            skipped(Tool::Envoy, "the Envoy half (Outrider's alone)", "envoy not found");
            None
        }
    };
    let outrider = outrider::app::start(bootstrap(control_plane.port, api_type)).await.unwrap();
    wait_snapshot(&outrider.store, |s| s.ready).await;
    let mut nodes = vec![OUTRIDER_NODE];
    if envoy.is_some() {
        nodes.push(ENVOY_NODE);
    }
    SideBySide { control_plane, envoy, outrider, nodes }
}
