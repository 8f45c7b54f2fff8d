//! `envoy.filters.http.ratelimit`: the global rate limit. The route's (or virtual host's)
//! `rate_limits` make descriptors; the rate-limit service says whether any is over its
//! limit.

use std::time::Duration;

use super::grpc_service::EnvoyGrpc;
use crate::config::header_value::HeaderValueOption;
use crate::config::rate_limit::RateLimitPolicy;

/// `envoy.extensions.filters.http.ratelimit.v3.RateLimit`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    pub domain: String,
    /// `stage`: only route entries of this stage apply.
    pub stage: u32,
    pub request_type: RequestType,
    /// `timeout` of each call (default 20 ms).
    pub timeout: Duration,
    /// `failure_mode_deny`: answer `status_on_error` when the service fails (default:
    /// let the request through).
    pub failure_mode_deny: bool,
    /// `rate_limited_as_resource_exhausted`: gRPC requests get RESOURCE_EXHAUSTED rather
    /// than UNAVAILABLE (the mapping of 429).
    pub rate_limited_as_resource_exhausted: bool,
    /// `rate_limit_service.grpc_service.envoy_grpc`.
    pub service: EnvoyGrpc,
    /// `enable_x_ratelimit_headers: DRAFT_VERSION_03`.
    pub x_ratelimit_headers: bool,
    /// `disable_x_envoy_ratelimited_header`.
    pub disable_x_envoy_ratelimited_header: bool,
    /// `rate_limited_status` (default 429; below 400 means 429, as in Envoy).
    pub rate_limited_status: u16,
    /// `response_headers_to_add`: on the rate-limited reply.
    pub response_headers_to_add: Vec<HeaderValueOption>,
    /// `status_on_error` (default 500).
    pub status_on_error: u16,
    /// `stat_prefix`: `cluster.<route cluster>.<stat_prefix>.ratelimit.ok` (empty: none).
    pub stat_prefix: String,
    /// `rate_limits`: when set, these make the descriptors instead of the route's and the
    /// virtual host's.
    pub rate_limits: Vec<RateLimitPolicy>,
}

/// `request_type`: which requests are rate limited, by `x-envoy-internal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestType {
    Both,
    Internal,
    External,
}

/// `envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitPerRoute {
    pub vh_rate_limits: VhRateLimits,
    /// `rate_limits`: when set, these make the descriptors, and nothing else does.
    pub rate_limits: Vec<RateLimitPolicy>,
    /// `domain`: overrides the filter's.
    pub domain: Option<String>,
}

/// `RateLimitPerRoute.vh_rate_limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VhRateLimits {
    /// The virtual host's apply when the route has none.
    #[default]
    Override,
    /// The virtual host's apply as well.
    Include,
    /// The virtual host's never apply.
    Ignore,
}
