//! Istio's in-band TCP metadata exchange frame (`istio-peer-exchange`): the magic
//! `0x3D230467` and the payload's length, both 32-bit big-endian, then a
//! `google.protobuf.Any` holding a `Struct` with two fields: `x-envoy-peer-metadata` (the
//! node's workload metadata, as in the HTTP header) and `x-envoy-peer-metadata-id` (its
//! node id). Serialized deterministically, as Istio's filter does.

use std::collections::BTreeMap;

use super::wire::{self, Kind, Struct, Value};
use crate::config::filters::peer_metadata::{LocalNode, WorkloadMetadata};

pub const MAGIC: u32 = 0x3D23_0467;
/// The fixed part: magic and length.
pub const HEADER_LEN: usize = 8;
/// A peer announcing more than this is not read (the bytes pass through untouched).
pub const MAX_PAYLOAD: usize = 64 * 1024;

const STRUCT_TYPE_URL: &str = "type.googleapis.com/google.protobuf.Struct";

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// The whole frame this node sends.
pub fn encode(node: &LocalNode) -> Vec<u8> {
    let mut fields = BTreeMap::new();
    fields.insert(wire::METADATA.to_owned(), Value { kind: Some(Kind::StructValue(wire::to_struct(&node.workload))) });
    if !node.id.is_empty() {
        fields.insert(wire::METADATA_ID.to_owned(), wire::text(&node.id));
    }
    let any = Any { type_url: STRUCT_TYPE_URL.to_owned(), value: prost::Message::encode_to_vec(&Struct { fields }) };
    let payload = prost::Message::encode_to_vec(&any);
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.extend_from_slice(&MAGIC.to_be_bytes());
    // The payload is this node's own metadata, far below 4 GiB.
    frame.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(u32::MAX).to_be_bytes());
    frame.extend_from_slice(&payload);
    frame
}

/// What the first bytes of a connection say.
#[derive(Debug, PartialEq)]
pub enum Header {
    /// Not enough bytes yet.
    Incomplete,
    /// Not an exchange frame (wrong magic, oversized): the bytes are the connection's own.
    NotExchange,
    /// A frame of this many bytes in all, naming this peer (`None`: it did not decode).
    Frame(usize, Option<Box<WorkloadMetadata>>),
}

/// Reads a frame at the start of `bytes`.
pub fn parse(bytes: &[u8]) -> Header {
    let Some(magic) = bytes.get(..4) else {
        return if MAGIC.to_be_bytes().starts_with(bytes) { Header::Incomplete } else { Header::NotExchange };
    };
    if magic != MAGIC.to_be_bytes() {
        return Header::NotExchange;
    }
    let Some(length) = bytes.get(4..HEADER_LEN) else { return Header::Incomplete };
    let length = u32::from_be_bytes([length[0], length[1], length[2], length[3]]) as usize;
    if length > MAX_PAYLOAD {
        return Header::NotExchange;
    }
    let total = HEADER_LEN + length;
    let Some(payload) = bytes.get(HEADER_LEN..total) else { return Header::Incomplete };
    let peer = <Any as prost::Message>::decode(payload)
        .ok()
        .filter(|any| any.type_url == STRUCT_TYPE_URL)
        .and_then(|any| <Struct as prost::Message>::decode(any.value.as_slice()).ok())
        .and_then(|mut data| match data.fields.remove(wire::METADATA)?.kind? {
            Kind::StructValue(metadata) => Some(Box::new(wire::from_struct(metadata))),
            Kind::StringValue(_) => None,
        });
    Header::Frame(total, peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> LocalNode {
        let mut workload =
            WorkloadMetadata { workload_name: "ratings-v1".into(), namespace: "bookinfo".into(), ..Default::default() };
        workload.labels.insert("app".into(), "ratings".into());
        LocalNode { id: "sidecar~10.0.0.7~ratings.bookinfo~bookinfo.svc.cluster.local".into(), workload }
    }

    #[test]
    fn a_frame_is_magic_length_and_an_any_of_a_struct() {
        let frame = encode(&node());
        assert_eq!(frame[..4], [0x3D, 0x23, 0x04, 0x67]);
        let length = u32::from_be_bytes(frame[4..8].try_into().unwrap()) as usize;
        assert_eq!(frame.len(), 8 + length);
        // The generated Any and Struct read it too.
        let any = <crate::pb::google::protobuf::Any as prost::Message>::decode(&frame[8..]).unwrap();
        assert_eq!(any.type_url, "type.googleapis.com/google.protobuf.Struct");
        let data = <crate::pb::google::protobuf::Struct as prost::Message>::decode(any.value.as_slice()).unwrap();
        assert!(data.fields.contains_key("x-envoy-peer-metadata"));
        assert!(data.fields.contains_key("x-envoy-peer-metadata-id"));
        assert_eq!(parse(&frame), Header::Frame(frame.len(), Some(Box::new(node().workload))));
    }

    #[test]
    fn partial_and_foreign_bytes_are_told_apart() {
        let frame = encode(&node());
        for cut in [0, 3, 4, 7, 8, frame.len() - 1] {
            assert_eq!(parse(&frame[..cut]), Header::Incomplete, "cut at {cut}");
        }
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Header::NotExchange);
        assert_eq!(parse(&[0x3D, 0x23, 0x04, 0x67, 0xff, 0xff, 0xff, 0xff]), Header::NotExchange, "oversized");
        assert_eq!(parse(&[0x3D, 0x24]), Header::NotExchange);
    }
}
