//! Whole-cluster conversion: defaults, discovery, refused and ignored fields, protocols,
//! and every cluster of the Istio test data.

use std::time::Duration;

use serde_json::{Value, json};

use super::cluster;
use crate::config::cluster::{
    CircuitBreakers, Cluster, DiscoveryType, DnsLookupFamily, EdsConfig, UpstreamProtocol, UpstreamTransport,
};
use crate::config::error::{ConfigError, Warnings};
use crate::pb::json;

fn convert(mut value: Value) -> Result<(Cluster, Warnings), ConfigError> {
    if let Some(map) = value.as_object_mut() {
        map.remove("@type");
    }
    let (proto, dropped) = json::from_value("envoy.config.cluster.v3.Cluster", value).unwrap();
    assert!(dropped.is_empty(), "{dropped:?}");
    let mut warnings = Warnings::new();
    cluster(proto, &mut warnings).map(|c| (c, warnings))
}

fn eds(extra: Value) -> Value {
    let mut value =
        json!({"name": "outbound|80||svc", "type": "EDS", "eds_cluster_config": {"eds_config": {"ads": {}}}});
    if let (Some(map), Value::Object(mut extra)) = (value.as_object_mut(), extra) {
        map.append(&mut extra);
    }
    value
}

fn error_path(value: Value) -> String {
    convert(value).unwrap_err().path().to_owned()
}

#[test]
fn defaults_are_applied() {
    let (c, warnings) = convert(eds(json!({}))).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.connect_timeout, Duration::from_secs(5));
    let expected =
        EdsConfig { service_name: "outbound|80||svc".into(), initial_fetch_timeout: Some(Duration::from_secs(15)) };
    assert_eq!(c.discovery, DiscoveryType::Eds(expected));
    assert_eq!(c.eds_service_name(), Some("outbound|80||svc"));
    assert_eq!(c.circuit_breakers, CircuitBreakers::default());
    assert_eq!(c.transport_socket, UpstreamTransport::Plain);
    assert_eq!(c.http.protocol, UpstreamProtocol::Http1);
    assert_eq!(c.http.idle_timeout, Some(Duration::from_secs(3600)));
    assert_eq!((c.outlier_detection, c.dns, c.original_dst, c.upstream_bind), (None, None, None, None));
    assert!(c.health_checks.is_empty() && c.load_assignment.is_none());
}

#[test]
fn eds_service_name_and_fetch_timeout() {
    let value = json!({"name": "c", "type": "EDS", "eds_cluster_config": {"service_name": "cla",
        "eds_config": {"ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3"}}});
    let (c, _) = convert(value).unwrap();
    assert_eq!(c.discovery, DiscoveryType::Eds(EdsConfig { service_name: "cla".into(), initial_fetch_timeout: None }));
    let value = json!({"name": "c", "type": "EDS", "eds_cluster_config": {"eds_config": {"path": "/eds.yaml"}}});
    assert_eq!(error_path(value), "eds_cluster_config.eds_config.path");
    let rest = json!({"api_config_source": {"api_type": "REST"}});
    let value = json!({"name": "c", "type": "EDS", "eds_cluster_config": {"eds_config": rest}});
    assert_eq!(error_path(value), "eds_cluster_config.eds_config.api_config_source");
    assert_eq!(error_path(json!({"name": "c", "type": "EDS"})), "eds_cluster_config");
}

#[test]
fn unsupported_fields_are_refused_with_their_path() {
    assert_eq!(error_path(eds(json!({"upstream_config": {"name": "x"}}))), "upstream_config");
    assert_eq!(error_path(eds(json!({"filters": [{"name": "envoy.filters.network.upstream.foo"}]}))), "filters[0]");
    assert_eq!(error_path(eds(json!({"connect_timeout": "0s"}))), "connect_timeout");
    assert_eq!(error_path(json!({"name": "c", "cluster_type": {"name": "envoy.clusters.aggregate"}})), "cluster_type");
    assert_eq!(error_path(eds(json!({"health_checks": [{"timeout": "1s"}]}))), "health_checks[0].interval");
    assert_eq!(error_path(json!({"name": ""})), "name");
    let value = json!({"name": "c", "load_assignment": {"cluster_name": "c", "endpoints": [{"lb_endpoints": [
        {"endpoint": {"address": {"socket_address": {"address": "example.com", "port_value": 80}}}}]}]}});
    assert_eq!(
        error_path(value),
        "load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address"
    );
}

