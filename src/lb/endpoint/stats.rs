//! Per-endpoint statistics shared by every worker: in-flight requests, latency, outcomes,
//! the latest load report, outlier state, active health check verdicts.
//!
//! All fields are atomics (or an `ArcSwap` for the load report): workers update them on
//! the request path without locks, and the control runtime reads them to compute weights.
//! They live as long as the endpoint is in its cluster, across EDS pushes, because the
//! registry hands out the same `Arc` for the same address.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use super::health::HealthFlags;
use super::outlier_counters::OutlierCounters;
use super::weight::WeightState;
use crate::lb::load::{Capacity, LoadReport, LoadSink};

/// Linkerd's default decay for the peak-EWMA latency estimate.
pub const RTT_DECAY: Duration = Duration::from_secs(10);
/// The mean round trip's decay: each sample weighs `1 − e^(−elapsed/1 s)`, so the mean is
/// of about the last second's responses.
const RTT_MEAN_DECAYS_PER_RTT_DECAY: i32 = 10;
/// Recent outcomes are decayed at most this often, not on every request: one `exp` per
/// endpoint every 50 ms instead of one per response. Counts added in between decay from
/// the next tick, an error of at most 0.5 % of the 10 s decay.
const OUTCOME_TICK_NANOS: u64 = 50_000_000;
/// The requests sent to an endpoint are counted decaying by e every this long: the rate
/// sent over about the last half second, quick enough to see a burst of picks that a
/// load report (smoothed over a second, a quarter of a second late) cannot.
const SENT_DECAY: Duration = Duration::from_millis(500);
/// The rate sent is decayed at most this often: 2 % of `SENT_DECAY`.
const SENT_TICK_NANOS: u64 = 10_000_000;

/// Counts that decay together by e every `decay`, decayed at most every `every_nanos` (by
/// the worker that moves `updated` forward) rather than at every addition: counts added in
/// between decay from the next tick, an error of at most `every_nanos / decay`.
/// Concurrent additions may lose a count, which leaves the counts valid estimates.
struct Tick<'a> {
    updated: &'a AtomicU64,
    every_nanos: u64,
    decay: Duration,
}

impl Tick<'_> {
    /// Adds one to `count` (one of `counts`) at `at` nanoseconds, first decaying `counts`
    /// if a tick has passed.
    fn add_one(&self, at: u64, counts: &[&AtomicU64], count: &AtomicU64) {
        let updated = self.updated.load(Ordering::Relaxed);
        let elapsed = at.saturating_sub(updated);
        if elapsed >= self.every_nanos
            && self.updated.compare_exchange(updated, at, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            let decay = (-(elapsed as f64) / self.decay.as_nanos() as f64).exp();
            for count in counts {
                let decayed = f64::from_bits(count.load(Ordering::Relaxed)) * decay;
                count.store(decayed.to_bits(), Ordering::Relaxed);
            }
        }
        let next = f64::from_bits(count.load(Ordering::Relaxed)) + 1.0;
        count.store(next.to_bits(), Ordering::Relaxed);
    }
}

/// A load report and when it arrived.
#[derive(Debug, Clone)]
pub struct TimedReport {
    pub report: LoadReport,
    pub received: Instant,
}

/// The shared statistics of one endpoint. What every request writes (in-flight count,
/// outcomes, latency, outlier counters) sits in [`Written`], on cache lines of its own:
/// the fields read on other paths (epoch, ejection, health, load report, weight state)
/// and the next endpoint's stats do not share a line with counters that every worker
/// writes per request.
/// A load report's measurement of an endpoint's capacity (see
/// [`EndpointStats::measured_load`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredLoad {
    /// Requests per second at full utilization.
    pub capacity: f64,
    /// The utilization the report was taken at (1.0 = full; above 1, queued).
    pub utilization: f64,
}

