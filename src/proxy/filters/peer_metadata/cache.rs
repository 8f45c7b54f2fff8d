//! Peers already decoded, by header value: a peer sends the same header on every request,
//! so base64 and protobuf decoding happen once per peer (Istio's `max_peer_cache_size`
//! cache, keyed by the value rather than the id so a changed peer is never mistaken for
//! the old one). Sharded so that workers seldom meet on a lock, and bounded.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use super::wire;
use crate::config::filters::peer_metadata::WorkloadMetadata;

const SHARDS: usize = 8;
/// Entries per shard; a full shard is emptied (peers are few, so this is rare).
const SHARD_CAPACITY: usize = 128;

/// Decoded peers by header value.
type Shard = Mutex<HashMap<Box<[u8]>, Arc<WorkloadMetadata>>>;

#[derive(Default)]
pub struct PeerCache {
    hasher: std::collections::hash_map::RandomState,
    shards: [Shard; SHARDS],
}

impl PeerCache {
    /// The peer a header value names; `None` when it does not decode.
    pub fn decode(&self, value: &[u8]) -> Option<Arc<WorkloadMetadata>> {
        let shard = &self.shards[(self.hasher.hash_one(value) as usize) % SHARDS];
        if let Some(peer) = lock(shard).get(value) {
            return Some(peer.clone());
        }
        let peer = Arc::new(wire::decode(value)?);
        let mut entries = lock(shard);
        if entries.len() >= SHARD_CAPACITY {
            entries.clear();
        }
        entries.insert(value.into(), peer.clone());
        Some(peer)
    }
}

/// Nothing panics while holding a shard; a poisoned one still holds whole entries.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
