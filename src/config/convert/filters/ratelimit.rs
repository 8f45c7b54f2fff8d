//! `envoy.extensions.filters.http.ratelimit.v3.RateLimit` → [`RateLimit`], and its
//! per-route `RateLimitPerRoute`.

use std::time::Duration;

use super::super::common;
use super::super::header_value_option::header_value_option;
use super::super::rate_limit::rate_limits;
use super::grpc_service::{envoy_grpc, error_status, require_v3};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::ratelimit::{RateLimit, RateLimitPerRoute, RequestType, VhRateLimits};
use crate::pb::envoy::extensions::filters::http::ratelimit::v3 as proto;
use crate::pb::google::protobuf::Any;

pub const TYPE: &str = "envoy.extensions.filters.http.ratelimit.v3.RateLimit";
pub const PER_ROUTE_TYPE: &str = "envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute";

/// Envoy's default timeout of a call to the rate-limit service.
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(20);

pub fn ratelimit(any: &Any, warnings: &mut Warnings) -> Result<RateLimit> {
    let proto::RateLimit {
        domain,
        stage,
        request_type,
        timeout,
        failure_mode_deny,
        rate_limited_as_resource_exhausted,
        rate_limit_service,
        enable_x_ratelimit_headers,
        disable_x_envoy_ratelimited_header,
        rate_limited_status,
        response_headers_to_add,
        status_on_error,
        stat_prefix,
        filter_enabled,
        filter_enforced,
        failure_mode_deny_percent,
        rate_limits: filter_rate_limits,
        metadata_namespace,
        enable_retry_after_header,
    } = common::unpack::<proto::RateLimit>(any)?;
    let refuse = |field: &str, what: &str| Err(ConfigError::new(field, format!("{what} is not supported")));
    if domain.is_empty() {
        return Err(ConfigError::new("domain", "must not be empty"));
    }
    if stage > 10 {
        return Err(ConfigError::new("stage", format!("{stage} is greater than 10")));
    }
    let request_type = match request_type.as_str() {
        "" | "both" => RequestType::Both,
        "internal" => RequestType::Internal,
        "external" => RequestType::External,
        other => return Err(ConfigError::new("request_type", format!("{other:?} is not internal, external or both"))),
    };
    if filter_enabled.is_some() {
        return refuse("filter_enabled", "enabling the filter for a runtime fraction of requests");
    }
    if filter_enforced.is_some() {
        return refuse("filter_enforced", "enforcing for a runtime fraction of requests");
    }
    if failure_mode_deny_percent.is_some() {
        return refuse("failure_mode_deny_percent", "denying a runtime fraction of requests on failure");
    }
    if enable_retry_after_header {
        return refuse("enable_retry_after_header", "the retry-after header");
    }
    if !metadata_namespace.is_empty() {
        warnings.ignored("metadata_namespace", "the service's dynamic metadata is not kept");
    }
    let x_ratelimit_headers = {
        use proto::rate_limit::XRateLimitHeadersRfcVersion as X;
        match X::try_from(enable_x_ratelimit_headers) {
            Ok(X::Off) => false,
            Ok(X::DraftVersion03) => {
                return refuse("enable_x_ratelimit_headers", "X-RateLimit headers");
            }
            Err(_) => return Err(ConfigError::new("enable_x_ratelimit_headers", "unknown value")),
        }
    };
    let crate::pb::envoy::config::ratelimit::v3::RateLimitServiceConfig { grpc_service, transport_api_version } =
        rate_limit_service.ok_or_else(|| ConfigError::new("rate_limit_service", "is required"))?;
    require_v3(transport_api_version, "rate_limit_service.transport_api_version")?;
    let grpc = grpc_service.ok_or_else(|| ConfigError::new("rate_limit_service.grpc_service", "is required"))?;
    let service = warnings
        .within("rate_limit_service.grpc_service", |w| envoy_grpc(grpc, w))
        .map_err(|e| e.at("rate_limit_service.grpc_service"))?;
    let response_headers_to_add = response_headers_to_add
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            let option = header_value_option(h, false).map_err(|e| e.at(format!("response_headers_to_add[{i}]")))?;
            if option.value.contains('%') {
                return Err(ConfigError::new(
                    format!("response_headers_to_add[{i}].header.value"),
                    "substitution formatters are not supported",
                ));
            }
            Ok(option)
        })
        .collect::<Result<_>>()?;
    Ok(RateLimit {
        domain,
        stage,
        request_type,
        timeout: common::opt_duration(&timeout, "timeout")?.unwrap_or(DEFAULT_TIMEOUT),
        failure_mode_deny,
        rate_limited_as_resource_exhausted,
        service,
        x_ratelimit_headers,
        disable_x_envoy_ratelimited_header,
        rate_limited_status: error_status(rate_limited_status, 429),
        response_headers_to_add,
        status_on_error: error_status(status_on_error, 500),
        stat_prefix,
        rate_limits: rate_limits(filter_rate_limits, "rate_limits", warnings)?,
    })
}

pub fn per_route(any: &Any, warnings: &mut Warnings) -> Result<RateLimitPerRoute> {
    use proto::rate_limit_per_route::{OverrideOptions as O, VhRateLimitsOptions as V};
    let proto::RateLimitPerRoute { vh_rate_limits, override_option, rate_limits: route_rate_limits, domain } =
        common::unpack::<proto::RateLimitPerRoute>(any)?;
    let vh_rate_limits = match V::try_from(vh_rate_limits) {
        Ok(V::Override) => VhRateLimits::Override,
        Ok(V::Include) => VhRateLimits::Include,
        Ok(V::Ignore) => VhRateLimits::Ignore,
        Err(_) => return Err(ConfigError::new("vh_rate_limits", "unknown value")),
    };
    if override_option != O::Default as i32 {
        // Envoy does not implement it either (`not-implemented-hide`).
        warnings.ignored("override_option", "not implemented by Envoy");
    }
    Ok(RateLimitPerRoute {
        vh_rate_limits,
        rate_limits: rate_limits(route_rate_limits, "rate_limits", warnings)?,
        domain: (!domain.is_empty()).then_some(domain),
    })
}
