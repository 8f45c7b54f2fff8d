//! Resource-by-resource acceptance, against the real Envoy 1.40: Envoy and Outrider are
//! pointed at one control plane that serves them the same responses (valid resources
//! mixed with invalid ones), and what each applies, what each NACK says and which versions
//! each reports are compared.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::differential::{Envoy, envoy_binary, stat_value};
use common::{ControlPlane, WAIT, admin_get, bootstrap, wait_snapshot};
use outrider::app;
use outrider::config::{Address, ResourceType};
use outrider::store::Snapshot;
use outrider::xds::server::{Journal, ReceivedRequest};
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

/// The body of a chunked HTTP/1.1 response (or the body as it is).
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

/// What a proxy applied, in comparable form: name → version (listeners: active ones;
/// clusters: dynamic active ones; routes), endpoint ports by cluster, and the
/// `version_info` of LDS and CDS.
#[derive(Debug, Default, PartialEq, Eq)]
struct Applied {
    /// Active listeners by name: their connection manager's `stat_prefix`.
    listeners: BTreeMap<String, String>,
    listener_versions: BTreeMap<String, String>,
    clusters: BTreeMap<String, String>,
    routes: BTreeMap<String, String>,
    endpoints: BTreeMap<String, Vec<u64>>,
    lds_version: String,
    cds_version: String,
}

