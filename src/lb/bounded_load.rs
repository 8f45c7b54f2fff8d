//! Consistent hashing with bounded loads: `hash_balance_factor` of ring hash and maglev,
//! as Envoy's `BoundedLoadHashingLoadBalancer` (`thread_aware_lb_impl.cc`) does it, after
//! Mirrokni, Thorup and Zadimoghaddam (arXiv:1608.01350).
//!
//! A host may carry `factor / 100` times its weighted share of the cluster's active
//! requests. The ring's (or table's) host is kept while it is within that bound; otherwise
//! the hosts are walked in a shuffle seeded by the request hash (so one key always spills
//! the same way, and different keys spill to different hosts instead of piling onto the
//! ring's next entry: arXiv:1908.08762) and the first host within its bound wins. When every
//! host is over, the least overloaded one is used.
//!
//! Bit for bit as Envoy: the bound is `max(ceil(⌊((active + 1) × factor + 99) / 100⌋ ×
//! weight), 1)` with the cluster's `upstream_rq_active` as `active`; the shuffle is a
//! Fisher–Yates over host-set order drawn from `std::mt19937` seeded with the hash's low 32
//! bits (what `std::mt19937(uint64_t)` keeps), with Envoy's own division-based draw. One
//! deliberate difference: Envoy computes `(active + 1) × factor` in 32 bits, which wraps
//! past 4 294 967 295; Outrider saturates instead.

use std::sync::Arc;

use rand_mt::Mt;

use super::hashing::Normalized;
use super::host::Host;

/// The bound and what a spill may choose from, built with the ring or table.
#[derive(Debug)]
pub struct BoundedLoad {
    /// `hash_balance_factor`: a percentage, at least 100.
    factor: u32,
    /// Host indices in host-set order (Envoy's normalised weight vector).
    candidates: Vec<u32>,
    /// Normalised weight by host index; 0 for a host without a share.
    weights: Vec<f64>,
}

impl BoundedLoad {
    /// The bound for the hosts `normalized` gives a share (of `host_count` hosts).
    pub fn new(factor: u32, normalized: &Normalized, host_count: usize) -> Self {
        let mut weights = vec![0.0; host_count];
        let mut candidates = Vec::with_capacity(normalized.hosts.len());
        for weighted in &normalized.hosts {
            if let Some(weight) = weights.get_mut(weighted.host as usize) {
                *weight = weighted.weight;
                candidates.push(weighted.host);
            }
        }
        Self { factor, candidates, weights }
    }

    /// The host for a request with `hash` whose ring (or table) host is `first`.
    pub fn choose(&self, hosts: &[Arc<Host>], hash: u64, first: usize) -> usize {
        let Some(overload) = self.overload(hosts, first) else { return first };
        if overload <= 1.0 {
            return first;
        }
        let (mut least, mut least_overload) = (first, overload);
        for candidate in Shuffle::new(self.candidates.clone(), hash) {
            let candidate = candidate as usize;
            if candidate == first {
                continue;
            }
            let Some(overload) = self.overload(hosts, candidate) else { continue };
            if overload <= 1.0 {
                return candidate;
            }
            if overload < least_overload {
                (least, least_overload) = (candidate, overload);
            }
        }
        least
    }

    /// Host `index`'s active requests over its bound (≤ 1 is within it); `None` for a host
    /// not in the set.
    fn overload(&self, hosts: &[Arc<Host>], index: usize) -> Option<f64> {
        let host = hosts.get(index)?;
        let weight = *self.weights.get(index)?;
        let cluster_active = host.cluster_stats.upstream_rq_active.get().clamp(0, i64::from(u32::MAX)) as u64;
        let total_slots = (cluster_active + 1).saturating_mul(u64::from(self.factor)).saturating_add(99) / 100;
        let total_slots = total_slots.min(u64::from(u32::MAX)) as f64;
        let slots = ((total_slots * weight).ceil() as u32).max(1);
        Some(f64::from(host.stats.in_flight()) / f64::from(slots))
    }
}

/// The hosts in the order a spill tries them: a Fisher–Yates shuffle drawn step by step, so
/// a spill that finds a host early draws no further.
struct Shuffle {
    order: Vec<u32>,
    /// `std::mt19937(seed)` keeps `seed mod 2³²`.
    twister: Mt,
    next: usize,
}

impl Shuffle {
    fn new(order: Vec<u32>, hash: u64) -> Self {
        Self { order, twister: Mt::new(hash as u32), next: 0 }
    }

    /// A draw uniform in `[0, k)`, `k ≥ 1`: Envoy's `uniform_int` (the 32-bit output divided
    /// by `2³² / k`, drawn again when the quotient reaches `k`), not a standard library's
    /// distribution, whose draws differ between implementations.
    fn below(&mut self, k: u32) -> u32 {
        let bucket = (1_u64 << 32) / u64::from(k.max(1));
        loop {
            let x = u64::from(self.twister.next_u32()) / bucket;
            if x < u64::from(k) {
                return x as u32;
            }
        }
    }
}

impl Iterator for Shuffle {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let i = self.next;
        let remaining = self.order.len().checked_sub(i).filter(|&n| n > 0)?;
        let j = self.below(u32::try_from(remaining).unwrap_or(u32::MAX)) as usize;
        self.order.swap(i, i + j);
        self.next += 1;
        self.order.get(i).copied()
    }
}

#[cfg(test)]
mod tests;
