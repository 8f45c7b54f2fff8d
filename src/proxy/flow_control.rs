//! Flow control: how `per_connection_buffer_limit_bytes` (the listener's for downstream
//! connections, the cluster's for upstream ones) bounds the bytes one connection can make
//! Outrider hold, in both directions.
//!
//! Envoy stops reading from the side that is ahead when a buffer passes its high
//! watermark. Outrider's codecs (hyper and h2) do the same by construction: a body is read
//! from one connection only when the other connection's codec asks for the next frame, so
//! a slow reader or a slow upstream stops the reads on the other side. What is left to
//! bound is what each codec holds before that happens, sized here from the limit:
//!
//! - HTTP/2 receive windows. A peer may send a whole advertised window before anything is
//!   read, and the h2 library holds what it received until the body is read. Envoy's
//!   defaults (256 MiB) stay the configured values; each stream's advertised window is
//!   capped at a quarter of the limit. The connection window is not capped: capped at the
//!   limit, four stalled streams would hold it whole and stop every other stream of the
//!   connection (on a pooled upstream connection, other clients' requests), which Envoy's
//!   per-stream watermarks do not do. What a connection holds is bounded per stream, as in
//!   Envoy, and by its streams (`max_concurrent_streams`).
//! - HTTP/2 send buffers: what a stream may queue beyond the peer's window, a quarter of
//!   the limit (the h2 library's per-stream `max_send_buffer_size`).
//! - HTTP/1.1 upstream read buffer (how far hyper reads ahead of the body, and the size of
//!   the body chunks it hands on): a quarter of the limit, at least 64 KiB so that a
//!   response head of Envoy's default 60 KiB fits, at most hyper's default 400 KiB. The
//!   downstream one is sized by `max_request_headers_kb` (60 KiB by default).
//! - Request bodies kept for retries and shadows: at most the limit (and at most 64 KiB).
//!
//! A limit of 0 is Envoy's "no limit": the configured windows and the libraries' defaults.

/// The protocol's initial connection window (RFC 9113 §6.9.2): a connection window cannot
/// be advertised below it.
const PROTOCOL_CONNECTION_WINDOW: u32 = 65_535;
/// The smallest stream window and send buffer: one default-size DATA frame.
const MIN_STREAM_SHARE: u32 = 16_384;
/// Response heads up to Envoy's default `max_response_headers_kb` (60) fit in the HTTP/1.1
/// upstream read buffer.
const MIN_HTTP1_READ_BUFFER: usize = 64 * 1024;
/// hyper's default HTTP/1.1 read buffer.
const MAX_HTTP1_READ_BUFFER: usize = 400 * 1024;
/// hyper's default HTTP/2 send buffer per stream, used when there is no limit.
const DEFAULT_SEND_BUFFER: usize = 400 * 1024;

/// The HTTP/2 settings a connection advertises and uses under its buffer limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Flow {
    pub stream_window: u32,
    pub connection_window: u32,
    /// Bytes a stream may queue for sending beyond what the peer's window lets out.
    pub send_buffer: usize,
}

/// The HTTP/2 windows and send buffer of a connection whose buffer limit is `limit`, from
/// the configured windows (Envoy's defaults unless set).
pub fn http2(limit: u32, stream_window: u32, connection_window: u32) -> Http2Flow {
    if limit == 0 {
        return Http2Flow { stream_window, connection_window, send_buffer: DEFAULT_SEND_BUFFER };
    }
    let share = (limit / 4).max(MIN_STREAM_SHARE);
    Http2Flow {
        stream_window: stream_window.min(share),
        // At least the protocol's initial window, and never below one stream's share.
        connection_window: connection_window.max(PROTOCOL_CONNECTION_WINDOW),
        send_buffer: share as usize,
    }
}

/// The HTTP/1.1 read (and write) buffer of an upstream connection whose buffer limit is
/// `limit`.
pub fn http1_upstream_buffer(limit: u32) -> usize {
    if limit == 0 {
        return MAX_HTTP1_READ_BUFFER;
    }
    (limit as usize / 4).clamp(MIN_HTTP1_READ_BUFFER, MAX_HTTP1_READ_BUFFER)
}

/// The largest request body kept whole for retries and shadows, under a downstream buffer
/// limit of `limit`: `preferred` (what Outrider keeps at most, so that larger bodies
/// stream without waiting for their end), never over the limit.
pub fn retry_buffer(limit: u32, preferred: usize) -> usize {
    if limit == 0 { preferred } else { preferred.min(limit as usize) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENVOY_WINDOW: u32 = 268_435_456;

    #[test]
    fn the_default_limit_caps_envoys_windows() {
        let flow = http2(1024 * 1024, ENVOY_WINDOW, ENVOY_WINDOW);
        assert_eq!(flow, Http2Flow { stream_window: 262_144, connection_window: ENVOY_WINDOW, send_buffer: 262_144 });
    }

    #[test]
    fn smaller_configured_windows_are_kept() {
        let flow = http2(1024 * 1024, 65_535, 131_072);
        assert_eq!((flow.stream_window, flow.connection_window), (65_535, 131_072));
    }

    #[test]
    fn tiny_limits_keep_the_protocol_minimums() {
        let flow = http2(1024, ENVOY_WINDOW, 1024);
        assert_eq!((flow.stream_window, flow.connection_window, flow.send_buffer), (16_384, 65_535, 16_384));
    }

    #[test]
    fn no_limit_is_envoys_unlimited() {
        let flow = http2(0, ENVOY_WINDOW, ENVOY_WINDOW);
        assert_eq!((flow.stream_window, flow.connection_window), (ENVOY_WINDOW, ENVOY_WINDOW));
        assert_eq!(http1_upstream_buffer(0), 400 * 1024);
        assert_eq!(retry_buffer(0, 65_536), 65_536);
    }

    #[test]
    fn http1_buffers_follow_the_limit_within_bounds() {
        assert_eq!(http1_upstream_buffer(1024 * 1024), 256 * 1024);
        assert_eq!(http1_upstream_buffer(32 * 1024), 64 * 1024);
        assert_eq!(http1_upstream_buffer(64 * 1024 * 1024), 400 * 1024);
        assert_eq!(retry_buffer(32 * 1024, 65_536), 32 * 1024);
        assert_eq!(retry_buffer(1024 * 1024, 65_536), 65_536);
    }
}
