//! LEAST_REQUEST: with equal weights, the best of `choice_count` random hosts by in-flight
//! requests (P2C); with unequal weights, EDF over `weight / (active + 1)^bias`; or a full
//! scan with ties broken at random.
//!
//! Outrider samples the P2C candidates *without* replacement (tower's choice). Envoy
//! samples with replacement, so with two hosts half its "choices" compare a host with
//! itself, and a hung host can be drawn twice (grpc-java#12237). Ties go to the first
//! candidate drawn, which is random, so no position in the host list is favoured.

use std::sync::Arc;

use rand::Rng;
use rand::rngs::SmallRng;

use super::edf::Edf;
use super::host::Host;
use super::pick_context::PickContext;
use super::slow_start;
use crate::config::cluster::{LeastRequestConfig, SlowStartConfig};

#[derive(Debug)]
pub struct LeastRequest {
    choice_count: usize,
    active_request_bias: f64,
    full_scan: bool,
    weights: Vec<f64>,
    equal: bool,
    slow_start: Option<SlowStartConfig>,
}

#[derive(Debug)]
pub enum Cursor {
    Choices,
    Edf(Edf),
}

impl LeastRequest {
    pub fn new(hosts: &[Arc<Host>], config: &LeastRequestConfig) -> Self {
        let weights: Vec<f64> = hosts.iter().map(|h| f64::from(h.weight())).collect();
        Self {
            choice_count: (config.choice_count as usize).max(2),
            active_request_bias: config.active_request_bias,
            full_scan: config.full_scan,
            equal: weights.windows(2).all(|w| w[0] == w[1]),
            weights,
            slow_start: config.slow_start.clone(),
        }
    }

    pub fn cursor(&self, rng: &mut SmallRng) -> Cursor {
        if self.full_scan || (self.equal && self.slow_start.is_none()) {
            return Cursor::Choices;
        }
        let n = self.weights.len().max(1);
        let weights = self.weights.clone();
        Cursor::Edf(Edf::new(self.weights.iter().copied(), rng.random_range(0..n), |i| weights[i]))
    }

    pub fn pick(
        &self,
        hosts: &[Arc<Host>],
        cursor: &mut Cursor,
        rng: &mut SmallRng,
        ctx: &PickContext<'_>,
    ) -> Option<usize> {
        if self.full_scan {
            return Some(full_scan(hosts, rng));
        }
        match cursor {
            Cursor::Choices => Some(best_of(hosts, self.choice_count, rng)),
            Cursor::Edf(edf) => edf.next(&mut |i| self.weight(hosts, i, ctx)),
        }
    }

    /// `weight / (active + 1)^bias`, after slow start.
    fn weight(&self, hosts: &[Arc<Host>], index: usize, ctx: &PickContext<'_>) -> f64 {
        let Some(host) = hosts.get(index) else { return 1.0 };
        let mut weight = self.weights.get(index).copied().unwrap_or(1.0);
        if let Some(config) = &self.slow_start {
            weight = slow_start::weight(config, weight, host.stats.first_seen(), ctx.now);
        }
        let active = f64::from(host.stats.in_flight()) + 1.0;
        if self.active_request_bias == 1.0 {
            weight / active
        } else if self.active_request_bias == 0.0 {
            weight
        } else {
            weight / active.powf(self.active_request_bias)
        }
    }
}

/// The host with the fewest in-flight requests among `choices` distinct random ones.
fn best_of(hosts: &[Arc<Host>], choices: usize, rng: &mut SmallRng) -> usize {
    let n = hosts.len();
    if n == 1 {
        return 0;
    }
    if choices >= n {
        return full_scan(hosts, rng);
    }
    let mut best = rng.random_range(0..n);
    if choices == 2 {
        // Two distinct draws in constant time.
        let mut other = rng.random_range(0..n - 1);
        if other >= best {
            other += 1;
        }
        if hosts[other].stats.in_flight() < hosts[best].stats.in_flight() {
            best = other;
        }
        return best;
    }
    let mut drawn = Vec::with_capacity(choices);
    drawn.push(best);
    while drawn.len() < choices {
        let candidate = rng.random_range(0..n);
        if drawn.contains(&candidate) {
            continue;
        }
        drawn.push(candidate);
        if hosts[candidate].stats.in_flight() < hosts[best].stats.in_flight() {
            best = candidate;
        }
    }
    best
}

/// The least-loaded host of all; ties broken by reservoir sampling.
fn full_scan(hosts: &[Arc<Host>], rng: &mut SmallRng) -> usize {
    let mut best = 0;
    let mut least = u32::MAX;
    let mut ties = 0u32;
    for (i, host) in hosts.iter().enumerate() {
        let active = host.stats.in_flight();
        if active < least {
            least = active;
            best = i;
            ties = 1;
        } else if active == least {
            ties += 1;
            if rng.random_range(0..ties) == 0 {
                best = i;
            }
        }
    }
    best
}
