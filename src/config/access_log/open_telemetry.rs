//! `envoy.access_loggers.open_telemetry` (`OpenTelemetryAccessLogConfig`): log records
//! exported over OTLP/gRPC (`LogsService/Export`) to a cluster of this proxy, with a
//! body and attributes written from format strings.

use std::time::Duration;

use crate::config::format::Piece;

/// One OpenTelemetry access logger.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OpenTelemetryAccessLog {
    /// `common_config.log_name` (or `log_name`): the `log_name` resource attribute.
    pub log_name: String,
    /// `grpc_service.envoy_grpc.cluster_name`.
    pub cluster: String,
    /// `grpc_service.envoy_grpc.authority`, else the cluster name.
    pub authority: String,
    /// `buffer_flush_interval` (default 1 s).
    pub flush_interval: Duration,
    /// `buffer_size_bytes` (default 16 KiB): a worker sends its records once they reach it.
    pub buffer_size_bytes: usize,
    /// Not `disable_builtin_labels`: the resource carries `log_name`, `zone_name`,
    /// `cluster_name` and `node_name`, as Envoy's does.
    pub builtin_labels: bool,
    /// `resource_attributes`, an `opentelemetry.proto.common.v1.KeyValueList` kept in its
    /// wire form: exported as given, never formatted.
    pub resource_attributes: Vec<u8>,
    /// `body`.
    pub body: Option<OtelTemplate>,
    /// `attributes`, in their configured order.
    pub attributes: Vec<(String, OtelTemplate)>,
}

/// An `AnyValue` of the configuration: strings are format strings (a missing value is
/// `-`, as in Envoy's text format), lists and key-value lists hold more of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OtelTemplate {
    Text(Vec<Piece>),
    Array(Vec<OtelTemplate>),
    KvList(Vec<(String, OtelTemplate)>),
}
