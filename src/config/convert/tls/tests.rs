use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::config::secret::{SanType, StringPattern};
use crate::config::tls::SdsSource;
use crate::pb::json::from_value;

const PKG: &str = "envoy.extensions.transport_sockets.tls.v3";

fn upstream(value: Value) -> (Result<UpstreamTlsContext>, Warnings) {
    let (proto, _) = from_value::<proto::UpstreamTlsContext>(&format!("{PKG}.UpstreamTlsContext"), value).unwrap();
    let mut warnings = Warnings::new();
    (upstream_tls_context(proto, &mut warnings), warnings)
}

fn downstream(value: Value) -> (Result<DownstreamTlsContext>, Warnings) {
    let (proto, _) = from_value::<proto::DownstreamTlsContext>(&format!("{PKG}.DownstreamTlsContext"), value).unwrap();
    let mut warnings = Warnings::new();
    (downstream_tls_context(proto, &mut warnings), warnings)
}

fn upstream_err(value: Value) -> (String, String) {
    let e = upstream(value).0.unwrap_err();
    (e.path().to_owned(), e.reason().to_owned())
}

fn istio_sds(name: &str) -> Value {
    json!({
        "name": name,
        "sds_config": {
            "api_config_source": {
                "api_type": "GRPC",
                "grpc_services": [{ "envoy_grpc": { "cluster_name": "sds-grpc" } }],
                "set_node_on_first_message_only": true,
                "transport_api_version": "V3"
            },
            "initial_fetch_timeout": "0s",
            "resource_api_version": "V3"
        }
    })
}

/// What istiod sends for an outbound cluster in ISTIO_MUTUAL mode.
fn istio_upstream() -> Value {
    json!({
        "common_tls_context": {
            "tls_params": { "tls_minimum_protocol_version": "TLSv1_2", "tls_maximum_protocol_version": "TLSv1_3" },
            "alpn_protocols": ["istio-peer-exchange", "istio"],
            "tls_certificate_sds_secret_configs": [istio_sds("default")],
            "combined_validation_context": {
                "default_validation_context": {
                    "match_subject_alt_names": [{ "exact": "spiffe://cluster.local/ns/default/sa/reviews" }]
                },
                "validation_context_sds_secret_config": istio_sds("ROOTCA")
            }
        },
        "sni": "outbound_.9080_._.reviews.default.svc.cluster.local"
    })
}

use crate::config::testdata::{istio_dump, typed_objects};

#[test]
fn every_tls_context_of_the_istio_dumps_converts() {
    let mut names = Vec::new();
    let mut downstream_count = 0;
    for file in ["sidecar-listeners.config_dump.json", "waypoint-full.config_dump.json"] {
        let dump = istio_dump(file);
        let mut found = Vec::new();
        typed_objects(&dump, ".DownstreamTlsContext", &mut found);
        for value in found {
            let ctx = downstream(value).0.unwrap();
            assert!(ctx.require_client_certificate);
            assert_eq!(ctx.common.tls_params.max, TlsVersion::Tls13);
            for sds in ctx.common.sds_secret_configs() {
                assert_eq!(sds.source, SdsSource::Grpc { cluster_name: "sds-grpc".into(), delta: false });
                assert_eq!(sds.initial_fetch_timeout, None, "Istio's 0s waits forever");
            }
            names.extend(ctx.common.secret_names().into_iter().map(str::to_owned));
            downstream_count += 1;
        }
        let mut found = Vec::new();
        typed_objects(&dump, ".UpstreamTlsContext", &mut found);
        for value in found {
            names.extend(upstream(value).0.unwrap().common.secret_names().into_iter().map(str::to_owned));
        }
    }
    assert_eq!(downstream_count, 4);
    assert!(names.iter().any(|n| n == "default") && names.iter().any(|n| n == "ROOTCA"), "{names:?}");
}

#[test]
fn istio_inbound_context_keeps_its_san_prefix_for_every_san_type() {
    let mut found = Vec::new();
    typed_objects(&istio_dump("sidecar-listeners.config_dump.json"), ".DownstreamTlsContext", &mut found);
    let (ctx, warnings) = downstream(found.swap_remove(0));
    let ctx = ctx.unwrap();
    let Some(Validation::Combined { default, sds }) = &ctx.common.validation else { panic!("{ctx:?}") };
    assert_eq!(sds.name, "ROOTCA");
    assert_eq!(default.match_subject_alt_names.len(), 4);
    assert!(default.match_subject_alt_names.iter().any(|m| m.san_type == SanType::Uri));
    assert!(default.match_subject_alt_names.iter().all(|m| m.matcher.matches("spiffe://cluster.local/ns/a/sa/b")));
    assert!(warnings.items().iter().any(|w| w.path == "common_tls_context.tls_params.cipher_suites"));
}

