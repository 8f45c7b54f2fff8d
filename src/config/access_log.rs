//! Access loggers of an HTTP connection manager: where each writes and in what format.

pub mod filter;
pub mod format;

use std::path::PathBuf;
use std::sync::Arc;

pub use filter::AccessLogFilter;
pub use format::LogFormat;

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
}
