//! Exponential backoff with full jitter, for reconnecting to the control plane.
//!
//! Envoy's gRPC streams back off from 500 ms up to 30 s with jitter; Outrider does the
//! same. The random source is seeded by the caller so tests are deterministic.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
    rng: SmallRng,
}

impl Backoff {
    /// Envoy's defaults for xDS streams: 500 ms base, 30 s cap.
    pub fn xds(seed: u64) -> Self {
        Self::new(Duration::from_millis(500), Duration::from_secs(30), seed)
    }

    pub fn new(base: Duration, max: Duration, seed: u64) -> Self {
        Self { base, max, attempt: 0, rng: SmallRng::seed_from_u64(seed) }
    }

    /// The delay before the next attempt: uniform in `[base/2, min(max, base·2^attempt)]`,
    /// so concurrent clients spread out but never retry in a tight loop.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.base.saturating_mul(1u32 << self.attempt.min(16)).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let floor = (self.base / 2).min(ceiling);
        let span = ceiling.saturating_sub(floor).as_millis() as u64;
        floor + Duration::from_millis(if span == 0 { 0 } else { self.rng.random_range(0..=span) })
    }

    /// Called once a stream has made progress (a response was accepted).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_and_resets() {
        let mut backoff = Backoff::xds(7);
        let delays: Vec<_> = (0..12).map(|_| backoff.next_delay()).collect();
        assert!(delays.iter().all(|d| *d >= Duration::from_millis(250) && *d <= Duration::from_secs(30)));
        assert!(delays[0] <= Duration::from_millis(500));
        assert!(delays[11] >= Duration::from_millis(250));
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(500));
    }

    #[test]
    fn same_seed_same_delays() {
        let a: Vec<_> = {
            let mut b = Backoff::xds(1);
            (0..8).map(|_| b.next_delay()).collect()
        };
        let b: Vec<_> = {
            let mut b = Backoff::xds(1);
            (0..8).map(|_| b.next_delay()).collect()
        };
        assert_eq!(a, b);
    }
}
