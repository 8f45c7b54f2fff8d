//! The `x-envoy-peer-metadata` header, as Istio writes it: the workload's metadata as a
//! `google.protobuf.Struct` (only the keys Istio exchanges: `NAME`, `NAMESPACE`, `OWNER`,
//! `WORKLOAD_NAME`, `ISTIO_VERSION`, `MESH_ID`, `CLUSTER_ID`, `LABELS`,
//! `PLATFORM_METADATA`, `APP_CONTAINERS`), serialized deterministically (map keys sorted),
//! then base64 with padding. `x-envoy-peer-metadata-id` carries the node's id.
//!
//! A Struct is declared here rather than taken from the generated protos because those
//! keep `fields` in a hash map: the bytes would change from one encoding to the next.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::config::filters::peer_metadata::WorkloadMetadata;

pub const METADATA: &str = "x-envoy-peer-metadata";
pub const METADATA_ID: &str = "x-envoy-peer-metadata-id";

/// Istio writes padding and reads with or without it.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// `google.protobuf.Struct`, with its map ordered.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Struct {
    #[prost(btree_map = "string, message", tag = "1")]
    pub(super) fields: BTreeMap<String, Value>,
}

/// `google.protobuf.Value`: the two kinds the exchange uses.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Value {
    #[prost(oneof = "Kind", tags = "3, 5")]
    pub(super) kind: Option<Kind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum Kind {
    #[prost(string, tag = "3")]
    StringValue(String),
    #[prost(message, tag = "5")]
    StructValue(Struct),
}

pub(super) fn text(value: &str) -> Value {
    Value { kind: Some(Kind::StringValue(value.to_owned())) }
}

fn map(entries: &BTreeMap<String, String>) -> Value {
    Value {
        kind: Some(Kind::StructValue(Struct { fields: entries.iter().map(|(k, v)| (k.clone(), text(v))).collect() })),
    }
}

/// The serialized Struct of `workload` (before base64). Empty facts are left out, as
/// Istio leaves out the keys a node's metadata does not have.
pub fn to_bytes(workload: &WorkloadMetadata) -> Vec<u8> {
    prost::Message::encode_to_vec(&to_struct(workload))
}

/// `workload` as the Struct Istio exchanges.
pub(super) fn to_struct(workload: &WorkloadMetadata) -> Struct {
    let mut fields = BTreeMap::new();
    let strings = [
        ("NAME", &workload.name),
        ("NAMESPACE", &workload.namespace),
        ("OWNER", &workload.owner),
        ("WORKLOAD_NAME", &workload.workload_name),
        ("ISTIO_VERSION", &workload.istio_version),
        ("MESH_ID", &workload.mesh_id),
        ("CLUSTER_ID", &workload.cluster_id),
    ];
    for (key, value) in strings {
        if !value.is_empty() {
            fields.insert(key.to_owned(), text(value));
        }
    }
    if !workload.labels.is_empty() {
        fields.insert("LABELS".to_owned(), map(&workload.labels));
    }
    if !workload.platform_metadata.is_empty() {
        fields.insert("PLATFORM_METADATA".to_owned(), map(&workload.platform_metadata));
    }
    if !workload.app_containers.is_empty() {
        fields.insert("APP_CONTAINERS".to_owned(), text(&workload.app_containers.join(",")));
    }
    Struct { fields }
}

/// The header value for `workload`.
pub fn encode(workload: &WorkloadMetadata) -> String {
    BASE64.encode(to_bytes(workload))
}

/// Reads a peer's header value; `None` when it is not base64 of a Struct. Keys Istio
/// does not exchange are ignored, as are values of other kinds.
pub fn decode(value: &[u8]) -> Option<WorkloadMetadata> {
    let bytes = BASE64.decode(value).ok()?;
    Some(from_struct(<Struct as prost::Message>::decode(bytes.as_slice()).ok()?))
}

