//! Outrider's adaptive policy, the demo's default: the endpoint with the lowest expected
//! latency for the next request (of all, up to 8 endpoints; else of two drawn at random),
//! estimated from every signal the endpoint gives, each standing in for nothing when it is
//! missing:
//!
//! `cost = latency + in_flight / capacity + error_penalty`
//!
//! - `latency`: the endpoint's mean round trip over about the last second (an EWMA kept in
//!   `EndpointStats`), `default_rtt` before the first sample. A mean, not peak-EWMA's
//!   peak: the queue term below sees a stall the moment requests pile up, and a peak's
//!   memory of one slow response would swing the split between equal endpoints for
//!   seconds. Like the peak, it decays towards zero while the endpoint gets no requests,
//!   so an endpoint left alone is tried again.
//! - `queue`: the load already there. With an ORCA report it is `(in_flight + ½) /
//!   capacity`, where `capacity` is what the endpoint says it serves at full utilization
//!   (`rps_fractional / utilization`): picking the lowest of these apportions requests the
//!   way Sainte-Laguë's divisors apportion seats, in proportion to capacity without bias
//!   between large and small endpoints. `+ 1`, D'Hondt's divisor, favours the large: the
//!   lab's 2-slot endpoint beside 4- and 8-slot ones got 11 % where its capacity is 14 %;
//!   `+ 0` favours the small (20 %); `+ ½` gave it 12–13 % (`bench/RESULTS.md`, S5).
//!   A recent report also charges the wait behind every caller's requests: the round trip
//!   and the wait behind this caller's are stretched by M/M/1's `1 / (1 − u)` at the
//!   report's utilization (or this caller's own rate sent over the capacity, if higher),
//!   so `latency + queue = (latency + (in_flight + ½) / capacity) / (1 − u)`:
//!   a caller's in-flight count cannot tell a pod limited to a tenth of a CPU from one at
//!   four tenths, and sees nothing of other callers or a neighbour's use of the CPU.
//!   Stretching the whole keeps the count in flight steering in an overload, where every
//!   endpoint's utilization is at the cap and its mean round trip lags its queue.
//!   Between endpoints of one latency, the lowest wait is the lowest utilization: the
//!   picks even utilizations out (`bench/RESULTS.md`, S8).
//!   Without a report the endpoint is taken for one that serves a request at a time:
//!   `in_flight × latency`, which makes the cost Linkerd's `latency × (in_flight + 1)`.
//!   Without a capacity but with a report from an Outrider server sidecar, `latency` there
//!   is the longer of the round trip and the wait the report implies, the requests in the
//!   application over the rate it answers them at (Little's law): the mean round trip
//!   lags a queue that grew since and knows nothing of one other callers made. In the
//!   lab's S10 two backends joined into an overload whose sidecars reported no
//!   utilization were costed at their first 68 ms round trips and sent 154 requests each
//!   within half a second, where the others had 790 ms round trips (`bench/RESULTS.md`).
//!   With a report, an endpoint with spare capacity is not charged a whole round trip per
//!   request it serves in parallel: peak-EWMA alone sends a 50 ms backend a share whenever
//!   the 5 ms one has enough requests in flight, though they wait for nothing there; and
//!   endpoints of one speed fill in proportion to their capacities, CSWRR's split, without
//!   CSWRR's blackout or its round robin until the weights come.
//!
//!   A report must never starve the endpoint that sent it (issue 36: the demo's `busy`,
//!   2 slots of 5 ms, reported 1 request a second at utilization 0.5, was costed 250 ms
//!   with nothing in flight and got 1 request of about 5 500). So a capacity is
//!   taken only from a report at a utilization of at least 0.2 (below, the rate is a
//!   handful of requests or the utilization a CPU's baseline: `rps / utilization` is far
//!   below what the endpoint serves); it is floored at one request per round trip (an
//!   endpoint answering in `latency` serves at least `1 / latency` a second, Little's law
//!   with one in flight), so a request is never charged more than a round trip; and it is
//!   dropped when no newer report came for `report_refresh` (2 s, or 4 of the endpoint's
//!   round trips if longer; `report_expiration`, 180 s, at most): reports come with
//!   responses, so an old one means the endpoint is getting no requests. A report that is
//!   absurd (utilization above 100, a rate above 10⁹ a second; the decoders refuse NaN and
//!   negatives) is refused whole and counted in the endpoint's `load_report_refused`.
//! - `error_penalty`: `error_penalty × error fraction × min(recent errors, 1) × 2^(errors in
//!   a row − 1)`: a failure costs the caller about one more round trip (30 ms), weighed by
//!   how likely it is. The error fraction is of recent outcomes (decaying by e every 10 s),
//!   so an endpoint that fails 1 % of a heavy load pays 1 % of the penalty, not one penalty
//!   per error. Once the endpoint is no longer tried, its recent errors fade below one and
//!   take the penalty down with them, so it is tried again. The doubling backs a black hole
//!   off the way outlier detection's ejection time grows: its next trial comes about 3 s
//!   after its first error, the one after that about 15 s later.
//!
//! Two more rules give an endpoint the next request whatever its cost:
//!
//! - Warm-up, for an endpoint that joins a cluster already serving (first seen more than
//!   `founding_grace` after the cluster's first endpoint): during its first `warmup` it
//!   gets the next request whenever it has none in flight and no recent error. A cold
//!   endpoint answers slowly until it has served its first requests (JIT, caches,
//!   connection pools); costed at its own latency it would never get them, which is how
//!   peak-EWMA leaves a scale-up unused. One request at a time warms it without a queue;
//!   it gets more as soon as its cost is lower than the others', which it is when they are
//!   loaded.
//! - The trickle, for an endpoint the costs have left idle: one that has answered nothing
//!   for `trickle_after` (1 s), has nothing in flight and did not fail its last request
//!   gets the next pick if another endpoint compared has a request in flight. A cost is
//!   only as good as the signals under it, and an endpoint that gets no requests sends no
//!   new ones (Prequal probes for them; here the probe is a request). Its share is bounded:
//!   one request at a time, each after a second idle, so about one a second per endpoint,
//!   and none while the cluster is idle between requests (each pick then goes by cost,
//!   which at light load is latency). An endpoint failing in a row is left to the error
//!   penalty's backoff.
//!
//! A pick reads a few shared atomics per endpoint compared (`EndpointStats`) and writes
//! nothing; the queue term's rules are in `adaptive::queue`.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;
use rand::rngs::SmallRng;

