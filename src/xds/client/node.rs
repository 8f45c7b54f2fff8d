//! The `Node` this client presents to the control plane.

use crate::config::bootstrap::Node;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::google::protobuf as gpb;

pub fn node_proto(node: &Node) -> core::Node {
    let metadata = if node.metadata.is_empty() {
        None
    } else {
        // The metadata came from a protobuf Struct, so it converts back without loss.
        crate::pb::json::from_value::<gpb::Struct>(
            "google.protobuf.Struct",
            serde_json::Value::Object(node.metadata.clone()),
        )
        .ok()
        .map(|(s, _)| s)
    };
    core::Node {
        id: node.id.clone(),
        cluster: node.cluster.clone(),
        metadata,
        locality: Some(core::Locality {
            region: node.locality.region.clone(),
            zone: node.locality.zone.clone(),
            sub_zone: node.locality.sub_zone.clone(),
        }),
        user_agent_name: "outrider".into(),
        user_agent_version_type: Some(core::node::UserAgentVersionType::UserAgentVersion(
            env!("CARGO_PKG_VERSION").into(),
        )),
        ..Default::default()
    }
}
