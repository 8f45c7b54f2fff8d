//! Passive health checking: ejecting endpoints whose responses go wrong. Field names and
//! defaults are Envoy's `envoy.config.cluster.v3.OutlierDetection`. Percentages are whole
//! percent (0–100) as in Envoy; an `enforcing_*` value is the chance that a detected
//! outlier is really ejected.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct OutlierDetection {
    /// Consecutive 5xx (or local-origin failures when not split) that eject a host.
    pub consecutive_5xx: u32,
    pub enforcing_consecutive_5xx: u32,
    /// Consecutive 502/503/504 (gateway failures) that eject a host.
    pub consecutive_gateway_failure: u32,
    pub enforcing_consecutive_gateway_failure: u32,
    /// Count connect failures, timeouts and resets apart from HTTP status codes.
    pub split_external_local_origin_errors: bool,
    pub consecutive_local_origin_failure: u32,
    pub enforcing_consecutive_local_origin_failure: u32,
    pub enforcing_local_origin_success_rate: u32,
    /// How often success-rate and failure-percentage ejection is evaluated.
    pub interval: Duration,
    /// Ejection lasts `base_ejection_time × times ejected`, capped at `max_ejection_time`.
    pub base_ejection_time: Duration,
    /// Never below `base_ejection_time`.
    pub max_ejection_time: Duration,
    /// A random extra of up to this much per ejection.
    pub max_ejection_time_jitter: Duration,
    pub max_ejection_percent: u32,
    /// Eject one host even when `max_ejection_percent` of the cluster is less than one host.
    pub always_eject_one_host: bool,
    pub enforcing_success_rate: u32,
    pub success_rate_minimum_hosts: u32,
    pub success_rate_request_volume: u32,
    /// In thousandths: 1900 ejects hosts whose success rate is below mean − 1.9 σ.
    pub success_rate_stdev_factor: u32,
    /// Eject hosts whose failure percentage is at least this.
    pub failure_percentage_threshold: u32,
    pub enforcing_failure_percentage: u32,
    pub enforcing_failure_percentage_local_origin: u32,
    pub failure_percentage_minimum_hosts: u32,
    pub failure_percentage_request_volume: u32,
    /// An active health check success returns an ejected host at once.
    pub successful_active_health_check_uneject_host: bool,
    /// Mark hosts that answer with `x-envoy-degraded` as degraded.
    pub detect_degraded_hosts: bool,
}

impl Default for OutlierDetection {
    fn default() -> Self {
        Self {
            consecutive_5xx: 5,
            enforcing_consecutive_5xx: 100,
            consecutive_gateway_failure: 5,
            enforcing_consecutive_gateway_failure: 0,
            split_external_local_origin_errors: false,
            consecutive_local_origin_failure: 5,
            enforcing_consecutive_local_origin_failure: 100,
            enforcing_local_origin_success_rate: 100,
            interval: Duration::from_secs(10),
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_time_jitter: Duration::ZERO,
            max_ejection_percent: 10,
            always_eject_one_host: false,
            enforcing_success_rate: 100,
            success_rate_minimum_hosts: 5,
            success_rate_request_volume: 100,
            success_rate_stdev_factor: 1900,
            failure_percentage_threshold: 85,
            enforcing_failure_percentage: 0,
            enforcing_failure_percentage_local_origin: 0,
            failure_percentage_minimum_hosts: 5,
            failure_percentage_request_volume: 50,
            successful_active_health_check_uneject_host: true,
            detect_degraded_hosts: false,
        }
    }
}
