//! MAGLEV: Envoy's Maglev table (`maglev_lb.cc`, the paper's listing 1 with weights).
//!
//! Hosts are sorted by hash key so the table does not depend on host-set order. Host
//! `h` prefers slots `(offset + skip × j) mod M` for j = 0, 1, … with `offset =
//! xxh64(key, 0) mod M` and `skip = xxh64(key, 1) mod (M − 1) + 1`. The table fills in
//! rounds 1, 2, …: in round r a host claims its next free preferred slot only if `r × w ≥
//! target`, then its target grows by the largest normalised weight — so the heaviest host
//! claims a slot every round and one of a third its weight every third round. A request
//! goes to `table[hash mod M]`; the k-th host-selection retry first XORs the hash with
//! `2⁶⁴ − k` (`~0 − k + 1`), as Envoy does. With `hash_balance_factor` the slot's host is
//! kept only while within its bound ([`super::bounded_load`]).

use std::sync::Arc;

use rand::Rng;
use rand::rngs::SmallRng;
use xxhash_rust::xxh64::xxh64;

use super::bounded_load::BoundedLoad;
use super::hashing;
use super::host::Host;
use super::pick_context::PickContext;
use crate::config::cluster::MaglevConfig;

/// A slot nobody has claimed yet.
const FREE: u32 = u32::MAX;

#[derive(Debug, Default)]
pub struct Maglev {
    /// Host index per slot; empty when no host takes traffic, and for a single host (every
    /// slot would be that host: Envoy's degenerate table).
    table: Vec<u32>,
    /// The only host, when there is exactly one.
    single: Option<u32>,
    /// Fewest and most slots a host got (Envoy's `min_entries_per_host` /
    /// `max_entries_per_host` gauges).
    entries_per_host: (u64, u64),
    bounded: Option<BoundedLoad>,
}

/// One host's progress through its permutation while the table fills.
struct Filler {
    host: u32,
    offset: u64,
    skip: u64,
    weight: f64,
    target: f64,
    next: u64,
    count: u64,
}

impl Maglev {
    /// Builds the table over `hosts` with `weights` (see [`hashing::normalize`]).
    pub fn new(hosts: &[Arc<Host>], weights: &[f64], config: &MaglevConfig) -> Self {
        let normalized = hashing::normalize(weights, hosts.len());
        // The converter only accepts primes; two is the smallest table that can be filled.
        let size = config.table_size.max(2);
        let bounded = config.hash_balance_factor.map(|factor| BoundedLoad::new(factor, &normalized, hosts.len()));
        match normalized.hosts.as_slice() {
            [] => return Self::default(),
            [only] => return Self { single: Some(only.host), entries_per_host: (1, 1), bounded, ..Self::default() },
            _ => {}
        }
        let keys = hashing::keys(hosts, config.hash_key);
        let mut sorted: Vec<_> = normalized.hosts.iter().filter(|w| (w.host as usize) < keys.len()).collect();
        // Ties (two hosts with one key) keep host-set order; Envoy's order there is by pointer.
        sorted.sort_by(|a, b| keys[a.host as usize].cmp(&keys[b.host as usize]));
        let mut fillers: Vec<Filler> = sorted
            .into_iter()
            .map(|w| {
                let key = keys[w.host as usize].as_bytes();
                Filler {
                    host: w.host,
                    offset: xxh64(key, 0) % size,
                    skip: xxh64(key, 1) % (size - 1) + 1,
                    weight: w.weight,
                    target: 0.0,
                    next: 0,
                    count: 0,
                }
            })
            .collect();

        let mut table = vec![FREE; size as usize];
        let mut filled = 0_u64;
        let mut round = 1_u32;
        while filled < size {
            for filler in fillers.iter_mut() {
                if filled >= size {
                    break;
                }
                if f64::from(round) * filler.weight < filler.target {
                    continue;
                }
                filler.target += normalized.max;
                let slot = claim(&mut table, filler, size);
                table[slot] = filler.host;
                filler.next += 1;
                filler.count += 1;
                filled += 1;
            }
            round = round.wrapping_add(1);
        }
        let fewest = fillers.iter().map(|f| f.count).min().unwrap_or(0).min(size);
        let most = fillers.iter().map(|f| f.count).max().unwrap_or(0);
        Self { table, single: None, entries_per_host: (fewest, most), bounded }
    }

    /// The host of `hosts` (the hosts the table was built over) for `ctx.hash` (a random
    /// one without), or `None` when no host takes traffic.
    pub fn pick(&self, hosts: &[Arc<Host>], rng: &mut SmallRng, ctx: &PickContext<'_>) -> Option<usize> {
        if self.single.is_none() && self.table.is_empty() {
            return None;
        }
        let hash = ctx.hash.unwrap_or_else(|| rng.random());
        let host = self.choose(hash, ctx.attempt)?;
        Some(match &self.bounded {
            Some(bounded) => bounded.choose(hosts, hash, host),
            None => host,
        })
    }

    /// The host at `hash` for host-selection attempt `attempt` (0 = the first try).
    pub fn choose(&self, hash: u64, attempt: u32) -> Option<usize> {
        if let Some(only) = self.single {
            return Some(only as usize);
        }
        if self.table.is_empty() {
            return None;
        }
        let hash = if attempt > 0 { hash ^ u64::from(attempt).wrapping_neg() } else { hash };
        self.table.get((hash % self.table.len() as u64) as usize).map(|&h| h as usize)
    }

    /// (fewest, most) slots a host got; (1, 1) for a single host, as in Envoy.
    pub fn entries_per_host(&self) -> (u64, u64) {
        self.entries_per_host
    }

    /// The table: host index per slot (empty for a single host or none).
    pub fn table(&self) -> impl Iterator<Item = usize> + '_ {
        self.table.iter().map(|&h| h as usize)
    }
}

/// The filler's next free preferred slot. With a prime table the permutation visits every
/// slot, so a free one is found within `size` steps; should the size not be prime, fall
/// back to the first free slot rather than loop forever.
fn claim(table: &mut [u32], filler: &mut Filler, size: u64) -> usize {
    let permutation = |f: &Filler| (f.offset.wrapping_add(f.skip.wrapping_mul(f.next)) % size) as usize;
    for _ in 0..size {
        let slot = permutation(filler);
        if table[slot] == FREE {
            return slot;
        }
        filler.next += 1;
    }
    table.iter().position(|&h| h == FREE).unwrap_or(0)
}

#[cfg(test)]
mod tests;
