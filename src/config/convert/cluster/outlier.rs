//! `envoy.config.cluster.v3.OutlierDetection` → [`OutlierDetection`], Envoy's defaults
//! applied to every unset field.

use std::time::Duration;

use crate::config::cluster::OutlierDetection;
use crate::config::convert::common;
use crate::config::error::{ConfigError, Result};
use crate::pb::envoy::config::cluster::v3 as proto;
use crate::pb::google::protobuf as gpb;

pub(super) fn outlier_detection(proto: proto::OutlierDetection) -> Result<OutlierDetection> {
    let proto::OutlierDetection {
        consecutive_5xx,
        interval,
        base_ejection_time,
        max_ejection_percent,
        enforcing_consecutive_5xx,
        enforcing_success_rate,
        success_rate_minimum_hosts,
        success_rate_request_volume,
        success_rate_stdev_factor,
        consecutive_gateway_failure,
        enforcing_consecutive_gateway_failure,
        split_external_local_origin_errors,
        consecutive_local_origin_failure,
        enforcing_consecutive_local_origin_failure,
        enforcing_local_origin_success_rate,
        failure_percentage_threshold,
        enforcing_failure_percentage,
        enforcing_failure_percentage_local_origin,
        failure_percentage_minimum_hosts,
        failure_percentage_request_volume,
        max_ejection_time,
        max_ejection_time_jitter,
        successful_active_health_check_uneject_host,
        monitors,
        always_eject_one_host,
        detect_degraded_hosts,
    } = proto;
    if !monitors.is_empty() {
        return Err(ConfigError::new("monitors", "outlier detection monitors are not supported"));
    }
    let d = OutlierDetection::default();
    let count = |value: &Option<gpb::UInt32Value>, default| common::u32_or(value, default);
    let interval = positive_duration(&interval, "interval", d.interval)?;
    let base_ejection_time = positive_duration(&base_ejection_time, "base_ejection_time", d.base_ejection_time)?;
    // Unset, the cap is 300 s or the base time if that is longer; set, it may not be shorter.
    let max_ejection_time = match common::opt_duration(&max_ejection_time, "max_ejection_time")? {
        None => d.max_ejection_time.max(base_ejection_time),
        Some(max) if max.is_zero() => return Err(ConfigError::new("max_ejection_time", "must be greater than 0")),
        Some(max) if max < base_ejection_time => {
            return Err(ConfigError::new("max_ejection_time", "must not be shorter than base_ejection_time"));
        }
        Some(max) => max,
    };
    Ok(OutlierDetection {
        consecutive_5xx: count(&consecutive_5xx, d.consecutive_5xx),
        enforcing_consecutive_5xx: percent(
            &enforcing_consecutive_5xx,
            "enforcing_consecutive_5xx",
            d.enforcing_consecutive_5xx,
        )?,
        consecutive_gateway_failure: count(&consecutive_gateway_failure, d.consecutive_gateway_failure),
        enforcing_consecutive_gateway_failure: percent(
            &enforcing_consecutive_gateway_failure,
            "enforcing_consecutive_gateway_failure",
            d.enforcing_consecutive_gateway_failure,
        )?,
        split_external_local_origin_errors,
        consecutive_local_origin_failure: count(&consecutive_local_origin_failure, d.consecutive_local_origin_failure),
        enforcing_consecutive_local_origin_failure: percent(
            &enforcing_consecutive_local_origin_failure,
            "enforcing_consecutive_local_origin_failure",
            d.enforcing_consecutive_local_origin_failure,
        )?,
        enforcing_local_origin_success_rate: percent(
            &enforcing_local_origin_success_rate,
            "enforcing_local_origin_success_rate",
            d.enforcing_local_origin_success_rate,
        )?,
        interval,
        base_ejection_time,
        max_ejection_time,
        max_ejection_time_jitter: common::opt_duration(&max_ejection_time_jitter, "max_ejection_time_jitter")?
            .unwrap_or(d.max_ejection_time_jitter),
        max_ejection_percent: percent(&max_ejection_percent, "max_ejection_percent", d.max_ejection_percent)?,
        always_eject_one_host: common::bool_or(&always_eject_one_host, d.always_eject_one_host),
        enforcing_success_rate: percent(&enforcing_success_rate, "enforcing_success_rate", d.enforcing_success_rate)?,
        success_rate_minimum_hosts: count(&success_rate_minimum_hosts, d.success_rate_minimum_hosts),
        success_rate_request_volume: count(&success_rate_request_volume, d.success_rate_request_volume),
        success_rate_stdev_factor: count(&success_rate_stdev_factor, d.success_rate_stdev_factor),
        failure_percentage_threshold: percent(
            &failure_percentage_threshold,
            "failure_percentage_threshold",
            d.failure_percentage_threshold,
        )?,
        enforcing_failure_percentage: percent(
            &enforcing_failure_percentage,
            "enforcing_failure_percentage",
            d.enforcing_failure_percentage,
        )?,
        enforcing_failure_percentage_local_origin: percent(
            &enforcing_failure_percentage_local_origin,
            "enforcing_failure_percentage_local_origin",
            d.enforcing_failure_percentage_local_origin,
        )?,
        failure_percentage_minimum_hosts: count(&failure_percentage_minimum_hosts, d.failure_percentage_minimum_hosts),
        failure_percentage_request_volume: count(
            &failure_percentage_request_volume,
            d.failure_percentage_request_volume,
        ),
        successful_active_health_check_uneject_host: common::bool_or(
            &successful_active_health_check_uneject_host,
            d.successful_active_health_check_uneject_host,
        ),
        detect_degraded_hosts: common::bool_or(&detect_degraded_hosts, d.detect_degraded_hosts),
    })
}

