// The request-edge fields of the connection manager.
mod edge;
// Istio-shaped listeners (what istiod sends), kept apart from the generic cases.
mod istio;
// Filters are known by type, never by name; optional ones skipped only as Envoy would.
mod filters_by_type;
// Fields accepted at Envoy's default only.
mod hcm_defaults_only;
// The TCP proxy's timeouts and refusals.
mod tcp_proxy;
// What a listener binds; listener filter options refused.
mod addresses;

use std::net::IpAddr;
use std::time::Duration;

use serde_json::{Value, json};

use super::listener;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::listener::tcp_proxy::TcpCluster;
use crate::config::listener::{
    CidrRange, HttpConnectionManager, Listener, ListenerFilterKind, RouteSource, SkippedKind, TerminalFilter,
};
use crate::pb::envoy::config::listener::v3 as proto;

const HCM: &str =
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
const TCP_PROXY: &str = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";

fn convert_with(value: Value, warnings: &mut Warnings) -> Result<Listener> {
    let (proto, dropped) =
        crate::pb::json::from_value::<proto::Listener>("envoy.config.listener.v3.Listener", value).unwrap();
    // TypedStruct is not in the descriptor set: such configs arrive without a type, as
    // Istio's own filters do in config dumps.
    assert!(dropped.iter().all(|d| d.what.ends_with("TypedStruct")), "{dropped:?}");
    listener(proto, warnings)
}

fn convert(value: Value) -> Result<Listener> {
    convert_with(value, &mut Warnings::new())
}

fn router() -> Value {
    json!({"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER}})
}

/// A listener on port 8080 whose single chain ends with `filter`.
fn with_filters(filters: Value) -> Value {
    json!({"name": "l", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 8080}},
        "filter_chains": [{"filters": filters}]})
}

fn hcm(config: Value) -> Value {
    let mut typed = json!({"@type": HCM, "stat_prefix": "s"});
    typed.as_object_mut().unwrap().extend(config.as_object().unwrap().clone());
    with_filters(json!([{"name": "envoy.filters.network.http_connection_manager", "typed_config": typed}]))
}

fn hcm_of(l: &Listener) -> &HttpConnectionManager {
    match &l.filter_chains[0].terminal {
        TerminalFilter::HttpConnectionManager(h) => h,
        other => panic!("not an HCM: {other:?}"),
    }
}

fn error(result: Result<Listener>) -> ConfigError {
    result.err().unwrap()
}

fn inline_routes() -> Value {
    json!({"name": "local", "virtual_hosts": [{"name": "vh", "domains": ["*"],
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "c"}}]}]})
}

#[test]
fn hcm_with_rds_and_with_inline_route_config() {
    let rds = convert(hcm(json!({"rds": {"route_config_name": "r1", "config_source": {"ads": {}}},
        "http_filters": [router()]})))
    .unwrap();
    assert_eq!(rds.route_config_names(), ["r1"]);
    let h = hcm_of(&rds);
    assert!(h.generate_request_id && !h.use_remote_address);
    assert_eq!(h.stream_idle_timeout, Some(Duration::from_secs(300)));
    assert_eq!(h.common.idle_timeout, Some(Duration::from_secs(3600)));
    assert_eq!(h.http2.max_concurrent_streams, 2_147_483_647);
    assert_eq!(h.server_name, "envoy");

    let inline = convert(hcm(json!({"route_config": inline_routes(), "http_filters": [router()],
        "stream_idle_timeout": "0s", "use_remote_address": true, "xff_num_trusted_hops": 2,
        "generate_request_id": false, "common_http_protocol_options": {"idle_timeout": "30s"},
        "http2_protocol_options": {"max_concurrent_streams": 100}})))
    .unwrap();
    assert!(inline.route_config_names().is_empty());
    let h = hcm_of(&inline);
    let RouteSource::Inline(routes) = &h.route_source else { panic!() };
    assert_eq!(routes.name, "local");
    assert_eq!((h.stream_idle_timeout, h.use_remote_address, h.xff_num_trusted_hops), (None, true, 2));
    assert!(!h.generate_request_id);
    assert_eq!(h.common.idle_timeout, Some(Duration::from_secs(30)));
    assert_eq!(h.http2.max_concurrent_streams, 100);

    let err = error(convert(hcm(json!({"rds": {"route_config_name": "r1", "config_source": {"path": "/x"}},
        "http_filters": [router()]}))));
    assert_eq!(err.path(), "filter_chains[0].filters[0].typed_config.rds.config_source");
}

