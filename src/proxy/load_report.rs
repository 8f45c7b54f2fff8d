//! The load this sidecar reports for the application behind it, so that callers balance on
//! it without the application sending ORCA itself. The inbound side counts, for every
//! request it hands the application, the requests in flight, those answered, and the time
//! to the answer's headers; a control-runtime task turns the counts and the pod's CPU use
//! into an ORCA report (`endpoint-load-metrics: TEXT …`, a form Envoy, gRPC and Outrider
//! parse) every [`REFRESH`], and the inbound side adds it to answers for callers that asked.
//!
//! Who gets a report: a caller that asked with [`LOAD_REPORT_REQUEST`] over mutual TLS
//! (it holds a mesh identity). Outrider sidecars ask on the requests they send to mTLS
//! upstreams and take the report off the answer before their application sees it (as they
//! take off any ORCA header). Envoy sidecars are not asked for: Envoy hands an upstream's
//! ORCA header on to the calling application. The header never reaches the application
//! behind this sidecar, and an application's own report wins over this one.
//!
//! The report (`REFRESH`-old at most):
//! - `cpu_utilization`: the application's CPU use over the CPUs it may use
//!   (`core::cpu_usage`, from the source the node metadata names), smoothed over about a
//!   second; absent when the source is off;
//! - `application_utilization`: the larger of that and the requests in the application
//!   (smoothed the same way) over how many it serves at once, estimated from its latency
//!   by how many were in it at each arrival (`load_report::concurrency`); what callers
//!   read first;
//! - `rps_fractional`: answered requests per second, smoothed the same way;
//! - `named_metrics.in_flight`: requests in the application now (callers without a
//!   capacity for the endpoint divide it by the rate: the wait in the application);
//! - `named_metrics.latency_ms`: the mean time to the answer's headers in the last
//!   window that had answers.
//!
//! With nothing answered for a while (`rps_fractional` below [`MIN_RPS`]) there is no
//! report: a capacity read from an idle pod means nothing.
//!
//! The request path's cost: six relaxed atomic adds on cache lines only its worker writes,
//! a relaxed load of every worker's count of requests in flight (the arrival count: the
//! one read of lines other workers write, which a count of the application's requests
//! needs), a relaxed load of the first arrival's time (a line written once per burst of
//! traffic), and a header value copied per worker once per refresh.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::core::cpu_usage::{self, CpuSample};
use crate::core::shutdown::Signal;
use crate::lb::load::IN_FLIGHT_METRIC;

mod concurrency;
use concurrency::{BUCKETS, Buckets};

/// The request header a calling sidecar asks for a load report with.
pub const LOAD_REPORT_REQUEST: HeaderName = HeaderName::from_static("x-outrider-load-report");
/// The ORCA headers an application's own report comes in.
const ENDPOINT_LOAD_METRICS: HeaderName = HeaderName::from_static("endpoint-load-metrics");
const ENDPOINT_LOAD_METRICS_BIN: HeaderName = HeaderName::from_static("endpoint-load-metrics-bin");

/// How often the report is recomputed.
pub const REFRESH: Duration = Duration::from_millis(250);
/// The smoothing of rates and utilization: about the last second.
const SMOOTHING: Duration = Duration::from_secs(1);
/// Below this many answers per second there is nothing to report.
pub const MIN_RPS: f64 = 0.5;

/// One worker's counts, on cache lines no other worker writes.
#[derive(Debug)]
#[repr(align(128))]
struct Slot {
    in_flight: AtomicI64,
    answered: AtomicU64,
    latency_ns: AtomicU64,
    /// Answers and their latencies by how many requests were in the application when each
    /// arrived (index `k − 1`).
    by_arrival: [(AtomicU64, AtomicU64); BUCKETS],
}

impl Default for Slot {
    fn default() -> Self {
        Self {
            in_flight: AtomicI64::new(0),
            answered: AtomicU64::new(0),
            latency_ns: AtomicU64::new(0),
            by_arrival: std::array::from_fn(|_| (AtomicU64::new(0), AtomicU64::new(0))),
        }
    }
}

/// How many requests were in the application when one arrived, itself included (as a
/// bucket index, `k − 1`, the last bucket holding every larger count).
#[derive(Debug, Clone, Copy)]
pub struct Arrival(usize);

/// The inbound counts of every worker and the report made from them.
#[derive(Debug)]
pub struct InboundLoad {
    slots: Box<[Slot]>,
    report: ArcSwapOption<HeaderValue>,
    /// Bumped with every new report (or its withdrawal): workers copy it when it moves.
    generation: AtomicU64,
    /// When the first request since the application was last idle arrived (nanoseconds
    /// after `epoch`, 0 = none since): the reporter counts the window in which the
    /// traffic began from it. Written once per burst of traffic, read by every request.
    first_arrival: FirstArrival,
    epoch: Instant,
}

/// On a cache line of its own: read by every request, written once per burst.
#[derive(Debug, Default)]
#[repr(align(128))]
struct FirstArrival(AtomicU64);

