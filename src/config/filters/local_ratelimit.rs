//! `envoy.filters.http.local_ratelimit` and `envoy.filters.network.local_ratelimit`: a
//! token bucket per filter (or per route, for per-route settings); a request or
//! connection finding it empty is refused.

use std::time::Duration;

use http::StatusCode;

use super::fractional_percent::FractionalPercent;
use crate::config::header_value::HeaderValueOption;

/// `envoy.type.v3.TokenBucket`: `max_tokens` to start with and at most; `tokens_per_fill`
/// come back every `fill_interval`, continuously (Envoy 1.40's bucket refills by elapsed
/// time, not by a timer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    pub max_tokens: u32,
    pub tokens_per_fill: u32,
    pub fill_interval: Duration,
}

/// `envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit`, on the connection
/// manager or as a route's settings (which replace the filter's wholesale, bucket included).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpLocalRateLimit {
    pub stat_prefix: String,
    /// `None` only when the filter is never enabled (`filter_enabled` absent or 0%).
    pub token_bucket: Option<TokenBucket>,
    /// Share of requests checked against the bucket (absent in Envoy means none).
    pub filter_enabled: FractionalPercent,
    /// Share of limited requests actually refused (absent means none: counted only).
    pub filter_enforced: FractionalPercent,
    /// `status`: the refusal's status (429 unless a code of 400 or more is configured).
    pub status: StatusCode,
    /// `rate_limited_as_resource_exhausted`: gRPC requests get RESOURCE_EXHAUSTED (8)
    /// instead of the status Envoy maps from the HTTP one.
    pub grpc_resource_exhausted: bool,
    /// Added to the refusal.
    pub response_headers_to_add: Vec<HeaderValueOption>,
    /// Added to a limited request that is let through (enabled, not enforced).
    pub request_headers_to_add_when_not_enforced: Vec<HeaderValueOption>,
}

/// `envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit`.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkLocalRateLimit {
    pub stat_prefix: String,
    pub token_bucket: TokenBucket,
    /// `runtime_enabled.default_value` (true when absent).
    pub enabled: bool,
}
