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

/// Where decoded load reports go. Implemented by the balancers' per-endpoint stats.
pub trait LoadSink: Send + Sync {
    fn report_load(&self, report: LoadReport);
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

    /// What the report says the backend could serve at full utilization,
    /// `rps_fractional / utilization` requests per second; `None` when either is missing.
    pub fn capacity(&self) -> Option<f64> {
        let utilization = self.utilization(&[]);
        let capacity = self.rps_fractional / utilization;
        (utilization > 0.0 && self.rps_fractional > 0.0 && capacity.is_finite()).then_some(capacity)
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
        assert_eq!(report.capacity(), Some(400.0));
        let cpu = LoadReport { rps_fractional: 50.0, cpu_utilization: 0.5, ..Default::default() };
        assert_eq!(cpu.capacity(), Some(100.0), "cpu_utilization when no application utilization");
        assert_eq!(LoadReport { rps_fractional: 100.0, ..Default::default() }.capacity(), None, "no utilization");
        let idle = LoadReport { application_utilization: 0.5, ..Default::default() };
        assert_eq!(idle.capacity(), None, "no traffic");
    }
}
