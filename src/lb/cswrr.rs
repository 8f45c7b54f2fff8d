//! CLIENT_SIDE_WEIGHTED_ROUND_ROBIN (gRFC A58, Envoy's `client_side_weighted_round_robin`):
//! endpoints are weighted by what they report about themselves (ORCA),
//! `weight = qps / (utilization + eps/qps × error_utilization_penalty)`.
//!
//! Two halves, as `docs/architecture.md` ("Threads and state") describes:
//! - [`Cswrr::update_weights`] runs on the control runtime every `weight_update_period`:
//!   it reads each endpoint's latest report, keeps the per-endpoint weight state (which
//!   lives in `EndpointStats`, so blackout and expiry survive balancer rebuilds on EDS
//!   pushes; grpc/proposal#343), and publishes an immutable [`Weights`] with one
//!   `ArcSwap::store`.
//! - [`Cswrr::pick`] runs on the workers: one lock-free load of the published weights and
//!   gRPC's static stride scheduler over them, with a per-worker sequence.
//!
//! Choices where gRPC and Envoy differ, and why:
//! - Endpoints without a valid weight (new, in blackout, expired) get the **mean** of the
//!   valid weights (gRPC), not the median (Envoy). A58 specifies the mean; it is what the
//!   stride scheduler was designed and tested with; and a newcomer then takes exactly the
//!   average share: with a skewed fleet (one strong endpoint among weak ones) the median
//!   would hand it a weak endpoint's share and starve it of the very requests whose
//!   reports would establish its weight, while a few strong endpoints would make the
//!   median flood it. The mean is the share that keeps total load unchanged when it joins.
//! - `error_utilization_penalty` defaults to 1.0 (gRPC and the proto's documentation;
//!   Envoy's code reads an unset wrapper as 0).
//! - Utilization is the maximum of the configured metrics (> 0) first, then
//!   `application_utilization`, then `cpu_utilization` (Envoy's current default, gRPC A114).
//! - Fewer than two valid weights → plain round robin (grpc-java#11407).
//! - Weights are clamped to [1 %, 10×] of their mean before scaling, as gRPC C++ does: it
//!   bounds a pick to about ten sequence steps on average, whatever the reports say.
//!   The floor is why, with two endpoints of which one reports ten thousand times the
//!   other's weight, the weak one still gets about 0.5 % of the picks (1 % of a mean that
//!   is half the strong weight) where Envoy, whose EDF has no floor, gives it 0.01 %; with
//!   a 50× slower endpoint that 0.5 % is what reaches p99.9. Kept, deliberately: reports ride
//!   on responses, and an endpoint that gets almost no requests stops reporting. At 0.01 %
//!   of a 100 requests-per-second cluster it hears from its weak endpoint once every 100 s,
//!   close to the 3-minute `weight_expiration_period`; once that weight expires, fewer than
//!   two weights are valid and the cluster falls back to plain round robin — half the
//!   requests to the slow endpoint. The floor keeps reports coming down to about a request
//!   per second of cluster traffic. A policy that must keep a slow endpoint out of the tail
//!   should look at latency, which utilization does not show: peak-EWMA does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use rand::Rng;
use rand::rngs::SmallRng;

use super::endpoint::EndpointStats;
use super::host::Host;
use super::load::LoadReport;
use super::slow_start;
use crate::config::cluster::CswrrConfig;

/// The scheduler's weight scale: the largest weight becomes this.
const MAX_WEIGHT: u64 = u16::MAX as u64;
/// Per-index phase offset of the stride test (half the scale), so that neighbouring
/// endpoints with equal weights do not skip in the same generations.
const OFFSET: u64 = MAX_WEIGHT / 2;
/// Clamp of known weights relative to their mean (gRPC C++ `kMaxRatio`, `kMinRatio`).
const MAX_RATIO: f64 = 10.0;
const MIN_RATIO: f64 = 0.01;

