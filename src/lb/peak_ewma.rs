//! Peak-EWMA P2C (Linkerd's and Finagle's balancer, tower's `PeakEwma`): draw two distinct
//! hosts at random and take the cheaper, where
//! `cost = (rtt_estimate + error_penalty × recent_errors) × (in_flight + 1)`.
//!
//! The RTT estimate is the per-endpoint peak-EWMA in `EndpointStats` (a slower sample is
//! taken at once, faster ones pull it down over the 10 s decay, and an idle endpoint's
//! estimate decays towards zero so it is tried again); `default_rtt` stands in before the
//! first sample. Ties go to the first host drawn, which is random.
//!
//! Why the error penalty is *added* as latency: a latency-only balancer loves an endpoint
//! that fails in a millisecond (the black hole of ingress-nginx#9882, linkerd2#15374). An
//! error does not save the caller time; it costs it a retry elsewhere, about one more
//! round trip, so each recent error (counted 1, decaying with the estimate's 10 s) adds
//! `error_penalty` (default: the default RTT, 30 ms) to the endpoint's latency. A
//! multiplicative penalty (`rtt × (1 + k × errors)`) scales with the failing endpoint's
//! own RTT, which for a black hole is tiny, so it needs tens of errors to bite; the
//! additive one needs two to make a 1 ms black hole look worse than a 50 ms healthy peer.
//! Under load, in-flight counts dominate the cost and the penalty only tilts the choice,
//! and it fades within seconds once the endpoint stops failing.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;
use rand::rngs::SmallRng;

use super::host::Host;
use super::pick_context::PickContext;
use crate::config::cluster::lb_policy::PeakEwmaConfig;

const NANOS_PER_MILLI: f64 = 1e6;

#[derive(Debug)]
pub struct PeakEwma {
    /// Nanoseconds.
    default_rtt: f64,
    /// Nanoseconds per recent error.
    error_penalty: f64,
    /// Nanoseconds × requests: the cost of an endpoint with requests in flight and no
    /// sample yet (Envoy's contrib policy; see `PeakEwmaConfig::unmeasured_busy_cost`).
    unmeasured_busy_cost: Option<f64>,
}

impl PeakEwma {
    pub fn new(config: &PeakEwmaConfig) -> Self {
        Self {
            default_rtt: config.default_rtt.as_nanos() as f64,
            error_penalty: config.error_penalty.as_nanos() as f64,
            unmeasured_busy_cost: config.unmeasured_busy_cost.map(|ms| ms * NANOS_PER_MILLI),
        }
    }

    pub fn pick(&self, hosts: &[Arc<Host>], rng: &mut SmallRng, ctx: &PickContext<'_>) -> Option<usize> {
        let n = hosts.len();
        if n <= 1 {
            return (n == 1).then_some(0);
        }
        let first = rng.random_range(0..n);
        let mut second = rng.random_range(0..n - 1);
        if second >= first {
            second += 1;
        }
        let cost = |i: usize| self.cost(&hosts[i], ctx.now);
        Some(if cost(second) < cost(first) { second } else { first })
    }

    /// The load of `host` at `now` in nanoseconds × requests.
    pub fn cost(&self, host: &Host, now: Instant) -> f64 {
        let stats = &host.stats;
        let in_flight = f64::from(stats.in_flight());
        let estimate = stats.rtt_estimate(now);
        if let (None, Some(busy)) = (estimate, self.unmeasured_busy_cost)
            && in_flight > 0.0
        {
            // Envoy's contrib policy: requests went out and none came back yet, so the
            // endpoint is taken for a failing one, at a cost that grows with its requests.
            return busy + in_flight * NANOS_PER_MILLI;
        }
        let rtt = estimate.map_or(self.default_rtt, |d| d.as_nanos() as f64);
        let penalty = self.error_penalty * stats.error_penalty_at(now);
        (rtt + penalty) * (in_flight + 1.0)
    }
}

#[cfg(test)]
mod tests {

    use std::time::Duration;

    use rand::SeedableRng;

    use super::*;
    use crate::lb::test_hosts::hosts;

    #[test]
    fn unsampled_hosts_cost_the_default_rtt_and_errors_add_to_it() {
        let now = Instant::now();
        let hosts = hosts(2, now);
        let lb = PeakEwma::new(&PeakEwmaConfig::default());
        assert_eq!(lb.cost(&hosts[0], now), 30e6);
        hosts[1].stats.record(now, Duration::from_millis(1), false);
        assert!((lb.cost(&hosts[1], now) - 31e6).abs() < 1.0, "{}", lb.cost(&hosts[1], now));
        let _a = hosts[0].stats.start(Instant::now());
        assert_eq!(lb.cost(&hosts[0], now), 60e6, "in flight doubles the cost");
    }

    #[test]
    fn envoys_contrib_costs_take_a_busy_unmeasured_host_for_a_failing_one() {
        let now = Instant::now();
        let hosts = hosts(2, now);
        let lb = PeakEwma::new(&PeakEwmaConfig::envoy_contrib());
        assert_eq!(lb.cost(&hosts[0], now), 10e6, "Envoy's default RTT, 10 ms");
        let _a = hosts[0].stats.start(Instant::now());
        assert_eq!(lb.cost(&hosts[0], now), 1e12 + 1e6, "penalty_value (ms) + in flight");
        hosts[1].stats.record(now, Duration::from_millis(1), false);
        assert!((lb.cost(&hosts[1], now) - 1e6).abs() < 1.0, "no error penalty: {}", lb.cost(&hosts[1], now));
    }

    #[test]
    fn candidates_are_distinct_so_the_cheaper_of_two_always_wins() {
        let now = Instant::now();
        let hosts = hosts(2, now);
        hosts[0].stats.record(now, Duration::from_millis(50), true);
        hosts[1].stats.record(now, Duration::from_millis(5), true);
        let lb = PeakEwma::new(&PeakEwmaConfig::default());
        let mut rng = SmallRng::seed_from_u64(7);
        let ctx = PickContext::at(now);
        assert!((0..1000).all(|_| lb.pick(&hosts, &mut rng, &ctx) == Some(1)));
    }
}
