//! Route actions: forward to a cluster (`route`), `redirect`, or `direct_response`.

use std::time::Duration;

use super::{HashPolicy, HeaderMutations, RetryPolicy};

/// Envoy's default route timeout.
pub const DEFAULT_ROUTE_TIMEOUT: Duration = Duration::from_secs(15);

/// `envoy.config.route.v3.RouteAction`.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteAction {
    pub cluster: ClusterSpecifier,
    pub cluster_not_found_response_code: ClusterNotFoundResponseCode,
    /// The whole-request timeout: default 15 s; `None` when configured as 0 (disabled).
    pub timeout: Option<Duration>,
    /// Per-route stream idle timeout: `None` keeps the connection manager's; `Some(ZERO)`
    /// disables it.
    pub idle_timeout: Option<Duration>,
    /// Replaces the matched prefix (or the whole path for an exact match).
    pub prefix_rewrite: Option<String>,
    /// `regex_rewrite`: every match in the path (not the query) is substituted. Never set
    /// together with `prefix_rewrite`.
    pub regex_rewrite: Option<super::RegexRewrite>,
    /// `request_mirror_policies`: clusters that get a copy of each request.
    pub request_mirror_policies: Vec<super::RequestMirrorPolicy>,
    pub host_rewrite: Option<HostRewrite>,
    pub append_x_forwarded_host: bool,
    /// The route's own policy; when `None`, the virtual host's applies.
    pub retry_policy: Option<RetryPolicy>,
    pub hash_policy: Vec<HashPolicy>,
    pub max_stream_duration: MaxStreamDuration,
    /// `cors`: the CORS filter's policy here when `typed_per_filter_config` has none.
    pub cors: Option<std::sync::Arc<crate::config::filters::cors::CorsPolicy>>,
    /// `rate_limits`: descriptors for the global rate-limit filter.
    pub rate_limits: Vec<super::RateLimitPolicy>,
    /// `include_vh_rate_limits`: the virtual host's rate limits apply as well as these.
    pub include_vh_rate_limits: bool,
    /// `upgrade_configs`: this route's say on `Upgrade:` types (see
    /// [`crate::config::upgrade::upgrade_allowed`]).
    pub upgrade_configs: Vec<crate::config::upgrade::UpgradeConfig>,
}

/// Where a route sends the request.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterSpecifier {
    Cluster(String),
    /// The cluster named by this request header (lower-cased).
    ClusterHeader(String),
    WeightedClusters(WeightedClusters),
}

/// Weighted split between clusters. Weights are relative; `total` is their sum (> 0).
#[derive(Debug, Clone, PartialEq)]
pub struct WeightedClusters {
    pub clusters: Vec<WeightedCluster>,
    pub total: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WeightedCluster {
    pub target: WeightedTarget,
    pub weight: u32,
    pub headers: HeaderMutations,
    pub host_rewrite_literal: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightedTarget {
    Cluster(String),
    /// The cluster named by this request header.
    ClusterHeader(String),
}

impl WeightedClusters {
    /// The entry a random `value` in `[0, total)` selects: entries take consecutive
    /// ranges in configuration order.
    pub fn pick(&self, value: u64) -> Option<&WeightedCluster> {
        let mut end = 0u64;
        self.clusters.iter().find(|c| {
            end += u64::from(c.weight);
            value < end
        })
    }
}

/// Status used when the route's cluster does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterNotFoundResponseCode {
    #[default]
    ServiceUnavailable,
    NotFound,
    InternalServerError,
}

impl ClusterNotFoundResponseCode {
    pub fn status(self) -> u16 {
        match self {
            Self::ServiceUnavailable => 503,
            Self::NotFound => 404,
            Self::InternalServerError => 500,
        }
    }
}

/// How the `:authority` sent upstream is rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRewrite {
    Literal(String),
    /// `auto_host_rewrite`: the selected endpoint's hostname (logical/strict DNS clusters).
    Auto,
    /// The value of this request header.
    Header(String),
}

/// `RouteAction.max_stream_duration` (and the deprecated `max_grpc_timeout` /
/// `grpc_timeout_offset`, folded in here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MaxStreamDuration {
    /// Overrides the connection manager's `max_stream_duration`; `Some(ZERO)` disables.
    pub max_stream_duration: Option<Duration>,
    /// When set, a `grpc-timeout` request header is honoured, capped at this value
    /// (`Some(ZERO)`: not capped). When `None`, `grpc-timeout` is ignored.
    pub grpc_timeout_header_max: Option<Duration>,
    /// Subtracted from the `grpc-timeout` header value.
    pub grpc_timeout_header_offset: Option<Duration>,
}

/// `envoy.config.route.v3.RedirectAction`: answered by Outrider without going upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// `https_redirect` gives `https`; `scheme_redirect` any scheme.
    pub scheme: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub path: Option<RedirectPathRewrite>,
    pub strip_query: bool,
    /// 301 (default), 302, 303, 307 or 308.
    pub response_code: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedirectPathRewrite {
    Path(String),
    Prefix(String),
}

/// `envoy.config.route.v3.DirectResponseAction`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectResponse {
    pub status: u16,
    pub body: Option<bytes::Bytes>,
}
