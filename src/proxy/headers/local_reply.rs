//! Replies Outrider makes itself, with Envoy's status codes and bodies, so clients and
//! tests that look for Envoy's texts keep working.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, StatusCode};

/// Why an upstream stream ended before its response headers, in Envoy's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    LocalConnectionFailure,
    RemoteConnectionFailure,
    ConnectionTimeout,
    ConnectionTermination,
    LocalReset,
    LocalRefusedStreamReset,
    Overflow,
    RemoteReset,
    RemoteRefusedStreamReset,
    ProtocolError,
}

impl ResetReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ResetReason::LocalConnectionFailure => "local connection failure",
            ResetReason::RemoteConnectionFailure => "remote connection failure",
            ResetReason::ConnectionTimeout => "connection timeout",
            ResetReason::ConnectionTermination => "connection termination",
            ResetReason::LocalReset => "local reset",
            ResetReason::LocalRefusedStreamReset => "local refused stream reset",
            ResetReason::Overflow => "overflow",
            ResetReason::RemoteReset => "remote reset",
            ResetReason::RemoteRefusedStreamReset => "remote refused stream reset",
            ResetReason::ProtocolError => "protocol error",
        }
    }
}

/// The local replies the proxy makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalReply {
    /// No route matched: 404, empty body.
    NoRoute,
    /// The route's cluster does not exist: the route's `cluster_not_found_response_code`,
    /// empty body.
    ClusterNotFound(StatusCode),
    /// The balancer found no healthy endpoint: 503 `no healthy upstream`.
    NoHealthyUpstream,
    /// The route timeout (or the last per-try timeout) fired: 504 `upstream request timeout`.
    UpstreamTimeout,
    /// The upstream reset or failed before response headers: 503 (502 for a protocol
    /// error), `upstream connect error or disconnect/reset before headers. …`.
    UpstreamReset { reason: ResetReason, retried: bool },
    /// The cluster's `max_requests` circuit breaker is open or its pool overflowed.
    Overflow,
    /// The overload manager refuses new requests: 503 `envoy overloaded`.
    Overloaded,
}

impl LocalReply {
    pub fn status(&self) -> StatusCode {
        match self {
            LocalReply::NoRoute => StatusCode::NOT_FOUND,
            LocalReply::ClusterNotFound(status) => *status,
            LocalReply::NoHealthyUpstream | LocalReply::Overflow | LocalReply::Overloaded => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            LocalReply::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            LocalReply::UpstreamReset { reason: ResetReason::ProtocolError, .. } => StatusCode::BAD_GATEWAY,
            LocalReply::UpstreamReset { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Envoy's `%RESPONSE_CODE_DETAILS%` for the reply.
    pub fn details(&self) -> String {
        match self {
            LocalReply::NoRoute => "route_not_found".to_owned(),
            LocalReply::ClusterNotFound(_) => "cluster_not_found".to_owned(),
            LocalReply::NoHealthyUpstream => "no_healthy_upstream".to_owned(),
            LocalReply::UpstreamTimeout => "upstream_response_timeout".to_owned(),
            LocalReply::Overflow => "upstream_reset_before_response_started{overflow}".to_owned(),
            LocalReply::Overloaded => "overload".to_owned(),
            LocalReply::UpstreamReset { reason, .. } => {
                format!("upstream_reset_before_response_started{{{}}}", reason.as_str().replace(' ', "_"))
            }
        }
    }

    pub fn message(&self) -> String {
        match self {
            LocalReply::NoRoute | LocalReply::ClusterNotFound(_) => String::new(),
            LocalReply::NoHealthyUpstream => "no healthy upstream".into(),
            LocalReply::UpstreamTimeout => "upstream request timeout".into(),
            LocalReply::Overloaded => "envoy overloaded".into(),
            LocalReply::UpstreamReset { reason, retried: false } => {
                format!("upstream connect error or disconnect/reset before headers. reset reason: {}", reason.as_str())
            }
            LocalReply::UpstreamReset { reason, retried: true } => format!(
                "upstream connect error or disconnect/reset before headers. retried and the latest reset reason: {}",
                reason.as_str()
            ),
            LocalReply::Overflow => {
                format!("upstream connect error or disconnect/reset before headers. reset reason: {}", "overflow")
            }
        }
    }

    /// The reply as [`local_reply`] builds it.
    pub fn build(&self) -> (StatusCode, HeaderMap, Bytes) {
        local_reply(self.status(), &self.message())
    }
}

/// A plain local reply: `message` as a `text/plain` body; an empty message gives an empty
/// body and no `content-type`, as Envoy.
pub fn local_reply(status: StatusCode, message: &str) -> (StatusCode, HeaderMap, Bytes) {
    let mut headers = HeaderMap::new();
    if !message.is_empty() {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    (status, headers, Bytes::copy_from_slice(message.as_bytes()))
}

/// A local reply to a gRPC request, as Envoy turns it into a trailers-only response:
/// HTTP 200, `grpc-status` mapped from the HTTP status, `grpc-message` the text
/// (percent-encoded), no body.
pub fn grpc_local_reply(status: StatusCode, message: &str) -> (StatusCode, HeaderMap, Bytes) {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(grpc_status_for(status)));
    if !message.is_empty()
        && let Ok(value) = HeaderValue::from_str(&grpc_percent_encode(message))
    {
        headers.insert("grpc-message", value);
    }
    (StatusCode::OK, headers, Bytes::new())
}

/// The gRPC status for an HTTP status (gRPC's HTTP-to-gRPC mapping, as Envoy uses).
pub fn grpc_status_for(status: StatusCode) -> u32 {
    match status.as_u16() {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => 12,
        429 | 502 | 503 | 504 => 14,
        _ => 2,
    }
}

/// `grpc-message` encoding: bytes outside printable ASCII, and `%`, as `%XX`.
fn grpc_percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