#[test]
fn router_must_be_last() {
    let router2 = router();
    let err = error(convert(hcm(json!({"route_config": inline_routes(), "http_filters": [router(), router2]}))));
    assert_eq!(err.path(), "filter_chains[0].filters[0].typed_config.http_filters[0]");
    let err = error(convert(hcm(json!({"route_config": inline_routes(), "http_filters": []}))));
    assert_eq!(err.path(), "filter_chains[0].filters[0].typed_config.http_filters");

    // A filter that changes what requests get is refused, never skipped; one that only
    // observes is skipped with a warning.
    let grpc_web = json!({"name": "envoy.filters.http.grpc_web",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.grpc_web.v3.GrpcWeb"}});
    let err = error(convert(hcm(json!({"route_config": inline_routes(), "http_filters": [grpc_web, router()]}))));
    assert_eq!(err.path(), "filter_chains[0].filters[0].typed_config.http_filters[0]");
    assert!(err.to_string().contains("grpc_web.v3.GrpcWeb"), "{err}");
    let stats = json!({"name": "envoy.filters.http.grpc_stats",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.grpc_stats.v3.FilterConfig"}});
    let mut warnings = Warnings::new();
    let l =
        convert_with(hcm(json!({"route_config": inline_routes(), "http_filters": [stats, router()]})), &mut warnings)
            .unwrap();
    let kinds: Vec<_> = hcm_of(&l).skipped_http_filters.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [SkippedKind::Harmless]);
    let paths: Vec<_> = warnings.items().iter().map(|w| w.path.as_str()).collect();
    assert_eq!(paths, ["filter_chains[0].filters[0].typed_config.http_filters[0]"]);
}

/// Envoy's contrib peak-EWMA filter only times requests for its policy (Outrider times every
/// response itself): a configuration written for an Envoy contrib build is accepted.
#[test]
fn envoys_peak_ewma_filter_is_skipped_as_harmless() {
    let timing = json!({"name": "envoy.filters.http.peak_ewma",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.peak_ewma.v3alpha.PeakEwmaConfig"}});
    let mut warnings = Warnings::new();
    let config = hcm(json!({"route_config": inline_routes(), "http_filters": [timing, router()]}));
    let l = convert_with(config, &mut warnings).unwrap();
    let kinds: Vec<_> = hcm_of(&l).skipped_http_filters.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [SkippedKind::Harmless]);
}

#[test]
fn filter_chain_match_fields() {
    let tcp = json!([{"name": "tcp", "typed_config": {"@type": TCP_PROXY, "stat_prefix": "t", "cluster": "c"}}]);
    let l = convert(json!({"name": "l", "address": {"socket_address": {"address": "::", "port_value": 15001}},
        "filter_chains": [{"name": "a", "filters": tcp, "filter_chain_match": {
            "destination_port": 443, "prefix_ranges": [{"address_prefix": "10.1.2.3", "prefix_len": 16}],
            "server_names": ["*.Example.com"], "transport_protocol": "tls", "application_protocols": ["h2", "http/1.1"],
            "source_prefix_ranges": [{"address_prefix": "2001:db8::1", "prefix_len": 32}], "source_ports": [1234]}}],
        "default_filter_chain": {"filters": tcp}}))
    .unwrap();
    let m = &l.filter_chains[0].filter_chain_match;
    assert_eq!(m.destination_port, Some(443));
    let range = m.prefix_ranges[0];
    assert_eq!(range, CidrRange::new("10.1.0.0".parse().unwrap(), 16).unwrap());
    assert!(range.contains("10.1.200.1".parse().unwrap()) && !range.contains("10.2.0.1".parse().unwrap()));
    assert!(range.contains("::ffff:10.1.0.9".parse::<IpAddr>().unwrap()));
    assert!(m.source_prefix_ranges[0].contains("2001:db8:0:1::5".parse().unwrap()));
    assert_eq!(
        (m.server_names.as_slice(), m.transport_protocol.as_deref()),
        (&["*.example.com".to_owned()][..], Some("tls"))
    );
    assert_eq!(m.application_protocols, ["h2", "http/1.1"]);
    assert_eq!(m.source_ports, [1234]);
    assert!(l.default_filter_chain.is_some());
    assert!(l.bind_to_port && !l.use_original_dst && !l.internal);
    let TerminalFilter::TcpProxy(t) = &l.filter_chains[0].terminal else { panic!() };
    assert_eq!((&t.cluster, t.idle_timeout), (&TcpCluster::Cluster("c".into()), Some(Duration::from_secs(3600))));

    let chain = |m: Value| json!({"filters": tcp, "filter_chain_match": m});
    let base = |chains: Value| json!({"name": "l", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 1}}, "filter_chains": chains});
    let err = error(convert(base(json!([chain(
        json!({"prefix_ranges": [{"address_prefix": "10.0.0.0", "prefix_len": 33}]})
    )]))));
    assert_eq!(err.path(), "filter_chains[0].filter_chain_match.prefix_ranges[0].prefix_len");
    let err =
        error(convert(base(json!([chain(json!({"destination_port": 80})), chain(json!({"destination_port": 80}))]))));
    assert_eq!(err.path(), "filter_chains[1].filter_chain_match");
}

#[test]
fn listener_filters_and_original_dst() {
    let mut warnings = Warnings::new();
    let tcp = json!([{"name": "tcp", "typed_config": {"@type": TCP_PROXY, "stat_prefix": "t",
        "weighted_clusters": {"clusters": [{"name": "a", "weight": 1}, {"name": "b", "weight": 3}]}, "idle_timeout": "0s"}}]);
    let l = convert_with(json!({"name": "l", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 15006}},
        "bind_to_port": false, "listener_filters_timeout": "0s",
        "listener_filters": [
            {"name": "envoy.filters.listener.original_dst", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"}},
            {"name": "envoy.filters.listener.tls_inspector", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"},
             "filter_disabled": {"or_match": {"rules": [{"destination_port_range": {"start": 80, "end": 81}}]}}},
        ],
        "filter_chains": [{"filters": tcp}]}), &mut warnings)
    .unwrap();
    assert!(!l.use_original_dst && l.restores_original_dst() && !l.bind_to_port);
    assert_eq!(l.listener_filters_timeout, None);
    assert!(l.has_listener_filter(ListenerFilterKind::TlsInspector));
    assert!(!l.has_listener_filter(ListenerFilterKind::HttpInspector));
    let disabled = l.listener_filters[1].disabled_when.as_ref().unwrap();
    assert!(disabled.matches(80) && !disabled.matches(81));
    let TerminalFilter::TcpProxy(t) = &l.filter_chains[0].terminal else { panic!() };
    assert_eq!(t.cluster, TcpCluster::Weighted(vec![("a".into(), 1), ("b".into(), 3)]));
    assert_eq!(t.idle_timeout, None);

    let l = convert(json!({"name": "l", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 1}},
        "use_original_dst": true, "filter_chains": [{"filters": tcp}]}))
    .unwrap();
    assert!(l.use_original_dst && l.restores_original_dst());
    // A listener filter Outrider does not run is refused with its path, never skipped.
    let err = convert(json!({"name": "l", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 1}},
        "listener_filters": [{"name": "set_dst_address", "typed_config": {"@type": "type.googleapis.com/xds.type.v3.TypedStruct",
             "type_url": "type.googleapis.com/istio.set_internal_dst_address.v1.Config"}}],
        "filter_chains": [{"filters": tcp}]}))
    .unwrap_err();
    assert_eq!(err.path(), "listener_filters[0]");
}

