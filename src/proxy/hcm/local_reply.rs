//! The answers the connection manager and the router make themselves, in Envoy's words:
//! local replies (gRPC requests get the trailers-only gRPC form), filters' replies,
//! direct responses and the resets an upstream failure turns into.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Full};

use super::super::filters::LocalResponse;
use super::super::headers::{self, LocalReply, ResetReason};
use super::super::response_flags::ResponseFlags;
use super::super::router::{self, Forward};
use super::super::upstream::UpstreamError;
use super::ProxyBody;
use super::observed::StreamInfo;
use crate::config::listener::HttpConnectionManager;

/// A request Envoy's HTTP/1 codec refuses, and the details it logs.
#[derive(Debug, Clone, Copy)]
pub(super) enum CodecRefusal {
    /// A transfer coding it does not implement: 501.
    UnsupportedTransferCoding,
    /// Framing it cannot read (a broken chunked body): 400.
    MalformedBody,
    /// A `Connection` header nominating what may not be removed: 400.
    InvalidConnectionHeader,
}

/// Envoy's answer to a request its codec refuses: the status with its reason phrase as the
/// body, a downstream protocol error, and the connection closed after it.
pub(super) fn codec_refusal(
    manager: &HttpConnectionManager,
    stream: &mut StreamInfo,
    refusal: CodecRefusal,
    is_grpc: bool,
) -> Response<ProxyBody> {
    let (status, details) = match refusal {
        CodecRefusal::UnsupportedTransferCoding => (StatusCode::NOT_IMPLEMENTED, "http1.invalid_transfer_encoding"),
        CodecRefusal::MalformedBody => (StatusCode::BAD_REQUEST, "http1.codec_error"),
        CodecRefusal::InvalidConnectionHeader => (StatusCode::BAD_REQUEST, "http1.connection_header_rejected"),
    };
    let mut reply = LocalResponse::new(status, status.canonical_reason().unwrap_or(""), details);
    reply.flags = ResponseFlags::DOWNSTREAM_PROTOCOL_ERROR;
    reply.headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    filter_reply(manager, stream, reply, is_grpc)
}

/// Envoy's 400 for a request it will not route (`path_normalization_failed`).
pub(super) fn bad_request(
    manager: &HttpConnectionManager,
    stream: &mut StreamInfo,
    is_grpc: bool,
) -> Response<ProxyBody> {
    let reply = LocalResponse {
        flags: ResponseFlags::DOWNSTREAM_PROTOCOL_ERROR,
        ..LocalResponse::new(StatusCode::BAD_REQUEST, "", "path_normalization_failed")
    };
    filter_reply(manager, stream, reply, is_grpc)
}

/// A filter's local reply (gRPC requests get the trailers-only gRPC form).
pub(super) fn filter_reply(
    manager: &HttpConnectionManager,
    info: &mut StreamInfo,
    reply: LocalResponse,
    is_grpc: bool,
) -> Response<ProxyBody> {
    info.flags.insert(reply.flags);
    info.details = Some(reply.details.clone().into());
    tracing::debug!(status = reply.status.as_u16(), details = %reply.details, "local reply");
    let message = String::from_utf8_lossy(&reply.body);
    let (status, mut header_map, body) = if is_grpc {
        headers::grpc_local_reply(reply.status, &message)
    } else {
        headers::local_reply(reply.status, &message)
    };
    if let (true, Some(code)) = (is_grpc, reply.grpc_status) {
        header_map.insert("grpc-status", HeaderValue::from(code));
    }
    // A header the filter sets replaces the default of that name (`content-type`).
    for name in reply.headers.keys() {
        header_map.remove(name);
    }
    for (name, value) in &reply.headers {
        header_map.append(name.clone(), value.clone());
    }
    built(manager, status, header_map, body)
}

/// A reply the router makes itself once it has tried (or tried to try) the upstream: it
/// carries `x-envoy-attempt-count` when the virtual host asks for it, as Envoy's do.
pub(super) fn attempted(
    forward: &Forward<'_>,
    attempts: u32,
    mut response: Response<ProxyBody>,
) -> Response<ProxyBody> {
    router::set_response_attempt_count(forward, response.headers_mut(), attempts);
    response
}

pub(super) fn reset_reply(
    manager: &HttpConnectionManager,
    info: &mut StreamInfo,
    failure: Option<UpstreamError>,
    retried: bool,
    is_grpc: bool,
) -> Response<ProxyBody> {
    let reason = match failure {
        Some(UpstreamError::ConnectFailure { .. }) => ResetReason::RemoteConnectionFailure,
        Some(UpstreamError::ConnectTimeout { .. }) => ResetReason::ConnectionTimeout,
        Some(UpstreamError::RefusedStream) => ResetReason::RemoteRefusedStreamReset,
        Some(UpstreamError::RemoteReset(_)) => ResetReason::RemoteReset,
        Some(UpstreamError::Protocol(_)) => ResetReason::ProtocolError,
        _ => ResetReason::ConnectionTermination,
    };
    local(manager, info, LocalReply::UpstreamReset { reason, retried }, is_grpc)
}

/// A circuit breaker refused the request: 503 `… reset reason: overflow` with
/// `x-envoy-overloaded: true` (a router header: not with `suppress_envoy_headers`), as
/// Envoy answers (response flag UO).
pub(super) fn overflow(manager: &HttpConnectionManager, stream: &mut StreamInfo, is_grpc: bool) -> Response<ProxyBody> {
    let mut response = local(manager, stream, LocalReply::Overflow, is_grpc);
    if !manager.suppress_envoy_headers {
        response.headers_mut().insert("x-envoy-overloaded", HeaderValue::from_static("true"));
    }
    response
}

/// A local reply (gRPC requests get a trailers-only gRPC status instead).
pub(super) fn local(
    manager: &HttpConnectionManager,
    info: &mut StreamInfo,
    reply: LocalReply,
    is_grpc: bool,
) -> Response<ProxyBody> {
    info.flags.insert(ResponseFlags::for_local_reply(&reply));
    info.details = Some(reply.details().into());
    let (status, header_map, body) =
        if is_grpc { headers::grpc_local_reply(reply.status(), &reply.message()) } else { reply.build() };
    built(manager, status, header_map, body)
}

/// A route's direct response or redirect.
pub(super) fn direct(manager: &HttpConnectionManager, status: StatusCode, body: Bytes) -> Response<ProxyBody> {
    let mut header_map = HeaderMap::new();
    if !body.is_empty() {
        header_map.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    built(manager, status, header_map, body)
}

/// A whole response made here: the status, the headers, the body, and the connection
/// manager's `server` header.
fn built(
    manager: &HttpConnectionManager,
    status: StatusCode,
    header_map: HeaderMap,
    body: Bytes,
) -> Response<ProxyBody> {
    let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    *response.headers_mut() = header_map;
    headers::set_server(manager, response.headers_mut());
    response
}