impl InboundLoad {
    pub fn new(workers: usize) -> Arc<Self> {
        Arc::new(Self {
            slots: (0..workers.max(1)).map(|_| Slot::default()).collect(),
            report: ArcSwapOption::empty(),
            generation: AtomicU64::new(0),
            first_arrival: FirstArrival::default(),
            epoch: Instant::now(),
        })
    }

    /// A request handed to the application by `worker`; the other workers' counts are
    /// read, not written.
    pub fn started(&self, worker: usize) -> Arrival {
        if self.first_arrival.0.load(Ordering::Relaxed) == 0 {
            let nanos = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1);
            // Another worker's first request may have won; either time is the burst's start.
            let _ = self.first_arrival.0.compare_exchange(0, nanos, Ordering::Relaxed, Ordering::Relaxed);
        }
        if let Some(slot) = self.slots.get(worker) {
            slot.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        let in_app = self.slots.iter().fold(0i64, |sum, s| sum.saturating_add(s.in_flight.load(Ordering::Relaxed)));
        Arrival(usize::try_from(in_app).unwrap_or(0).clamp(1, BUCKETS) - 1)
    }

    /// Its answer's headers came after `latency` (or it ended without one).
    pub fn answered(&self, worker: usize, arrival: Arrival, latency: Duration) {
        if let Some(slot) = self.slots.get(worker) {
            slot.in_flight.fetch_sub(1, Ordering::Relaxed);
            slot.answered.fetch_add(1, Ordering::Relaxed);
            let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
            slot.latency_ns.fetch_add(nanos, Ordering::Relaxed);
            if let Some((answers, latency)) = slot.by_arrival.get(arrival.0) {
                answers.fetch_add(1, Ordering::Relaxed);
                latency.fetch_add(nanos, Ordering::Relaxed);
            }
        }
    }

    /// The sums over workers for arrival bucket `index`: (answers, latency in nanoseconds).
    fn by_arrival(&self, index: usize) -> (u64, u64) {
        self.slots.iter().filter_map(|s| s.by_arrival.get(index)).fold((0, 0), |(a, l), (answers, latency)| {
            (a.wrapping_add(answers.load(Ordering::Relaxed)), l.wrapping_add(latency.load(Ordering::Relaxed)))
        })
    }

    /// The sums over workers: (in flight, answered, latency in nanoseconds).
    fn totals(&self) -> (i64, u64, u64) {
        self.slots.iter().fold((0, 0, 0), |(f, a, l), s| {
            (
                f.saturating_add(s.in_flight.load(Ordering::Relaxed)),
                a.wrapping_add(s.answered.load(Ordering::Relaxed)),
                l.wrapping_add(s.latency_ns.load(Ordering::Relaxed)),
            )
        })
    }

    /// When the first request since the application was last idle arrived, if one has.
    fn first_arrival(&self) -> Option<Instant> {
        let nanos = self.first_arrival.0.load(Ordering::Relaxed);
        (nanos != 0).then(|| self.epoch + Duration::from_nanos(nanos))
    }

    /// The application is idle: the next request starts a new burst.
    fn forget_first_arrival(&self) {
        self.first_arrival.0.store(0, Ordering::Relaxed);
    }

    fn publish(&self, report: Option<HeaderValue>) {
        self.report.store(report.map(Arc::new));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Publishes `text` as the current report (for the benches, which run no reporter task).
    #[doc(hidden)]
    pub fn publish_for_bench(&self, text: &str) {
        self.publish(HeaderValue::from_str(text).ok());
    }
}

/// A worker's copy of the current report: each clone the request path makes counts on the
/// worker's own allocation, not on one every worker shares.
#[derive(Debug, Default)]
pub struct WorkerReport {
    copy: RefCell<(u64, Option<HeaderValue>)>,
}

impl WorkerReport {
    pub fn current(&self, load: &InboundLoad) -> Option<HeaderValue> {
        let generation = load.generation.load(Ordering::Acquire);
        let mut copy = self.copy.borrow_mut();
        if copy.0 != generation {
            let fresh = load.report.load_full().and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok());
            *copy = (generation, fresh);
        }
        copy.1.clone()
    }
}

/// Whether a request asked for a report (taking the ask off it, so the application never
/// sees it): only over TLS with the caller's certificate.
pub fn take_request(headers: &mut HeaderMap, mutual_tls: bool) -> bool {
    headers.remove(LOAD_REPORT_REQUEST).is_some() && mutual_tls
}

/// Adds `report` to an answer unless the application sent its own.
pub fn add_to_answer(headers: &mut HeaderMap, report: HeaderValue) {
    if !headers.contains_key(ENDPOINT_LOAD_METRICS) && !headers.contains_key(ENDPOINT_LOAD_METRICS_BIN) {
        headers.insert(ENDPOINT_LOAD_METRICS, report);
    }
}

/// Turns the counts into reports, one tick at a time.
#[derive(Debug, Default)]
pub struct Reporter {
    last: Option<Tick>,
    rps: f64,
    utilization: Option<f64>,
    latency_ms: Option<f64>,
    /// The mean number of requests in the application, smoothed like the rate.
    in_app: f64,
    /// Whether the rate and `in_app` have had a sample: the first is taken whole.
    measured: bool,
    by_arrival: Buckets,
}

