//! Why an upstream request failed, classified the way retry policies ask about it
//! (`connect-failure`, `reset`, `refused-stream`).

use std::error::Error as _;
use std::time::Duration;

/// An upstream request that produced no response headers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// The connection could not be made (refused, unreachable, handshake failed).
    #[error("connect to {address} failed: {reason}")]
    ConnectFailure { address: String, reason: String },
    /// The cluster's `connect_timeout` passed before the connection was made.
    #[error("connect to {address} timed out after {timeout:?}")]
    ConnectTimeout { address: String, timeout: Duration },
    /// The connection was closed or reset before the response headers arrived.
    #[error("upstream reset before response headers: {0}")]
    Reset(String),
    /// The upstream reset the HTTP/2 stream (`RST_STREAM` other than `REFUSED_STREAM`)
    /// before the response headers: Envoy's `remote reset` (flag UR).
    #[error("upstream reset the stream: {0}")]
    RemoteReset(String),
    /// HTTP/2 `REFUSED_STREAM`: the upstream did not process the request, so it is always
    /// safe to retry.
    #[error("upstream refused the stream")]
    RefusedStream,
    /// The upstream spoke malformed HTTP.
    #[error("upstream protocol error: {0}")]
    Protocol(String),
    /// A circuit breaker refused the request: `max_pending_requests` was reached while it
    /// needed a connection (Envoy's `overflow` reset reason; never retried).
    #[error("upstream circuit breaker overflow")]
    Overflow,
    /// The request cannot be sent as it is (no usable authority, bad URI).
    #[error("request cannot be sent upstream: {0}")]
    InvalidRequest(String),
}

impl UpstreamError {
    /// Envoy's `connect-failure` retry condition (a connect timeout is one).
    pub fn is_connect_failure(&self) -> bool {
        matches!(self, Self::ConnectFailure { .. } | Self::ConnectTimeout { .. })
    }

    /// Envoy's `reset` retry condition: no response headers came back.
    pub fn is_reset(&self) -> bool {
        matches!(self, Self::Reset(_) | Self::RemoteReset(_) | Self::RefusedStream | Self::Protocol(_))
    }

    /// Classifies an error of a request that was handed to a connection.
    pub(crate) fn from_hyper(error: &hyper::Error) -> Self {
        let mut source = error.source();
        while let Some(cause) = source {
            if let Some(h2) = cause.downcast_ref::<h2::Error>() {
                if h2.reason() == Some(h2::Reason::REFUSED_STREAM) {
                    return Self::RefusedStream;
                }
                if h2.is_reset() && h2.is_remote() {
                    return Self::RemoteReset(h2.to_string());
                }
                return Self::Reset(h2.to_string());
            }
            if cause.is::<std::io::Error>() {
                return Self::Reset(error.to_string());
            }
            source = cause.source();
        }
        if error.is_parse() || error.is_user() {
            Self::Protocol(error.to_string())
        } else {
            // Closed, canceled, incomplete message, shutdown: the connection went away.
            Self::Reset(error.to_string())
        }
    }
}
