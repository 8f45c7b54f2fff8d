//! `envoy.extensions.filters.{http,network}.local_ratelimit.v3.LocalRateLimit` →
//! [`HttpLocalRateLimit`] / [`NetworkLocalRateLimit`].

use std::time::Duration;

use http::StatusCode;

use super::super::common;
use super::super::header_value_option::header_value_option;
use super::fractional_percent::runtime_fractional_percent;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::fractional_percent::FractionalPercent;
use crate::config::filters::local_ratelimit::{HttpLocalRateLimit, NetworkLocalRateLimit, TokenBucket};
use crate::config::route::HeaderValueOption;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::extensions::filters::http::local_ratelimit::v3 as http_proto;
use crate::pb::envoy::extensions::filters::network::local_ratelimit::v3 as network_proto;
use crate::pb::envoy::r#type::v3 as types;
use crate::pb::google::protobuf::Any;

pub const HTTP_TYPE: &str = "envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit";
pub const NETWORK_TYPE: &str = "envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit";

/// Envoy refuses a bucket that refills more often than this.
const MIN_FILL_INTERVAL: Duration = Duration::from_millis(50);

/// The HTTP filter's settings; `per_route` settings must have a bucket, as in Envoy.
pub fn http_local_rate_limit(any: &Any, per_route: bool, warnings: &mut Warnings) -> Result<HttpLocalRateLimit> {
    let http_proto::LocalRateLimit {
        stat_prefix,
        status,
        token_bucket,
        filter_enabled,
        filter_enforced,
        request_headers_to_add_when_not_enforced,
        response_headers_to_add,
        descriptors,
        stage,
        local_rate_limit_per_downstream_connection,
        local_cluster_rate_limit,
        enable_x_ratelimit_headers,
        vh_rate_limits,
        always_consume_default_token_bucket,
        rate_limited_as_resource_exhausted,
        rate_limits,
        max_dynamic_descriptors,
        enable_retry_after_header,
    } = common::unpack::<http_proto::LocalRateLimit>(any)?;
    if stat_prefix.is_empty() {
        return Err(ConfigError::new("stat_prefix", "must not be empty"));
    }
    // Descriptors need the route's `rate_limits` actions, which Outrider does not
    // evaluate yet: refused rather than letting every request share the default bucket.
    if !descriptors.is_empty() {
        return Err(ConfigError::new("descriptors", "rate limit descriptors are not supported"));
    }
    if !rate_limits.is_empty() {
        return Err(ConfigError::new("rate_limits", "rate limit actions are not supported"));
    }
    if local_rate_limit_per_downstream_connection {
        return Err(ConfigError::new(
            "local_rate_limit_per_downstream_connection",
            "a token bucket per downstream connection is not supported",
        ));
    }
    if local_cluster_rate_limit.is_some() {
        return Err(ConfigError::new(
            "local_cluster_rate_limit",
            "sharing the limit across the local cluster is not supported",
        ));
    }
    if enable_x_ratelimit_headers != 0 {
        return Err(ConfigError::new("enable_x_ratelimit_headers", "x-ratelimit-* headers are not supported"));
    }
    if enable_retry_after_header {
        return Err(ConfigError::new("enable_retry_after_header", "retry-after on refusals is not supported"));
    }
    // These only shape how descriptors are chosen and consumed; there are none.
    if stage != 0 {
        warnings.ignored("stage", "only selects route rate_limits for descriptors, which are not configured");
    }
    if vh_rate_limits != 0 {
        warnings.ignored("vh_rate_limits", "only selects route rate_limits for descriptors, which are not configured");
    }
    if always_consume_default_token_bucket.is_some() {
        warnings
            .ignored("always_consume_default_token_bucket", "without descriptors the default bucket is always used");
    }
    if max_dynamic_descriptors.is_some() {
        warnings.ignored("max_dynamic_descriptors", "no descriptors are configured");
    }
    let filter_enabled = optional_runtime_percent(&filter_enabled, "filter_enabled", warnings)?;
    let filter_enforced = optional_runtime_percent(&filter_enforced, "filter_enforced", warnings)?;
    let token_bucket = match token_bucket {
        Some(bucket) => Some(token_bucket_of(&bucket).map_err(|e| e.at("token_bucket"))?),
        None if per_route => {
            return Err(ConfigError::new("token_bucket", "is required in per-route settings"));
        }
        // Envoy's bucket without settings holds no token: an enabled filter would refuse
        // everything. Refused rather than guessed at.
        None if !filter_enabled.is_none() => {
            return Err(ConfigError::new("token_bucket", "is required when filter_enabled is above 0%"));
        }
        None => None,
    };
    Ok(HttpLocalRateLimit {
        stat_prefix,
        token_bucket,
        filter_enabled,
        filter_enforced,
        status: status_of(status.as_ref()).map_err(|e| e.at("status"))?,
        grpc_resource_exhausted: rate_limited_as_resource_exhausted,
        response_headers_to_add: headers(response_headers_to_add, "response_headers_to_add", false)?,
        request_headers_to_add_when_not_enforced: headers(
            request_headers_to_add_when_not_enforced,
            "request_headers_to_add_when_not_enforced",
            true,
        )?,
    })
}

