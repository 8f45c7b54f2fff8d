//! The metric cells: counters, gauges, latency histograms and text readouts.
//!
//! Every cell is a handful of atomics behind an `Arc`: a handle is resolved once (when a
//! cluster, listener or connection manager is created) and then updated from any worker
//! without a lock. Only registration and scraping touch the registry's lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;

/// A monotonically increasing count.
#[derive(Debug, Clone, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    pub(super) fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    pub(super) fn shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }
}

/// A value that goes up and down. It remembers whether it was ever set (Envoy's "used"
/// flag, which `/stats?usedonly` reads: istio-agent's readiness check asks for
/// `listener_manager.workers_started` while it is still a set 0).
#[derive(Debug, Clone, Default)]
pub struct Gauge(Arc<GaugeCell>);

#[derive(Debug, Default)]
struct GaugeCell {
    value: AtomicI64,
    used: AtomicBool,
}

impl Gauge {
    pub fn set(&self, value: i64) {
        self.0.value.store(value, Ordering::Relaxed);
        self.mark_used();
    }

    pub fn inc(&self) {
        self.0.value.fetch_add(1, Ordering::Relaxed);
        self.mark_used();
    }

    pub fn dec(&self) {
        self.0.value.fetch_sub(1, Ordering::Relaxed);
        self.mark_used();
    }

    pub fn get(&self) -> i64 {
        self.0.value.load(Ordering::Relaxed)
    }

    /// Increments now and decrements when the guard drops: no path can leak the count.
    pub fn track(&self) -> GaugeGuard {
        self.inc();
        GaugeGuard(self.clone())
    }

    /// Whether it was ever set, incremented or decremented.
    pub fn used(&self) -> bool {
        self.0.used.load(Ordering::Relaxed)
    }

    /// A load first: once set, the flag costs no write (and no cache-line transfer).
    fn mark_used(&self) {
        if !self.0.used.load(Ordering::Relaxed) {
            self.0.used.store(true, Ordering::Relaxed);
        }
    }

    pub(super) fn shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }
}

/// Holds one unit of a gauge (see [`Gauge::track`]).
#[derive(Debug)]
pub struct GaugeGuard(Gauge);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Envoy's default histogram bucket bounds (`stats_config.histogram_bucket_settings`
/// unset), in milliseconds.
pub const DEFAULT_BUCKETS_MS: [f64; 19] = [
    0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0, 300000.0,
    600000.0, 1800000.0, 3600000.0,
];

/// A latency histogram in milliseconds over Envoy's default buckets. Recording is one
/// bucket increment and one sum increment (microseconds), both relaxed atomics.
#[derive(Debug, Clone, Default)]
pub struct Histogram(Arc<HistogramCells>);

#[derive(Debug)]
struct HistogramCells {
    /// Per bucket (not cumulative); the last one is `+Inf`.
    counts: [AtomicU64; DEFAULT_BUCKETS_MS.len() + 1],
    sum_micros: AtomicU64,
}

impl Default for HistogramCells {
    fn default() -> Self {
        Self { counts: std::array::from_fn(|_| AtomicU64::new(0)), sum_micros: AtomicU64::new(0) }
    }
}

/// A histogram's values at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Cumulative counts per bucket bound of [`DEFAULT_BUCKETS_MS`].
    pub cumulative: Vec<(f64, u64)>,
    pub count: u64,
    /// Sum of the recorded values, in milliseconds.
    pub sum: f64,
}

impl Histogram {
    pub fn record(&self, elapsed: Duration) {
        let micros = elapsed.as_micros().min(u128::from(u64::MAX)) as u64;
        let millis = micros as f64 / 1000.0;
        let bucket = DEFAULT_BUCKETS_MS.partition_point(|bound| *bound < millis);
        self.0.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.0.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Records a value that is not a duration (a size in bytes) in the same buckets:
    /// Envoy's bucket bounds are unitless, so `value` is read in the histogram's own unit.
    pub fn record_value(&self, value: u64) {
        let bucket = DEFAULT_BUCKETS_MS.partition_point(|bound| *bound < value as f64);
        self.0.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.0.sum_micros.fetch_add(value.saturating_mul(1000), Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let mut cumulative = Vec::with_capacity(DEFAULT_BUCKETS_MS.len());
        for (bound, count) in DEFAULT_BUCKETS_MS.iter().zip(&self.0.counts) {
            total += count.load(Ordering::Relaxed);
            cumulative.push((*bound, total));
        }
        total += self.0.counts[DEFAULT_BUCKETS_MS.len()].load(Ordering::Relaxed);
        let sum = self.0.sum_micros.load(Ordering::Relaxed) as f64 / 1000.0;
        HistogramSnapshot { cumulative, count: total, sum }
    }

    pub(super) fn shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }
}

impl HistogramSnapshot {
    /// The `q` quantile (0..=1), interpolated linearly inside its bucket; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * self.count as f64;
        let mut lower = (0.0, 0u64);
        for &(bound, cumulative) in &self.cumulative {
            if cumulative as f64 >= rank && cumulative > lower.1 {
                let within = (rank - lower.1 as f64) / (cumulative - lower.1) as f64;
                return Some(lower.0 + (bound - lower.0) * within.clamp(0.0, 1.0));
            }
            lower = (bound, cumulative);
        }
        // Beyond the last bound: report the last bound, as a bucketed histogram can.
        Some(lower.0)
    }
}

/// A string value (xDS version texts).
#[derive(Debug, Clone, Default)]
pub struct TextReadout(Arc<ArcSwap<String>>);

impl TextReadout {
    pub fn set(&self, value: &str) {
        self.0.store(Arc::new(value.to_owned()));
    }

    pub fn get(&self) -> String {
        self.0.load().as_ref().clone()
    }

    pub(super) fn shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_quantiles_interpolate() {
        let h = Histogram::default();
        for ms in [0, 1, 3, 7, 7, 200] {
            h.record(Duration::from_millis(ms));
        }
        h.record(Duration::from_secs(7200));
        let s = h.snapshot();
        assert_eq!(s.count, 7);
        assert_eq!(s.cumulative[0], (0.5, 1));
        assert_eq!(s.cumulative[1], (1.0, 2), "1 ms falls in the le=1 bucket");
        assert_eq!(s.cumulative[3], (10.0, 5));
        assert_eq!(s.cumulative.last().map(|c| c.1), Some(6), "7200 s is only in +Inf");
        assert!((s.sum - (218.0 + 7_200_000.0)).abs() < 1e-6);
        let median = s.quantile(0.5).unwrap_or_default();
        assert!((5.0..=10.0).contains(&median), "{median}");
        assert_eq!(Histogram::default().snapshot().quantile(0.5), None);
    }

    #[test]
    fn values_fall_in_the_same_buckets_as_milliseconds() {
        let h = Histogram::default();
        h.record_value(1);
        h.record_value(700);
        let s = h.snapshot();
        assert_eq!(s.cumulative[1], (1.0, 1));
        assert_eq!(s.cumulative[8], (500.0, 1));
        assert_eq!(s.cumulative[9], (1000.0, 2));
        assert!((s.sum - 701.0).abs() < 1e-9);
    }

    #[test]
    fn gauge_guard_releases() {
        let g = Gauge::default();
        let a = g.track();
        let b = g.track();
        assert_eq!(g.get(), 2);
        drop((a, b));
        assert_eq!(g.get(), 0);
    }
}
