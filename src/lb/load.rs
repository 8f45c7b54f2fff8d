//! Load reports: what a backend says about its own load (ORCA), independent of how it was
//! carried (response headers, trailers, or an out-of-band stream). `orca` decodes reports
//! and hands them to a [`LoadSink`]; the balancers read them from `EndpointStats`.

use std::collections::BTreeMap;

/// One backend load report (the fields of `xds.data.orca.v3.OrcaLoadReport` that balancing
/// uses). Values are validated by the decoder: finite and non-negative.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadReport {
    pub cpu_utilization: f64,
    pub mem_utilization: f64,
    pub application_utilization: f64,
    /// Queries per second the backend served.
    pub rps_fractional: f64,
    /// Errors per second the backend returned.
    pub eps: f64,
    pub named_metrics: BTreeMap<String, f64>,
    pub utilization: BTreeMap<String, f64>,
    pub request_cost: BTreeMap<String, f64>,
}

/// Below this utilization a report is not taken as a capacity measurement: at light load a
/// utilization is mostly what the backend uses whatever its rate (a CPU meter's baseline,
/// the one request being answered), so `rps / utilization` comes out far below what the
/// backend can serve, and an endpoint costed by it is sent nothing that would correct it.
/// (A report above it can still be light: the demo's `busy` said 1 request a second at 0.5,
/// that one request being half its slots. The adaptive policy's floor on capacity, one
/// request per round trip, answers that case.)
pub const MIN_MEASURED_UTILIZATION: f64 = 0.2;

/// A utilization above this (a hundred times the backend's capacity queued inside it) is
/// a broken reporter, not a load: the report is refused.
pub const MAX_UTILIZATION: f64 = 100.0;

/// A rate above this many requests per second from one backend is a broken reporter.
pub const MAX_RPS: f64 = 1e9;

/// The named metric an Outrider server sidecar reports the requests inside its
/// application with, at the moment of the report (`named_metrics.in_flight`).
pub const IN_FLIGHT_METRIC: &str = "in_flight";

/// A queue longer than this is reported as this long: past it the endpoint is out of the
/// running either way, and the bound keeps the arithmetic finite.
const MAX_QUEUE_WAIT_SECONDS: f64 = 60.0;

/// What a load report says about the backend's capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Capacity {
    /// Requests per second at full utilization, `rps_fractional / utilization`.
    Measured(f64),
    /// No rate or no utilization: the report is about something else.
    Unsaid,
    /// A utilization below [`MIN_MEASURED_UTILIZATION`]: too light a load to measure by.
    LightLoad,
    /// Beyond [`MAX_UTILIZATION`] or [`MAX_RPS`]: the whole report is refused.
    Absurd,
}

/// Where decoded load reports go. Implemented by the balancers' per-endpoint stats.
pub trait LoadSink: Send + Sync {
    fn report_load(&self, report: LoadReport);

    /// A report from the backend was refused (undecodable, NaN, negative): counted where
    /// the sink keeps counts.
    fn refuse_load(&self) {}
}

impl LoadReport {
    /// The utilization balancing reads: the maximum of `metric_names` that are > 0; else
    /// `application_utilization` if > 0; else `cpu_utilization` (gRPC's A58, which CSWRR
    /// follows; the adaptive policy reads it with no names).
    pub fn utilization(&self, metric_names: &[String]) -> f64 {
        let named = metric_names.iter().filter_map(|name| self.metric(name)).filter(|v| *v > 0.0).fold(0.0, f64::max);
        if named > 0.0 {
            named
        } else if self.application_utilization > 0.0 {
            self.application_utilization
        } else {
            self.cpu_utilization
        }
    }

    /// How long a request arriving now would spend in the application, in seconds, by
    /// Little's law from what its sidecar reported: the requests inside it over the rate
    /// it answers them at. `None` unless both are there (an application's own ORCA report
    /// names no requests inside).
    pub fn queue_wait(&self) -> Option<f64> {
        let inside = *self.named_metrics.get(IN_FLIGHT_METRIC)?;
        // The decoders refuse a NaN rate; never divided by here either way.
        if self.rps_fractional.is_nan() || self.rps_fractional <= 0.0 || !inside.is_finite() || inside < 0.0 {
            return None;
        }
        Some((inside / self.rps_fractional).min(MAX_QUEUE_WAIT_SECONDS))
    }

