//! The store: endpoint reconciliation keeps per-endpoint allocations across EDS pushes and
//! costs O(N); warming decides what is served.

use std::sync::Arc;
use std::time::SystemTime;

use outrider::config::convert::decode_resource;
use outrider::config::{Resource, ResourceType, Warnings};
use outrider::store::{ConfigState, Versioned};
use prost::Message;

fn assignment(ports: impl Iterator<Item = u32>) -> Versioned<Resource> {
    let lb_endpoints: Vec<_> = ports
        .map(|p| {
            serde_json::json!({ "endpoint": { "address": { "socket_address": {
                "address": format!("10.0.{}.{}", p / 256 % 256, p % 256), "port_value": 1000 + p / 65536 } } } })
        })
        .collect();
    let value = serde_json::json!({ "cluster_name": "big", "endpoints": [{ "lb_endpoints": lb_endpoints }] });
    let (proto, _): (outrider::pb::envoy::config::endpoint::v3::ClusterLoadAssignment, _) =
        outrider::pb::json::from_value("envoy.config.endpoint.v3.ClusterLoadAssignment", value).unwrap();
    let bytes = proto.encode_to_vec();
    let resource = decode_resource(ResourceType::ClusterLoadAssignment, &bytes, &mut Warnings::new()).unwrap();
    Versioned { resource, version: "v".into(), last_updated: SystemTime::now(), raw: bytes.into() }
}

/// A state with one EDS cluster, `big`, whose endpoints the tests push.
fn state() -> ConfigState {
    let value =
        serde_json::json!({ "name": "big", "type": "EDS", "eds_cluster_config": { "eds_config": { "ads": {} } } });
    let (proto, _): (outrider::pb::envoy::config::cluster::v3::Cluster, _) =
        outrider::pb::json::from_value("envoy.config.cluster.v3.Cluster", value).unwrap();
    let Resource::Cluster(cluster) =
        decode_resource(ResourceType::Cluster, &proto.encode_to_vec(), &mut Warnings::new()).unwrap()
    else {
        unreachable!()
    };
    ConfigState::new(Vec::new(), vec![cluster], Vec::new(), [], Default::default())
}

/// Pushes `first` then `second` endpoints and returns the reconcile operations of the second.
fn operations_for(first: u32, second: std::ops::Range<u32>) -> usize {
    let mut state = state();
    state.apply(ResourceType::ClusterLoadAssignment, "1", vec![assignment(0..first)], &[], false);
    state.apply(ResourceType::ClusterLoadAssignment, "2", vec![assignment(second)], &[], false);
    state.last_reconcile_operations()
}

#[test]
fn an_eds_push_of_n_endpoints_costs_o_of_n() {
    for n in [100u32, 1_000, 10_000] {
        // One endpoint changes (an identical push is not applied at all; see below).
        let operations = operations_for(n, 1..n + 1);
        assert_eq!(operations, 2 * n as usize, "one insert per old endpoint, one lookup per new one");
    }
    // Unequal sizes stay linear in their sum.
    assert_eq!(operations_for(10_000, 5_000..15_000), 20_000);
}

#[test]
fn unchanged_endpoints_keep_their_allocation_across_pushes() {
    let mut state = state();
    state.apply(ResourceType::ClusterLoadAssignment, "1", vec![assignment(0..3)], &[], false);
    let before = state.snapshot().endpoints["big"].clone();
    state.apply(ResourceType::ClusterLoadAssignment, "2", vec![assignment(1..4)], &[], false);
    let after = state.snapshot().endpoints["big"].clone();

    let old: Vec<_> = before.resource.endpoints().cloned().collect();
    let new: Vec<_> = after.resource.endpoints().cloned().collect();
    assert!(Arc::ptr_eq(&old[1], &new[0]), "endpoint 1 survived");
    assert!(Arc::ptr_eq(&old[2], &new[1]), "endpoint 2 survived");
    assert!(!old.iter().any(|o| Arc::ptr_eq(o, &new[2])), "endpoint 3 is new");
}

/// As Envoy skips an unchanged listener, cluster or route configuration: a resource whose
/// bytes did not change is left as it is, version included, and the type's version_info
/// moves only when something changed.
#[test]
fn an_identical_push_is_not_applied() {
    let mut state = state();
    assert!(state.apply(ResourceType::ClusterLoadAssignment, "1", vec![assignment(0..3)], &[], false));
    assert!(!state.apply(ResourceType::ClusterLoadAssignment, "2", vec![assignment(0..3)], &[], false));
    assert_eq!(state.last_reconcile_operations(), 0, "nothing reconciled");
    let snapshot = state.snapshot();
    assert_eq!(snapshot.versions[&ResourceType::ClusterLoadAssignment].version_info, "1");
    assert_eq!(state.resource_versions(ResourceType::ClusterLoadAssignment)["big"], "v");
    assert!(state.apply(ResourceType::ClusterLoadAssignment, "3", vec![assignment(0..4)], &[], false));
    assert_eq!(state.snapshot().versions[&ResourceType::ClusterLoadAssignment].version_info, "3");
    // A removal is a change.
    assert!(state.apply(ResourceType::ClusterLoadAssignment, "4", Vec::new(), &["big".to_owned()], false));
    assert!(!state.apply(ResourceType::ClusterLoadAssignment, "5", Vec::new(), &["big".to_owned()], false));
    assert_eq!(state.snapshot().versions[&ResourceType::ClusterLoadAssignment].version_info, "4");
}

/// An initial-fetch timer that fires after its resource arrived times nothing out.
#[test]
fn a_resource_that_arrived_is_not_timed_out() {
    let mut state = state();
    assert!(!state.arrived(ResourceType::ClusterLoadAssignment, "big"));
    state.apply(ResourceType::ClusterLoadAssignment, "1", vec![assignment(0..3)], &[], false);
    assert!(state.arrived(ResourceType::ClusterLoadAssignment, "big"));
    assert!(!state.arrived(ResourceType::ClusterLoadAssignment, "other"));
    assert!(!state.arrived(ResourceType::Cluster, ""), "no CDS response yet");
}
