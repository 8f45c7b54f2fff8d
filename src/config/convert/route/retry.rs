//! `envoy.config.route.v3.RetryPolicy` → [`RetryPolicy`], with Envoy's defaults.

use super::super::common;
use super::super::matchers::header_matcher;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::route::{RetryBackOff, RetryOn, RetryOnSet, RetryPolicy};
use crate::pb::envoy::config::route::v3 as proto;

const PREVIOUS_HOSTS: &str = "envoy.retry_host_predicates.previous_hosts";
const PREVIOUS_HOSTS_TYPE: &str = "envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate";

pub fn retry_policy(proto: proto::RetryPolicy, warnings: &mut Warnings) -> Result<RetryPolicy> {
    let proto::RetryPolicy {
        retry_on,
        num_retries,
        per_try_timeout,
        per_try_idle_timeout,
        retry_priority,
        retry_host_predicate,
        retry_options_predicates,
        host_selection_retry_max_attempts,
        retriable_status_codes,
        retry_back_off,
        rate_limited_retry_back_off,
        retriable_headers,
        retriable_request_headers,
        refresh_cluster_on_retry,
    } = proto;
    let retry_on = parse_retry_on(&retry_on).map_err(|e| e.at("retry_on"))?;
    if retry_priority.is_some() {
        return Err(ConfigError::new("retry_priority", "retry priority plugins are not supported"));
    }
    if !retry_options_predicates.is_empty() {
        return Err(ConfigError::new("retry_options_predicates", "retry options predicates are not supported"));
    }
    if rate_limited_retry_back_off.is_some() {
        return Err(ConfigError::new("rate_limited_retry_back_off", "rate-limited retry back-off is not supported"));
    }
    if refresh_cluster_on_retry {
        warnings.ignored("refresh_cluster_on_retry", "the cluster is resolved once per request");
    }
    let mut avoid_previous_hosts = false;
    for (i, predicate) in retry_host_predicate.iter().enumerate() {
        let type_name = match &predicate.config_type {
            Some(proto::retry_policy::retry_host_predicate::ConfigType::TypedConfig(any)) => {
                common::type_name(&any.type_url)
            }
            None => "",
        };
        if predicate.name == PREVIOUS_HOSTS || type_name == PREVIOUS_HOSTS_TYPE {
            avoid_previous_hosts = true;
        } else {
            return Err(ConfigError::new(
                format!("retry_host_predicate[{i}]"),
                format!("only {PREVIOUS_HOSTS} is supported, got {:?}", predicate.name),
            ));
        }
    }
    let host_selection_retry_max_attempts = match host_selection_retry_max_attempts {
        0 => 1,
        n => u32::try_from(n).map_err(|_| {
            ConfigError::new("host_selection_retry_max_attempts", format!("{n} is not a positive 32-bit count"))
        })?,
    };
    let retriable_status_codes = retriable_status_codes
        .into_iter()
        .enumerate()
        .map(|(i, code)| match u16::try_from(code) {
            Ok(code) if (100..=599).contains(&code) => Ok(code),
            _ => Err(ConfigError::new(format!("retriable_status_codes[{i}]"), format!("{code} is not an HTTP status"))),
        })
        .collect::<Result<Vec<_>>>()?;
    let headers = |list: Vec<proto::HeaderMatcher>, field: &str, warnings: &mut Warnings| {
        list.into_iter()
            .enumerate()
            .map(|(i, h)| {
                let at = format!("{field}[{i}]");
                warnings.within(&at, |w| header_matcher(h, w)).map_err(|e| e.at(&at))
            })
            .collect::<Result<Vec<_>>>()
    };
    Ok(RetryPolicy {
        retry_on,
        num_retries: common::u32_or(&num_retries, 1),
        per_try_timeout: common::opt_duration(&per_try_timeout, "per_try_timeout")?.filter(|d| !d.is_zero()),
        per_try_idle_timeout: common::opt_duration(&per_try_idle_timeout, "per_try_idle_timeout")?
            .filter(|d| !d.is_zero()),
        avoid_previous_hosts,
        host_selection_retry_max_attempts,
        retriable_status_codes,
        retriable_headers: headers(retriable_headers, "retriable_headers", warnings)?,
        retriable_request_headers: headers(retriable_request_headers, "retriable_request_headers", warnings)?,
        back_off: match retry_back_off {
            None => RetryBackOff::default(),
            Some(b) => back_off(b).map_err(|e| e.at("retry_back_off"))?,
        },
    })
}

/// Parses Envoy's comma-separated `retry_on` (HTTP and gRPC conditions together).
pub fn parse_retry_on(value: &str) -> Result<RetryOnSet> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| RetryOn::parse(s).ok_or_else(|| ConfigError::new("", format!("unknown retry condition {s:?}"))))
        .collect()
}

fn back_off(proto: proto::retry_policy::RetryBackOff) -> Result<RetryBackOff> {
    let proto::retry_policy::RetryBackOff { base_interval, max_interval } = proto;
    let base = common::opt_duration(&base_interval, "base_interval")?
        .ok_or_else(|| ConfigError::new("base_interval", "is required"))?;
    if base.as_millis() < 1 {
        return Err(ConfigError::new("base_interval", "must be at least 1ms"));
    }
    let max = common::opt_duration(&max_interval, "max_interval")?.unwrap_or(base.saturating_mul(10));
    if max < base {
        return Err(ConfigError::new("max_interval", "must not be less than base_interval"));
    }
    Ok(RetryBackOff { base_interval: base, max_interval: max })
}
