//! The TCP proxy's fields: what is enforced, what is refused with its path.

use std::time::Duration;

use serde_json::{Value, json};

use crate::config::listener::{TcpProxy, TerminalFilter};

use super::{TCP_PROXY, convert, error, with_filters};

fn tcp_proxy(extra: Value) -> Value {
    let mut typed = json!({"@type": TCP_PROXY, "stat_prefix": "t", "cluster": "c"});
    typed.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    with_filters(json!([{"name": "envoy.filters.network.tcp_proxy", "typed_config": typed}]))
}

#[test]
fn tunneling_config_takes_istios_shape_and_refuses_what_it_cannot_send() {
    // Istio's HBONE `connect_originate` shape.
    let t = converted(json!({"tunneling_config": {"hostname": "%DOWNSTREAM_LOCAL_ADDRESS%",
        "headers_to_add": [{"header": {"key": "baggage", "value": "k8s.cluster.name=Kubernetes"}}]}}));
    let tunneling = t.tunneling.unwrap();
    assert_eq!(tunneling.hostname, "%DOWNSTREAM_LOCAL_ADDRESS%");
    assert_eq!(tunneling.headers_to_add[0].name, "baggage");
    assert_eq!(converted(json!({})).tunneling, None);
    let at = "filter_chains[0].filters[0].typed_config.tunneling_config";
    let refused = |config: Value| error(convert(tcp_proxy(json!({"tunneling_config": config})))).path().to_owned();
    assert_eq!(refused(json!({"hostname": "h:1", "use_post": true})), format!("{at}.use_post"));
    // A command the tunnel cannot evaluate would go out as written.
    assert_eq!(refused(json!({"hostname": "%UPSTREAM_HOST%"})), format!("{at}.hostname"));
    assert_eq!(
        refused(json!({"hostname": "h:1", "headers_to_add": [{"header": {"key": "x", "value": "%START_TIME%"}}]})),
        format!("{at}.headers_to_add[0].header.value")
    );
    assert_eq!(refused(json!({"hostname": ""})), format!("{at}.hostname"));
    assert!(convert(tcp_proxy(json!({"tunneling_config": {"hostname": "100%% h:1"}}))).is_ok(), "%% is a %");
}

fn converted(extra: Value) -> TcpProxy {
    let l = convert(tcp_proxy(extra)).unwrap();
    let TerminalFilter::TcpProxy(t) = &l.filter_chains[0].terminal else { panic!() };
    t.clone()
}

#[test]
fn connection_limits_follow_envoys_defaults_and_bounds() {
    let t = converted(json!({}));
    assert_eq!(t.idle_timeout, Some(Duration::from_secs(3600)));
    assert_eq!(t.max_downstream_connection_duration, None);
    assert_eq!(converted(json!({"idle_timeout": "0s"})).idle_timeout, None);
    // Envoy keeps whole milliseconds: 0.5 ms is 0, which disables the timeout.
    assert_eq!(converted(json!({"idle_timeout": "0.0005s"})).idle_timeout, None);
    let t = converted(json!({"max_downstream_connection_duration": "30s",
        "max_downstream_connection_duration_jitter_percentage": {"value": 10.0}}));
    assert_eq!(t.max_downstream_connection_duration, Some(Duration::from_secs(30)));
    assert_eq!(t.max_downstream_connection_duration_jitter, 10.0);
    let e = error(convert(tcp_proxy(json!({"max_downstream_connection_duration": "0s"}))));
    assert_eq!(e.path(), "filter_chains[0].filters[0].typed_config.max_downstream_connection_duration");
    let e = error(convert(tcp_proxy(json!({"max_downstream_connection_duration": "1s",
        "max_downstream_connection_duration_jitter_percentage": {"value": 150.0}}))));
    assert_eq!(
        e.path(),
        "filter_chains[0].filters[0].typed_config.max_downstream_connection_duration_jitter_percentage.value"
    );
}
