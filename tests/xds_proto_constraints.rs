//! A resource that breaks a constraint of its proto (`validate.rules`) refuses the whole
//! response, against the real Envoy 1.40: Envoy checks the constraints while decoding a
//! response, before any resource reaches the listener, cluster or route manager, so one
//! such resource NACKs the response and nothing of it is applied, valid resources and
//! removals included. Envoy and Outrider get the same responses from one control plane;
//! what each applies, NACKs and counts is compared.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::acceptance::*;
use common::differential::{Envoy, envoy_binary, stat_value};
use common::{ControlPlane, admin_get, bootstrap, wait_snapshot};
use outrider::app;
use outrider::config::ResourceType;

/// A listener whose (only) network filter has an empty name: `Filter.name` is `min_len: 1`.
fn listener_without_filter_name(name: &str) -> String {
    listener(name, "v2", INLINE_ROUTE, "")
        .replace("- name: envoy.filters.network.http_connection_manager", "- name: ''")
}

/// A route without `match` (`Route.match` is `required`).
fn route_without_match(name: &str) -> String {
    format!("name: {name}\nvirtual_hosts:\n- name: all\n  domains: ['*']\n  routes:\n  - route: {{ cluster: keep }}\n")
}

/// An endpoint of weight 0 (`LbEndpoint.load_balancing_weight` is `gte: 1`).
fn assignment_with_weight_zero(name: &str, port: u16) -> String {
    format!(
        "cluster_name: {name}\nendpoints:\n- lb_endpoints:\n  - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}\n    load_balancing_weight: 0\n"
    )
}

