//! Istio's telemetry filters as istiod renders them: what converts, what is refused and
//! where.

use super::http_filter;
use crate::config::error::Warnings;
use crate::config::filters::HttpFilterConfig;
use crate::config::filters::istio_stats::{IstioMetric, StatsReporter, TagOverride, TagValue};
use crate::pb::google::protobuf::Any;

/// A filter config as istiod sends it: a `TypedStruct` around the JSON.
fn typed_struct(type_url: &str, value: serde_json::Value) -> Any {
    let json = serde_json::json!({
        "@type": "type.googleapis.com/udpa.type.v1.TypedStruct",
        "type_url": type_url,
        "value": value,
    });
    let (any, _) = crate::pb::json::from_value::<Any>(
        "google.protobuf.Any",
        serde_json::json!({
            "@type": "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
            "name": "x",
            "typed_config": json,
        }),
    )
    .unwrap();
    let config: crate::pb::envoy::config::core::v3::TypedExtensionConfig =
        prost::Message::decode(any.value.as_slice()).unwrap();
    config.typed_config.unwrap()
}

fn convert(any: &Any) -> (crate::config::error::Result<Option<HttpFilterConfig>>, Warnings) {
    let mut warnings = Warnings::new();
    (http_filter(any, &mut warnings), warnings)
}

const PEER_METADATA: &str = "type.googleapis.com/io.istio.http.peer_metadata.Config";
const STATS: &str = "type.googleapis.com/stats.PluginConfig";

#[test]
fn istiods_sidecar_metadata_filters_convert() {
    let outbound = typed_struct(
        PEER_METADATA,
        serde_json::json!({
            "upstream_discovery": [{"istio_headers": {}}, {"workload_discovery": {}}],
            "upstream_propagation": [{"istio_headers": {}}],
        }),
    );
    let (config, warnings) = convert(&outbound);
    let Some(HttpFilterConfig::PeerMetadata(mx)) = config.unwrap() else { panic!() };
    assert!(mx.upstream_discovery && mx.upstream_propagation);
    assert!(!mx.downstream_discovery && !mx.downstream_propagation);
    assert_eq!(warnings.items()[0].path, "upstream_discovery[1].workload_discovery");

    let inbound = typed_struct(
        PEER_METADATA,
        serde_json::json!({
            "downstream_discovery": [{"istio_headers": {}}, {"workload_discovery": {}}],
            "downstream_propagation": [{"istio_headers": {}}],
        }),
    );
    let Some(HttpFilterConfig::PeerMetadata(mx)) = convert(&inbound).0.unwrap() else { panic!() };
    assert!(mx.downstream_discovery && mx.downstream_propagation && !mx.upstream_propagation);
    assert!(mx.downstream_workload_discovery && !mx.upstream_discovery);
}

#[test]
fn propagation_outrider_cannot_do_is_refused_with_its_path() {
    for (value, path) in [
        (
            serde_json::json!({"upstream_propagation": [{"istio_headers": {"skip_external_clusters": true}}]}),
            "upstream_propagation[0].istio_headers.skip_external_clusters",
        ),
        (serde_json::json!({"downstream_propagation": [{"baggage": {}}]}), "downstream_propagation[0].baggage"),
        (
            serde_json::json!({"upstream_propagation": [{"istio_headers": {"other": 1}}]}),
            "upstream_propagation[0].istio_headers.other",
        ),
    ] {
        let error = convert(&typed_struct(PEER_METADATA, value)).0.unwrap_err();
        assert_eq!(error.path(), path, "{error}");
    }
}

#[test]
fn stats_typed_and_wrapped_forms_read_the_same() {
    let typed = Any {
        type_url: STATS.into(),
        value: prost::Message::encode_to_vec(&crate::pb::istio_stats::PluginConfig {
            disable_host_header_fallback: true,
            reporter: crate::pb::istio_stats::Reporter::ServerGateway as i32,
            ..Default::default()
        }),
    };
    let wrapped = typed_struct(
        STATS,
        serde_json::json!({
            "disable_host_header_fallback": true,
            "reporter": "SERVER_GATEWAY",
        }),
    );
    let read = |any: &Any| match convert(any).0.unwrap() {
        Some(HttpFilterConfig::IstioStats(stats)) => stats,
        other => panic!("{other:?}"),
    };
    let (a, b) = (read(&typed), read(&wrapped));
    assert_eq!(a, b);
    assert!(a.disable_host_header_fallback);
    assert_eq!(a.reporter, StatsReporter::ServerGateway);
    assert_eq!(a.tcp_reporting_duration, std::time::Duration::from_secs(5));
}

