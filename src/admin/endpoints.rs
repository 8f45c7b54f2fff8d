//! What Outrider knows about each endpoint beyond Envoy's stats, read from the shared
//! per-endpoint stats at scrape time: in-flight requests, peak-EWMA latency, outcomes,
//! the latest ORCA report and the utilization taken from it, the reports refused, the
//! weight client-side weighted round robin derived from it, outlier ejection and active
//! health check flags.
//!
//! `/clusters` always shows them; `/stats` exports them only for clusters that ask
//! (`track_cluster_stats.per_endpoint_stats`), as Envoy exports per-host stats: with
//! thousands of clusters they would otherwise be most of the series.

use std::time::{Duration, Instant};

use crate::lb::load::LoadReport;
use crate::lb::{Balancers, Host};
use crate::telemetry::{Sample, Scope, Value};

/// One endpoint's live view.
#[derive(Debug, Clone)]
pub struct EndpointView {
    pub in_flight: u32,
    pub successes: u64,
    pub errors: u64,
    /// ORCA reports refused as undecodable, NaN, negative or beyond reason.
    pub load_reports_refused: u64,
    pub ewma_latency: Option<Duration>,
    /// Application utilization, else CPU, from the latest report.
    pub utilization: Option<f64>,
    pub last_report: Option<(LoadReport, Duration)>,
    /// The weight derived from the last usable ORCA report (CSWRR); 0 = none.
    pub reported_weight: f64,
    pub ejected: bool,
    /// Active health checking's flags (meaningful when the cluster has health checks).
    pub failed_active_hc: bool,
    pub degraded_active_hc: bool,
    pub active_hc_timeout: bool,
}

impl EndpointView {
    pub fn of(host: &Host, now: Instant) -> Self {
        let stats = &host.stats;
        let report = stats.load_report();
        Self {
            in_flight: stats.in_flight(),
            successes: stats.successes(),
            errors: stats.errors(),
            load_reports_refused: stats.load_reports_refused(),
            ewma_latency: stats.rtt_estimate(now),
            utilization: report.as_ref().map(|r| r.report.utilization(&[])),
            last_report: report.map(|r| (r.report.clone(), now.saturating_duration_since(r.received))),
            reported_weight: stats.weight_state().reported_weight(),
            ejected: stats.is_ejected(now),
            failed_active_hc: stats.health().failed(),
            degraded_active_hc: stats.health().degraded(),
            active_hc_timeout: stats.health().timed_out(),
        }
    }
}

/// `outrider_cluster_endpoint_*` gauges, labelled by cluster and endpoint address, of the
/// clusters `exported` names.
pub fn samples(balancers: &Balancers, exported: impl Fn(&str) -> bool, now: Instant) -> Vec<Sample> {
    let mut out = Vec::new();
    for (cluster, lb) in balancers.all().iter().filter(|(cluster, _)| exported(cluster)) {
        for host in lb.hosts() {
            let view = EndpointView::of(host, now);
            let scope = Scope::outrider()
                .child("cluster")
                .tagged("envoy_cluster_name", cluster)
                .child("endpoint")
                .tagged("outrider_endpoint", &host.address().to_string());
            let mut gauge = |name: &str, value: f64| out.push((scope.name(name), Value::Gauge(value)));
            gauge("weight", f64::from(host.weight()));
            gauge("reported_weight", view.reported_weight);
            gauge("in_flight", f64::from(view.in_flight));
            gauge("ejected", if view.ejected { 1.0 } else { 0.0 });
            if let Some(latency) = view.ewma_latency {
                gauge("ewma_latency_seconds", latency.as_secs_f64());
            }
            if let Some(utilization) = view.utilization {
                gauge("utilization", utilization);
            }
            out.push((scope.name("rq_success"), Value::Counter(view.successes)));
            out.push((scope.name("rq_error"), Value::Counter(view.errors)));
            out.push((scope.name("load_report_refused"), Value::Counter(view.load_reports_refused)));
        }
    }
    out
}
