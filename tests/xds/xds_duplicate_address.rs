//! Two listeners on one address, side by side with Envoy 1.40: one control plane serves
//! both proxies the same LDS response; each applies the first listener and the one on an
//! address of its own, and NACKs the second on the shared address with Envoy's words
//! ("has duplicate address … as existing listener"), instead of binding both and letting
//! the kernel split connections between two configurations.

use crate::common;

use common::acceptance::*;
use common::lab::free_port;
use common::wait_snapshot;
use outrider::config::ResourceType;

fn on_port(name: &str, port: u16) -> String {
    listener(name, name, INLINE_ROUTE, "").replace("port_value: 0 ", &format!("port_value: {port} "))
}

async fn duplicate_address(api_type: &str) {
    let SideBySide { control_plane, envoy, outrider, nodes } = side_by_side(api_type).await;
    wait_answered(&control_plane, &nodes, ResourceType::Listener).await;

    let (shared, own) = (free_port(), free_port());
    let listeners = [on_port("first", shared), on_port("second", shared), on_port("own", own)];
    set(&control_plane, ResourceType::Listener, &listeners);
    wait_answered(&control_plane, &nodes, ResourceType::Listener).await;
    let journal = control_plane.server.journal();
    let expected = format!("'second' has duplicate address '127.0.0.1:{shared}' as existing listener");
    for node in &nodes {
        let nacks = nacks(&journal, node, ResourceType::Listener);
        let detail = nacks.last().and_then(|r| r.error_detail.clone()).map(|e| e.message).unwrap_or_default();
        assert!(detail.contains(&expected), "{node}: {detail}");
        assert!(!detail.contains("'first'") && !detail.contains("own:"), "{node}: {detail}");
    }
    wait_snapshot(&outrider.store, |s| s.listeners.contains_key("own")).await;
    let applied = outrider_applied(&outrider.store.load());
    let names: Vec<&str> = applied.listeners.keys().map(String::as_str).collect();
    assert_eq!(names, ["first", "own"], "outrider applied");
    if let Some(envoy) = &envoy {
        let envoy_applied = envoy_applied(&envoy_dump(envoy).await);
        let envoy_names: Vec<&str> = envoy_applied.listeners.keys().map(String::as_str).collect();
        assert_eq!(envoy_names, names, "envoy applied the same listeners");
    }
    outrider.stop();
}

#[tokio::test]
async fn a_second_listener_on_an_address_is_refused_sotw() {
    duplicate_address("GRPC").await;
}

#[tokio::test]
async fn a_second_listener_on_an_address_is_refused_delta() {
    duplicate_address("DELTA_GRPC").await;
}
