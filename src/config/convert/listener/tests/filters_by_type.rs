//! A filter is what its configuration's type says, never what its name says; an optional
//! one, or one from extension config discovery, or an optional per-route setting, is left
//! out only where that cannot change what a request gets (or Envoy would leave it out too).
//! Everything else is refused with its field path.

use serde_json::{Value, json};

use super::{convert, convert_with, error, hcm, hcm_of, inline_routes, router, with_filters};
use crate::config::error::Warnings;
use crate::config::filters::HttpFilterConfig;
use crate::config::listener::SkippedKind;

const RBAC: &str = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC";
const EXT_PROC: &str = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor";

fn deny_all() -> Value {
    json!({"@type": RBAC, "rules": {"action": "DENY", "policies": {"all": {
        "permissions": [{"any": true}], "principals": [{"any": true}]}}}})
}

fn http_filters(filters: Value) -> Value {
    hcm(json!({"route_config": inline_routes(), "http_filters": filters}))
}

#[test]
fn a_filter_named_like_istio_telemetry_with_an_rbac_type_is_run() {
    for name in ["istio.stats", "istio_authn", "istio.metadata_exchange"] {
        let l = convert(http_filters(json!([{"name": name, "typed_config": deny_all()}, router()]))).unwrap();
        let h = hcm_of(&l);
        assert!(h.skipped_http_filters.is_empty(), "{name}: {:?}", h.skipped_http_filters);
        assert_eq!(h.http_filters.len(), 1, "{name}");
        assert_eq!(h.http_filters[0].name, name);
        assert!(matches!(h.http_filters[0].config, HttpFilterConfig::Rbac(_)), "{name}: run as RBAC");
    }
}

#[test]
fn a_filter_named_like_istio_telemetry_of_a_type_not_run_is_refused() {
    for name in ["istio.stats", "istio_authn", "istio.alpn", "connect_baggage"] {
        let filter = json!({"name": name, "typed_config": {"@type": EXT_PROC}});
        let err = error(convert(http_filters(json!([filter, router()]))));
        assert_eq!(err.path(), "filter_chains[0].filters[0].typed_config.http_filters[0]", "{name}");
        assert!(err.to_string().contains("ext_proc.v3.ExternalProcessor"), "{name}: {err}");
        // No configuration at all: the name alone does not make it telemetry.
        let err = error(convert(http_filters(json!([{"name": name}, router()]))));
        assert_eq!(err.path(), "filter_chains[0].filters[0].typed_config.http_filters[0]", "{name}");
    }
    // A network filter likewise.
    let network = json!([
        {"name": "istio_authn", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.ratelimit.v3.RateLimit",
            "stat_prefix": "s", "domain": "d"}},
        {"name": "envoy.filters.network.tcp_proxy", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
            "stat_prefix": "s", "cluster": "c"}},
    ]);
    let err = error(convert(with_filters(network)));
    assert!(err.path().starts_with("filter_chains[0].filters[0]"), "{}", err.path());
    assert!(err.to_string().contains("network.ratelimit.v3.RateLimit"), "{err}");
}

fn discovered(name: &str, optional: bool, type_urls: &[&str]) -> Value {
    json!({"name": name, "is_optional": optional, "config_discovery": {
        "config_source": {"ads": {}},
        "type_urls": type_urls.iter().map(|t| format!("type.googleapis.com/{t}")).collect::<Vec<_>>()}})
}

#[test]
fn an_optional_discovered_filter_is_skipped_only_when_every_type_observes() {
    let at = "filter_chains[0].filters[0].typed_config.http_filters[0].config_discovery";
    // Whatever its name: an RBAC filter Outrider cannot fetch would deny nothing.
    let rbac = discovered("istio.stats", true, &["stats.PluginConfig", "envoy.extensions.filters.http.rbac.v3.RBAC"]);
    let err = error(convert(http_filters(json!([rbac, router()]))));
    assert_eq!(err.path(), format!("{at}.type_urls[1]"));
    assert!(err.to_string().contains("rbac.v3.RBAC"), "{err}");

    let wasm = discovered("acme.auth", true, &["envoy.extensions.filters.http.wasm.v3.Wasm"]);
    assert_eq!(error(convert(http_filters(json!([wasm, router()])))).path(), format!("{at}.type_urls[0]"));

    let untyped = discovered("acme", true, &[]);
    assert_eq!(error(convert(http_filters(json!([untyped, router()])))).path(), format!("{at}.type_urls"));

    let required = discovered("istio.stats", false, &["stats.PluginConfig"]);
    assert_eq!(error(convert(http_filters(json!([required, router()])))).path(), at);

    let telemetry = discovered(
        "istio.stats",
        true,
        &["stats.PluginConfig", "envoy.extensions.filters.http.grpc_stats.v3.FilterConfig"],
    );
    let mut warnings = Warnings::new();
    let l = convert_with(http_filters(json!([telemetry, router()])), &mut warnings).unwrap();
    let kinds: Vec<_> = hcm_of(&l).skipped_http_filters.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [SkippedKind::Harmless]);
    assert_eq!(warnings.items()[0].path, at);
}

fn routes_with(per_filter: Value) -> Value {
    json!({"name": "local", "virtual_hosts": [{"name": "vh", "domains": ["*"],
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "c"}, "typed_per_filter_config": per_filter}]}]})
}

fn optional(config: Value) -> Value {
    json!({"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "is_optional": true, "config": config})
}

#[test]
fn an_optional_per_route_setting_is_ignored_only_when_envoy_would_ignore_it() {
    let convert_routes = |per_filter: Value, warnings: &mut Warnings| {
        convert_with(
            hcm(json!({"route_config": routes_with(per_filter),
        "http_filters": [router()]})),
            warnings,
        )
    };
    // Envoy has ext_proc and would apply this: refused, optional or not.
    let ext_proc = json!({"@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute",
        "disabled": true});
    let err = convert_routes(json!({"envoy.filters.http.ext_proc": optional(ext_proc.clone())}), &mut Warnings::new())
        .unwrap_err();
    assert!(err.path().ends_with(r#"typed_per_filter_config["envoy.filters.http.ext_proc"].config"#), "{}", err.path());
    assert!(err.to_string().contains("Envoy would apply"), "{err}");
    let err = convert_routes(json!({"envoy.filters.http.ext_proc": ext_proc}), &mut Warnings::new()).unwrap_err();
    assert!(err.path().ends_with(r#"typed_per_filter_config["envoy.filters.http.ext_proc"]"#), "{}", err.path());

    // A type Envoy has no factory for either: ignored, as Envoy ignores it, with a warning.
    let unknown = json!({"@type": "type.googleapis.com/google.protobuf.Struct", "value": {}});
    let mut warnings = Warnings::new();
    convert_routes(json!({"acme.filter": optional(unknown.clone())}), &mut warnings).unwrap();
    assert!(warnings.items().iter().any(|w| w.path.ends_with(r#"typed_per_filter_config["acme.filter"]"#)));
    // Not optional: refused.
    assert!(convert_routes(json!({"acme.filter": unknown}), &mut Warnings::new()).is_err());
}