fn envoy_applied(dump: &Value) -> Applied {
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

fn port(address: &Address) -> Option<u64> {
    match address {
        Address::Socket(socket) => Some(u64::from(socket.port())),
        _ => None,
    }
}

/// The `stat_prefix` of a listener's (first) connection manager.
fn stat_prefix(listener: &outrider::config::Listener) -> String {
    let debug = format!("{listener:?}");
    let (_, rest) = debug.split_once("stat_prefix: \"").unwrap();
    rest.split('"').next().unwrap().to_owned()
}

fn outrider_applied(snapshot: &Snapshot) -> Applied {
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

/// The NACKs `node` sent for `resource_type`.
fn nacks(journal: &Journal, node: &str, resource_type: ResourceType) -> Vec<ReceivedRequest> {
    let streams = streams_of(journal, node);
    journal.nacks(resource_type.type_url()).into_iter().filter(|r| streams.contains(&r.stream)).cloned().collect()
}

/// The first request of each type on `node`'s newest stream.
fn resumed(journal: &Journal, node: &str) -> BTreeMap<String, ReceivedRequest> {
    let stream = streams_of(journal, node).into_iter().max().unwrap();
    let mut first = BTreeMap::new();
    for r in journal.requests.iter().filter(|r| r.stream == stream) {
        first.entry(r.type_url.clone()).or_insert_with(|| r.clone());
    }
    first
}

/// Pushes a response per type mixing valid and invalid resources, to Envoy and Outrider at
/// once, and compares what they apply, what they NACK and what they resume with.
async fn partial_acceptance(api_type: &str) {
    let mut control_plane = ControlPlane::start().await;
    initial(&control_plane);
    let envoy = match envoy_binary() {
        Some(binary) => Some(Envoy::start(&binary, &envoy_bootstrap(api_type, control_plane.port)).await),
        None => {
            println!("SKIPPED: envoy not found (bench/install-envoy.sh); Outrider's half only");
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
    let initial_versions: BTreeMap<ResourceType, String> =
        ResourceType::ALL.into_iter().map(|t| (t, type_version(&control_plane, t))).collect();

    // CDS: one update, one addition, one removal (SotW: by omission), and an invalid
    // update and addition.
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
    let cds_version = type_version(&control_plane, ResourceType::Cluster);
    // LDS: the same with listeners, the invalid ones carrying a filter nobody runs.
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
    let lds_version = type_version(&control_plane, ResourceType::Listener);
    // RDS and EDS: three updates, the middle one invalid.
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
    let rds_version = type_version(&control_plane, ResourceType::RouteConfiguration);
    set(
        &control_plane,
        ResourceType::ClusterLoadAssignment,
        &[
            assignment("eds_a", "127.0.0.1", 9011),
            assignment("eds_b", "127.0.0.1, resolver_name: acme.resolver", 9012),
            assignment("eds_c", "127.0.0.1", 9013),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::ClusterLoadAssignment).await;

    let journal = control_plane.server.journal();
    let outrider_now = outrider_applied(&outrider.store.load());
    let v = |t: ResourceType| initial_versions[&t].clone();
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    };
    let (c0, l0, r0) = (v(ResourceType::Cluster), v(ResourceType::Listener), v(ResourceType::RouteConfiguration));
    // LDS and CDS: every valid resource applied, each invalid one at its previous
    // version (or absent), what the response no longer names removed; the type's version
    // is the new one.
    let expected_clusters = map(&[
        ("eds_a", &c0),
        ("eds_b", &c0),
        ("eds_c", &c0),
        ("keep", &c0),
        ("new_ok", &cds_version),
        ("upd_bad", &c0),
        ("upd_ok", &cds_version),
    ]);
    let expected_listeners = map(&[
        ("l_keep", &l0),
        ("l_new_ok", &lds_version),
        ("l_rds", &l0),
        ("l_rds2", &l0),
        ("l_rds3", &l0),
        ("l_upd_bad", &l0),
        ("l_upd_ok", &lds_version),
    ]);
    let mut sides = vec![("outrider", OUTRIDER_NODE, outrider_now)];
    if let Some(envoy) = &envoy {
        sides.push(("envoy", ENVOY_NODE, envoy_applied(&envoy_dump(envoy).await)));
    }
    for (side, node, applied) in &sides {
        let context = format!("{side} ({api_type}): {applied:#?}");
        assert_eq!(applied.clusters, expected_clusters, "{context}");
        let prefixes = map(&[
            ("l_keep", "keep"),
            ("l_new_ok", "v2"),
            ("l_rds", "rds"),
            ("l_rds2", "rds"),
            ("l_rds3", "rds"),
            ("l_upd_bad", "v1"),
            ("l_upd_ok", "v2"),
        ]);
        assert_eq!(applied.listeners, prefixes, "{context}");
        if *side == "outrider" {
            assert_eq!(applied.listener_versions, expected_listeners, "{context}");
        } else {
            // Envoy's dump keeps the previous version_info for a listener updated in place
            // (only its filter chains changed); every other one is as expected.
            let mut versions = applied.listener_versions.clone();
            versions.insert("l_upd_ok".into(), lds_version.clone());
            assert_eq!(versions, expected_listeners, "{context}");
        }
        assert_eq!(applied.cds_version, cds_version, "{context}");
        assert_eq!(applied.lds_version, lds_version, "{context}");
        // RDS and EDS: the invalid one keeps its previous version. Envoy applies the ones
        // its (unspecified) order puts before it; Outrider takes the response's order.
        assert_eq!(applied.routes["route_b"], r0, "{context}");
        assert_eq!(applied.endpoints["eds_b"], [9002], "{context}");
        for route in ["route_a", "route_c"] {
            assert!([&r0, &rds_version].contains(&&applied.routes[route]), "{context}");
        }
        if *side == "outrider" {
            assert_eq!(applied.routes["route_a"], rds_version, "{context}");
            assert_eq!(applied.routes["route_c"], r0, "{context}");
            assert_eq!(applied.endpoints["eds_a"], [9011], "{context}");
            assert_eq!(applied.endpoints["eds_c"], [9003], "{context}");
        }

        // One NACK per type, INTERNAL, naming the invalid resources only; SotW NACKs carry
        // the last ACKed version, not the one partly applied.
        let one_nack = |t: ResourceType| {
            let all = nacks(&journal, node, t);
            assert_eq!(all.len(), 1, "{side} NACKs of {t:?}: {all:#?}");
            let nack = all[0].clone();
            if api_type == "GRPC" {
                assert_eq!(nack.version_info, initial_versions[&t], "{side} {t:?}");
            }
            let detail = nack.error_detail.unwrap();
            assert_eq!(detail.code, tonic::Code::Internal as i32, "{side} {t:?}");
            detail.message
        };
        let cds = one_nack(ResourceType::Cluster);
        assert!(cds.starts_with("Error adding/updating cluster(s) new_bad: "), "{side}: {cds}");
        assert!(cds.contains(", upd_bad: ") && !cds.contains("upd_ok") && !cds.contains("new_ok"), "{side}: {cds}");
        let lds = one_nack(ResourceType::Listener);
        assert!(lds.starts_with("Error adding/updating listener(s) l_new_bad: "), "{side}: {lds}");
        assert!(lds.contains("\nl_upd_bad: ") && lds.ends_with('\n'), "{side}: {lds}");
        assert!(!lds.contains("l_upd_ok") && !lds.contains("l_new_ok"), "{side}: {lds}");
        let rds = one_nack(ResourceType::RouteConfiguration);
        assert!(!rds.contains("route_a") && !rds.contains("route_c"), "{side}: {rds}");
        let eds = one_nack(ResourceType::ClusterLoadAssignment);
        assert!(eds.contains("resolver") && !eds.contains("eds_a"), "{side}: {eds}");
        if *side == "outrider" {
            assert!(rds.starts_with("route_b: virtual_hosts[0].routes[0].match.safe_regex.regex: "), "{rds}");
            assert!(lds.contains("filter_chains[0].filters[0].typed_config.http_filters[0]"), "{lds}");
            assert!(cds.contains("load_assignment.endpoints[0].lb_endpoints[0].endpoint.address"), "{cds}");
            assert!(eds.starts_with("eds_b: endpoints[0].lb_endpoints[0].endpoint.address"), "{eds}");
        }
    }

    // Stats: a partly applied response counts as rejected, not as a success.
    let outrider_stats = admin_get(outrider.admin_address, "/stats").await.1;
    for stat in [
        "cluster_manager.cds.update_rejected",
        "cluster_manager.cds.update_success",
        "listener_manager.lds.update_rejected",
        "listener_manager.lds.update_success",
    ] {
        let outrider_value = stat_value(&outrider_stats, stat);
        assert_eq!(outrider_value, 1, "outrider {stat}");
        if let Some(envoy) = &envoy {
            assert_eq!(envoy.stat(stat).await, outrider_value, "envoy {stat}");
        }
    }

    // A new stream resumes from what was ACKed: SotW with the last ACKed version_info,
    // Delta with the versions of the ACKed responses (the partly applied ones not
    // advancing them).
    let streams_before: BTreeMap<&str, usize> = nodes.iter().map(|n| (*n, streams_of(&journal, n).len())).collect();
    control_plane.restart().await;
    control_plane
        .server
        .wait_until(WAIT * 3, |j| {
            nodes.iter().all(|n| {
                streams_of(j, n).len() > streams_before[n]
                    && [
                        ResourceType::Cluster,
                        ResourceType::Listener,
                        ResourceType::RouteConfiguration,
                        ResourceType::ClusterLoadAssignment,
                    ]
                    .iter()
                    .all(|t| resumed(j, n).contains_key(t.type_url()))
            })
        })
        .await
        .unwrap();
    let journal = control_plane.server.journal();
    let outrider_resumed = resumed(&journal, OUTRIDER_NODE);
    for t in [
        ResourceType::Cluster,
        ResourceType::Listener,
        ResourceType::RouteConfiguration,
        ResourceType::ClusterLoadAssignment,
    ] {
        let request = &outrider_resumed[t.type_url()];
        if api_type == "GRPC" {
            assert_eq!(request.version_info, initial_versions[&t], "outrider resumes {t:?}");
        } else {
            let initial_version = &initial_versions[&t];
            assert!(
                request.initial_resource_versions.values().all(|v| v == initial_version),
                "outrider resumes {t:?} with the ACKed versions: {request:#?}"
            );
        }
        if envoy.is_some() {
            let envoy_request = &resumed(&journal, ENVOY_NODE)[t.type_url()];
            assert_eq!(envoy_request.version_info, request.version_info, "{t:?}");
            assert_eq!(envoy_request.initial_resource_versions, request.initial_resource_versions, "{t:?}");
        }
    }
    outrider.stop();
}

#[tokio::test]
async fn valid_resources_are_applied_and_invalid_ones_nacked_sotw() {
    partial_acceptance("GRPC").await;
}

#[tokio::test]
async fn valid_resources_are_applied_and_invalid_ones_nacked_delta() {
    partial_acceptance("DELTA_GRPC").await;
}