#[derive(Debug)]
pub struct EndpointStats {
    /// Origin of the nanosecond timestamps stored below.
    epoch: Instant,
    /// Upstream connections open (or opening) to the endpoint, every worker's: the count
    /// `per_host_thresholds` `max_connections` limits (see `resources`).
    connections: AtomicU32,
    /// Outlier detection: ejected until this many nanoseconds after `epoch`; 0 = not ejected.
    ejected_until: AtomicU64,
    /// Active health checking's verdicts (set on the control runtime).
    health: HealthFlags,
    load: ArcSwapOption<TimedReport>,
    /// What the last load report that measured it says the endpoint can serve at full
    /// utilization, `rps_fractional / utilization` ([`Capacity::Measured`]: not at light
    /// load; f64 bits, requests per second; 0 = unknown), the utilization it was measured
    /// at (f64 bits), and when it arrived (nanoseconds since `epoch` plus one). The
    /// adaptive policy reads these three words on every pick instead of the report itself.
    capacity: AtomicU64,
    utilization: AtomicU64,
    capacity_received: AtomicU64,
    /// The wait in the application its sidecar last reported ([`LoadReport::queue_wait`]:
    /// f64 bits, nanoseconds) and when it arrived (nanoseconds since `epoch` plus one;
    /// 0 = never), read on every pick like the capacity.
    queue_wait: AtomicU64,
    queue_wait_received: AtomicU64,
    /// Load reports refused: undecodable, NaN or negative values (the decoders), or a
    /// utilization or rate beyond reason ([`Capacity::Absurd`]). None of them is stored.
    load_reports_refused: AtomicU64,
    /// CSWRR's weight state, here so that blackout and expiry survive balancer rebuilds.
    weight: WeightState,
    written: Written,
}

/// The per-request counters of [`EndpointStats`], on cache lines of their own. Aligned to
/// one line, not to the pair the adjacent-line prefetcher moves: 128 would also pad the
/// reference counts in front of every endpoint's stats to 128 bytes (384 bytes an endpoint
/// instead of 320; 3 MB at a mesh's 50 000 endpoints).
#[derive(Debug)]
#[repr(align(64))]
struct Written {
    in_flight: AtomicU32,
    successes: AtomicU64,
    errors: AtomicU64,
    /// Peak-EWMA round-trip estimate, f64 nanoseconds as bits; 0 = no sample yet.
    rtt_estimate: AtomicU64,
    /// Mean round trip (f64 nanoseconds as bits), an EWMA over `RTT_MEAN_DECAY`; 0 = no
    /// sample yet.
    rtt_mean: AtomicU64,
    /// When `rtt_estimate` and `rtt_mean` were last updated, nanoseconds since `epoch`.
    rtt_updated: AtomicU64,
    /// Recent errors and successes (f64 bits): +1 per outcome, both decaying by e every
    /// `RTT_DECAY`, decayed together when `outcomes_updated` ticks (`OUTCOME_TICK_NANOS`).
    recent_errors: AtomicU64,
    recent_successes: AtomicU64,
    outcomes_updated: AtomicU64,
    /// Requests sent (f64 bits): +1 each, decaying by e every `SENT_DECAY`, decayed when
    /// `sent_updated` (nanoseconds since `epoch`) ticks (`SENT_TICK_NANOS`).
    recent_sent: AtomicU64,
    sent_updated: AtomicU64,
    /// Errors since the last success.
    consecutive_errors: AtomicU32,
    /// Outlier detection's consecutive-failure and success-rate counters.
    outlier: OutlierCounters,
}

impl Written {
    fn new(outlier: OutlierCounters) -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            successes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            rtt_estimate: AtomicU64::new(0),
            rtt_mean: AtomicU64::new(0),
            rtt_updated: AtomicU64::new(0),
            recent_errors: AtomicU64::new(0),
            recent_successes: AtomicU64::new(0),
            outcomes_updated: AtomicU64::new(0),
            recent_sent: AtomicU64::new(0),
            sent_updated: AtomicU64::new(0),
            consecutive_errors: AtomicU32::new(0),
            outlier,
        }
    }
}