#[test]
fn harmless_fields_are_recorded() {
    let (_, warnings) = convert(eds(json!({"alt_stat_name": "x", "metadata": {"filter_metadata": {"istio": {}}},
        "upstream_connection_options": {"tcp_keepalive": {"keepalive_time": 300}}, "dns_lookup_family": "V4_ONLY",
        "filters": [{"name": "istio.metadata_exchange"}]})))
    .unwrap();
    let paths: Vec<&str> = warnings.items().iter().map(|i| i.path.as_str()).collect();
    for path in ["alt_stat_name", "metadata", "upstream_connection_options", "dns_lookup_family", "filters[0]"] {
        assert!(paths.contains(&path), "{path} not in {paths:?}");
    }
}

#[test]
fn the_buffer_limit_is_enforced_not_ignored() {
    let (c, warnings) = convert(eds(json!({}))).unwrap();
    assert_eq!(c.per_connection_buffer_limit_bytes, 1024 * 1024, "Envoy's default");
    assert!(warnings.is_empty());
    let (c, warnings) = convert(eds(json!({"per_connection_buffer_limit_bytes": 32768}))).unwrap();
    assert_eq!(c.per_connection_buffer_limit_bytes, 32768);
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn dns_clusters() {
    let endpoint =
        |host: &str| json!({"endpoint": {"address": {"socket_address": {"address": host, "port_value": 443}}}});
    let value = json!({"name": "ext", "type": "STRICT_DNS", "dns_refresh_rate": "60s", "respect_dns_ttl": true,
        "dns_lookup_family": "V4_PREFERRED", "load_assignment": {"cluster_name": "ext",
        "endpoints": [{"lb_endpoints": [endpoint("a.example.com"), endpoint("b.example.com")]}]}});
    let (c, _) = convert(value.clone()).unwrap();
    let dns = c.dns.unwrap();
    assert_eq!(dns.lookup_family, DnsLookupFamily::V4Preferred);
    assert_eq!(c.load_assignment.unwrap().endpoint_count(), 2);
    let mut logical = value;
    logical["type"] = json!("LOGICAL_DNS");
    assert_eq!(error_path(logical), "load_assignment");
    let resolvers = json!({"name": "ext", "type": "STRICT_DNS", "typed_dns_resolver_config": {"name": "cares"}});
    assert_eq!(error_path(resolvers), "typed_dns_resolver_config");
}

#[test]
fn istio_inbound_original_dst_cluster() {
    let value = json!({"name": "inbound|8080||", "type": "ORIGINAL_DST", "connect_timeout": "10s",
        "lb_policy": "CLUSTER_PROVIDED", "cleanup_interval": "60s",
        "upstream_bind_config": {"source_address": {"address": "127.0.0.6", "port_value": 0}},
        "circuit_breakers": {"thresholds": [{"max_connections": 4294967295u64, "max_pending_requests": 4294967295u64,
            "max_requests": 4294967295u64, "max_retries": 4294967295u64, "track_remaining": true}]},
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "common_http_protocol_options": {"idle_timeout": "0s"},
            "use_downstream_protocol_config": {"http_protocol_options": {}, "http2_protocol_options": {}}}}});
    let (c, _) = convert(value).unwrap();
    assert_eq!(c.discovery, DiscoveryType::OriginalDst);
    assert_eq!(c.load_balancing, None);
    let original_dst = c.original_dst.unwrap();
    assert_eq!(original_dst.http_header_name, "x-envoy-original-dst-host");
    assert_eq!(original_dst.cleanup_interval, Duration::from_secs(60));
    assert_eq!(c.upstream_bind.map(|b| b.source), Some("127.0.0.6:0".parse().unwrap()));
    assert_eq!(c.circuit_breakers.default.max_requests, u32::MAX);
    assert_eq!(c.http.protocol, UpstreamProtocol::UseDownstream);
    assert_eq!(c.http.idle_timeout, None);
}

