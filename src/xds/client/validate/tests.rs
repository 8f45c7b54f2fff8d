use std::collections::HashSet;

use prost::Message;
use serde_json::{Value, json};

use super::*;
use crate::pb::envoy::config::cluster::v3::Cluster;
use crate::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;

fn encode<M: Message + Default>(full_name: &str, value: Value) -> Bytes {
    let (message, dropped): (M, _) = crate::pb::json::from_value(full_name, value).unwrap();
    assert!(dropped.is_empty());
    message.encode_to_vec().into()
}

fn cluster(name: &str, address: &str) -> Incoming {
    let value = json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": address, "port_value": 80}}}}]}]
        }
    });
    Incoming { name: None, version: "2".into(), bytes: encode::<Cluster>("envoy.config.cluster.v3.Cluster", value) }
}

fn assignment(name: &str, port: u32) -> Incoming {
    let value = json!({
        "cluster_name": name,
        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}]
    });
    Incoming {
        name: Some(name.into()),
        version: "2".into(),
        bytes: encode::<ClusterLoadAssignment>("envoy.config.endpoint.v3.ClusterLoadAssignment", value),
    }
}

/// An assignment that converts to nothing: its address names a resolver Outrider lacks.
fn bad_assignment(name: &str) -> Incoming {
    let value = json!({
        "cluster_name": name,
        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 80, "resolver_name": "acme.resolver"}}}}]}]
    });
    Incoming {
        name: Some(name.into()),
        version: "2".into(),
        bytes: encode::<ClusterLoadAssignment>("envoy.config.endpoint.v3.ClusterLoadAssignment", value),
    }
}

fn names(verdict: &Verdict) -> Vec<&str> {
    verdict.accepted.iter().map(|a| a.resource.name()).collect()
}

fn rejected(verdict: &Verdict) -> Vec<&str> {
    verdict.rejected.iter().map(|r| r.name.as_str()).collect()
}

#[test]
fn clusters_are_taken_one_by_one() {
    let incoming =
        vec![cluster("a", "127.0.0.1"), cluster("bad1", "not-an-ip"), cluster("b", "127.0.0.2"), cluster("bad2", "x")];
    let verdict = validate(None, ResourceType::Cluster, incoming, &mut HashSet::new());
    assert_eq!(names(&verdict), ["a", "b"]);
    assert_eq!(rejected(&verdict), ["bad1", "bad2"]);
    assert_eq!(verdict.names.iter().map(String::as_str).collect::<Vec<_>>(), ["a", "b", "bad1", "bad2"]);
    let detail = verdict.error_detail(ResourceType::Cluster).unwrap();
    assert!(detail.starts_with("Error adding/updating cluster(s) bad1: load_assignment.endpoints[0]"), "{detail}");
    assert!(detail.contains(", bad2: load_assignment.endpoints[0]"), "{detail}");
}

#[test]
fn a_valid_response_has_no_error_detail() {
    let verdict = validate(None, ResourceType::Cluster, vec![cluster("a", "127.0.0.1")], &mut HashSet::new());
    assert_eq!(names(&verdict), ["a"]);
    assert_eq!(verdict.error_detail(ResourceType::Cluster), None);
}

#[test]
fn endpoints_stop_at_the_first_failure() {
    let incoming = vec![assignment("a", 80), bad_assignment("bad"), assignment("c", 80), bad_assignment("bad2")];
    let verdict = validate(None, ResourceType::ClusterLoadAssignment, incoming, &mut HashSet::new());
    assert_eq!(names(&verdict), ["a"], "what follows the failure is not applied");
    assert_eq!(rejected(&verdict), ["bad"], "only the first failure is reported");
    assert!(!verdict.refused);
    let detail = verdict.error_detail(ResourceType::ClusterLoadAssignment).unwrap();
    assert!(detail.starts_with("bad: endpoints[0].lb_endpoints[0].endpoint.address"), "{detail}");
}

