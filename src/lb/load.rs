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