#[test]
fn original_dst_cleanup_interval_defaults_and_must_be_positive() {
    let (c, _) = convert(json!({"name": "p", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED"})).unwrap();
    assert_eq!(c.original_dst.unwrap().cleanup_interval, Duration::from_secs(5));
    let zero = json!({"name": "p", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED", "cleanup_interval": "0s"});
    assert_eq!(error_path(zero), "cleanup_interval");
    let header = json!({"name": "p", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
        "original_dst_lb_config": {"metadata_key": {"key": "k", "path": []}}});
    assert_eq!(error_path(header), "original_dst_lb_config.metadata_key.path");
    // Istio's connect_originate: a waypoint named by the endpoint's metadata, else the
    // tunnel's destination on 15008.
    let hbone = json!({"name": "connect_originate", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
        "original_dst_lb_config": {"upstream_port_override": 15008,
            "metadata_key": {"key": "envoy.filters.listener.original_dst", "path": [{"key": "waypoint"}]}}});
    let original_dst = convert(hbone).unwrap().0.original_dst.unwrap();
    assert_eq!(original_dst.upstream_port_override, Some(15008));
    let key = original_dst.metadata_key.unwrap();
    assert_eq!((key.key.as_str(), key.path), ("envoy.filters.listener.original_dst", vec!["waypoint".to_owned()]));
    let (_, warnings) = convert(json!({"name": "s", "type": "STATIC", "cleanup_interval": "1s"})).unwrap();
    assert!(warnings.items().iter().any(|w| w.path == "cleanup_interval"));
}

#[test]
fn istio_outbound_cluster_with_tls_mode_matches() {
    let tls = json!({"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "sni": "outbound_.80_._.svc"}});
    let value = eds(json!({"lb_policy": "LEAST_REQUEST", "transport_socket_matches": [
        {"name": "tlsMode-istio", "match": {"tlsMode": "istio"}, "transport_socket": tls},
        {"name": "tlsMode-disabled", "match": {}, "transport_socket": {"name": "envoy.transport_sockets.raw_buffer"}}],
        "outlier_detection": {"consecutive_5xx": 7}}));
    let (c, _) = convert(value).unwrap();
    assert_eq!(c.transport_socket_matches.len(), 2);
    assert_eq!(c.transport_socket_matches[0].criteria.get("tlsMode").map(String::as_str), Some("istio"));
    assert!(matches!(c.transport_socket_matches[0].transport, UpstreamTransport::Tls(_)));
    assert!(c.transport_socket_matches[1].criteria.is_empty());
    assert_eq!(c.outlier_detection.unwrap().consecutive_5xx, 7);
    let value = eds(json!({"transport_socket_matches": [{"name": "m", "match": {"n": 1}}]}));
    assert_eq!(error_path(value), "transport_socket_matches[0].match.n");
}

#[test]
fn secret_names_cover_every_transport_without_duplicates() {
    let (mut c, _) = convert(eds(json!({}))).unwrap();
    let tls = |cert: &str| {
        let value = json!({
            "common_tls_context": {
                "tls_certificate_sds_secret_configs": [{"name": cert, "sds_config": {"ads": {}}}],
                "validation_context_sds_secret_config": {"name": "ROOTCA", "sds_config": {"ads": {}}},
            },
        });
        let (proto, _) =
            crate::pb::json::from_value("envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext", value).unwrap();
        let context = crate::config::convert::tls::upstream_tls_context(proto, &mut Warnings::new()).unwrap();
        UpstreamTransport::Tls(Box::new(context))
    };
    c.transport_socket = tls("default");
    c.transport_socket_matches = vec![crate::config::cluster::TransportSocketMatch {
        name: "m".into(),
        criteria: Default::default(),
        transport: tls("other"),
    }];
    assert_eq!(c.secret_names(), vec!["default", "ROOTCA", "other"]);
}

#[test]
fn http_protocol_sources() {
    let h2 = json!({"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http2_protocol_options": {"max_concurrent_streams": 50}}}});
    let (c, _) =
        convert(eds(json!({"typed_extension_protocol_options": h2.clone(), "max_requests_per_connection": 1})))
            .unwrap();
    assert_eq!(c.http.protocol, UpstreamProtocol::Http2);
    assert_eq!(c.http.http2.max_concurrent_streams, 50);
    assert_eq!(c.http.max_requests_per_connection, Some(1));
    let (c, _) = convert(eds(json!({"http2_protocol_options": {}}))).unwrap();
    assert_eq!(c.http.protocol, UpstreamProtocol::Http2);
    let both = eds(json!({"typed_extension_protocol_options": h2, "http2_protocol_options": {}}));
    assert_eq!(error_path(both), "http2_protocol_options");
    let auto = json!({"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions", "auto_config": {}}});
    let path = error_path(eds(json!({"typed_extension_protocol_options": auto})));
    assert_eq!(
        path,
        "typed_extension_protocol_options[envoy.extensions.upstreams.http.v3.HttpProtocolOptions].auto_config"
    );
}

/// Every cluster in the Istio captures must convert: a sidecar that NACKs its own
/// bootstrap or istiod's clusters is useless.
#[test]
fn istio_testdata_clusters_convert() {
    let read = crate::config::testdata::istio_dump;
    let mut clusters: Vec<Value> = Vec::new();
    let bootstrap = read("sidecar-bootstrap.default_golden.json");
    clusters.extend(bootstrap["static_resources"]["clusters"].as_array().unwrap().iter().cloned());
    let dump = read("waypoint-full.config_dump.json");
    for config in dump["configs"].as_array().unwrap() {
        for group in ["static_clusters", "dynamic_active_clusters", "dynamic_warming_clusters"] {
            if let Some(list) = config[group].as_array() {
                clusters.extend(list.iter().map(|entry| entry["cluster"].clone()));
            }
        }
    }
    assert_eq!(clusters.len(), 7);
    for value in clusters {
        let name = value["name"].clone();
        let (c, _) = convert(value).unwrap_or_else(|e| panic!("{name}: {e}"));
        if c.name == "xds-grpc" {
            assert_eq!(c.http.protocol, UpstreamProtocol::Http2);
            assert_eq!(c.http.max_requests_per_connection, Some(1));
            assert_eq!(c.circuit_breakers.high.max_connections, 100_000);
        }
        if c.name.starts_with("inbound-vip") {
            // Istio's waypoint VIP clusters reach connect_originate with the destination
            // passed through.
            let UpstreamTransport::Internal(internal) = &c.transport_socket else { panic!("{name}: not internal") };
            assert_eq!(internal.host_metadata, ["envoy.filters.listener.original_dst"]);
            assert_eq!(internal.inner, UpstreamTransport::Plain);
            assert_eq!(c.eds_service_name(), Some(c.name.as_str()));
        }
    }
}

/// Istio's InboundPassthroughCluster on a dual-stack pod: 127.0.0.6 for IPv4 upstreams,
/// ::6 for IPv6 ones.
#[test]
fn dual_stack_source_addresses() {
    let bind = |extra: serde_json::Value| {
        json!({"name": "InboundPassthroughCluster", "type": "ORIGINAL_DST", "connect_timeout": "10s",
            "lb_policy": "CLUSTER_PROVIDED",
            "upstream_bind_config": {"source_address": {"address": "127.0.0.6", "port_value": 0},
                "extra_source_addresses": extra}})
    };
    let (c, _) = convert(bind(json!([{"address": {"address": "::6", "port_value": 0}}]))).unwrap();
    let addresses = c.upstream_bind.unwrap();
    assert_eq!(addresses.for_peer("10.0.0.1:80".parse().unwrap()), "127.0.0.6:0".parse().unwrap());
    assert_eq!(addresses.for_peer("[fd00::1]:80".parse().unwrap()), "[::6]:0".parse().unwrap());
    assert_eq!(
        error_path(bind(json!([{"address": {"address": "127.0.0.7", "port_value": 0}}]))),
        "upstream_bind_config.extra_source_addresses[0]"
    );
}

#[test]
fn istios_service_host_is_read_from_the_cluster_metadata() {
    let metadata = json!({"filter_metadata": {"istio": {"services": [
        {"host": "app.default.svc.cluster.local", "name": "app", "namespace": "default"}]}}});
    let (cluster, _) = convert(eds(json!({"metadata": metadata}))).unwrap();
    assert_eq!(cluster.istio_service_host.as_deref(), Some("app.default.svc.cluster.local"));
    let (cluster, _) = convert(eds(json!({"metadata": {"filter_metadata": {"other": {}}}}))).unwrap();
    assert_eq!(cluster.istio_service_host, None);
}
