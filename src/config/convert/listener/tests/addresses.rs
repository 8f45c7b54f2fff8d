//! What a listener binds, and the listener filter options refused where Outrider would not
//! do what Envoy does.

use serde_json::json;

use super::{TCP_PROXY, convert, error};

fn listener(address: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    let mut l = json!({"name": "l", "address": address, "filter_chains": [{"filters": [
        {"name": "tcp", "typed_config": {"@type": TCP_PROXY, "stat_prefix": "t", "cluster": "c"}}]}]});
    l.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    l
}

#[test]
fn pipe_and_ipv4_compat_listener_addresses_are_refused() {
    let pipe = json!({"pipe": {"path": "/tmp/outrider.sock", "mode": 384}});
    assert_eq!(error(convert(listener(pipe.clone(), json!({})))).path(), "address.pipe");
    let v6 = json!({"socket_address": {"address": "::", "port_value": 8080}});
    let compat = json!({"socket_address": {"address": "::", "port_value": 8080, "ipv4_compat": true}});
    assert_eq!(error(convert(listener(compat.clone(), json!({})))).path(), "address.socket_address.ipv4_compat");
    let additional = |address| json!({"additional_addresses": [{"address": address}]});
    assert_eq!(
        error(convert(listener(v6.clone(), additional(compat)))).path(),
        "additional_addresses[0].address.socket_address.ipv4_compat"
    );
    assert_eq!(error(convert(listener(v6.clone(), additional(pipe)))).path(), "additional_addresses[0].address.pipe");
    assert!(convert(listener(v6, json!({}))).is_ok());
}

#[test]
fn tls_inspector_closing_on_parse_errors_is_refused() {
    let inspector = |close: bool| {
        json!({"listener_filters": [{"name": "envoy.filters.listener.tls_inspector", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector",
            "close_connection_on_client_hello_parsing_errors": close}}]})
    };
    let address = json!({"socket_address": {"address": "0.0.0.0", "port_value": 8080}});
    let e = error(convert(listener(address.clone(), inspector(true))));
    assert_eq!(e.path(), "listener_filters[0].typed_config.close_connection_on_client_hello_parsing_errors");
    assert!(convert(listener(address, inspector(false))).is_ok());
}
