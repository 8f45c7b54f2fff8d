//! The differences from Envoy the corpus knows of, each with its reason.

/// Why a case may differ from Envoy today.
#[derive(Debug, Clone, Copy)]
pub(super) enum Known {
    /// A difference in Outrider that a fix under way changes: remove the entry once the case
    /// agrees. (None today: kept for the next fix that lands in steps.)
    #[allow(dead_code)]
    Fixing(&'static str),
    /// A difference in Outrider that nothing fixes yet (docs/edge.md lists it): a bug to file.
    /// (None today.)
    #[allow(dead_code)]
    Open(&'static str),
    /// A difference accepted for the reason given (docs/edge.md lists it too).
    Reason(&'static str),
}

const H2_MALFORMED: Known = Known::Reason(
    "a malformed HTTP/2 request (RFC 9113 §8.2.2): Outrider resets the stream (PROTOCOL_ERROR), Envoy closes the connection (no GOAWAY); both refuse it and nothing reaches the upstream",
);

/// Cases that may differ, by name, each with its reason. A case listed here that Envoy
/// refuses and Outrider forwards still fails the test.
pub(super) const KNOWN: &[(&str, Known)] = &[
    (
        "upgrade: websocket on HTTP/1.0, accept_http_10",
        Known::Reason(
            "an upgrade from an HTTP/1.0 client never gets a tunnel in Outrider (403); Envoy with accept_http_10 tunnels a WebSocket one",
        ),
    ),
    (
        "h2: a header of 61 KiB",
        Known::Reason(
            "headers over max_request_headers_kb on HTTP/2: Envoy resets the stream, Outrider answers 431; both refuse it",
        ),
    ),
    ("h2 raw: te: gzip", H2_MALFORMED),
    ("h2 raw: connection: keep-alive", H2_MALFORMED),
    ("h2 raw: keep-alive", H2_MALFORMED),
    ("h2 raw: proxy-connection", H2_MALFORMED),
    ("h2 raw: transfer-encoding: chunked", H2_MALFORMED),
    ("h2 raw: upgrade: websocket", H2_MALFORMED),
    ("h2 raw: two :authority", H2_MALFORMED),
    (
        "h2 raw: uppercase header name",
        Known::Reason(
            "an upper-case HTTP/2 field name (RFC 9113 §8.2.1): Outrider ends the connection with GOAWAY PROTOCOL_ERROR, Envoy closes it without one; both refuse it",
        ),
    ),
    (
        "HTTP2-Settings without upgrade",
        Known::Reason(
            "HTTP2-Settings never leaves Outrider (it only means something beside `upgrade: h2c`); Envoy forwards it when there is no upgrade",
        ),
    ),
];

pub(super) fn known(name: &str) -> Option<Known> {
    KNOWN.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
}