    /// What the report says the backend could serve at full utilization,
    /// `rps_fractional / utilization` requests per second, when it says anything: a rate
    /// and a utilization both there, the utilization high enough to be a measurement of
    /// load (see [`Capacity::LightLoad`]) and both within reason.
    pub fn capacity(&self) -> Capacity {
        let utilization = self.utilization(&[]);
        // Written so that a NaN, which the decoders refuse already, lands here too.
        let within = (0.0..=MAX_UTILIZATION).contains(&utilization) && (0.0..=MAX_RPS).contains(&self.rps_fractional);
        if !within {
            return Capacity::Absurd;
        }
        if utilization <= 0.0 || self.rps_fractional <= 0.0 {
            return Capacity::Unsaid;
        }
        if utilization < MIN_MEASURED_UTILIZATION {
            return Capacity::LightLoad;
        }
        let capacity = self.rps_fractional / utilization;
        if capacity.is_finite() { Capacity::Measured(capacity) } else { Capacity::Absurd }
    }

    fn metric(&self, name: &str) -> Option<f64> {
        match name {
            "application_utilization" => Some(self.application_utilization),
            "cpu_utilization" => Some(self.cpu_utilization),
            "mem_utilization" => Some(self.mem_utilization),
            _ => {
                if let Some(key) = name.strip_prefix("named_metrics.") {
                    self.named_metrics.get(key).copied()
                } else {
                    name.strip_prefix("utilization.").and_then(|key| self.utilization.get(key).copied())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_requests_per_second_at_full_utilization() {
        let report = LoadReport { rps_fractional: 100.0, application_utilization: 0.25, ..Default::default() };
        assert_eq!(report.capacity(), Capacity::Measured(400.0));
        let cpu = LoadReport { rps_fractional: 50.0, cpu_utilization: 0.5, ..Default::default() };
        assert_eq!(cpu.capacity(), Capacity::Measured(100.0), "cpu_utilization when no application utilization");
        let unsaid = LoadReport { rps_fractional: 100.0, ..Default::default() };
        assert_eq!(unsaid.capacity(), Capacity::Unsaid, "no utilization");
        let idle = LoadReport { application_utilization: 0.5, ..Default::default() };
        assert_eq!(idle.capacity(), Capacity::Unsaid, "no traffic");
    }

    #[test]
    fn the_queue_wait_is_the_requests_inside_over_the_rate() {
        let mut report = LoadReport { rps_fractional: 200.0, ..Default::default() };
        assert_eq!(report.queue_wait(), None, "no count of requests inside");
        report.named_metrics.insert(IN_FLIGHT_METRIC.to_owned(), 50.0);
        assert_eq!(report.queue_wait(), Some(0.25));
        report.rps_fractional = 0.0;
        assert_eq!(report.queue_wait(), None, "no rate to divide by");
        report.rps_fractional = 1e-9;
        assert_eq!(report.queue_wait(), Some(MAX_QUEUE_WAIT_SECONDS), "bounded");
    }

    #[test]
    fn a_light_load_is_no_capacity_measurement() {
        let light = LoadReport { rps_fractional: 3.0, cpu_utilization: 0.05, ..Default::default() };
        assert_eq!(light.capacity(), Capacity::LightLoad);
    }

    #[test]
    fn absurd_reports_are_refused() {
        let overloaded = LoadReport { rps_fractional: 1.0, application_utilization: 1e9, ..Default::default() };
        assert_eq!(overloaded.capacity(), Capacity::Absurd);
        let rate = LoadReport { rps_fractional: 1e300, application_utilization: 0.5, ..Default::default() };
        assert_eq!(rate.capacity(), Capacity::Absurd);
        let nan = LoadReport { rps_fractional: f64::NAN, application_utilization: 0.5, ..Default::default() };
        assert_eq!(nan.capacity(), Capacity::Absurd, "the decoder refuses these; never a capacity either way");
        let queued = LoadReport { rps_fractional: 50.0, application_utilization: 2.0, ..Default::default() };
        assert_eq!(queued.capacity(), Capacity::Measured(25.0), "a queue is a load");
    }
}
