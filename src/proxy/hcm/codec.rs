//! The downstream codec: which HTTP version a connection speaks, and hyper's HTTP/1.1 and
//! HTTP/2 servers configured from the connection manager's limits (Envoy's names and
//! defaults; see the README's "Limits" section for how each maps).

use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper_util::rt::TokioTimer;
use tokio::io::{AsyncRead, AsyncReadExt};

mod refusal;
pub(super) use refusal::{refusal_response, refusal_status};

use super::super::exec::LocalExec;
use super::super::flow_control;
use crate::config::listener::HttpConnectionManager;
use crate::config::listener::http_connection_manager::CodecType;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// hyper's smallest read buffer: a lower `max_request_headers_kb` is still enforced on the
/// parsed head, only the buffer cannot shrink below it.
const MIN_READ_BUFFER: usize = 8192;

/// Streams reset by the client before the server accepted them, after which the
/// connection gets GOAWAY `ENHANCE_YOUR_CALM` (the h2 library's rapid-reset guard; its
/// default).
const MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;

/// Streams the server may reset for the client's protocol errors before it closes the
/// connection (the h2 library's default).
const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    Http1,
    Http2,
}

/// The protocol when it is known without reading: the codec type if it is not `AUTO`,
/// else what ALPN chose (as Envoy's `AUTO` codec does).
pub(super) fn known(manager: &HttpConnectionManager, alpn: Option<&[u8]>) -> Option<Protocol> {
    match (manager.codec_type, alpn) {
        (CodecType::Http1, _) => Some(Protocol::Http1),
        (CodecType::Http2, _) => Some(Protocol::Http2),
        (CodecType::Auto, Some(b"h2")) => Some(Protocol::Http2),
        (CodecType::Auto, Some(b"http/1.1" | b"http/1.0")) => Some(Protocol::Http1),
        (CodecType::Auto, _) => None,
    }
}

/// Reads until the first bytes are or cannot be the HTTP/2 preface. What was read is
/// returned so that it can be replayed to the codec.
pub(super) async fn sniff<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<(Protocol, Vec<u8>)> {
    let mut read = Vec::with_capacity(H2_PREFACE.len());
    let mut chunk = [0u8; 24];
    while read.len() < H2_PREFACE.len() {
        let want = H2_PREFACE.len() - read.len();
        let n = stream.read(&mut chunk[..want]).await?;
        if n == 0 {
            break;
        }
        read.extend_from_slice(&chunk[..n]);
        if !H2_PREFACE.starts_with(&read) {
            return Ok((Protocol::Http1, read));
        }
    }
    let protocol = if read == H2_PREFACE { Protocol::Http2 } else { Protocol::Http1 };
    Ok((protocol, read))
}

/// The most headers an `http::HeaderMap` can reserve room for (its 32 768 slots, a quarter
/// kept free): an HTTP/1.1 request with more is answered 431.
const HEADER_MAP_MAX: usize = 24_576;

/// HTTP/1.1: header size and count (431 beyond them, from hyper), the header read timeout,
/// keep-alive.
pub(super) fn http1(manager: &HttpConnectionManager) -> http1::Builder {
    let mut builder = http1::Builder::new();
    let max_head = manager.max_request_headers_kb as usize * 1024;
    builder
        .timer(TokioTimer::new())
        .keep_alive(true)
        .max_header_size(max_head)
        // The read buffer bounds a head still arriving: one over the limit is refused
        // when the buffer fills, without waiting for its end.
        .max_buf_size(max_head.max(MIN_READ_BUFFER))
        // hyper's default is 30 s once a timer is set; Envoy's is none.
        .header_read_timeout(manager.request_headers_timeout)
        // A connection waiting for its next request holds no read or write buffer (24 KiB
        // by default): most of what an idle keep-alive connection would cost.
        .release_idle_buffers(true)
        // Framing as Envoy's codec: a head whose body length could be read two ways is
        // refused (the smuggling primitive), `Content-Length` beside `Transfer-Encoding`
        // unless `allow_chunked_length` (then the chunks frame it), and a transfer coding
        // other than one `chunked` gets 501.
        .reject_repeated_content_length(true)
        .reject_content_length_with_transfer_encoding(!manager.http1.allow_chunked_length)
        .reject_unsupported_transfer_encoding(true)
        // What Envoy accepts and normalises: obs-fold (the line break removed, the
        // whitespace kept) and runs of spaces in the request line.
        .allow_obsolete_multiline_headers(true)
        .allow_multiple_spaces_in_request_line_delimiters(true)
        .allow_trailing_spaces_in_request_line(true)
        // HTTP/1.0 is refused with Envoy's 426 unless `accept_http_10`.
        .reject_http_10(!manager.http1.accept_http_10)
        // A refused head is answered by the connection (see [`refusal`]) in Envoy's
        // words, not hyper's bodiless ones.
        .parse_error_response(false);
    // hyper reserves room for `max_headers` headers on every parse: never more than fit in
    // the largest head (a header line is at least 3 bytes, `a:\n`), so that a large
    // `max_headers_count` (up to 2³² − 1) costs what the head can hold, not its magnitude;
    // and never more than a `HeaderMap` holds, which hyper would panic reserving.
    let count = (manager.common.max_headers_count as usize).min(max_head / 3 + 1).min(HEADER_MAP_MAX);
    if count != 100 {
        // hyper's default is Envoy's 100 (and cheaper: kept on the stack).
        builder.max_headers(count);
    }
    builder
}

/// HTTP/2: Envoy's stream settings, its windows as far as the listener's buffer limit
/// allows (see [`flow_control`]), the header list size, keep-alive PINGs, and the h2
/// library's reset-flood guards.
pub(super) fn http2(manager: &HttpConnectionManager, buffer_limit: u32) -> http2::Builder<LocalExec> {
    let options = &manager.http2;
    let flow =
        flow_control::http2(buffer_limit, options.initial_stream_window_size, options.initial_connection_window_size);
    let mut builder = http2::Builder::new(LocalExec);
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(options.max_concurrent_streams)
        .initial_stream_window_size(flow.stream_window)
        .initial_connection_window_size(flow.connection_window)
        .max_send_buf_size(flow.send_buffer)
        .max_header_list_size(manager.max_request_headers_kb.saturating_mul(1024))
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESET_STREAMS)
        .max_local_error_reset_streams(MAX_LOCAL_ERROR_RESET_STREAMS)
        // A connection with no stream open holds no read or write buffer, no HPACK
        // Huffman buffer and no stream storage (about 32 KiB by default), and its HPACK
        // tables hold copies, not slices that keep whole read buffers alive.
        .release_idle_buffers(true);
    if let Some(keepalive) = options.keepalive {
        builder.keep_alive_interval(keepalive.interval).keep_alive_timeout(keepalive.timeout);
    }
    builder
}

/// Envoy's local reply when `request_headers_timeout` passes with a request head begun.
pub(super) fn header_timeout_response(server: &str) -> Vec<u8> {
    refusal::closing_response(http::StatusCode::REQUEST_TIMEOUT, server, "request header timeout")
}

/// Never waits longer than this for the first bytes when no idle timeout is set (a
/// connection that says nothing holds a slot; Envoy's default idle timeout is 1 h).
pub(super) const SNIFF_LIMIT: Duration = Duration::from_secs(3600);

#[cfg(test)]
mod tests;
