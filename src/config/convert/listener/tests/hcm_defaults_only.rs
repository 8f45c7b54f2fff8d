//! Connection manager fields accepted at Envoy's default only: anything else is refused
//! with the field's path, never accepted and ignored.

use serde_json::{Value, json};

use super::inline_routes;
use super::{convert, error, hcm, router};

const PATH: &str = "filter_chains[0].filters[0].typed_config";

fn with(field: &str, value: Value) -> Value {
    let mut config = json!({"route_config": inline_routes(), "http_filters": [router()]});
    config[field] = value;
    hcm(config)
}

#[test]
fn non_default_values_are_refused_with_their_path() {
    let refused = [
        ("drain_timeout", json!("30s"), "drain_timeout"),
        ("drain_timeout", json!("0s"), "drain_timeout"),
        ("delayed_close_timeout", json!("0s"), "delayed_close_timeout"),
        ("delayed_close_timeout", json!("3s"), "delayed_close_timeout"),
        ("http_protocol_options", json!({"enable_trailers": true}), "http_protocol_options.enable_trailers"),
        ("proxy_status_config", json!({}), "proxy_status_config"),
        ("scheme_header_transformation", json!({"scheme_to_overwrite": "https"}), "scheme_header_transformation"),
        ("scheme_header_transformation", json!({"match_upstream": true}), "scheme_header_transformation"),
        (
            "represent_ipv4_remote_address_as_ipv4_mapped_ipv6",
            json!(true),
            "represent_ipv4_remote_address_as_ipv4_mapped_ipv6",
        ),
    ];
    for (field, value, path) in refused {
        let err = error(convert(with(field, value.clone())));
        assert_eq!(err.path(), format!("{PATH}.{path}"), "{field}: {value}");
    }
}

#[test]
fn defaults_spelled_out_are_accepted() {
    let accepted = [
        ("proxy_100_continue", json!(false)),
        ("proxy_100_continue", json!(true)),
        ("drain_timeout", json!("5s")),
        ("delayed_close_timeout", json!("1s")),
        ("http_protocol_options", json!({"enable_trailers": false})),
        ("http2_protocol_options", json!({"allow_connect": false})),
        // Istio's HBONE listener: plain CONNECT needs no setting; extended CONNECT is not
        // offered (with a warning).
        ("http2_protocol_options", json!({"allow_connect": true})),
        ("add_user_agent", json!(false)),
        ("add_user_agent", json!(true)),
        ("scheme_header_transformation", json!({})),
        ("represent_ipv4_remote_address_as_ipv4_mapped_ipv6", json!(false)),
    ];
    for (field, value) in accepted {
        assert!(convert(with(field, value.clone())).is_ok(), "{field}: {value}");
    }
}
