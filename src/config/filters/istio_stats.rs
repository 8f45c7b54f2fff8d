//! Istio's standard metrics (`istio.stats`, `stats.PluginConfig`): what the filter reports
//! and how the Telemetry API changed it (dropped metrics, removed or added labels).

use std::time::Duration;

/// Istio's standard HTTP and TCP metrics, by their configuration names (`requests_total`
/// is reported as `istio_requests_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IstioMetric {
    RequestsTotal,
    RequestDurationMilliseconds,
    RequestBytes,
    ResponseBytes,
    RequestMessagesTotal,
    ResponseMessagesTotal,
    TcpConnectionsOpenedTotal,
    TcpConnectionsClosedTotal,
    TcpSentBytesTotal,
    TcpReceivedBytesTotal,
}

impl IstioMetric {
    pub const ALL: [IstioMetric; 10] = [
        Self::RequestsTotal,
        Self::RequestDurationMilliseconds,
        Self::RequestBytes,
        Self::ResponseBytes,
        Self::RequestMessagesTotal,
        Self::ResponseMessagesTotal,
        Self::TcpConnectionsOpenedTotal,
        Self::TcpConnectionsClosedTotal,
        Self::TcpSentBytesTotal,
        Self::TcpReceivedBytesTotal,
    ];

    /// The name the configuration uses (`MetricConfig.name`).
    pub fn config_name(self) -> &'static str {
        match self {
            Self::RequestsTotal => "requests_total",
            Self::RequestDurationMilliseconds => "request_duration_milliseconds",
            Self::RequestBytes => "request_bytes",
            Self::ResponseBytes => "response_bytes",
            Self::RequestMessagesTotal => "request_messages_total",
            Self::ResponseMessagesTotal => "response_messages_total",
            Self::TcpConnectionsOpenedTotal => "tcp_connections_opened_total",
            Self::TcpConnectionsClosedTotal => "tcp_connections_closed_total",
            Self::TcpSentBytesTotal => "tcp_sent_bytes_total",
            Self::TcpReceivedBytesTotal => "tcp_received_bytes_total",
        }
    }

    pub fn from_config_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.config_name() == name)
    }
}

/// Istio's standard labels, in the order Istio's filter reports them.
pub const STANDARD_TAGS: [&str; 25] = [
    "reporter",
    "source_workload",
    "source_canonical_service",
    "source_canonical_revision",
    "source_workload_namespace",
    "source_principal",
    "source_app",
    "source_version",
    "source_cluster",
    "destination_workload",
    "destination_workload_namespace",
    "destination_principal",
    "destination_app",
    "destination_version",
    "destination_service",
    "destination_canonical_service",
    "destination_canonical_revision",
    "destination_service_name",
    "destination_service_namespace",
    "destination_cluster",
    "request_protocol",
    "response_code",
    "grpc_response_status",
    "response_flags",
    "connection_security_policy",
];

/// Which side reports: by the listener's direction, unless the configuration says it is a
/// gateway (`reporter: SERVER_GATEWAY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatsReporter {
    /// `UNSPECIFIED`: `destination` on an inbound listener, `source` otherwise.
    #[default]
    ByDirection,
    ServerGateway,
}

/// A label's value computed from the request (a `dimensions` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagValue {
    /// A string literal (`'constant'`).
    Literal(String),
    /// `request.headers['name']` (lower-cased name); `unknown` when absent.
    RequestHeader(String),
    /// `response.headers['name']`; `unknown` when absent.
    ResponseHeader(String),
    /// `request.host` (`:authority`).
    RequestHost,
    /// `request.method`.
    RequestMethod,
    /// `request.url_path` (the path without the query).
    RequestUrlPath,
    /// `response.code`.
    ResponseCode,
}

/// The settings the filter runs with.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IstioStats {
    pub reporter: StatsReporter,
    /// `disable_host_header_fallback`: the destination service is not taken from the
    /// `host` header.
    pub disable_host_header_fallback: bool,
    /// `tcp_reporting_duration` (default 5 s): how often long TCP connections report.
    pub tcp_reporting_duration: Duration,
    /// Metrics not reported (`drop`).
    pub dropped: Vec<IstioMetric>,
    /// Per metric: the standard labels left out (`tags_to_remove`) or given another value,
    /// and labels added (`dimensions`), in configuration order.
    pub overrides: Vec<(IstioMetric, TagOverride)>,
}

/// One change to a metric's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagOverride {
    /// A standard label left out.
    Remove(&'static str),
    /// A standard label's value replaced, or a new label appended after the standard ones.
    Set(String, TagValue),
}