/// A whole percentage, 0–100.
fn percent(value: &Option<gpb::UInt32Value>, field: &str, default: u32) -> Result<u32> {
    match common::u32_or(value, default) {
        p if p > 100 => Err(ConfigError::new(field, format!("{p} is more than 100"))),
        p => Ok(p),
    }
}

fn positive_duration(value: &Option<gpb::Duration>, field: &str, default: Duration) -> Result<Duration> {
    match common::opt_duration(value, field)? {
        None => Ok(default),
        Some(d) if d.is_zero() => Err(ConfigError::new(field, "must be greater than 0")),
        Some(d) => Ok(d),
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::pb::json;
    use serde_json::json;

    fn convert(value: serde_json::Value) -> Result<OutlierDetection> {
        let (proto, dropped) = json::from_value("envoy.config.cluster.v3.OutlierDetection", value).unwrap();
        assert!(dropped.is_empty(), "{dropped:?}");
        outlier_detection(proto)
    }

    #[test]
    fn empty_config_gets_envoy_defaults() {
        let od = convert(json!({})).unwrap();
        assert_eq!(od, OutlierDetection::default());
        assert_eq!(od.consecutive_5xx, 5);
        assert_eq!(od.enforcing_consecutive_gateway_failure, 0);
        assert_eq!(od.max_ejection_time, Duration::from_secs(300));
        assert_eq!(od.success_rate_stdev_factor, 1900);
        assert!(od.successful_active_health_check_uneject_host);
    }

    #[test]
    fn values_are_taken_and_max_ejection_follows_a_long_base() {
        let od = convert(json!({
            "consecutive_5xx": 3, "interval": "2s", "base_ejection_time": "400s",
            "max_ejection_percent": 100, "always_eject_one_host": true,
            "split_external_local_origin_errors": true,
        }))
        .unwrap();
        assert_eq!(od.consecutive_5xx, 3);
        assert_eq!(od.interval, Duration::from_secs(2));
        assert_eq!(od.max_ejection_time, Duration::from_secs(400));
        assert_eq!(od.max_ejection_percent, 100);
        assert!(od.always_eject_one_host && od.split_external_local_origin_errors);
    }

    #[test]
    fn out_of_range_values_are_refused_with_their_path() {
        let err = convert(json!({"max_ejection_percent": 101})).unwrap_err();
        assert_eq!(err.path(), "max_ejection_percent");
        let err = convert(json!({"interval": "0s"})).unwrap_err();
        assert_eq!(err.path(), "interval");
        let err = convert(json!({"base_ejection_time": "60s", "max_ejection_time": "30s"})).unwrap_err();
        assert_eq!(err.path(), "max_ejection_time");
    }
}
