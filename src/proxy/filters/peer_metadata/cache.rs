//! Peers already decoded, by header value: a peer sends the same header on every request,
//! so base64 and protobuf decoding happen once per peer (Istio's `max_peer_cache_size`
//! cache, keyed by the value rather than the id so a changed peer is never mistaken for
//! the old one). Each worker keeps its own, bounded: a request finds its peer with no lock,
//! and the peer it gets is its worker's own copy, whose reference count no other worker
//! writes (a peer is decoded once per worker, which costs microseconds once).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use thread_local::ThreadLocal;

use super::wire;
use crate::config::filters::peer_metadata::WorkloadMetadata;

/// Entries per worker; a full cache is emptied (peers are few, so this is rare).
const CAPACITY: usize = 1024;

/// One worker's decoded peers, by header value.
type Peers = RefCell<HashMap<Box<[u8]>, Arc<WorkloadMetadata>>>;

/// Decoded peers, one map per worker.
#[derive(Default)]
pub struct PeerCache {
    workers: ThreadLocal<Peers>,
}

impl PeerCache {
    /// The peer a header value names; `None` when it does not decode.
    pub fn decode(&self, value: &[u8]) -> Option<Arc<WorkloadMetadata>> {
        let entries = self.workers.get_or_default();
        if let Some(peer) = entries.borrow().get(value) {
            return Some(peer.clone());
        }
        let peer = Arc::new(wire::decode(value)?);
        let mut entries = entries.borrow_mut();
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(value.into(), peer.clone());
        Some(peer)
    }
}
