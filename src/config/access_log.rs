//! Access loggers of an HTTP connection manager: where each writes and in what format.

pub mod filter;
pub mod open_telemetry;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use super::format::LogFormat;
pub use filter::AccessLogFilter;

/// One access logger of a connection manager.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessLog {
    pub sink: AccessLogSink,
    /// The line each request writes (Envoy's default format unless configured).
    pub format: Arc<LogFormat>,
    /// Which requests it writes (all without a filter).
    pub filter: Option<Arc<AccessLogFilter>>,
}

/// Where an access logger writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AccessLogSink {
    /// `envoy.access_loggers.stdout`.
    Stdout,
    /// `envoy.access_loggers.stderr`.
    Stderr,
    /// `envoy.access_loggers.file`.
    File(PathBuf),
    /// `envoy.access_loggers.http_grpc`: Envoy's access log service.
    Grpc(GrpcAccessLog),
    /// `envoy.access_loggers.open_telemetry`: OTLP log records.
    OpenTelemetry(std::sync::Arc<open_telemetry::OpenTelemetryAccessLog>),
}

/// `HttpGrpcAccessLogConfig`: entries streamed to `StreamAccessLogs` on a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GrpcAccessLog {
    pub log_name: String,
    /// `grpc_service.envoy_grpc.cluster_name`.
    pub cluster: String,
    /// `grpc_service.envoy_grpc.authority`, else the cluster name (as Envoy sends it).
    pub authority: String,
    /// `buffer_flush_interval` (default 1 s).
    pub flush_interval: Duration,
    /// `buffer_size_bytes` (default 16 KiB): a worker sends its entries once they reach it.
    pub buffer_size_bytes: usize,
    /// `additional_request_headers_to_log` (lower-cased).
    pub request_headers: Vec<String>,
    pub response_headers: Vec<String>,
    pub response_trailers: Vec<String>,
}
