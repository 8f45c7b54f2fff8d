//! The TCP proxy (`envoy.filters.network.tcp_proxy`): bytes to a cluster, as they come.

use std::time::Duration;

use crate::config::header_value::HeaderValueOption;

/// Envoy's default TCP proxy `idle_timeout`.
pub const DEFAULT_TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, PartialEq)]
pub struct TcpProxy {
    pub stat_prefix: String,
    pub cluster: TcpCluster,
    /// Default 1 h; `None` disabled (configured 0).
    pub idle_timeout: Option<Duration>,
    pub downstream_idle_timeout: Option<Duration>,
    pub upstream_idle_timeout: Option<Duration>,
    /// Connection attempts before giving up (default 1).
    pub max_connect_attempts: u32,
    pub max_downstream_connection_duration: Option<Duration>,
    /// Hash the downstream source IP for ring hash / maglev clusters.
    pub hash_source_ip: bool,
    /// Tunnel the bytes through an HTTP CONNECT (or POST) to the cluster.
    pub tunneling: Option<Tunneling>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpCluster {
    Cluster(String),
    /// Weights are at least 1.
    Weighted(Vec<(String, u32)>),
}

/// `tunneling_config`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tunneling {
    /// `:authority` of the CONNECT; may contain `%DOWNSTREAM_LOCAL_ADDRESS%`-style
    /// substitutions, kept verbatim.
    pub hostname: String,
    /// POST to `post_path` instead of CONNECT.
    pub use_post: bool,
    pub post_path: String,
    pub headers_to_add: Vec<HeaderValueOption>,
    pub propagate_response_headers: bool,
    pub propagate_response_trailers: bool,
}
