//! Why a load report was refused. A refused report is dropped whole: a half-read report
//! would feed the balancer a zero where the backend meant a value.

/// A load report that could not be decoded or failed validation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OrcaError {
    /// `endpoint-load-metrics` did not start with `BIN `, `TEXT ` or `JSON `.
    #[error("unsupported ORCA header format: {0:?}")]
    UnsupportedFormat(String),
    #[error("ORCA header value is not UTF-8")]
    NotUtf8,
    #[error("ORCA binary header value is empty")]
    EmptyBinary,
    #[error("ORCA binary header value is not base64: {0}")]
    Base64(String),
    #[error("ORCA binary header value is not an OrcaLoadReport: {0}")]
    Protobuf(String),
    #[error("ORCA JSON header value is invalid: {0}")]
    Json(String),
    #[error("ORCA JSON header value has an unknown field: {0:?}")]
    UnknownField(String),
    #[error("ORCA header names {0:?} twice")]
    DuplicateMetric(String),
    #[error("ORCA metric name is empty")]
    EmptyName,
    #[error("ORCA metric {0:?} has an empty value")]
    EmptyValue(String),
    /// `named_metrics.` or `utilization.` with nothing after the dot.
    #[error("ORCA metric {0:?} has an empty key")]
    EmptyKey(String),
    #[error("unsupported ORCA metric name: {0:?}")]
    UnsupportedMetric(String),
    #[error("ORCA metric {name:?} value is not a number: {value:?}")]
    NotANumber { name: String, value: String },
    /// NaN or ±infinity: no balancer arithmetic survives either.
    #[error("ORCA metric {0:?} is not finite")]
    NotFinite(String),
    /// Load, rates and costs cannot be negative; a negative one means a broken reporter.
    #[error("ORCA metric {0:?} is negative")]
    Negative(String),
}