/// The workload a Struct describes (keys Istio does not exchange ignored).
pub(super) fn from_struct(metadata: Struct) -> WorkloadMetadata {
    let fields = metadata.fields;
    let string = |key: &str| match fields.get(key).and_then(|v| v.kind.as_ref()) {
        Some(Kind::StringValue(s)) => s.clone(),
        _ => String::new(),
    };
    let entries = |key: &str| match fields.get(key).and_then(|v| v.kind.as_ref()) {
        Some(Kind::StructValue(s)) => s
            .fields
            .iter()
            .filter_map(|(k, v)| match &v.kind {
                Some(Kind::StringValue(s)) => Some((k.clone(), s.clone())),
                _ => None,
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    let containers = string("APP_CONTAINERS");
    WorkloadMetadata {
        name: string("NAME"),
        namespace: string("NAMESPACE"),
        owner: string("OWNER"),
        workload_name: string("WORKLOAD_NAME"),
        istio_version: string("ISTIO_VERSION"),
        mesh_id: string("MESH_ID"),
        cluster_id: string("CLUSTER_ID"),
        labels: entries("LABELS"),
        platform_metadata: entries("PLATFORM_METADATA"),
        app_containers: if containers.is_empty() {
            Vec::new()
        } else {
            containers.split(',').map(str::to_owned).collect()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_is_the_struct_bytes_protobuf_defines() {
        let workload = WorkloadMetadata { name: "a".into(), ..WorkloadMetadata::default() };
        // Struct.fields (1, LEN 11) { key (1, LEN 4) "NAME", value (2, LEN 3) { string_value (3, LEN 1) "a" } }
        let expected = [0x0a, 0x0b, 0x0a, 0x04, b'N', b'A', b'M', b'E', 0x12, 0x03, 0x1a, 0x01, b'a'];
        assert_eq!(to_bytes(&workload), expected);
        assert_eq!(encode(&workload), "CgsKBE5BTUUSAxoBYQ==");
    }

    #[test]
    fn the_generated_struct_reads_the_same_fields() {
        let mut workload = WorkloadMetadata {
            name: "productpage-v1-84975bc778-pxz2w".into(),
            namespace: "default".into(),
            workload_name: "productpage-v1".into(),
            cluster_id: "client-cluster".into(),
            app_containers: vec!["test".into(), "bonzai".into()],
            ..WorkloadMetadata::default()
        };
        workload.labels.insert("app".into(), "productpage".into());
        workload.labels.insert("service.istio.io/canonical-name".into(), "productpage-v1".into());
        let bytes = to_bytes(&workload);
        let generic = <crate::pb::google::protobuf::Struct as prost::Message>::decode(bytes.as_slice()).unwrap();
        let keys: std::collections::BTreeSet<_> = generic.fields.keys().cloned().collect();
        let expected = ["APP_CONTAINERS", "CLUSTER_ID", "LABELS", "NAME", "NAMESPACE", "WORKLOAD_NAME"];
        assert_eq!(keys.iter().map(String::as_str).collect::<Vec<_>>(), expected);
        assert_eq!(decode(encode(&workload).as_bytes()).unwrap(), workload);
        // Deterministic: the same bytes every time, whatever order the labels came in.
        assert_eq!(to_bytes(&workload.clone()), bytes);
    }

    const NODE: &str = include_str!("../../../../tests/data/istio_peer_metadata/node_metadata.json");
    const EXCHANGED: &str = include_str!("../../../../tests/data/istio_peer_metadata/exchanged.b64");
    const FULL: &str = include_str!("../../../../tests/data/istio_peer_metadata/full_unpadded.b64");

    #[test]
    fn a_node_encodes_to_the_bytes_of_googles_protobuf_runtime() {
        let node: serde_json::Value = serde_json::from_str(NODE).unwrap();
        let workload = WorkloadMetadata::from_node_metadata(node.as_object().unwrap());
        assert_eq!(encode(&workload), EXCHANGED.trim());
    }

    #[test]
    fn a_whole_node_struct_as_istio_tests_send_it_reads_the_exchanged_keys() {
        let peer = decode(FULL.trim().as_bytes()).unwrap();
        assert_eq!(peer.workload_name, "ratings-v1");
        assert_eq!(peer.namespace, "bookinfo");
        assert_eq!(peer.cluster_id, "Kubernetes");
        assert_eq!(peer.canonical_name(), "ratings");
        assert_eq!(peer.canonical_revision(), "v1");
        assert_eq!(peer.app_containers, ["ratings", "log-shipper"]);
        assert_eq!(peer, decode(EXCHANGED.trim().as_bytes()).unwrap());
    }

    #[test]
    fn unpadded_values_are_read_and_garbage_is_not() {
        let workload = WorkloadMetadata { namespace: "ns".into(), ..WorkloadMetadata::default() };
        let padded = encode(&workload);
        assert_eq!(decode(padded.trim_end_matches('=').as_bytes()).unwrap(), workload);
        assert_eq!(decode(b"%%%"), None);
        assert_eq!(decode(b"AAAA"), None, "not a Struct");
    }
}