pub fn network_local_rate_limit(any: &Any, warnings: &mut Warnings) -> Result<NetworkLocalRateLimit> {
    let network_proto::LocalRateLimit { stat_prefix, token_bucket, runtime_enabled, share_key } =
        common::unpack::<network_proto::LocalRateLimit>(any)?;
    if stat_prefix.is_empty() {
        return Err(ConfigError::new("stat_prefix", "must not be empty"));
    }
    if !share_key.is_empty() {
        return Err(ConfigError::new("share_key", "sharing a bucket between filters is not supported"));
    }
    let Some(bucket) = token_bucket else {
        return Err(ConfigError::new("token_bucket", "is required"));
    };
    let token_bucket = token_bucket_of(&bucket).map_err(|e| e.at("token_bucket"))?;
    let enabled = match runtime_enabled {
        None => true,
        Some(core::RuntimeFeatureFlag { default_value, runtime_key }) => {
            let Some(default_value) = default_value else {
                return Err(ConfigError::new("runtime_enabled.default_value", "is required"));
            };
            if !runtime_key.is_empty() {
                warnings.ignored("runtime_enabled.runtime_key", "Outrider has no runtime: the default value applies");
            }
            default_value.value
        }
    };
    Ok(NetworkLocalRateLimit { stat_prefix, token_bucket, enabled })
}

/// `envoy.type.v3.TokenBucket`, with Envoy's validation.
pub fn token_bucket_of(proto: &types::TokenBucket) -> Result<TokenBucket> {
    let types::TokenBucket { max_tokens, tokens_per_fill, fill_interval } = proto;
    if *max_tokens == 0 {
        return Err(ConfigError::new("max_tokens", "must be above 0"));
    }
    let tokens_per_fill = common::u32_or(tokens_per_fill, 1);
    if tokens_per_fill == 0 {
        return Err(ConfigError::new("tokens_per_fill", "must be above 0"));
    }
    let Some(fill_interval) = common::opt_duration(fill_interval, "fill_interval")? else {
        return Err(ConfigError::new("fill_interval", "is required"));
    };
    if fill_interval < MIN_FILL_INTERVAL {
        return Err(ConfigError::new("fill_interval", "must be at least 50ms"));
    }
    Ok(TokenBucket { max_tokens: *max_tokens, tokens_per_fill, fill_interval })
}

/// Envoy's `toErrorCode`: a configured code below 400 (or none) means 429.
fn status_of(status: Option<&types::HttpStatus>) -> Result<StatusCode> {
    let code = status.map_or(0, |s| s.code);
    if code < 400 {
        return Ok(StatusCode::TOO_MANY_REQUESTS);
    }
    u16::try_from(code)
        .ok()
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| ConfigError::new("code", format!("{code} is not an HTTP status")))
}

fn optional_runtime_percent(
    proto: &Option<core::RuntimeFractionalPercent>,
    field: &str,
    warnings: &mut Warnings,
) -> Result<FractionalPercent> {
    match proto {
        // Envoy: an absent `filter_enabled` / `filter_enforced` is never true.
        None => Ok(FractionalPercent::NONE),
        Some(p) => warnings.within(field, |w| runtime_fractional_percent(p, w)).map_err(|e| e.at(field)),
    }
}

