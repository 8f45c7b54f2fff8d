//! Resource-by-resource acceptance, against the real Envoy 1.40: Envoy and Outrider are
//! pointed at one control plane that serves them the same responses (valid resources
//! mixed with invalid ones), and what each applies, what each NACK says and which versions
//! each reports are compared.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::differential::{Envoy, envoy_binary};
use common::{ControlPlane, WAIT, admin_get, bootstrap, wait_snapshot};
use outrider::app;
use outrider::config::ResourceType;
use outrider::xds::server::Journal;
use serde_json::Value;

const ENVOY_NODE: &str = "envoy-partial";
const OUTRIDER_NODE: &str = "sidecar~10.0.0.1~app-1.default~default.svc.cluster.local";

fn static_cluster(name: &str, timeout: &str, address: &str) -> String {
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

fn eds_cluster(name: &str) -> String {
    format!(
        r#"
name: {name}
type: EDS
connect_timeout: 1s
eds_cluster_config: {{ eds_config: {{ ads: {{}}, resource_api_version: V3 }} }}
"#
    )
}

fn assignment(name: &str, address: &str, port: u16) -> String {
    format!(
        "cluster_name: {name}\nendpoints:\n- lb_endpoints:\n  - endpoint: {{ address: {{ socket_address: {{ address: {address}, port_value: {port} }} }} }}\n"
    )
}

/// A listener whose connection manager has `route` (inline `route_config` or `rds`) and
/// `extra_filter` before the router.
fn listener(name: &str, stat_prefix: &str, route: &str, extra_filter: &str) -> String {
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

const INLINE_ROUTE: &str = "route_config: { name: inline, virtual_hosts: [{ name: all, domains: ['*'], routes: [{ match: { prefix: / }, route: { cluster: keep } }] }] }";

fn rds(route: &str) -> String {
    format!("rds: {{ route_config_name: {route}, config_source: {{ ads: {{}}, resource_api_version: V3 }} }}")
}

const UNKNOWN_FILTER: &str = r#"
      - name: acme.rewrite
        typed_config:
          "@type": type.googleapis.com/udpa.type.v1.TypedStruct
          type_url: type.googleapis.com/acme.filters.Rewrite
          value: { prefix: /v2 }"#;

fn route(name: &str, path_match: &str) -> String {
    format!(
        "name: {name}\nvirtual_hosts:\n- name: all\n  domains: ['*']\n  routes:\n  - match: {path_match}\n    route: {{ cluster: keep }}\n"
    )
}

fn envoy_bootstrap(api_type: &str, xds_port: u16) -> String {
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
fn streams_of(journal: &Journal, node: &str) -> Vec<u64> {
    let mut streams: Vec<u64> = journal.requests.iter().filter(|r| r.node_id == node).map(|r| r.stream).collect();
    streams.dedup();
    streams
}

/// Whether `node` answered (ACK or NACK) the last response of `type_url` sent to it, and
/// that response carried `version` (the control plane's current one for the type).
fn answered(journal: &Journal, node: &str, type_url: &str, version: &str) -> bool {
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

fn print_journal(journal: &Journal, node: &str) {
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

async fn envoy_dump(envoy: &Envoy) -> Value {
    let (status, body) = admin_get(envoy.admin, "/config_dump?include_eds").await;
    assert_eq!(status, 200);
    serde_json::from_str(&dechunk(&body)).unwrap()
}

/// The body of a chunked HTTP/1.1 response.
fn dechunk(body: &str) -> String {
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

fn dump_summary(dump: &Value) {
    for config in dump["configs"].as_array().unwrap() {
        let t = config["@type"].as_str().unwrap();
        match t.rsplit('.').next().unwrap() {
            "ListenersConfigDump" => {
                println!("LDS version_info={:?}", config["version_info"]);
                for l in config["dynamic_listeners"].as_array().into_iter().flatten() {
                    println!(
                        "  listener {} active={:?} prefix={:?} warming={:?} error={:?}",
                        l["name"],
                        l["active_state"]["version_info"],
                        l["active_state"]["listener"]["filter_chains"][0]["filters"][0]["typed_config"]["stat_prefix"],
                        l["warming_state"]["version_info"],
                        l["error_state"]["details"]
                    );
                }
            }
            "ClustersConfigDump" => {
                println!("CDS version_info={:?}", config["version_info"]);
                for c in config["dynamic_active_clusters"].as_array().into_iter().flatten() {
                    println!(
                        "  cluster {} version={:?} timeout={:?}",
                        c["cluster"]["name"], c["version_info"], c["cluster"]["connect_timeout"]
                    );
                }
                for c in config["dynamic_warming_clusters"].as_array().into_iter().flatten() {
                    println!("  warming cluster {} version={:?}", c["cluster"]["name"], c["version_info"]);
                }
            }
            "RoutesConfigDump" => {
                for r in config["dynamic_route_configs"].as_array().into_iter().flatten() {
                    println!(
                        "  route {} version={:?} match={}",
                        r["route_config"]["name"], r["version_info"], r["route_config"]["virtual_hosts"][0]["routes"][0]["match"]
                    );
                }
            }
            "EndpointsConfigDump" => {
                for e in config["dynamic_endpoint_configs"].as_array().into_iter().flatten() {
                    println!(
                        "  cla {} version={:?} ep={}",
                        e["endpoint_config"]["cluster_name"],
                        e["version_info"],
                        e["endpoint_config"]["endpoints"]
                    );
                }
            }
            _ => {}
        }
    }
}

fn initial(control_plane: &ControlPlane) {
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
    let clas =
        [assignment("eds_a", "127.0.0.1", 9001), assignment("eds_b", "127.0.0.1", 9002), assignment("eds_c", "127.0.0.1", 9003)];
    set(control_plane, ResourceType::Cluster, &clusters);
    set(control_plane, ResourceType::ClusterLoadAssignment, &clas);
    set(control_plane, ResourceType::Listener, &listeners);
    set(control_plane, ResourceType::RouteConfiguration, &routes);
}

/// The version the control plane serves `resource_type` at: the newest of its resources'.
fn type_version(control_plane: &ControlPlane, resource_type: ResourceType) -> String {
    let resources = control_plane.server.resources(resource_type.type_url());
    let newest = resources.values().filter_map(|r| r.version.parse::<u64>().ok()).max().unwrap_or(0);
    newest.to_string()
}

fn set(control_plane: &ControlPlane, resource_type: ResourceType, yamls: &[String]) {
    let refs: Vec<&str> = yamls.iter().map(String::as_str).collect();
    control_plane.set(resource_type, &refs);
}

async fn wait_answered(control_plane: &ControlPlane, nodes: &[&str], resource_type: ResourceType) {
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

async fn explore(api_type: &str) {
    let control_plane = ControlPlane::start().await;
    initial(&control_plane);
    let binary = envoy_binary();
    let envoy = match &binary {
        Some(b) => Some(Envoy::start(b, &envoy_bootstrap(api_type, control_plane.port)).await),
        None => {
            println!("SKIPPED: envoy not found");
            None
        }
    };
    let outrider = app::start(bootstrap(control_plane.port, api_type)).await.unwrap();
    wait_snapshot(&outrider.store, |s| s.ready).await;
    let mut nodes = vec![OUTRIDER_NODE];
    if envoy.is_some() {
        nodes.push(ENVOY_NODE);
    }
    for t in ResourceType::ALL.into_iter().filter(|t| *t != ResourceType::Secret) {
        wait_answered(&control_plane, &nodes, t).await;
    }

    set(
        &control_plane,
        ResourceType::Cluster,
        &[
            static_cluster("keep", "1s", "127.0.0.1"),
            static_cluster("upd_ok", "2s", "127.0.0.1"),
            static_cluster("upd_bad", "2s", "backend.invalid"),
            static_cluster("new_ok", "1s", "127.0.0.1"),
            static_cluster("new_bad", "1s", "backend.invalid"),
            eds_cluster("eds_a"),
            eds_cluster("eds_b"),
            eds_cluster("eds_c"),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::Cluster).await;
    set(
        &control_plane,
        ResourceType::Listener,
        &[
            listener("l_keep", "keep", INLINE_ROUTE, ""),
            listener("l_upd_ok", "v2", INLINE_ROUTE, ""),
            listener("l_upd_bad", "v2", INLINE_ROUTE, UNKNOWN_FILTER),
            listener("l_new_ok", "v2", INLINE_ROUTE, ""),
            listener("l_new_bad", "v2", INLINE_ROUTE, UNKNOWN_FILTER),
            listener("l_rds", "rds", &rds("route_a"), ""),
            listener("l_rds2", "rds", &rds("route_b"), ""),
            listener("l_rds3", "rds", &rds("route_c"), ""),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::Listener).await;
    set(
        &control_plane,
        ResourceType::RouteConfiguration,
        &[
            route("route_a", "{ prefix: /a2 }"),
            route("route_b", "{ safe_regex: { regex: '(' } }"),
            route("route_c", "{ prefix: /c2 }"),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::RouteConfiguration).await;
    set(
        &control_plane,
        ResourceType::ClusterLoadAssignment,
        &[
            assignment("eds_a", "127.0.0.1", 9011),
            assignment("eds_b", "not-an-ip", 9012),
            assignment("eds_c", "127.0.0.1", 9013),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::ClusterLoadAssignment).await;

    let journal = control_plane.server.journal();
    for n in &nodes {
        print_journal(&journal, n);
    }
    if let Some(envoy) = &envoy {
        dump_summary(&envoy_dump(envoy).await);
        for stat in [
            "listener_manager.lds.update_rejected",
            "listener_manager.lds.update_success",
            "listener_manager.lds.version",
            "cluster_manager.cds.update_rejected",
            "cluster_manager.cds.update_success",
            "cluster_manager.cds.version",
            "control_plane.rate_limit_enforced",
        ] {
            println!("envoy {stat} = {}", envoy.stat(stat).await);
        }
        let (_, body) = admin_get(envoy.admin, "/stats?filter=rds|eds|update").await;
        println!("{body}");
    }
    let snapshot = outrider.store.load();
    println!("outrider versions {:?}", snapshot.versions);
    let listeners: BTreeMap<_, _> = snapshot.listeners.iter().map(|(n, l)| (n.clone(), l.version.clone())).collect();
    println!("outrider listeners {listeners:?}");
    let clusters: BTreeMap<_, _> = snapshot.clusters.iter().map(|(n, l)| (n.clone(), l.version.clone())).collect();
    println!("outrider clusters {clusters:?}");

    let mut control_plane = control_plane;
    control_plane.restart().await;
    let envoy_streams = streams_of(&journal, ENVOY_NODE).len();
    control_plane
        .server
        .wait_until(WAIT * 3, |j| {
            streams_of(j, ENVOY_NODE).len() > envoy_streams || envoy.is_none()
        })
        .await
        .unwrap();
    for t in ResourceType::ALL.into_iter().filter(|t| *t != ResourceType::Secret) {
        wait_answered(&control_plane, &nodes, t).await;
    }
    let journal = control_plane.server.journal();
    println!("=== after restart");
    for n in &nodes {
        print_journal(&journal, n);
    }
    outrider.stop();
}

#[tokio::test]
async fn explore_sotw() {
    explore("GRPC").await;
}

#[tokio::test]
async fn explore_delta() {
    explore("DELTA_GRPC").await;
}
