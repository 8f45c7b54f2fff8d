//! Outrider's adaptive policy, the demo's default: the endpoint with the lowest expected
//! latency for the next request (of all, up to 8 endpoints; else of two drawn at random), estimated from every signal the endpoint gives, each
//! standing in for nothing when it is missing:
//!
//! `cost = latency + in_flight / capacity + error_penalty`
//!
//! - `latency`: the endpoint's peak-EWMA round trip (`EndpointStats`, shared with the
//!   peak-EWMA policy), `default_rtt` before the first sample.
//! - `in_flight / capacity`: how long the requests already sent there take to drain.
//!   `capacity` is what the endpoint's last ORCA report says it serves at full
//!   utilization (`rps_fractional / utilization`). Without a report the endpoint is taken
//!   for one that serves a request at a time, `capacity = 1 / latency`, and the cost is
//!   Linkerd's `latency × (in_flight + 1)`. With one, an endpoint with free capacity is not
//!   charged for requests it serves in parallel: peak-EWMA alone sends a 50 ms backend a
//!   share whenever the 5 ms one has enough requests in flight, though those requests wait
//!   for nothing; and endpoints of one speed fill in proportion to their capacity, which is
//!   CSWRR's split, without CSWRR's blackout or its round-robin weight during it.
//! - `error_penalty`: `error_penalty × error fraction × min(recent errors, 1) × 2^(errors in
//!   a row − 1)`: a failure costs the caller about one more round trip (30 ms), weighed by
//!   how likely it is. The error fraction is of recent outcomes (decaying by e every 10 s),
//!   so an endpoint that fails 1 % of a heavy load pays 1 % of the penalty, not one penalty
//!   per error. Once the endpoint is no longer tried, its recent errors fade below one and
//!   take the penalty down with them, so it is tried again. The doubling backs a black hole
//!   off the way outlier detection's ejection time grows: its next trial comes about 3 s
//!   after its first error, the one after that about 15 s later.
//!
//! One more rule, for an endpoint that joins a cluster already serving (first seen more
//! than `founding_grace` after the cluster's first endpoint) during its first `warmup`: its
//! latency is taken as its rival's when its own is higher. A cold endpoint answers slowly
//! until it has served its first requests (JIT, caches, connection pools); charged at its
//! own latency it would never get them, which is how peak-EWMA leaves a scale-up unused.
//! Its in-flight term still counts at its own speed (or its reported capacity), so it gets
//! about as many requests as it can serve at once, not a rival's share. Errors are not
//! forgiven during warm-up.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;
use rand::rngs::SmallRng;

use super::host::Host;
use super::pick_context::PickContext;
use crate::config::cluster::lb_policy::AdaptiveConfig;

/// Up to this many endpoints every pick compares them all; above it, two drawn at random.
/// With few endpoints P2C's sampling shows: among 2, 4 and 8 slots it gives the largest
/// about 52 % where its capacity is 57 %, and a scan of 8 costs less than a connection
/// look-up. With many, comparing all would send every worker to the same endpoint.
const FULL_SCAN_HOSTS: usize = 8;

#[derive(Debug)]
pub struct Adaptive {
    config: AdaptiveConfig,
    /// When the earliest endpoint of the host set was first seen (the cluster's founding,
    /// as far as this set knows).
    founded: Option<Instant>,
}

/// One endpoint's cost, in its parts (nanoseconds), for a pick or an admin view.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub latency: f64,
    pub queue: f64,
    pub penalty: f64,
    /// Joined a serving cluster less than `warmup` ago.
    pub warming: bool,
}

impl Cost {
    pub fn total(&self) -> f64 {
        self.latency + self.queue + self.penalty
    }

    /// The cost against `rival`: a warming endpoint's latency is its rival's when lower.
    fn against(&self, rival: &Cost) -> f64 {
        let latency = if self.warming && !rival.warming { self.latency.min(rival.latency) } else { self.latency };
        latency + self.queue + self.penalty
    }
}

impl Adaptive {
    pub fn new(hosts: &[Arc<Host>], config: &AdaptiveConfig) -> Self {
        let founded = hosts.iter().map(|h| h.stats.first_seen()).min();
        Self { config: config.clone(), founded }
    }

    pub fn pick(&self, hosts: &[Arc<Host>], rng: &mut SmallRng, ctx: &PickContext<'_>) -> Option<usize> {
        let n = hosts.len();
        if n <= 1 {
            return (n == 1).then_some(0);
        }
        if n <= FULL_SCAN_HOSTS {
            return Some(self.cheapest(hosts, rng.random_range(0..n), ctx.now));
        }
        let first = rng.random_range(0..n);
        let mut second = rng.random_range(0..n - 1);
        if second >= first {
            second += 1;
        }
        let a = self.cost(&hosts[first], ctx.now);
        let b = self.cost(&hosts[second], ctx.now);
        // Ties go to the first drawn, which is random.
        Some(if b.against(&a) < a.against(&b) { second } else { first })
    }

    /// The cheapest of all `hosts`, looking from `start` on so that ties go to a random one.
    /// A warming endpoint is compared at the cheapest latency among the others.
    fn cheapest(&self, hosts: &[Arc<Host>], start: usize, now: Instant) -> usize {
        let none = Cost { latency: 0.0, queue: 0.0, penalty: 0.0, warming: false };
        let mut costs = [(0, none); FULL_SCAN_HOSTS];
        for (k, slot) in costs.iter_mut().take(hosts.len()).enumerate() {
            let i = (start + k) % hosts.len();
            *slot = (i, self.cost(&hosts[i], now));
        }
        let costs = &costs[..hosts.len().min(FULL_SCAN_HOSTS)];
        let fastest =
            costs.iter().filter(|(_, c)| !c.warming).map(|(_, c)| c).min_by(|a, b| a.latency.total_cmp(&b.latency));
        let mut best = (start, f64::INFINITY);
        for (i, cost) in costs {
            let total = fastest.map_or_else(|| cost.total(), |rival| cost.against(rival));
            if total < best.1 {
                best = (*i, total);
            }
        }
        best.0
    }

    /// `host`'s cost at `now`, in its parts.
    pub fn cost(&self, host: &Host, now: Instant) -> Cost {
        let stats = &host.stats;
        let config = &self.config;
        let latency = stats.rtt_estimate(now).unwrap_or(config.default_rtt).as_nanos() as f64;
        let in_flight = f64::from(stats.in_flight());
        let queue = match stats.capacity(now, config.report_expiration) {
            Some(per_second) => in_flight * 1e9 / per_second,
            None => in_flight * latency,
        };
        let recent_errors = stats.error_penalty_at(now);
        let penalty = if recent_errors > 0.0 {
            let doublings = stats.consecutive_errors().saturating_sub(1).min(config.max_error_doublings);
            let backoff = f64::from(doublings).exp2();
            // At most one recent error's worth: the fraction says how likely a failure is;
            // the fading count only lets an endpoint that stopped being tried be tried again.
            let fading = recent_errors.min(1.0);
            config.error_penalty.as_nanos() as f64 * stats.recent_error_fraction() * fading * backoff
        } else {
            0.0
        };
        let warming = self.founded.is_some_and(|founded| {
            let seen = stats.first_seen();
            seen.saturating_duration_since(founded) > config.founding_grace
                && now.saturating_duration_since(seen) < config.warmup
        });
        Cost { latency, queue, penalty, warming }
    }
}

#[cfg(test)]
mod tests;
