//! The TCP proxy's fields: what is enforced, what is refused with its path.

use serde_json::{Value, json};

use super::{TCP_PROXY, convert, error, with_filters};

fn tcp_proxy(extra: Value) -> Value {
    let mut typed = json!({"@type": TCP_PROXY, "stat_prefix": "t", "cluster": "c"});
    typed.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    with_filters(json!([{"name": "envoy.filters.network.tcp_proxy", "typed_config": typed}]))
}

#[test]
fn tunneling_config_is_refused_with_its_path() {
    // Istio's HBONE `connect_originate` shape: proxying these bytes as plain TCP would send
    // them without the CONNECT and its headers.
    let e = error(convert(tcp_proxy(json!({"tunneling_config": {"hostname": "%DOWNSTREAM_LOCAL_ADDRESS%",
        "headers_to_add": [{"header": {"key": "baggage", "value": "k8s.cluster.name=Kubernetes"}}]}}))));
    assert_eq!(e.path(), "filter_chains[0].filters[0].typed_config.tunneling_config");
    assert!(convert(tcp_proxy(json!({}))).is_ok());
}
