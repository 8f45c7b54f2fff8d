//! Resource-by-resource acceptance, against the real Envoy 1.40: Envoy and Outrider are
//! pointed at one control plane that serves them the same responses (valid resources
//! mixed with invalid ones), and what each applies, what each NACK says and which versions
//! each reports are compared.

use crate::common;

use std::collections::BTreeMap;

use common::acceptance::*;
use common::differential::stat_value;
use common::{WAIT, admin_get};
use outrider::config::ResourceType;

/// Pushes a response per type mixing valid and invalid resources, to Envoy and Outrider at
/// once, and compares what they apply, what they NACK and what they resume with.
async fn partial_acceptance(api_type: &str) {
    let SideBySide { mut control_plane, envoy, outrider, nodes } = side_by_side(api_type).await;
    for t in ResourceType::ALL.into_iter().filter(|t| *t != ResourceType::Secret) {
        wait_answered(&control_plane, &nodes, t).await;
    }
    let initial_versions: BTreeMap<ResourceType, String> =
        ResourceType::ALL.into_iter().map(|t| (t, type_version(&control_plane, t))).collect();

    // CDS: one update, one addition, one removal (SotW: by omission), and an invalid
    // update and addition.
    set(
        &control_plane,
        ResourceType::Cluster,
        &[
            static_cluster("keep", "1s", "127.0.0.1"),
            static_cluster("upd_ok", "2s", "127.0.0.1"),
            static_cluster("upd_bad", "2s", "backend.invalid"),
            static_cluster("new_ok", "1s", "127.0.0.1"),
            static_cluster("new_bad", "1s", "backend.invalid"),
            eds_cluster("eds_a"),
            eds_cluster("eds_b"),
            eds_cluster("eds_c"),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::Cluster).await;
    let cds_version = type_version(&control_plane, ResourceType::Cluster);
    // LDS: the same with listeners, the invalid ones carrying a filter nobody runs.
    set(
        &control_plane,
        ResourceType::Listener,
        &[
            listener("l_keep", "keep", INLINE_ROUTE, ""),
            listener("l_upd_ok", "v2", INLINE_ROUTE, ""),
            listener("l_upd_bad", "v2", INLINE_ROUTE, UNKNOWN_FILTER),
            listener("l_new_ok", "v2", INLINE_ROUTE, ""),
            listener("l_new_bad", "v2", INLINE_ROUTE, UNKNOWN_FILTER),
            listener("l_rds", "rds", &rds("route_a"), ""),
            listener("l_rds2", "rds", &rds("route_b"), ""),
            listener("l_rds3", "rds", &rds("route_c"), ""),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::Listener).await;
    let lds_version = type_version(&control_plane, ResourceType::Listener);
    // RDS and EDS: three updates, the middle one invalid.
    set(
        &control_plane,
        ResourceType::RouteConfiguration,
        &[
            route("route_a", "{ prefix: /a2 }"),
            route("route_b", "{ safe_regex: { regex: '(' } }"),
            route("route_c", "{ prefix: /c2 }"),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::RouteConfiguration).await;
    let rds_version = type_version(&control_plane, ResourceType::RouteConfiguration);
    set(
        &control_plane,
        ResourceType::ClusterLoadAssignment,
        &[
            assignment("eds_a", "127.0.0.1", 9011),
            assignment("eds_b", "127.0.0.1, resolver_name: acme.resolver", 9012),
            assignment("eds_c", "127.0.0.1", 9013),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::ClusterLoadAssignment).await;

    let journal = control_plane.server.journal();
    let outrider_now = outrider_applied(&outrider.store.load());
    let v = |t: ResourceType| initial_versions[&t].clone();
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    };
    let (c0, l0, r0) = (v(ResourceType::Cluster), v(ResourceType::Listener), v(ResourceType::RouteConfiguration));
    // LDS and CDS: every valid resource applied, each invalid one at its previous
    // version (or absent), what the response no longer names removed; the type's version
    // is the new one.
    let expected_clusters = map(&[
        ("eds_a", &c0),
        ("eds_b", &c0),
        ("eds_c", &c0),
        ("keep", &c0),
        ("new_ok", &cds_version),
        ("upd_bad", &c0),
        ("upd_ok", &cds_version),
    ]);
    let expected_listeners = map(&[
        ("l_keep", &l0),
        ("l_new_ok", &lds_version),
        ("l_rds", &l0),
        ("l_rds2", &l0),
        ("l_rds3", &l0),
        ("l_upd_bad", &l0),
        ("l_upd_ok", &lds_version),
    ]);
    let mut sides = vec![("outrider", OUTRIDER_NODE, outrider_now)];
    if let Some(envoy) = &envoy {
        sides.push(("envoy", ENVOY_NODE, envoy_applied(&envoy_dump(envoy).await)));
    }
    for (side, node, applied) in &sides {
        let context = format!("{side} ({api_type}): {applied:#?}");
        assert_eq!(applied.clusters, expected_clusters, "{context}");
        let prefixes = map(&[
            ("l_keep", "keep"),
            ("l_new_ok", "v2"),
            ("l_rds", "rds"),
            ("l_rds2", "rds"),
            ("l_rds3", "rds"),
            ("l_upd_bad", "v1"),
            ("l_upd_ok", "v2"),
        ]);
        assert_eq!(applied.listeners, prefixes, "{context}");
        if *side == "outrider" {
            assert_eq!(applied.listener_versions, expected_listeners, "{context}");
        } else {
            // Envoy's dump keeps the previous version_info for a listener updated in place
            // (only its filter chains changed); every other one is as expected.
            let mut versions = applied.listener_versions.clone();
            versions.insert("l_upd_ok".into(), lds_version.clone());
            assert_eq!(versions, expected_listeners, "{context}");
        }
        assert_eq!(applied.cds_version, cds_version, "{context}");
        assert_eq!(applied.lds_version, lds_version, "{context}");
        // RDS and EDS: the invalid one keeps its previous version. Envoy applies the ones
        // its (unspecified) order puts before it; Outrider takes the response's order.
        assert_eq!(applied.routes["route_b"], r0, "{context}");
        assert_eq!(applied.endpoints["eds_b"], [9002], "{context}");
        for route in ["route_a", "route_c"] {
            assert!([&r0, &rds_version].contains(&&applied.routes[route]), "{context}");
        }
        if *side == "outrider" {
            assert_eq!(applied.routes["route_a"], rds_version, "{context}");
            assert_eq!(applied.routes["route_c"], r0, "{context}");
            assert_eq!(applied.endpoints["eds_a"], [9011], "{context}");
            assert_eq!(applied.endpoints["eds_c"], [9003], "{context}");
        }

        // One NACK per type, INTERNAL, naming the invalid resources only; SotW NACKs carry
        // the last ACKed version, not the one partly applied.
        let one_nack = |t: ResourceType| {
            let all = nacks(&journal, node, t);
            assert_eq!(all.len(), 1, "{side} NACKs of {t:?}: {all:#?}");
            let nack = all[0].clone();
            if api_type == "GRPC" {
                assert_eq!(nack.version_info, initial_versions[&t], "{side} {t:?}");
            }
            let detail = nack.error_detail.unwrap();
            assert_eq!(detail.code, tonic::Code::Internal as i32, "{side} {t:?}");
            detail.message
        };
        let cds = one_nack(ResourceType::Cluster);
        assert!(cds.starts_with("Error adding/updating cluster(s) new_bad: "), "{side}: {cds}");
        assert!(cds.contains(", upd_bad: ") && !cds.contains("upd_ok") && !cds.contains("new_ok"), "{side}: {cds}");
        let lds = one_nack(ResourceType::Listener);
        assert!(lds.starts_with("Error adding/updating listener(s) l_new_bad: "), "{side}: {lds}");
        assert!(lds.contains("\nl_upd_bad: ") && lds.ends_with('\n'), "{side}: {lds}");
        assert!(!lds.contains("l_upd_ok") && !lds.contains("l_new_ok"), "{side}: {lds}");
        let rds = one_nack(ResourceType::RouteConfiguration);
        assert!(!rds.contains("route_a") && !rds.contains("route_c"), "{side}: {rds}");
        let eds = one_nack(ResourceType::ClusterLoadAssignment);
        assert!(eds.contains("resolver") && !eds.contains("eds_a"), "{side}: {eds}");
        if *side == "outrider" {
            assert!(rds.starts_with("route_b: virtual_hosts[0].routes[0].match.safe_regex.regex: "), "{rds}");
            assert!(lds.contains("filter_chains[0].filters[0].typed_config.http_filters[0]"), "{lds}");
            assert!(cds.contains("load_assignment.endpoints[0].lb_endpoints[0].endpoint.address"), "{cds}");
            assert!(eds.starts_with("eds_b: endpoints[0].lb_endpoints[0].endpoint.address"), "{eds}");
        }
    }

    // Stats: a partly applied response counts as rejected, not as a success.
    let outrider_stats = admin_get(outrider.admin_address, "/stats").await.1;
    for stat in [
        "cluster_manager.cds.update_rejected",
        "cluster_manager.cds.update_success",
        "listener_manager.lds.update_rejected",
        "listener_manager.lds.update_success",
    ] {
        let outrider_value = stat_value(&outrider_stats, stat);
        assert_eq!(outrider_value, 1, "outrider {stat}");
        if let Some(envoy) = &envoy {
            assert_eq!(envoy.stat(stat).await, outrider_value, "envoy {stat}");
        }
    }

    // A new stream resumes from what was ACKed: SotW with the last ACKed version_info,
    // Delta with the versions of the ACKed responses (the partly applied ones not
    // advancing them).
    let streams_before: BTreeMap<&str, usize> = nodes.iter().map(|n| (*n, streams_of(&journal, n).len())).collect();
    control_plane.restart().await;
    control_plane
        .server
        .wait_until(WAIT * 3, |j| {
            nodes.iter().all(|n| {
                streams_of(j, n).len() > streams_before[n]
                    && [
                        ResourceType::Cluster,
                        ResourceType::Listener,
                        ResourceType::RouteConfiguration,
                        ResourceType::ClusterLoadAssignment,
                    ]
                    .iter()
                    .all(|t| resumed(j, n).contains_key(t.type_url()))
            })
        })
        .await
        .unwrap();
    let journal = control_plane.server.journal();
    let outrider_resumed = resumed(&journal, OUTRIDER_NODE);
    for t in [
        ResourceType::Cluster,
        ResourceType::Listener,
        ResourceType::RouteConfiguration,
        ResourceType::ClusterLoadAssignment,
    ] {
        let request = &outrider_resumed[t.type_url()];
        if api_type == "GRPC" {
            assert_eq!(request.version_info, initial_versions[&t], "outrider resumes {t:?}");
        } else {
            let initial_version = &initial_versions[&t];
            assert!(
                request.initial_resource_versions.values().all(|v| v == initial_version),
                "outrider resumes {t:?} with the ACKed versions: {request:#?}"
            );
        }
        if envoy.is_some() {
            let envoy_request = &resumed(&journal, ENVOY_NODE)[t.type_url()];
            assert_eq!(envoy_request.version_info, request.version_info, "{t:?}");
            assert_eq!(envoy_request.initial_resource_versions, request.initial_resource_versions, "{t:?}");
        }
    }
    outrider.stop();
}

#[tokio::test]
async fn valid_resources_are_applied_and_invalid_ones_nacked_sotw() {
    partial_acceptance("GRPC").await;
}

#[tokio::test]
async fn valid_resources_are_applied_and_invalid_ones_nacked_delta() {
    partial_acceptance("DELTA_GRPC").await;
}