async fn proto_constraints(api_type: &str) {
    let control_plane = ControlPlane::start().await;
    initial(&control_plane);
    let envoy = match envoy_binary() {
        Some(binary) => Some(Envoy::start(&binary, &envoy_bootstrap(api_type, control_plane.port)).await),
        None => {
            println!("SKIPPED: envoy not found (bench/install-envoy.sh); Outrider's half only");
            None
        }
    };
    let outrider = app::start(bootstrap(control_plane.port, api_type)).await.unwrap();
    wait_snapshot(&outrider.store, |s| s.ready).await;
    let mut nodes = vec![OUTRIDER_NODE];
    if envoy.is_some() {
        nodes.push(ENVOY_NODE);
    }
    let types = [
        ResourceType::Cluster,
        ResourceType::Listener,
        ResourceType::RouteConfiguration,
        ResourceType::ClusterLoadAssignment,
    ];
    for t in types {
        wait_answered(&control_plane, &nodes, t).await;
    }
    let initial_versions: BTreeMap<ResourceType, String> =
        types.into_iter().map(|t| (t, type_version(&control_plane, t))).collect();
    let mut before = vec![("outrider", OUTRIDER_NODE, outrider_applied(&outrider.store.load()))];
    if let Some(envoy) = &envoy {
        before.push(("envoy", ENVOY_NODE, envoy_applied(&envoy_dump(envoy).await)));
    }

    // Each response: a valid update, an addition, a removal (by omission in SotW, by
    // `removed_resources` in Delta) and one resource breaking a constraint.
    set(
        &control_plane,
        ResourceType::Cluster,
        &[
            static_cluster("keep", "1s", "127.0.0.1"),
            static_cluster("upd_ok", "2s", "127.0.0.1"),
            static_cluster("upd_bad", "0s", "127.0.0.1"), // connect_timeout: gt 0s
            static_cluster("new_ok", "1s", "127.0.0.1"),
            eds_cluster("eds_a"),
            eds_cluster("eds_b"),
            eds_cluster("eds_c"),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::Cluster).await;
    set(
        &control_plane,
        ResourceType::Listener,
        &[
            listener("l_keep", "keep", INLINE_ROUTE, ""),
            listener("l_upd_ok", "v2", INLINE_ROUTE, ""),
            listener_without_filter_name("l_upd_bad"),
            listener("l_new_ok", "v2", INLINE_ROUTE, ""),
            listener("l_rds", "rds", &rds("route_a"), ""),
            listener("l_rds2", "rds", &rds("route_b"), ""),
            listener("l_rds3", "rds", &rds("route_c"), ""),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::Listener).await;
    set(
        &control_plane,
        ResourceType::RouteConfiguration,
        &[route("route_a", "{ prefix: /a2 }"), route_without_match("route_b"), route("route_c", "{ prefix: /c2 }")],
    );
    wait_answered(&control_plane, &nodes, ResourceType::RouteConfiguration).await;
    set(
        &control_plane,
        ResourceType::ClusterLoadAssignment,
        &[
            assignment("eds_a", "127.0.0.1", 9011),
            assignment_with_weight_zero("eds_b", 9012),
            assignment("eds_c", "127.0.0.1", 9013),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::ClusterLoadAssignment).await;

    let journal = control_plane.server.journal();
    let mut after = vec![outrider_applied(&outrider.store.load())];
    if let Some(envoy) = &envoy {
        after.push(envoy_applied(&envoy_dump(envoy).await));
    }
    for ((side, node, before), after) in before.iter().zip(after) {
        // Nothing of any response was applied: no update, no addition, no removal, and
        // each type still at its previous version.
        assert_eq!(&after, before, "{side} ({api_type}) applied part of a refused response");
        for t in types {
            let all = nacks(&journal, node, t);
            assert_eq!(all.len(), 1, "{side} ({api_type}) NACKs of {t:?}: {all:#?}");
            let nack = &all[0];
            println!("{side} ({api_type}) {t:?} NACK: {:?}", nack.error_detail.as_ref().map(|d| &d.message));
            if api_type == "GRPC" {
                assert_eq!(nack.version_info, initial_versions[&t], "{side} {t:?}");
            }
            let detail = nack.error_detail.clone().unwrap();
            assert_eq!(detail.code, tonic::Code::Internal as i32, "{side} {t:?}");
            // The NACK names the field and nothing of the valid resources.
            let (field, others): (&str, &[&str]) = match t {
                ResourceType::Cluster => ("onnect", &["upd_ok", "new_ok", "keep"]),
                ResourceType::Listener => ("name", &["l_upd_ok", "l_new_ok", "l_keep"]),
                ResourceType::RouteConfiguration => ("atch", &["route_a", "route_c"]),
                _ => ("eight", &["eds_a", "eds_c"]),
            };
            assert!(detail.message.contains(field), "{side} {t:?}: {}", detail.message);
            assert!(others.iter().all(|o| !detail.message.contains(o)), "{side} {t:?}: {}", detail.message);
        }
    }
    // Outrider's NACK names the resource and the field path, and gives the rule broken in
    // protoc-gen-validate's words, which are Envoy's.
    let nack = |node: &str, t: ResourceType| nacks(&journal, node, t)[0].error_detail.clone().unwrap().message;
    let expected = [
        (ResourceType::Cluster, "upd_bad: connect_timeout", "value must be greater than 0s"),
        (
            ResourceType::Listener,
            "l_upd_bad: filter_chains[0].filters[0].name",
            "value length must be at least 1 characters",
        ),
        (ResourceType::RouteConfiguration, "route_b: virtual_hosts[0].routes[0].match", "value is required"),
        (
            ResourceType::ClusterLoadAssignment,
            "eds_b: endpoints[0].lb_endpoints[0].load_balancing_weight",
            "value must be greater than or equal to 1",
        ),
    ];
    for (t, at, rule) in expected {
        assert_eq!(nack(OUTRIDER_NODE, t), format!("{at}: proto constraint validation failed: {rule}"));
        if envoy.is_some() {
            // Envoy: `<the resource as text>: Proto constraint validation failed (… caused by
            // <Message>ValidationError.<Field>: <rule>)`.
            let envoy_nack = nack(ENVOY_NODE, t);
            assert!(envoy_nack.contains("Proto constraint validation failed ("), "{envoy_nack}");
            assert!(envoy_nack.ends_with(&format!(": {rule})")), "{envoy_nack}");
        }
    }

    // A refused response counts as rejected, as Envoy counts it.
    let outrider_stats = admin_get(outrider.admin_address, "/stats").await.1;
    for stat in [
        "cluster_manager.cds.update_rejected",
        "cluster_manager.cds.update_success",
        "listener_manager.lds.update_rejected",
        "listener_manager.lds.update_success",
    ] {
        let outrider_value = stat_value(&outrider_stats, stat);
        if let Some(envoy) = &envoy {
            assert_eq!(envoy.stat(stat).await, outrider_value, "{stat} ({api_type})");
        }
        let expected = if stat.ends_with("rejected") { 1 } else { outrider_value };
        assert_eq!(outrider_value, expected, "outrider {stat}");
    }
    outrider.stop();
}

#[tokio::test]
async fn a_resource_breaking_its_proto_constraints_refuses_the_response_sotw() {
    proto_constraints("GRPC").await;
}

#[tokio::test]
async fn a_resource_breaking_its_proto_constraints_refuses_the_response_delta() {
    proto_constraints("DELTA_GRPC").await;
}