/// The weights workers pick with, replaced whole on every update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Weights {
    /// Plain rotation: fewer than two endpoints have a valid weight, or all are equal.
    RoundRobin,
    /// Stride scheduler weights, one per host, the largest 65535, none 0.
    Stride(Box<[u16]>),
}

/// The shared part: what recomputing needs, and the published weights.
#[derive(Debug)]
pub struct Cswrr {
    config: CswrrConfig,
    stats: Box<[Arc<EndpointStats>]>,
    weights: ArcSwap<Weights>,
    /// Bumped after each publication of `weights`: a worker compares it with the version
    /// its cursor holds (one relaxed load) instead of loading the `ArcSwap` every pick.
    version: AtomicU64,
}

/// A worker's position in the stride sequence: `seq = generation × n + index`, kept split
/// so a pick needs no division. Only `generation mod 65535` matters to the test, so it
/// is kept in that range.
#[derive(Debug)]
pub struct Cursor {
    index: usize,
    generation: u64,
    /// The weights this worker picks with, and the version they were published as.
    weights: Arc<Weights>,
    version: u64,
}

impl Cswrr {
    pub fn new(hosts: &[Arc<Host>], config: &CswrrConfig, now: Instant) -> Self {
        let cswrr = Self {
            config: config.clone(),
            stats: hosts.iter().map(|h| h.stats.clone()).collect(),
            weights: ArcSwap::from_pointee(Weights::RoundRobin),
            version: AtomicU64::new(0),
        };
        cswrr.update_weights(now);
        cswrr
    }

    pub fn config(&self) -> &CswrrConfig {
        &self.config
    }

    /// The weights workers currently pick with.
    pub fn weights(&self) -> Arc<Weights> {
        self.weights.load_full()
    }

    /// Recomputes every weight from the latest reports and publishes them. Called on the
    /// control runtime every `weight_update_period`; linear in the number of hosts.
    pub fn update_weights(&self, now: Instant) {
        let raw: Vec<f64> = self.stats.iter().map(|s| self.endpoint_weight(s, now)).collect();
        let weights = schedule(&raw, |i, w| self.slow_start(i, w, now));
        if **self.weights.load() != weights {
            self.weights.store(Arc::new(weights));
            self.version.fetch_add(1, Ordering::Release);
        }
    }

    /// Endpoint `stats`' valid weight at `now`, or 0 (unknown). Folds the latest report
    /// into the endpoint's state first.
    fn endpoint_weight(&self, stats: &EndpointStats, now: Instant) -> f64 {
        let state = stats.weight_state();
        let at = |t: Instant| t.saturating_duration_since(stats.first_seen()).as_nanos() as u64 + 1;
        if let Some(timed) = stats.load_report()
            && let Some(weight) = report_weight(&timed.report, &self.config)
        {
            state.fold_report(weight, at(timed.received));
        }
        state.valid_weight(at(now), self.config.weight_expiration_period, self.config.blackout_period)
    }

    /// Host `index`'s weight `weight` after slow start.
    fn slow_start(&self, index: usize, weight: f64, now: Instant) -> f64 {
        match (&self.config.slow_start, self.stats.get(index)) {
            (Some(config), Some(stats)) => slow_start::weight(config, weight, stats.first_seen(), now),
            _ => weight,
        }
    }

    pub fn cursor(&self, rng: &mut SmallRng) -> Cursor {
        let n = self.stats.len().max(1);
        // Version first: weights loaded after it are at least that new.
        let version = self.version.load(Ordering::Acquire);
        let weights = self.weights.load_full();
        Cursor { index: rng.random_range(0..n), generation: rng.random_range(0..MAX_WEIGHT), weights, version }
    }

