//! The contract between the balancer and each policy, and the dispatch over policies.
//!
//! A policy has a shared part, built once per host set off the hot path (an EDF weight
//! table, a ring, a maglev table), and a per-worker cursor (a position, a scheduler
//! state). `pick` returns an index into the host set's hosts; it is called with the
//! worker's own RNG and never blocks.

use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;

use super::host::Host;
use super::pick_context::PickContext;
use super::{adaptive, cswrr, least_request, maglev, peak_ewma, random, ring_hash, round_robin};
use crate::config::cluster::LbPolicy;

/// The shared part of a policy for one host set.
#[derive(Debug)]
pub enum SharedPolicy {
    RoundRobin(round_robin::RoundRobin),
    LeastRequest(least_request::LeastRequest),
    Random(random::Random),
    RingHash(ring_hash::RingHash),
    Maglev(maglev::Maglev),
    Cswrr(cswrr::Cswrr),
    PeakEwma(peak_ewma::PeakEwma),
    Adaptive(adaptive::Adaptive),
}

/// A worker's cursor for one host set.
#[derive(Debug)]
pub enum Cursor {
    RoundRobin(round_robin::Cursor),
    LeastRequest(least_request::Cursor),
    Random,
    RingHash,
    Maglev,
    Cswrr(cswrr::Cursor),
    PeakEwma,
    Adaptive,
}

impl SharedPolicy {
    /// Builds `policy`'s shared part over `hosts`. `weights[i]` is host i's effective
    /// weight (its endpoint weight, times its locality's where the policy folds locality
    /// weights in, as ring hash and maglev do).
    pub fn build(policy: &LbPolicy, hosts: &[Arc<Host>], weights: &[f64], now: Instant) -> Self {
        match policy {
            LbPolicy::RoundRobin(config) => {
                Self::RoundRobin(round_robin::RoundRobin::new(hosts, config.slow_start.clone()))
            }
            LbPolicy::LeastRequest(config) => Self::LeastRequest(least_request::LeastRequest::new(hosts, config)),
            LbPolicy::Random => Self::Random(random::Random),
            LbPolicy::RingHash(config) => Self::RingHash(ring_hash::RingHash::new(hosts, weights, config)),
            LbPolicy::Maglev(config) => Self::Maglev(maglev::Maglev::new(hosts, weights, config)),
            LbPolicy::ClientSideWeightedRoundRobin(config) => Self::Cswrr(cswrr::Cswrr::new(hosts, config, now)),
            LbPolicy::PeakEwma(config) => Self::PeakEwma(peak_ewma::PeakEwma::new(config)),
            LbPolicy::Adaptive(config) => Self::Adaptive(adaptive::Adaptive::new(hosts, config)),
        }
    }

    pub fn cursor(&self, rng: &mut SmallRng) -> Cursor {
        match self {
            Self::RoundRobin(p) => Cursor::RoundRobin(p.cursor(rng)),
            Self::LeastRequest(p) => Cursor::LeastRequest(p.cursor(rng)),
            Self::Random(_) => Cursor::Random,
            Self::RingHash(_) => Cursor::RingHash,
            Self::Maglev(_) => Cursor::Maglev,
            Self::Cswrr(p) => Cursor::Cswrr(p.cursor(rng)),
            Self::PeakEwma(_) => Cursor::PeakEwma,
            Self::Adaptive(_) => Cursor::Adaptive,
        }
    }

    /// Picks an index into `hosts` (the hosts this policy was built over).
    pub fn pick(
        &self,
        hosts: &[Arc<Host>],
        cursor: &mut Cursor,
        rng: &mut SmallRng,
        ctx: &PickContext<'_>,
    ) -> Option<usize> {
        if hosts.is_empty() {
            return None;
        }
        match (self, cursor) {
            (Self::RoundRobin(p), Cursor::RoundRobin(c)) => p.pick(hosts, c, ctx),
            (Self::LeastRequest(p), Cursor::LeastRequest(c)) => p.pick(hosts, c, rng, ctx),
            (Self::Random(p), _) => p.pick(hosts, rng),
            (Self::RingHash(p), _) => p.pick(hosts, rng, ctx),
            (Self::Maglev(p), _) => p.pick(hosts, rng, ctx),
            (Self::Cswrr(p), Cursor::Cswrr(c)) => p.pick(hosts, c),
            (Self::PeakEwma(p), _) => p.pick(hosts, rng, ctx),
            (Self::Adaptive(p), _) => p.pick(hosts, rng, ctx),
            // A cursor of another policy: the host set was rebuilt under the worker; the
            // caller refreshes its cursors on the next generation. Pick at random meanwhile.
            _ => random::Random.pick(hosts, rng),
        }
    }

    /// Whether the policy places requests by their hash (then the priority level is chosen
    /// by the hash too, so a key sticks to its level).
    pub fn is_hash_based(policy: &LbPolicy) -> bool {
        matches!(policy, LbPolicy::RingHash(_) | LbPolicy::Maglev(_))
    }
}