#[test]
fn istio_outbound_context_converts() {
    let (ctx, _) = upstream(istio_upstream());
    let ctx = ctx.unwrap();
    assert_eq!(ctx.sni, "outbound_.9080_._.reviews.default.svc.cluster.local");
    assert_eq!(ctx.common.secret_names(), ["default", "ROOTCA"]);
    assert_eq!(ctx.common.alpn_protocols, ["istio-peer-exchange", "istio"]);
    assert_eq!(ctx.common.tls_params, TlsParams { min: TlsVersion::Tls12, max: TlsVersion::Tls13 });
    let Some(Validation::Combined { default, .. }) = &ctx.common.validation else { panic!() };
    let m = &default.match_subject_alt_names[0].matcher;
    assert_eq!(m.pattern, StringPattern::Exact("spiffe://cluster.local/ns/default/sa/reviews".into()));
}

#[test]
fn envoy_defaults_apply() {
    let sds = json!({ "tls_certificate_sds_secret_configs": [{ "name": "a", "sds_config": { "ads": {} } }] });
    let ctx = upstream(json!({ "common_tls_context": sds })).0.unwrap();
    assert_eq!(ctx.common.tls_params, TlsParams::CLIENT_DEFAULT);
    assert_eq!(UpstreamTlsContext::default().common.tls_params, TlsParams::CLIENT_DEFAULT);
    let Certificates::Sds(sds) = &ctx.common.certificates else { panic!() };
    assert_eq!(sds[0].source, SdsSource::Ads);
    assert_eq!(sds[0].initial_fetch_timeout, Some(Duration::from_secs(15)));

    let two = json!({ "tls_certificate_sds_secret_configs": [{ "name": "rsa" }, { "name": "ecdsa" }] });
    let d = downstream(json!({ "common_tls_context": two })).0.unwrap();
    assert_eq!(d.common.tls_params, TlsParams::SERVER_DEFAULT);
    assert!(!d.require_client_certificate && !d.require_sni);
    let Certificates::Sds(sds) = &d.common.certificates else { panic!() };
    assert_eq!(sds[1].source, SdsSource::Bootstrap, "no sds_config: a bootstrap static secret");
    assert_eq!(d.common.secret_names(), ["rsa", "ecdsa"]);
}

#[test]
fn old_minimum_is_raised_with_a_warning() {
    let (ctx, warnings) = upstream(json!({ "common_tls_context": { "tls_params": {
        "tls_minimum_protocol_version": "TLSv1_0", "tls_maximum_protocol_version": "TLSv1_3" } } }));
    assert_eq!(ctx.unwrap().common.tls_params.min, TlsVersion::Tls12);
    assert_eq!(warnings.items()[0].path, "common_tls_context.tls_params.tls_minimum_protocol_version");
}