use super::host::Host;
use super::pick_context::PickContext;
use crate::config::cluster::lb_policy::AdaptiveConfig;

mod queue;

/// Up to this many endpoints every pick compares them all; above it, two drawn at random.
/// With few endpoints P2C's sampling shows (with 3, a third of the picks cannot choose the
/// largest), and a scan of 8 costs less than a connection look-up. With many, comparing
/// all would send every worker to the same endpoint.
const FULL_SCAN_HOSTS: usize = 8;

/// What an endpoint's queue term counts the request being placed as (see the module doc).
const SAINTE_LAGUE: f64 = 0.5;

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
    /// Joined a serving cluster less than `warmup` ago, and has no request in flight and
    /// no recent error: it gets the next request.
    pub idle_warming: bool,
    /// Requests in flight to the endpoint.
    pub in_flight: u32,
    /// Has answered nothing for `trickle_after`, has nothing in flight and did not fail its
    /// last request: it gets the next request if another endpoint compared is serving.
    pub trickle: bool,
}

impl Cost {
    pub fn total(&self) -> f64 {
        if self.idle_warming { 0.0 } else { self.latency + self.queue + self.penalty }
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
        let (a, b) = (self.cost(&hosts[first], ctx.now), self.cost(&hosts[second], ctx.now));
        if a.trickle && b.in_flight > 0 {
            return Some(first);
        }
        if b.trickle && a.in_flight > 0 {
            return Some(second);
        }
        // Ties go to the first drawn, which is random.
        Some(if b.total() < a.total() { second } else { first })
    }

    /// The cheapest of all `hosts`, looking from `start` on so that ties go to a random one;
    /// but the first due a trickle if another is serving.
    fn cheapest(&self, hosts: &[Arc<Host>], start: usize, now: Instant) -> usize {
        let mut best = (start, f64::INFINITY);
        let mut trickle = None;
        let mut serving = false;
        for i in (0..hosts.len()).map(|k| (start + k) % hosts.len()) {
            let cost = self.cost(&hosts[i], now);
            serving |= cost.in_flight > 0;
            if cost.trickle && trickle.is_none() {
                trickle = Some(i);
            }
            if cost.total() < best.1 {
                best = (i, cost.total());
            }
        }
        // A trickle candidate has nothing in flight, so `serving` is about the others.
        match trickle {
            Some(i) if serving => i,
            _ => best.0,
        }
    }

    /// `host`'s cost at `now`, in its parts.
    pub fn cost(&self, host: &Host, now: Instant) -> Cost {
        let stats = &host.stats;
        let config = &self.config;
        let round_trip = stats.rtt_mean(now).unwrap_or(config.default_rtt).as_nanos() as f64;
        let max_age = queue::report_max_age(round_trip, config);
        let load = stats.measured_load(now, max_age);
        // Without a capacity the endpoint is taken for one that serves a request at a time,
        // at its mean round trip of the last second, which lags a queue that grew since
        // and knows nothing of one other callers made. Its sidecar's count of requests in
        // the application over their rate (Little's law) does; when longer, it is the
        // round trip. (With a capacity the queue term charges the queue instead; there the
        // count, one instant's, would swing a small pool's cost report by report.)
        let latency = match load {
            Some(_) => round_trip,
            None => stats.queue_wait(now, max_age).map_or(round_trip, |wait| round_trip.max(wait)),
        };
        let in_flight = stats.in_flight();
        let queue = queue::queue(stats, now, latency, f64::from(in_flight), load);
        let recent_errors = stats.error_penalty_at(now);
        let consecutive_errors = stats.consecutive_errors();
        let penalty = if recent_errors > 0.0 {
            let doublings = consecutive_errors.saturating_sub(1).min(config.max_error_doublings);
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
        let idle_warming = warming && in_flight == 0 && penalty == 0.0;
        // Errors in a row are the error penalty's business (its backoff decides when a
        // failing endpoint is tried again); the trickle is for endpoints left idle by costs.
        let trickle =
            in_flight == 0 && consecutive_errors == 0 && stats.since_last_response(now) >= config.trickle_after;
        Cost { latency, queue, penalty, idle_warming, in_flight, trickle }
    }
}

#[cfg(test)]
mod tests;