#[test]
fn telemetry_api_overrides_convert_and_unsupported_expressions_are_refused() {
    let any = typed_struct(
        STATS,
        serde_json::json!({
            "metrics": [
                {"name": "requests_total", "dimensions": {"user": "request.headers['X-User']"}, "tags_to_remove": ["source_principal"]},
                {"name": "request_bytes", "drop": true},
            ],
            "rotation_interval": "60s",
        }),
    );
    let (config, warnings) = convert(&any);
    let Some(HttpFilterConfig::IstioStats(stats)) = config.unwrap() else { panic!() };
    assert_eq!(stats.dropped, [IstioMetric::RequestBytes]);
    assert_eq!(
        stats.overrides,
        [
            (IstioMetric::RequestsTotal, TagOverride::Remove("source_principal")),
            (IstioMetric::RequestsTotal, TagOverride::Set("user".into(), TagValue::RequestHeader("x-user".into()))),
        ]
    );
    assert_eq!(warnings.items()[0].path, "rotation_interval");

    let cel = typed_struct(
        STATS,
        serde_json::json!({
            "metrics": [{"dimensions": {"peer": "filter_state['wasm.upstream_peer']"}}],
        }),
    );
    let error = convert(&cel).0.unwrap_err();
    assert_eq!(error.path(), "metrics[0].dimensions[\"peer\"]", "{error}");
    let custom = typed_struct(STATS, serde_json::json!({"definitions": [{"name": "a", "value": "1"}]}));
    assert_eq!(convert(&custom).0.unwrap_err().path(), "definitions");
}

#[test]
fn the_older_wasm_forms_on_the_null_vm_convert() {
    let wasm = |code: &str, configuration: serde_json::Value| {
        let json = serde_json::json!({
            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
            "config": {
                "root_id": "stats_outbound",
                "vm_config": {"runtime": "envoy.wasm.runtime.null", "code": {"local": {"inline_string": code}}},
                "configuration": configuration,
            },
        });
        crate::pb::json::from_value::<Any>("google.protobuf.Any", json).unwrap().0
    };
    let mx = wasm(
        "envoy.wasm.metadata_exchange",
        serde_json::json!({
            "@type": "type.googleapis.com/envoy.tcp.metadataexchange.config.MetadataExchange"
        }),
    );
    let Some(HttpFilterConfig::PeerMetadata(config)) = convert(&mx).0.unwrap() else { panic!() };
    assert!(config.by_direction);
    let inbound = config.for_direction(true);
    assert!(inbound.downstream_propagation && !inbound.upstream_propagation && inbound.upstream_discovery);

    let stats = wasm(
        "envoy.wasm.stats",
        serde_json::json!({
            "@type": "type.googleapis.com/google.protobuf.StringValue",
            "value": "{\"debug\": \"false\", \"stat_prefix\": \"istio\", \"disable_host_header_fallback\": true}",
        }),
    );
    let Some(HttpFilterConfig::IstioStats(config)) = convert(&stats).0.unwrap() else { panic!() };
    assert!(config.disable_host_header_fallback);

    let other = wasm("acme.filter", serde_json::Value::Null);
    assert!(convert(&other).0.unwrap().is_none(), "not Istio's: left to the caller");
}

#[test]
fn tcp_metadata_exchange_and_stats_convert_as_network_filters() {
    use crate::config::filters::NetworkFilterConfig;
    const MX: &str = "type.googleapis.com/envoy.tcp.metadataexchange.config.MetadataExchange";
    let any = typed_struct(MX, serde_json::json!({"protocol": "istio-peer-exchange", "enable_discovery": true}));
    let mut warnings = Warnings::new();
    let Some(NetworkFilterConfig::MetadataExchange(mx)) = super::network_filter(&any, &mut warnings).unwrap() else {
        panic!()
    };
    assert_eq!(mx.protocol, "istio-peer-exchange");
    assert!(mx.enable_discovery && warnings.items().is_empty(), "{:?}", warnings.items());
    let typed = Any {
        type_url: MX.into(),
        value: prost::Message::encode_to_vec(&crate::pb::istio_tcp_metadata_exchange::MetadataExchange {
            protocol: "istio-peer-exchange".into(),
            enable_discovery: true,
            ..Default::default()
        }),
    };
    let Some(NetworkFilterConfig::MetadataExchange(typed)) = super::network_filter(&typed, &mut warnings).unwrap()
    else {
        panic!()
    };
    assert_eq!(typed, mx);
    let unknown = typed_struct(MX, serde_json::json!({"protocol": "x", "mode": "strict"}));
    assert_eq!(super::network_filter(&unknown, &mut warnings).unwrap_err().path(), "mode");
    let stats = typed_struct(STATS, serde_json::json!({"tcp_reporting_duration": "10s"}));
    let Some(NetworkFilterConfig::IstioStats(stats)) = super::network_filter(&stats, &mut warnings).unwrap() else {
        panic!()
    };
    assert_eq!(stats.tcp_reporting_duration, std::time::Duration::from_secs(10));
}
