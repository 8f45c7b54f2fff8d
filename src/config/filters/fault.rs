//! `envoy.filters.http.fault`: injects delays and aborts into a share of requests, by
//! configuration or as the request's own `x-envoy-fault-*` headers ask.

use std::time::Duration;

use http::StatusCode;

use super::fractional_percent::FractionalPercent;
use crate::config::matcher::HeaderMatcher;

/// `envoy.extensions.filters.http.fault.v3.HTTPFault`, on the connection manager or as a
/// route's settings (which replace the filter's wholesale; Istio's VirtualService faults
/// come this way, with an empty filter on the connection manager).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpFault {
    pub delay: Option<FaultDelay>,
    pub abort: Option<FaultAbort>,
    /// Only requests routed to this cluster get faults (empty: any).
    pub upstream_cluster: String,
    /// Only requests matching all of these get faults.
    pub headers: Vec<HeaderMatcher>,
    /// Only requests whose `x-envoy-downstream-service-node` is one of these (empty: any).
    pub downstream_nodes: Vec<String>,
    /// No new fault once this many are active (`None`: no limit).
    pub max_active_faults: Option<u64>,
    /// `disable_downstream_cluster_stats`: no `fault.<downstream cluster>.*` counters.
    pub disable_downstream_cluster_stats: bool,
}

/// How long to hold a request before it goes on.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultDelay {
    pub kind: DelayKind,
    pub percentage: FractionalPercent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayKind {
    Fixed(Duration),
    /// `x-envoy-fault-delay-request: <ms>`; `x-envoy-fault-delay-request-percentage` may
    /// lower the percentage.
    Header,
}

/// What to answer instead of forwarding.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultAbort {
    pub kind: AbortKind,
    pub percentage: FractionalPercent,
    /// `response_body`: the abort's body (Envoy's `fault filter abort` when empty).
    pub body: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortKind {
    Http(StatusCode),
    /// Answered with HTTP 200 and this `grpc-status` (a gRPC request gets it as a
    /// trailers-only response).
    Grpc(u32),
    /// `x-envoy-fault-abort-request: <status>` or `x-envoy-fault-abort-grpc-request:
    /// <code>`; `x-envoy-fault-abort-request-percentage` may lower the percentage.
    Header,
}