    /// The stride scheduler (gRPC's `StaticStrideScheduler`): step the sequence; host
    /// `index` with weight `w` is taken in generation `g` iff
    /// `(w × g + index × 32767) mod 65535 ≥ 65535 − w`, i.e. `w` times per 65535
    /// generations, spread evenly. With weights clamped to ≤ 10× their mean, a pick takes
    /// at most ten steps on average.
    pub fn pick(&self, hosts: &[Arc<Host>], cursor: &mut Cursor) -> Option<usize> {
        let n = hosts.len();
        if n == 0 {
            return None;
        }
        let version = self.version.load(Ordering::Acquire);
        if version != cursor.version {
            cursor.weights = self.weights.load_full();
            cursor.version = version;
        }
        let Cursor { index: position, generation, weights, .. } = cursor;
        let stride = match &**weights {
            Weights::Stride(w) if w.len() == n => w,
            _ => return Some(step(position, generation, n)),
        };
        loop {
            let index = step(position, generation, n);
            let weight = u64::from(stride[index]);
            let phase = (weight * *generation + index as u64 * OFFSET) % MAX_WEIGHT;
            if phase >= MAX_WEIGHT - weight {
                return Some(index);
            }
        }
    }
}

/// Returns the cursor's current index and advances the sequence by one.
fn step(position: &mut usize, generation: &mut u64, n: usize) -> usize {
    let index = if *position >= n { 0 } else { *position };
    *position = index + 1;
    if *position >= n {
        *position = 0;
        *generation = (*generation + 1) % MAX_WEIGHT;
    }
    index
}

/// The scheduler weights for `raw` (0 = unknown): round robin with fewer than two known
/// weights and no host in slow start; otherwise unknown weights take the mean of the known
/// ones, `ramp` applies slow start, and the result is clamped and scaled to u16.
fn schedule(raw: &[f64], ramp: impl Fn(usize, f64) -> f64) -> Weights {
    let known: Vec<f64> = raw.iter().copied().filter(|w| *w > 0.0).collect();
    let mean = if known.len() >= 2 { known.iter().sum::<f64>() / known.len() as f64 } else { 1.0 };
    let fill = |w: f64| if known.len() >= 2 && w > 0.0 { w } else { mean };
    let weights: Vec<f64> = raw.iter().enumerate().map(|(i, w)| ramp(i, fill(*w))).collect();
    scale(&weights)
}

/// Clamps to [1 %, 10×] of the mean and scales so the largest is 65535.
fn scale(weights: &[f64]) -> Weights {
    if weights.len() < 2 || weights.windows(2).all(|w| w[0] == w[1]) {
        return Weights::RoundRobin;
    }
    let mean = weights.iter().sum::<f64>() / weights.len() as f64;
    let max = weights.iter().copied().fold(0.0, f64::max).min(mean * MAX_RATIO);
    if !(max > 0.0 && max.is_finite()) {
        return Weights::RoundRobin;
    }
    let factor = MAX_WEIGHT as f64 / max;
    let floor = (mean * MIN_RATIO * factor).round().max(1.0);
    let scaled: Box<[u16]> =
        weights.iter().map(|w| ((w.min(max) * factor).round().clamp(floor, MAX_WEIGHT as f64) as u16).max(1)).collect();
    if scaled.windows(2).all(|w| w[0] == w[1]) {
        return Weights::RoundRobin;
    }
    Weights::Stride(scaled)
}

/// The weight a report gives, or `None` when it must be ignored (no traffic, or neither
/// utilization nor errors reported): `qps / (utilization + eps/qps × penalty)`.
///
/// The error penalty is added before the check, as Envoy does: an endpoint that fails
/// every request at once does no work and reports utilization 0, and must still get the
/// small weight its errors earn, not the mean weight of an endpoint without a report
/// (gRPC's A58 ignores such a report, which leaves a black hole its round-robin share).
pub fn report_weight(report: &LoadReport, config: &CswrrConfig) -> Option<f64> {
    let qps = report.rps_fractional;
    if qps <= 0.0 || !qps.is_finite() {
        return None;
    }
    let utilization = report.utilization(&config.metric_names_for_computing_utilization);
    let penalty = (report.eps / qps * config.error_utilization_penalty).max(0.0);
    let loaded = utilization + penalty;
    if loaded <= 0.0 || !loaded.is_finite() {
        return None;
    }
    let weight = qps / loaded;
    (weight.is_finite() && weight > 0.0).then_some(weight)
}

#[cfg(test)]
mod tests;