/// Header additions. Envoy evaluates `%COMMAND%` substitutions in them; Outrider refuses
/// a value that has one rather than sending it verbatim.
fn headers(list: Vec<core::HeaderValueOption>, field: &str, request: bool) -> Result<Vec<HeaderValueOption>> {
    list.into_iter()
        .enumerate()
        .map(|(i, h)| {
            let at = format!("{field}[{i}]");
            let option = header_value_option(h, request).map_err(|e| e.at(&at))?;
            if option.value.contains('%') {
                return Err(ConfigError::new(format!("{at}.header.value"), "substitutions are not supported here"));
            }
            Ok(option)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::google::protobuf as gpb;

    fn any(message: &http_proto::LocalRateLimit) -> Any {
        Any { type_url: format!("type.googleapis.com/{HTTP_TYPE}"), value: prost::Message::encode_to_vec(message) }
    }

    fn bucket(max_tokens: u32, fill_ms: i64) -> Option<types::TokenBucket> {
        Some(types::TokenBucket {
            max_tokens,
            tokens_per_fill: None,
            fill_interval: Some(gpb::Duration { seconds: fill_ms / 1000, nanos: (fill_ms % 1000 * 1_000_000) as i32 }),
        })
    }

    fn all() -> Option<core::RuntimeFractionalPercent> {
        Some(core::RuntimeFractionalPercent {
            default_value: Some(types::FractionalPercent { numerator: 100, denominator: 0 }),
            runtime_key: "local_rate_limit_enabled".into(),
        })
    }

    #[test]
    fn converts_with_envoy_defaults() {
        let message = http_proto::LocalRateLimit {
            stat_prefix: "lrl".into(),
            token_bucket: bucket(3, 60_000),
            filter_enabled: all(),
            ..Default::default()
        };
        let mut warnings = Warnings::new();
        let config = http_local_rate_limit(&any(&message), false, &mut warnings).unwrap();
        assert_eq!(config.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(config.filter_enabled, FractionalPercent::ALL);
        assert_eq!(config.filter_enforced, FractionalPercent::NONE);
        assert_eq!(config.token_bucket.unwrap().tokens_per_fill, 1);
        assert_eq!(warnings.items()[0].path, "filter_enabled.runtime_key");
    }

    #[test]
    fn refusals_name_their_field() {
        let base = http_proto::LocalRateLimit {
            stat_prefix: "lrl".into(),
            token_bucket: bucket(3, 60_000),
            filter_enabled: all(),
            ..Default::default()
        };
        let cases: Vec<(http_proto::LocalRateLimit, &str)> = vec![
            (http_proto::LocalRateLimit { token_bucket: bucket(3, 10), ..base.clone() }, "token_bucket.fill_interval"),
            (http_proto::LocalRateLimit { token_bucket: bucket(0, 1000), ..base.clone() }, "token_bucket.max_tokens"),
            (http_proto::LocalRateLimit { token_bucket: None, ..base.clone() }, "token_bucket"),
            (
                http_proto::LocalRateLimit { local_rate_limit_per_downstream_connection: true, ..base.clone() },
                "local_rate_limit_per_downstream_connection",
            ),
            (
                http_proto::LocalRateLimit { descriptors: vec![Default::default()], ..base.clone() },
                "descriptors[0].entries", // min_items 1, before Outrider's own refusal
            ),
            (http_proto::LocalRateLimit { stat_prefix: String::new(), ..base.clone() }, "stat_prefix"),
            (
                http_proto::LocalRateLimit {
                    filter_enforced: Some(core::RuntimeFractionalPercent {
                        default_value: None,
                        runtime_key: "k".into(),
                    }),
                    ..base.clone()
                },
                "filter_enforced.default_value",
            ),
        ];
        for (message, path) in cases {
            let error = http_local_rate_limit(&any(&message), false, &mut Warnings::new()).unwrap_err();
            assert_eq!(error.path(), path, "{error}");
        }
        // Per-route settings always need a bucket, even when disabled.
        let message = http_proto::LocalRateLimit { token_bucket: None, filter_enabled: None, ..base };
        assert!(http_local_rate_limit(&any(&message), false, &mut Warnings::new()).is_ok());
        let error = http_local_rate_limit(&any(&message), true, &mut Warnings::new()).unwrap_err();
        assert_eq!(error.path(), "token_bucket");
    }

    #[test]
    fn status_below_400_means_429() {
        assert_eq!(status_of(Some(&types::HttpStatus { code: 200 })).unwrap(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(status_of(Some(&types::HttpStatus { code: 503 })).unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
