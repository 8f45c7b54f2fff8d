//! The metric cells: counters, gauges, latency histograms and text readouts.
//!
//! Every cell is a handful of atomics behind an `Arc`: a handle is resolved once (when a
//! cluster, listener or connection manager is created) and then updated from any worker
//! without a lock. Only registration and scraping touch the registry's lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;

/// A monotonically increasing count. One the stats matcher rejected discards what it is
/// given and holds no memory (Envoy's null counter).
#[derive(Debug, Clone)]
pub struct Counter(Option<Arc<AtomicU64>>);

impl Default for Counter {
    fn default() -> Self {
        Self(Some(Arc::default()))
    }
}

impl Counter {
    /// A counter that counts nothing: a stat the matcher rejects.
    pub fn discarding() -> Self {
        Self(None)
    }

    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        if let Some(cell) = &self.0 {
            cell.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn get(&self) -> u64 {
        self.0.as_ref().map_or(0, |cell| cell.load(Ordering::Relaxed))
    }

    pub(super) fn reset(&self) {
        if let Some(cell) = &self.0 {
            cell.store(0, Ordering::Relaxed);
        }
    }

    pub(super) fn shared(&self) -> bool {
        self.0.as_ref().is_some_and(|cell| Arc::strong_count(cell) > 1)
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

/// A latency histogram in milliseconds, over Envoy's default buckets or the ones the
/// bootstrap's `histogram_bucket_settings` give its name. Recording is one bucket increment
/// and one sum increment (microseconds), both relaxed atomics, in the recording worker's
/// own copy of the counters (see [`super::shards`]); a snapshot adds the copies up. One the
/// stats matcher rejected records nothing and holds no memory.
#[derive(Debug, Clone)]
pub struct Histogram(Option<Arc<HistogramCells>>);

impl Default for Histogram {
    fn default() -> Self {
        Self(Some(Arc::default()))
    }
}

/// Words per line: two cache lines (the adjacent-line prefetcher moves lines in pairs).
const LINE_WORDS: usize = 16;

/// Counters on a line of their own.
#[derive(Debug)]
#[repr(align(128))]
struct Line([AtomicU64; LINE_WORDS]);

impl Line {
    fn new() -> Self {
        Self(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

#[derive(Debug)]
struct HistogramCells {
    /// Upper bounds, ascending, finite and positive.
    bounds: Arc<[f64]>,
    /// Per worker, `per_shard` lines: one count per bucket (not cumulative; one per bound
    /// and a last one for `+Inf`), then the sum in microseconds.
    lines: Box<[Line]>,
    per_shard: usize,
    shards: usize,
}

impl HistogramCells {
    fn new(bounds: Arc<[f64]>) -> Self {
        // Buckets, `+Inf` and the sum.
        let words = bounds.len() + 2;
        let per_shard = words.div_ceil(LINE_WORDS);
        let shards = super::shards::count();
        let lines = (0..per_shard * shards).map(|_| Line::new()).collect();
        Self { bounds, lines, per_shard, shards }
    }

    fn shards(&self) -> usize {
        self.shards
    }

    /// Word `index` of copy `shard`.
    fn word(&self, shard: usize, index: usize) -> Option<&AtomicU64> {
        let line = self.lines.get(shard * self.per_shard + index / LINE_WORDS)?;
        line.0.get(index % LINE_WORDS)
    }

    /// Adds one to `bucket` and `micros` to the sum, in the calling worker's copy.
    fn record(&self, bucket: usize, micros: u64) {
        let shard = super::shards::current(self.shards());
        if let Some(count) = self.word(shard, bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(sum) = self.word(shard, self.bounds.len() + 1) {
            sum.fetch_add(micros, Ordering::Relaxed);
        }
    }

    /// Word `index` summed over every copy.
    fn total(&self, index: usize) -> u64 {
        (0..self.shards())
            .filter_map(|shard| self.word(shard, index))
            .fold(0u64, |total, word| total.saturating_add(word.load(Ordering::Relaxed)))
    }
}

impl Default for HistogramCells {
    fn default() -> Self {
        Self::new(Arc::from(DEFAULT_BUCKETS_MS.as_slice()))
    }
}

/// A histogram's values at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Cumulative counts per bucket bound (the histogram's bounds, ascending).
    pub cumulative: Vec<(f64, u64)>,
    pub count: u64,
    /// Sum of the recorded values, in milliseconds.
    pub sum: f64,
}

impl Histogram {
    /// A histogram over `bounds` (milliseconds; sorted here, duplicates dropped, anything
    /// not finite and positive left out, as the configuration already refused it).
    pub fn with_buckets(bounds: &[f64]) -> Self {
        let mut bounds: Vec<f64> = bounds.iter().copied().filter(|b| b.is_finite() && *b > 0.0).collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        Self(Some(Arc::new(HistogramCells::new(Arc::from(bounds)))))
    }

    /// A histogram that records nothing: a stat the matcher rejects.
    pub fn discarding() -> Self {
        Self(None)
    }

    pub fn record(&self, elapsed: Duration) {
        let Some(cells) = &self.0 else { return };
        let micros = elapsed.as_micros().min(u128::from(u64::MAX)) as u64;
        let millis = micros as f64 / 1000.0;
        cells.record(cells.bounds.partition_point(|bound| *bound < millis), micros);
    }

    /// Records a value that is not a duration (a size in bytes) in the same buckets:
    /// Envoy's bucket bounds are unitless, so `value` is read in the histogram's own unit.
    pub fn record_value(&self, value: u64) {
        let Some(cells) = &self.0 else { return };
        cells.record(cells.bounds.partition_point(|bound| *bound < value as f64), value.saturating_mul(1000));
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let Some(cells) = &self.0 else { return HistogramSnapshot { cumulative: Vec::new(), count: 0, sum: 0.0 } };
        let mut total = 0u64;
        let mut cumulative = Vec::with_capacity(cells.bounds.len());
        for (bucket, bound) in cells.bounds.iter().enumerate() {
            total = total.saturating_add(cells.total(bucket));
            cumulative.push((*bound, total));
        }
        total = total.saturating_add(cells.total(cells.bounds.len()));
        let sum = cells.total(cells.bounds.len() + 1) as f64 / 1000.0;
        HistogramSnapshot { cumulative, count: total, sum }
    }

    pub(super) fn shared(&self) -> bool {
        self.0.as_ref().is_some_and(|cells| Arc::strong_count(cells) > 1)
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
    fn each_worker_records_into_its_own_copy_and_a_snapshot_adds_them_up() {
        super::super::shards::set_workers(2);
        let h = Histogram::default();
        let cells = h.0.clone().unwrap_or_default();
        assert_eq!(cells.shards(), 2);
        let threads: Vec<_> = [(0, 1), (1, 10), (1, 10)]
            .into_iter()
            .map(|(worker, ms)| {
                let h = h.clone();
                std::thread::spawn(move || {
                    super::super::shards::enter_worker(worker);
                    h.record(Duration::from_millis(ms));
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap_or_default());
        assert_eq!((cells.total(1), cells.word(0, 1).map(|w| w.load(Ordering::Relaxed))), (1, Some(1)));
        assert_eq!(cells.word(1, 3).map(|w| w.load(Ordering::Relaxed)), Some(2), "worker 1's 10 ms twice");
        let s = h.snapshot();
        assert_eq!((s.count, s.sum), (3, 21.0));
        assert_eq!(s.cumulative[1], (1.0, 1));
        assert_eq!(s.cumulative[3], (10.0, 3));
        super::super::shards::set_workers(1);
    }

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
    fn configured_buckets_are_sorted_and_used() {
        let h = Histogram::with_buckets(&[100.0, 1.0, 10.0, 10.0]);
        h.record(Duration::from_millis(5));
        h.record(Duration::from_secs(1));
        let s = h.snapshot();
        assert_eq!(s.cumulative, vec![(1.0, 0), (10.0, 1), (100.0, 1)]);
        assert_eq!(s.count, 2, "1 s is only in +Inf");
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