/// Counts one request as in flight until dropped, whatever path the request takes.
#[derive(Debug)]
pub struct InFlight {
    stats: Arc<EndpointStats>,
}

impl EndpointStats {
    pub fn new(now: Instant) -> Self {
        Self::with_outlier(now, OutlierCounters::default())
    }

    /// Stats whose outlier counters wake `wake` when a consecutive-failure threshold is
    /// reached (the cluster's detector listens on it).
    pub fn with_outlier_wake(now: Instant, wake: Arc<tokio::sync::Notify>) -> Self {
        Self::with_outlier(now, OutlierCounters::with_wake(wake))
    }

    fn with_outlier(now: Instant, outlier: OutlierCounters) -> Self {
        Self {
            epoch: now,
            connections: AtomicU32::new(0),
            ejected_until: AtomicU64::new(0),
            health: HealthFlags::default(),
            load: ArcSwapOption::empty(),
            capacity: AtomicU64::new(0),
            utilization: AtomicU64::new(0),
            capacity_received: AtomicU64::new(0),
            queue_wait: AtomicU64::new(0),
            queue_wait_received: AtomicU64::new(0),
            load_reports_refused: AtomicU64::new(0),
            weight: WeightState::default(),
            written: Written::new(outlier),
        }
    }

    pub fn outlier(&self) -> &OutlierCounters {
        &self.written.outlier
    }

    /// The same stats for a new host of a cluster with `checks` active health checks: it
    /// starts failed by each, as Envoy starts new hosts, until its first check passes.
    pub fn failed_by_health_checks(self, checks: usize) -> Self {
        Self { health: HealthFlags::failed_by_first(checks), ..self }
    }

    /// Active health checking's verdicts on the endpoint.
    pub fn health(&self) -> &HealthFlags {
        &self.health
    }

    /// When the endpoint was first seen (slow start counts from here).
    pub fn first_seen(&self) -> Instant {
        self.epoch
    }

    /// Starts a request at `now`: in flight until the returned guard drops, and counted in
    /// the rate sent (an `exp` at most every `SENT_TICK_NANOS`, not per request).
    pub fn start(self: &Arc<Self>, now: Instant) -> InFlight {
        let written = &self.written;
        written.in_flight.fetch_add(1, Ordering::Relaxed);
        let tick = Tick { updated: &written.sent_updated, every_nanos: SENT_TICK_NANOS, decay: SENT_DECAY };
        tick.add_one(self.nanos(now), &[&written.recent_sent], &written.recent_sent);
        InFlight { stats: Arc::clone(self) }
    }

    /// Requests per second sent to the endpoint over about the last half second, at `now`.
    pub fn sent_rate(&self, now: Instant) -> f64 {
        let written = &self.written;
        let elapsed = self.nanos(now).saturating_sub(written.sent_updated.load(Ordering::Relaxed)) as f64;
        let sent = f64::from_bits(written.recent_sent.load(Ordering::Relaxed));
        sent * (-elapsed / SENT_DECAY.as_nanos() as f64).exp() / SENT_DECAY.as_secs_f64()
    }

    pub fn in_flight(&self) -> u32 {
        self.written.in_flight.load(Ordering::Relaxed)
    }

    /// Upstream connections open or opening to the endpoint, across workers.
    pub fn connections(&self) -> u32 {
        self.connections.load(Ordering::Relaxed)
    }

    pub(in crate::lb) fn connection_count(&self) -> &AtomicU32 {
        &self.connections
    }

    pub fn successes(&self) -> u64 {
        self.written.successes.load(Ordering::Relaxed)
    }

    pub fn errors(&self) -> u64 {
        self.written.errors.load(Ordering::Relaxed)
    }