#[test]
fn route_config_and_secret_names() {
    let rds = |name: &str| {
        json!([{"name": "envoy.filters.network.http_connection_manager", "typed_config": {"@type": HCM,
            "stat_prefix": "s", "rds": {"route_config_name": name, "config_source": {"ads": {}}}, "http_filters": [router()]}}])
    };
    let tls = json!({"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
        "common_tls_context": {"tls_certificate_sds_secret_configs": [{"name": "default", "sds_config": {"ads": {}}}],
            "validation_context_sds_secret_config": {"name": "ROOTCA", "sds_config": {"ads": {}}}},
        "require_client_certificate": true}});
    let l = convert(json!({"name": "l", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 1}},
        "filter_chains": [
            {"filter_chain_match": {"destination_port": 1}, "filters": rds("a"), "transport_socket": tls},
            {"filter_chain_match": {"destination_port": 2}, "filters": rds("b"), "transport_socket": tls},
            {"filter_chain_match": {"destination_port": 3}, "filters": rds("a")},
        ],
        "default_filter_chain": {"filters": rds("c")}}))
    .unwrap();
    assert_eq!(l.route_config_names(), ["a", "b", "c"]);
    assert!(l.filter_chains[0].tls.is_some() && l.filter_chains[2].tls.is_none());
    // Whatever the TLS converter extracts, the listener reports each secret once.
    let mut expected: Vec<&str> = Vec::new();
    for name in l.filter_chains.iter().filter_map(|c| c.tls.as_ref()).flat_map(|t| t.common.secret_names()) {
        if !expected.contains(&name) {
            expected.push(name);
        }
    }
    assert_eq!(l.secret_names(), expected);
}

