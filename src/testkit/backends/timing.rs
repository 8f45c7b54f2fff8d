//! How long a lab backend takes over one request: its latency plus an exponential tail,
//! longer for its first requests (a cold process warming up), and replaced while a
//! time-scripted stall lasts (a garbage-collection pause, a noisy neighbour).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A time-scripted stall: from `at` (on the lab's clock) for `duration`, every request
/// that gets a slot takes `latency`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    pub at: Duration,
    pub duration: Duration,
    pub latency: Duration,
}

impl Stall {
    fn covers(&self, since_epoch: Duration) -> bool {
        since_epoch >= self.at && since_epoch < self.at + self.duration
    }
}

/// A cold start: the first `requests` requests take `factor` times as long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Warmup {
    pub requests: u64,
    pub factor: f64,
}

/// The lab's clock, shared by all its backends: it starts with the first request any of
/// them serves, so scripted stalls line up with the load, however long the proxies took
/// to start.
#[derive(Debug, Default)]
pub struct Epoch(OnceLock<Instant>);

impl Epoch {
    /// Time since the epoch, starting the clock if this is the first request.
    pub fn since(&self, now: Instant) -> Duration {
        now.saturating_duration_since(*self.0.get_or_init(|| now))
    }
}

/// Draws service times for one backend.
#[derive(Debug)]
pub(super) struct Timing {
    latency: Duration,
    jitter: Duration,
    stalls: Vec<Stall>,
    warmup: Option<Warmup>,
    served: AtomicU64,
    rng: Mutex<SmallRng>,
}

impl Timing {
    pub(super) fn new(
        latency: Duration,
        jitter: Duration,
        stalls: Vec<Stall>,
        warmup: Option<Warmup>,
        seed: u64,
    ) -> Self {
        Self {
            latency,
            jitter,
            stalls,
            warmup,
            served: AtomicU64::new(0),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
        }
    }

    /// The service time of the next request, which gets its slot `since_epoch`.
    pub(super) fn next(&self, since_epoch: Duration) -> Duration {
        let nth = self.served.fetch_add(1, Ordering::Relaxed);
        if let Some(stall) = self.stalls.iter().find(|s| s.covers(since_epoch)) {
            return stall.latency;
        }
        let mut time = self.latency + self.tail();
        if let Some(warmup) = self.warmup.filter(|w| nth < w.requests) {
            time = time.mul_f64(warmup.factor.max(0.0));
        }
        time
    }

    /// An exponentially distributed extra with mean `jitter`: most requests are close to
    /// the latency, a few much slower, as measured services are.
    fn tail(&self) -> Duration {
        if self.jitter.is_zero() {
            return Duration::ZERO;
        }
        let u: f64 = self.rng.lock().unwrap_or_else(PoisonError::into_inner).random();
        self.jitter.mul_f64(-(1.0 - u).ln())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_first_requests_cost_the_warmup_factor() {
        let timing = Timing::new(10 * MS, Duration::ZERO, vec![], Some(Warmup { requests: 2, factor: 10.0 }), 1);
        let times: Vec<_> = (0..4).map(|_| timing.next(Duration::ZERO)).collect();
        assert_eq!(times, [100 * MS, 100 * MS, 10 * MS, 10 * MS]);
    }

    #[test]
    fn a_stall_replaces_the_latency_while_it_lasts() {
        let stall = Stall { at: 1000 * MS, duration: 500 * MS, latency: 300 * MS };
        let timing = Timing::new(20 * MS, Duration::ZERO, vec![stall], None, 1);
        assert_eq!(timing.next(999 * MS), 20 * MS);
        assert_eq!(timing.next(1000 * MS), 300 * MS);
        assert_eq!(timing.next(1499 * MS), 300 * MS);
        assert_eq!(timing.next(1500 * MS), 20 * MS);
    }

    #[test]
    fn the_tail_is_exponential_with_the_jitter_as_mean() {
        let timing = Timing::new(Duration::ZERO, 10 * MS, vec![], None, 7);
        let n = 20_000;
        let times: Vec<f64> = (0..n).map(|_| timing.next(Duration::ZERO).as_secs_f64() * 1000.0).collect();
        let mean = times.iter().sum::<f64>() / f64::from(n);
        assert!((mean - 10.0).abs() < 0.5, "mean {mean} ms");
        let above_46 = times.iter().filter(|t| **t > 46.05).count();
        // P(X > 4.605 × mean) = 1 %.
        assert!((150..=250).contains(&above_46), "{above_46} of {n} above the 99th percentile");
    }

    #[test]
    fn the_epoch_starts_with_the_first_request() {
        let epoch = Epoch::default();
        let start = Instant::now();
        assert_eq!(epoch.since(start + 5 * MS), Duration::ZERO);
        assert_eq!(epoch.since(start + 8 * MS), 3 * MS);
    }
}