    /// Records a finished request: its latency (to the first response byte) and outcome.
    pub fn record(&self, now: Instant, latency: Duration, success: bool) {
        let written = &self.written;
        if success {
            written.successes.fetch_add(1, Ordering::Relaxed);
            if written.consecutive_errors.load(Ordering::Relaxed) != 0 {
                written.consecutive_errors.store(0, Ordering::Relaxed);
            }
        } else {
            written.errors.fetch_add(1, Ordering::Relaxed);
            written.consecutive_errors.fetch_add(1, Ordering::Relaxed);
        }
        self.count_outcome(now, success);
        self.observe_rtt(now, latency);
    }

    /// Adds one outcome to the recent counts, first decaying both if a tick has passed.
    /// The worker that moves `outcomes_updated` forward decays; concurrent adds may lose a
    /// count, which leaves the counts valid estimates.
    fn count_outcome(&self, now: Instant, success: bool) {
        let written = &self.written;
        let tick = Tick { updated: &written.outcomes_updated, every_nanos: OUTCOME_TICK_NANOS, decay: RTT_DECAY };
        let count = if success { &written.recent_successes } else { &written.recent_errors };
        tick.add_one(self.nanos(now), &[&written.recent_errors, &written.recent_successes], count);
    }

    /// Peak-EWMA: a slower sample replaces the estimate at once; faster samples pull it
    /// down with weight `1 − e^(−elapsed/decay)`. The mean moves towards every sample with
    /// weight `1 − e^(−elapsed/(decay/10))`. Concurrent updates from two workers may lose
    /// one sample; the estimates stay valid estimates, which is all the balancers need.
    fn observe_rtt(&self, now: Instant, sample: Duration) {
        let written = &self.written;
        let sample = sample.as_nanos() as f64;
        let at = self.nanos(now);
        let elapsed = at.saturating_sub(written.rtt_updated.load(Ordering::Relaxed)) as f64;
        let decay = (-elapsed / RTT_DECAY.as_nanos() as f64).exp();
        let estimate = f64::from_bits(written.rtt_estimate.load(Ordering::Relaxed));
        let peak =
            if estimate == 0.0 || sample > estimate { sample } else { estimate * decay + sample * (1.0 - decay) };
        let mean = f64::from_bits(written.rtt_mean.load(Ordering::Relaxed));
        let mean = if mean == 0.0 {
            sample
        } else {
            let weight = decay.powi(RTT_MEAN_DECAYS_PER_RTT_DECAY);
            mean * weight + sample * (1.0 - weight)
        };
        written.rtt_estimate.store(peak.to_bits(), Ordering::Relaxed);
        written.rtt_mean.store(mean.to_bits(), Ordering::Relaxed);
        written.rtt_updated.store(at, Ordering::Relaxed);
    }

    /// The RTT estimate at `now`, decayed towards zero since the last sample (an idle
    /// endpoint becomes attractive again); `None` before the first sample.
    pub fn rtt_estimate(&self, now: Instant) -> Option<Duration> {
        self.round_trip(&self.written.rtt_estimate, now)
    }

    /// The mean round trip of about the last second's responses at `now`, decayed towards
    /// zero since the last one as the peak estimate is (an idle endpoint is tried again);
    /// `None` before the first sample.
    pub fn rtt_mean(&self, now: Instant) -> Option<Duration> {
        self.round_trip(&self.written.rtt_mean, now)
    }

    fn round_trip(&self, nanos: &AtomicU64, now: Instant) -> Option<Duration> {
        let value = f64::from_bits(nanos.load(Ordering::Relaxed));
        (value != 0.0).then(|| Duration::from_nanos(self.decayed(value, &self.written.rtt_updated, now) as u64))
    }

    /// Recent errors, each counting 1 and decaying with `RTT_DECAY`.
    pub fn error_penalty_at(&self, now: Instant) -> f64 {
        let errors = f64::from_bits(self.written.recent_errors.load(Ordering::Relaxed));
        if errors == 0.0 { 0.0 } else { self.decayed(errors, &self.written.outcomes_updated, now) }
    }