#[derive(Debug, Clone)]
struct Tick {
    at: Instant,
    answered: u64,
    latency_ns: u64,
    by_arrival: [(u64, u64); BUCKETS],
    cpu: Option<CpuSample>,
}

impl Reporter {
    /// Takes the counts at `now` with the CPU reading `cpu`; returns the report text, or
    /// `None` when there is nothing worth reporting.
    pub fn tick(&mut self, load: &InboundLoad, cpu: Option<CpuSample>, now: Instant) -> Option<String> {
        let (in_flight, answered, latency_ns) = load.totals();
        let by_arrival: [(u64, u64); BUCKETS] = std::array::from_fn(|i| load.by_arrival(i));
        let tick = Tick { at: now, answered, latency_ns, by_arrival, cpu };
        let last = self.last.replace(tick)?;
        let seconds = now.checked_duration_since(last.at)?.as_secs_f64();
        if seconds <= 0.0 {
            return None;
        }
        let count = answered.wrapping_sub(last.answered);
        let smoothing = 1.0 - (-seconds / SMOOTHING.as_secs_f64()).exp();
        let latency_sum = latency_ns.wrapping_sub(last.latency_ns);
        // The rate and the count in the application start at their first sample, not at
        // zero: from zero a pod flooded from its first requests reported itself under half
        // busy for its first second (the lab's S5 through two hops: a 2-slot backend read
        // 0.39–0.42 after its caller had sent it up to 15 at once). That sample is counted
        // over the part of the window since the first request arrived, not the whole
        // window: the traffic began within it, and over the whole the rate came out a
        // fraction of what it was (a 2-slot backend's first report said 24 a second where
        // it was being sent about 115), which callers dividing the requests inside by it
        // read as a wait several times too long. At least the answers' mean latency: they
        // were all answered within it.
        let (weight, busy) = if self.measured || count == 0 {
            (smoothing, seconds)
        } else {
            let since_first = load.first_arrival().and_then(|at| now.checked_duration_since(at));
            // And a millisecond at least: never a rate from a division by nothing.
            let floor = (latency_sum as f64 / 1e9 / count as f64).max(1e-3);
            (1.0, since_first.map_or(seconds, |d| d.as_secs_f64().clamp(floor.min(seconds), seconds)))
        };
        self.measured |= count > 0;
        self.rps += weight * (count as f64 / busy - self.rps);
        // Little's law: the time the answered requests spent in the application over the
        // time passed is how many were in it on average.
        self.in_app += weight * (latency_sum as f64 / 1e9 / busy - self.in_app);
        if count > 0 {
            self.latency_ms = Some(latency_sum as f64 / count as f64 / 1e6);
        }
        self.by_arrival.age((-seconds / concurrency::WINDOW_SECONDS).exp());
        for (index, (sums, before)) in by_arrival.iter().zip(&last.by_arrival).enumerate() {
            self.by_arrival.add(index, sums.0.wrapping_sub(before.0), sums.1.wrapping_sub(before.1));
        }
        if let (Some(cpu), Some(before)) = (cpu, last.cpu)
            && let Some(now_used) = cpu.utilization_since(&before)
        {
            let smoothed = self.utilization.map_or(now_used, |u| u + smoothing * (now_used - u));
            self.utilization = Some(smoothed);
        }
        if self.rps < MIN_RPS {
            // Idle: when the traffic comes back its rate starts again from its first
            // sample, counted from its first request (none arrived in this window: any
            // would be inside or answered).
            if count == 0 && in_flight <= 0 {
                self.measured = false;
                load.forget_first_arrival();
            }
            return None;
        }
        let in_use = self.by_arrival.concurrency().map(|slots| self.in_app / slots);
        let mut text = String::from("TEXT ");
        match (self.utilization, in_use) {
            (Some(cpu), in_use) => {
                let application = in_use.map_or(cpu, |u| u.max(cpu));
                text.push_str(&format!("application_utilization={application:.4}, cpu_utilization={cpu:.4}, "));
            }
            (None, Some(in_use)) => text.push_str(&format!("application_utilization={in_use:.4}, ")),
            (None, None) => {}
        }
        text.push_str(&format!(
            "rps_fractional={:.3}, named_metrics.{IN_FLIGHT_METRIC}={}",
            self.rps,
            in_flight.max(0)
        ));
        if let Some(latency) = self.latency_ms {
            text.push_str(&format!(", named_metrics.latency_ms={latency:.3}"));
        }
        Some(text)
    }
}

/// Recomputes the report every [`REFRESH`] until `shutdown`.
pub async fn keep_reporting(load: Arc<InboundLoad>, cpu: cpu_usage::CpuSource, shutdown: Signal) {
    let mut reporter = Reporter::default();
    let mut interval = tokio::time::interval(REFRESH);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = shutdown.clone().triggered() => return,
        }
        let text = reporter.tick(&load, cpu_usage::sample(cpu), Instant::now());
        load.publish(text.and_then(|t| HeaderValue::from_str(&t).ok()));
    }
}

#[cfg(test)]
mod tests;
