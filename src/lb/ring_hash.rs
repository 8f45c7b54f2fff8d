//! RING_HASH: Envoy's ketama ring (`ring_hash_lb.cc`), entry for entry.
//!
//! The ring is scaled so the lightest host gets a whole number of entries:
//! `scale = min(ceil(min_w × minimum_ring_size) / min_w, maximum_ring_size)` over
//! normalised weights. Hosts are walked in host-set order with running sums (`target +=
//! scale × w`; while `current < target`: one more entry), so fractional shares carry over
//! to the next host exactly as in Envoy. Entry `i` of a host sits at xxHash64 of
//! `"<hash_key>_<i>"`. A request goes to the first entry at or after its hash, wrapping
//! to the start; the k-th host-selection retry takes the entry k places further on. With
//! `hash_balance_factor` the entry's host is kept only while within its bound
//! ([`super::bounded_load`]).

use std::fmt::Write;
use std::sync::Arc;

use rand::Rng;
use rand::rngs::SmallRng;

use super::bounded_load::BoundedLoad;
use super::hashing::{self, xxhash64};
use super::host::Host;
use super::pick_context::PickContext;
use crate::config::cluster::RingHashConfig;

/// The ring: entry hashes in ascending order and, at the same positions, the index of the
/// host each belongs to. Two parallel vectors (12 bytes an entry) keep the binary search
/// on a dense array of hashes.
#[derive(Debug, Default)]
pub struct RingHash {
    hashes: Vec<u64>,
    hosts: Vec<u32>,
    /// Fewest and most entries a host with a share of the ring got (Envoy's
    /// `min_hashes_per_host` / `max_hashes_per_host` gauges).
    hashes_per_host: (u64, u64),
    bounded: Option<BoundedLoad>,
}

impl RingHash {
    /// Builds the ring over `hosts` with `weights` (see [`hashing::normalize`]).
    pub fn new(hosts: &[Arc<Host>], weights: &[f64], config: &RingHashConfig) -> Self {
        let normalized = hashing::normalize(weights, hosts.len());
        if normalized.hosts.is_empty() {
            return Self::default();
        }
        let min_ring = config.minimum_ring_size as f64;
        let max_ring = config.maximum_ring_size as f64;
        let min_weight = normalized.min;
        let scale = ((min_weight * min_ring).ceil() / min_weight).min(max_ring);
        // Envoy's ring size is `ceil(scale)`; the walk below may add one entry more or
        // less when the weights' float sum is not exactly 1.
        let ring_size = scale.ceil() as u64;
        let capacity = ring_size as usize;

        let mut entries: Vec<(u64, u32)> = Vec::with_capacity(capacity);
        let mut key = String::new();
        let mut current = 0.0_f64;
        let mut target = 0.0_f64;
        let mut fewest = ring_size;
        let mut most = 0_u64;
        for weighted in &normalized.hosts {
            let Some(host) = hosts.get(weighted.host as usize) else { continue };
            key.clear();
            key.push_str(&hashing::host_key(host, config.hash_key));
            key.push('_');
            let prefix = key.len();
            target += scale * weighted.weight;
            let mut i = 0_u64;
            while current < target {
                key.truncate(prefix);
                let _ = write!(key, "{i}");
                entries.push((xxhash64(key.as_bytes()), weighted.host));
                i += 1;
                current += 1.0;
            }
            fewest = fewest.min(i);
            most = most.max(i);
        }
        entries.sort_unstable_by_key(|&(hash, _)| hash);
        let (hashes, ring_hosts) = entries.into_iter().unzip();
        let bounded = config.hash_balance_factor.map(|factor| BoundedLoad::new(factor, &normalized, hosts.len()));
        Self { hashes, hosts: ring_hosts, hashes_per_host: (fewest, most), bounded }
    }

    /// The host of `hosts` (the hosts the ring was built over) for `ctx.hash` (a random
    /// point without one), or `None` on an empty ring.
    pub fn pick(&self, hosts: &[Arc<Host>], rng: &mut SmallRng, ctx: &PickContext<'_>) -> Option<usize> {
        if self.hashes.is_empty() {
            return None;
        }
        let hash = ctx.hash.unwrap_or_else(|| rng.random());
        let host = self.host_at(self.position(hash), ctx.attempt);
        Some(match &self.bounded {
            Some(bounded) => bounded.choose(hosts, hash, host),
            None => host,
        })
    }

    /// The host at `hash` for host-selection attempt `attempt` (0 = the first try). A
    /// retry moves `attempt` entries along the ring, as Envoy does; that may well be the
    /// same host again. `None` on an empty ring.
    pub fn choose(&self, hash: u64, attempt: u32) -> Option<usize> {
        (!self.hashes.is_empty()).then(|| self.host_at(self.position(hash), attempt))
    }

    /// Index of the first entry whose hash is ≥ `hash`, 0 past the last (Envoy's port of
    /// ketama's `ketama_get_server`, which is this lower bound).
    fn position(&self, hash: u64) -> usize {
        let position = self.hashes.partition_point(|&h| h < hash);
        if position == self.hashes.len() { 0 } else { position }
    }

    fn host_at(&self, position: usize, attempt: u32) -> usize {
        let position = if attempt > 0 { (position + attempt as usize) % self.hosts.len() } else { position };
        self.hosts.get(position).map_or(0, |&h| h as usize)
    }

    /// Number of entries on the ring.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// (fewest, most) entries a host got, over the hosts with a share of the ring.
    pub fn hashes_per_host(&self) -> (u64, u64) {
        self.hashes_per_host
    }

    /// The ring in order: (entry hash, host index).
    pub fn entries(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.hashes.iter().zip(&self.hosts).map(|(&hash, &host)| (hash, host as usize))
    }
}

#[cfg(test)]
mod tests;