    /// `value`, last updated at `updated` (nanoseconds since `epoch`), decayed by e every
    /// `RTT_DECAY` until `now`.
    fn decayed(&self, value: f64, updated: &AtomicU64, now: Instant) -> f64 {
        let elapsed = self.nanos(now).saturating_sub(updated.load(Ordering::Relaxed)) as f64;
        value * (-elapsed / RTT_DECAY.as_nanos() as f64).exp()
    }

    /// The share of recent outcomes that were errors, 0 to 1 (0 before any outcome).
    pub fn recent_error_fraction(&self) -> f64 {
        let errors = f64::from_bits(self.written.recent_errors.load(Ordering::Relaxed));
        let successes = f64::from_bits(self.written.recent_successes.load(Ordering::Relaxed));
        let all = errors + successes;
        if all > 0.0 { errors / all } else { 0.0 }
    }

    /// Errors since the last success.
    pub fn consecutive_errors(&self) -> u32 {
        self.written.consecutive_errors.load(Ordering::Relaxed)
    }

    /// The latest load report, if any.
    pub fn load_report(&self) -> Option<Arc<TimedReport>> {
        self.load.load_full()
    }

    /// Stores a load report received at `now`, and the capacity it measured if it measured
    /// one. A report at light load leaves the last measured capacity as it was (it ages out
    /// on its own); an absurd one is refused whole and counted.
    pub fn record_load(&self, report: LoadReport, now: Instant) {
        match report.capacity() {
            Capacity::Measured(capacity) => {
                self.capacity.store(capacity.to_bits(), Ordering::Relaxed);
                self.utilization.store(report.utilization(&[]).to_bits(), Ordering::Relaxed);
                self.capacity_received.store(self.nanos(now).saturating_add(1), Ordering::Relaxed);
            }
            Capacity::Absurd => {
                self.refuse_load_report();
                return;
            }
            Capacity::Unsaid | Capacity::LightLoad => {}
        }
        if let Some(wait) = report.queue_wait() {
            self.queue_wait.store((wait * 1e9).to_bits(), Ordering::Relaxed);
            self.queue_wait_received.store(self.nanos(now).saturating_add(1), Ordering::Relaxed);
        }
        self.load.store(Some(Arc::new(TimedReport { report, received: now })));
    }

    /// Counts a load report refused before it reached [`record_load`](Self::record_load).
    pub fn refuse_load_report(&self) {
        self.load_reports_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Load reports refused so far (see `load_reports_refused`).
    pub fn load_reports_refused(&self) -> u64 {
        self.load_reports_refused.load(Ordering::Relaxed)
    }

    /// When the endpoint last answered (or failed) a request, or was first seen if it never
    /// has: how long ago at `now`.
    pub fn since_last_response(&self, now: Instant) -> Duration {
        let updated = self.written.rtt_updated.load(Ordering::Relaxed);
        Duration::from_nanos(self.nanos(now).saturating_sub(updated))
    }

    /// What the last load report that measured a capacity said, if it was received less
    /// than `max_age` before `now`.
    pub fn measured_load(&self, now: Instant, max_age: Duration) -> Option<MeasuredLoad> {
        if !self.received_within(&self.capacity_received, now, max_age) {
            return None;
        }
        Some(MeasuredLoad {
            capacity: f64::from_bits(self.capacity.load(Ordering::Relaxed)),
            utilization: f64::from_bits(self.utilization.load(Ordering::Relaxed)),
        })
    }

    /// The wait in the application (nanoseconds) that the last report naming one said, if
    /// it was received less than `max_age` before `now`.
    pub fn queue_wait(&self, now: Instant, max_age: Duration) -> Option<f64> {
        self.received_within(&self.queue_wait_received, now, max_age)
            .then(|| f64::from_bits(self.queue_wait.load(Ordering::Relaxed)))
    }

    /// Whether `received` (nanoseconds since `epoch` plus one, 0 = never) is less than
    /// `max_age` before `now`.
    fn received_within(&self, received: &AtomicU64, now: Instant, max_age: Duration) -> bool {
        let received = received.load(Ordering::Relaxed);
        received != 0 && self.nanos(now).saturating_sub(received - 1) < max_age.as_nanos() as u64
    }

    /// CSWRR's per-endpoint weight state (read and written by `cswrr` only).
    pub fn weight_state(&self) -> &WeightState {
        &self.weight
    }

    /// Ejects the endpoint until `until` (outlier detection).
    pub fn eject_until(&self, until: Instant) {
        self.ejected_until.store(self.nanos(until).max(1), Ordering::Relaxed);
    }

    /// Ejects the endpoint until [`uneject`](Self::uneject) (the detector decides when).
    pub fn eject(&self) {
        self.ejected_until.store(u64::MAX, Ordering::Relaxed);
    }

    pub fn uneject(&self) {
        self.ejected_until.store(0, Ordering::Relaxed);
    }

    /// Whether outlier detection keeps the endpoint out of rotation at `now`.
    pub fn is_ejected(&self, now: Instant) -> bool {
        let until = self.ejected_until.load(Ordering::Relaxed);
        until != 0 && self.nanos(now) < until
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_nanos() as u64
    }
}

impl LoadSink for EndpointStats {
    fn report_load(&self, report: LoadReport) {
        self.record_load(report, Instant::now());
    }

