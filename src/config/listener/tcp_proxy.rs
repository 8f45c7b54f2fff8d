//! The TCP proxy (`envoy.filters.network.tcp_proxy`): bytes to a cluster, as they come.

use std::time::Duration;

use crate::config::header_value::HeaderValueOption;

/// Envoy's default TCP proxy `idle_timeout`.
pub const DEFAULT_TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, PartialEq)]
pub struct TcpProxy {
    pub stat_prefix: String,
    pub cluster: TcpCluster,
    /// Closes both connections when no byte has moved either way for this long, counted
    /// from the connection's start (before the upstream connects, as in Envoy 1.36+).
    /// Default 1 h; `None` disabled (configured 0).
    pub idle_timeout: Option<Duration>,
    /// Connection attempts before giving up (default 1).
    pub max_connect_attempts: u32,
    /// Closes both connections this long after the downstream one was handed to the proxy.
    pub max_downstream_connection_duration: Option<Duration>,
    /// `max_downstream_connection_duration_jitter_percentage`: each connection's limit is
    /// lengthened by a random part of up to this percentage of it (0 to 100).
    pub max_downstream_connection_duration_jitter: f64,
    /// Hash the downstream source IP for ring hash / maglev clusters.
    pub hash_source_ip: bool,
    /// `tunneling_config`: the bytes go inside an HTTP `CONNECT` to the upstream (Istio's
    /// HBONE `connect_originate`) instead of straight on the connection.
    pub tunneling: Option<Tunneling>,
}

/// How a TCP proxy tunnels its bytes over HTTP: a `CONNECT` (over HTTP/2 when the cluster
/// speaks it, else HTTP/1.1), the bytes both ways once the upstream answers 2xx.
#[derive(Debug, Clone, PartialEq)]
pub struct Tunneling {
    /// The `CONNECT`'s authority, with the downstream address commands
    /// (`%DOWNSTREAM_LOCAL_ADDRESS%`, …) substituted per connection.
    pub hostname: String,
    /// Added to the `CONNECT` (values substituted the same way).
    pub headers_to_add: Vec<HeaderValueOption>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpCluster {
    Cluster(String),
    /// Weights are at least 1.
    Weighted(Vec<(String, u32)>),
}
