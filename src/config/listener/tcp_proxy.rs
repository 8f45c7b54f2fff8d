//! The TCP proxy (`envoy.filters.network.tcp_proxy`): bytes to a cluster, as they come.

use std::time::Duration;

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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpCluster {
    Cluster(String),
    /// Weights are at least 1.
    Weighted(Vec<(String, u32)>),
}