#[test]
fn unsupported_values_are_rejected_with_their_path() {
    let cases = [
        (json!({ "allow_renegotiation": true }), "allow_renegotiation"),
        (json!({ "auto_host_sni": true }), "auto_host_sni"),
        (json!({ "common_tls_context": { "alpn_protocols": ["h2", ""] } }), "common_tls_context.alpn_protocols[1]"),
        (
            json!({ "common_tls_context": { "tls_certificate_sds_secret_configs": [{ "name": "a" }, { "name": "b" }] } }),
            "common_tls_context.tls_certificate_sds_secret_configs",
        ),
        (
            json!({ "common_tls_context": { "tls_params": { "tls_maximum_protocol_version": "TLSv1_1" } } }),
            "common_tls_context.tls_params.tls_maximum_protocol_version",
        ),
        (
            json!({ "common_tls_context": { "tls_params": { "tls_minimum_protocol_version": "TLSv1_3" } } }),
            "common_tls_context.tls_params",
        ),
        (
            json!({ "common_tls_context": { "tls_params": { "compliance_policies": ["FIPS_202205"] } } }),
            "common_tls_context.tls_params.compliance_policies",
        ),
        (
            json!({ "common_tls_context": {
                "tls_certificates": [{ "certificate_chain": { "filename": "c" }, "private_key": { "filename": "k" } }],
                "tls_certificate_sds_secret_configs": [{ "name": "default" }] } }),
            "common_tls_context.tls_certificate_sds_secret_configs",
        ),
        (
            json!({ "common_tls_context": { "tls_certificates": [{ "certificate_chain": { "filename": "c" } }] } }),
            "common_tls_context.tls_certificates[0].private_key",
        ),
        (
            json!({ "common_tls_context": { "validation_context": { "crl": { "filename": "crl.pem" } } } }),
            "common_tls_context.validation_context.crl",
        ),
        (
            json!({ "common_tls_context": { "validation_context": { "verify_certificate_spki": ["x"] } } }),
            "common_tls_context.validation_context.verify_certificate_spki",
        ),
        (
            json!({ "common_tls_context": { "validation_context": {
                "match_typed_subject_alt_names": [{ "san_type": "DNS", "matcher": { "exact": "a" } }] } } }),
            "common_tls_context.validation_context.trusted_ca",
        ),
        (
            json!({ "common_tls_context": { "validation_context": { "trusted_ca": { "filename": "ca" },
                "match_typed_subject_alt_names": [{ "san_type": "URI", "matcher": { "safe_regex": { "regex": "(" } } }] } } }),
            "common_tls_context.validation_context.match_typed_subject_alt_names[0].matcher.safe_regex.regex",
        ),
        (
            json!({ "common_tls_context": { "validation_context": { "trusted_ca": { "filename": "ca" },
                "match_typed_subject_alt_names": [{ "san_type": "OTHER_NAME", "matcher": { "exact": "a" } }] } } }),
            "common_tls_context.validation_context.match_typed_subject_alt_names[0].san_type",
        ),
        (
            json!({ "common_tls_context": { "combined_validation_context": { "default_validation_context": {} } } }),
            "common_tls_context.combined_validation_context.validation_context_sds_secret_config",
        ),
    ];
    for (value, path) in cases {
        assert_eq!(upstream_err(value.clone()).0, path, "{value}");
    }
}

#[test]
fn unsupported_sds_sources_are_rejected_with_their_path() {
    let at = "common_tls_context.tls_certificate_sds_secret_configs[0].sds_config";
    let grpc = |api: Value| {
        json!({ "common_tls_context": { "tls_certificate_sds_secret_configs": [
            { "name": "default", "sds_config": { "api_config_source": api } }
        ] } })
    };
    let svc = json!({ "envoy_grpc": { "cluster_name": "sds-grpc" } });
    let cases = [
        (grpc(json!({ "api_type": "REST", "cluster_names": ["x"] })), "api_config_source.api_type"),
        (grpc(json!({ "api_type": "GRPC", "grpc_services": [svc, svc] })), "api_config_source.grpc_services"),
        (grpc(json!({ "api_type": "GRPC" })), "api_config_source.grpc_services"),
        (
            grpc(
                json!({ "api_type": "GRPC", "grpc_services": [{ "google_grpc": { "target_uri": "x", "stat_prefix": "s" } }] }),
            ),
            "api_config_source.grpc_services[0].google_grpc",
        ),
        (
            grpc(json!({ "api_type": "GRPC", "grpc_services": [{ "envoy_grpc": { "cluster_name": "" } }] })),
            "api_config_source.grpc_services[0].envoy_grpc.cluster_name",
        ),
        (
            json!({ "common_tls_context": { "tls_certificate_sds_secret_configs": [
                { "name": "default", "sds_config": { "path_config_source": { "path": "/s.yaml" } } }] } }),
            "path_config_source",
        ),
    ];
    for (value, path) in cases {
        assert_eq!(upstream_err(value.clone()).0, format!("{at}.{path}"), "{value}");
    }
    let delta = grpc(json!({ "api_type": "DELTA_GRPC", "grpc_services": [svc] }));
    let ctx = upstream(delta).0.unwrap();
    let Certificates::Sds(sds) = &ctx.common.certificates else { panic!() };
    assert_eq!(sds[0].source, SdsSource::Grpc { cluster_name: "sds-grpc".into(), delta: true });
}

#[test]
fn a_server_needs_certificates() {
    let e = downstream(json!({ "require_client_certificate": true })).0.unwrap_err();
    assert_eq!(e.path(), "common_tls_context");
}

#[test]
fn ignored_downstream_fields_are_reported() {
    let (ctx, warnings) = downstream(json!({
        "common_tls_context": { "tls_certificate_sds_secret_configs": [{ "name": "default" }] },
        "require_sni": true,
        "session_timeout": "60s",
        "disable_stateless_session_resumption": true,
        "ocsp_staple_policy": "MUST_STAPLE"
    }));
    assert!(ctx.unwrap().require_sni);
    let paths: Vec<_> = warnings.items().iter().map(|w| w.path.as_str()).collect();
    assert_eq!(paths, ["session_timeout", "ocsp_staple_policy", "disable_stateless_session_resumption"]);
}