    fn refuse_load(&self) {
        self.refuse_load_report();
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.stats.written.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl InFlight {
    pub fn stats(&self) -> &Arc<EndpointStats> {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_is_released_on_every_path() {
        let stats = Arc::new(EndpointStats::new(Instant::now()));
        let a = stats.start(Instant::now());
        let b = stats.start(Instant::now());
        assert_eq!(stats.in_flight(), 2);
        drop(a);
        fn fails(stats: &Arc<EndpointStats>) -> Result<(), ()> {
            let _in_flight = stats.start(Instant::now());
            Err(())
        }
        assert!(fails(&stats).is_err());
        assert_eq!(stats.in_flight(), 1);
        drop(b);
        assert_eq!(stats.in_flight(), 0);
    }

    #[test]
    fn peak_ewma_jumps_up_and_decays_down() {
        let t0 = Instant::now();
        let stats = EndpointStats::new(t0);
        assert_eq!(stats.rtt_estimate(t0), None);
        stats.record(t0, Duration::from_millis(10), true);
        stats.record(t0, Duration::from_millis(50), true);
        assert_eq!(stats.rtt_estimate(t0), Some(Duration::from_millis(50)), "peaks are taken at once");
        let later = t0 + RTT_DECAY;
        stats.record(later, Duration::from_millis(10), true);
        let estimate = stats.rtt_estimate(later).unwrap_or_default();
        assert!(estimate > Duration::from_millis(10) && estimate < Duration::from_millis(50), "{estimate:?}");
        let idle = stats.rtt_estimate(later + RTT_DECAY * 10).unwrap_or_default();
        assert!(idle < Duration::from_millis(1), "idle endpoints decay: {idle:?}");
    }

    #[test]
    fn errors_leave_a_decaying_penalty() {
        let t0 = Instant::now();
        let stats = EndpointStats::new(t0);
        stats.record(t0, Duration::from_millis(1), false);
        stats.record(t0, Duration::from_millis(1), false);
        assert!((stats.error_penalty_at(t0) - 2.0).abs() < 1e-9);
        assert!(stats.error_penalty_at(t0 + RTT_DECAY) < 1.0);
        assert_eq!(stats.errors(), 2);
    }

    #[test]
    fn ejection_expires() {
        let t0 = Instant::now();
        let stats = EndpointStats::new(t0);
        stats.eject_until(t0 + Duration::from_secs(30));
        assert!(stats.is_ejected(t0 + Duration::from_secs(29)));
        assert!(!stats.is_ejected(t0 + Duration::from_secs(30)));
    }
}
