//! Active health checking: probing each endpoint over HTTP, TCP or gRPC
//! (`envoy.config.core.v3.HealthCheck`), with Envoy's defaults applied.

use std::ops::Range;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheck {
    pub timeout: Duration,
    pub interval: Duration,
    /// Random delay before the first probe of a host.
    pub initial_jitter: Duration,
    /// Random extra added to every interval: `interval_jitter` plus
    /// `interval_jitter_percent` of the interval.
    pub interval_jitter: Duration,
    pub interval_jitter_percent: u32,
    /// Failed probes in a row that make a healthy host unhealthy.
    pub unhealthy_threshold: u32,
    /// Passed probes in a row that make an unhealthy host healthy (one at start-up).
    pub healthy_threshold: u32,
    /// Probe this port instead of the endpoint's.
    pub alt_port: Option<u16>,
    /// Keep the probe connection open between probes (default true).
    pub reuse_connection: bool,
    /// Interval while the cluster has carried no traffic (default 60 s).
    pub no_traffic_interval: Duration,
    /// Interval for healthy hosts while there is no traffic (default `no_traffic_interval`).
    pub no_traffic_healthy_interval: Duration,
    /// Interval for unhealthy hosts (default `interval`).
    pub unhealthy_interval: Duration,
    /// Interval right after a host became unhealthy (default `unhealthy_interval`).
    pub unhealthy_edge_interval: Duration,
    /// Interval right after a host became healthy (default `interval`).
    pub healthy_edge_interval: Duration,
    pub checker: HealthChecker,
}

#[derive(Debug, Clone, PartialEq)]
pub enum HealthChecker {
    Http(HttpHealthCheck),
    Tcp(TcpHealthCheck),
    Grpc(GrpcHealthCheck),
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpHealthCheck {
    /// `:authority`; empty means the cluster's name, as in Envoy.
    pub host: String,
    pub path: String,
    pub method: http::Method,
    /// Speak HTTP/2 to the host instead of HTTP/1.1.
    pub http2: bool,
    /// Half-open status ranges that pass; `[200, 201)` by default.
    pub expected_statuses: Vec<Range<u16>>,
    /// Status ranges that fail without counting as an immediate unhealthy verdict.
    pub retriable_statuses: Vec<Range<u16>>,
    pub request_headers_to_add: Vec<(String, String)>,
    pub request_headers_to_remove: Vec<String>,
}

/// Connect, optionally send bytes, optionally expect bytes back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TcpHealthCheck {
    pub send: Option<Vec<u8>>,
    /// Each block must be found in the response, in order; empty means connect-only.
    pub receive: Vec<Vec<u8>>,
}

/// `grpc.health.v1.Health/Check`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GrpcHealthCheck {
    pub service_name: String,
    /// `:authority`; empty means the cluster's name.
    pub authority: String,
    pub initial_metadata: Vec<(String, String)>,
}