#[test]
fn terminal_filter_rules_and_internal_listeners() {
    let err = error(convert(with_filters(json!([{"name": "istio.stats", "typed_config": {
        "@type": "type.googleapis.com/xds.type.v3.TypedStruct", "type_url": "type.googleapis.com/stats.PluginConfig"}}]))));
    assert_eq!(err.path(), "filter_chains[0].filters");
    let tcp = json!({"name": "tcp", "typed_config": {"@type": TCP_PROXY, "stat_prefix": "t", "cluster": "c"}});
    let err = error(convert(with_filters(json!([tcp, tcp]))));
    assert_eq!(err.path(), "filter_chains[0].filters[0]");

    let l =
        convert(json!({"name": "internal", "internal_listener": {}, "filter_chains": [{"filters": [tcp]}]})).unwrap();
    assert!(l.internal && !l.bind_to_port);
    let err = error(convert(json!({"name": "x", "filter_chains": [{"filters": [tcp]}]})));
    assert_eq!(err.path(), "address");
    // An internal address names a listener to reach, not one to be.
    let err = error(convert(json!({"name": "x", "address": {"envoy_internal_address": {"server_listener_name": "y"}},
        "filter_chains": [{"filters": [tcp]}]})));
    assert_eq!(err.path(), "address.envoy_internal_address");
}

#[test]
fn connection_limit_filter_is_converted_before_the_terminal_filter() {
    const LIMIT: &str = "type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit";
    let tcp = json!({"name": "envoy.filters.network.tcp_proxy",
        "typed_config": {"@type": TCP_PROXY, "stat_prefix": "t", "cluster": "c"}});
    let limit = |max: u64| {
        json!({"name": "envoy.filters.network.connection_limit",
            "typed_config": {"@type": LIMIT, "stat_prefix": "cl", "max_connections": max, "delay": "0.1s"}})
    };
    let l = convert(with_filters(json!([limit(3), tcp.clone()]))).unwrap();
    let chain = &l.filter_chains[0];
    assert_eq!(chain.connection_limits.len(), 1);
    assert_eq!(chain.connection_limits[0].max_connections, 3);
    assert_eq!(chain.connection_limits[0].delay, Some(Duration::from_millis(100)));
    assert!(chain.skipped_filters.is_empty());
    let e = error(convert(with_filters(json!([limit(0), tcp]))));
    assert_eq!(e.path(), "filter_chains[0].filters[0].typed_config.max_connections");
}