#[test]
fn a_proto_constraint_broken_refuses_the_whole_response() {
    // `SocketAddress.port_value` is `lte: 65535`: Envoy fails the response while decoding.
    for resource_type in [ResourceType::ClusterLoadAssignment, ResourceType::Cluster] {
        let incoming = match resource_type {
            ResourceType::Cluster => vec![cluster("a", "127.0.0.1"), cluster("bad", "127.0.0.1")],
            _ => vec![assignment("a", 80), assignment("bad", 70000), assignment("c", 80)],
        };
        let mut incoming = incoming;
        if resource_type == ResourceType::Cluster {
            let value = json!({"name": "bad", "type": "STATIC", "connect_timeout": "0s"});
            incoming[1].bytes = encode::<Cluster>("envoy.config.cluster.v3.Cluster", value);
        }
        let verdict = validate(None, resource_type, incoming, &mut HashSet::new());
        assert!(verdict.refused && verdict.accepted.is_empty() && verdict.names.is_empty(), "{verdict:?}");
        let detail = verdict.error_detail(resource_type).unwrap();
        let path = if resource_type == ResourceType::Cluster {
            "connect_timeout"
        } else {
            "endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value"
        };
        assert!(detail.starts_with(&format!("bad: {path}: proto constraint validation failed: ")), "{detail}");
    }
}

#[test]
fn a_resource_that_does_not_decode_refuses_the_whole_response() {
    let mut incoming = vec![assignment("a", 80), assignment("b", 80)];
    incoming[1].bytes = Bytes::from_static(&[0xff, 0xff]);
    let verdict = validate(None, ResourceType::ClusterLoadAssignment, incoming, &mut HashSet::new());
    assert!(verdict.refused && verdict.accepted.is_empty());
    assert_eq!(rejected(&verdict), ["b"]);
}

#[test]
fn a_second_resource_with_the_same_name_is_refused() {
    let incoming = vec![cluster("a", "127.0.0.1"), cluster("a", "127.0.0.2")];
    let verdict = validate(None, ResourceType::Cluster, incoming, &mut HashSet::new());
    assert_eq!(names(&verdict), ["a"]);
    assert_eq!(verdict.rejected, [Rejected { name: "a".into(), error: "duplicate cluster a found".into() }]);
}

#[test]
fn a_delta_name_that_differs_from_the_resource_is_refused() {
    let mut wrong = assignment("a", 80);
    wrong.name = Some("b".into());
    let verdict = validate(None, ResourceType::ClusterLoadAssignment, vec![wrong], &mut HashSet::new());
    assert!(verdict.accepted.is_empty());
    assert_eq!(verdict.rejected[0].name, "b");
    assert!(verdict.rejected[0].error.starts_with("name: "), "{:?}", verdict.rejected);
}

#[test]
fn listener_errors_are_worded_as_envoy_words_them() {
    let rejected = [
        Rejected { name: "l1".into(), error: "p: bad".into() },
        Rejected { name: "l2".into(), error: "q: worse".into() },
    ];
    assert_eq!(
        error_detail(ResourceType::Listener, &rejected).unwrap(),
        "Error adding/updating listener(s) l1: p: bad\nl2: q: worse\n"
    );
    assert_eq!(error_detail(ResourceType::RouteConfiguration, &rejected[..1]).unwrap(), "l1: p: bad");
    assert_eq!(error_detail(ResourceType::Listener, &[]), None);
}

#[test]
fn acceptance_per_type() {
    assert_eq!(acceptance(ResourceType::Listener), Acceptance::EachResource);
    assert_eq!(acceptance(ResourceType::Cluster), Acceptance::EachResource);
    assert_eq!(acceptance(ResourceType::RouteConfiguration), Acceptance::UntilFirstFailure);
    assert_eq!(acceptance(ResourceType::ClusterLoadAssignment), Acceptance::UntilFirstFailure);
    assert_eq!(acceptance(ResourceType::Secret), Acceptance::UntilFirstFailure);
}

#[test]
fn one_warning_per_cause_whatever_the_index_or_key() {
    let ignored = |path: &str| Ignored { path: path.into(), what: "not used".into() };
    let a = cause(ResourceType::RouteConfiguration, &ignored("virtual_hosts[0].routes[3].x"));
    let b = cause(ResourceType::RouteConfiguration, &ignored("virtual_hosts[4999].routes[0].x"));
    assert_eq!(a, b);
    assert_eq!(a.path, "rds:virtual_hosts[].routes[].x");
    let keyed = cause(ResourceType::RouteConfiguration, &ignored("typed_per_filter_config[\"a.b[1]\"].x"));
    assert_eq!(keyed.path, "rds:typed_per_filter_config[].x");
    assert_ne!(a, cause(ResourceType::Cluster, &ignored("virtual_hosts[0].routes[3].x")));
}
