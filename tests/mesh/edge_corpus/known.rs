//! The differences from Envoy the corpus knows of, each with its reason.

/// Why a case may differ from Envoy today.
#[derive(Debug, Clone, Copy)]
pub(super) enum Known {
    /// A difference in Outrider that a fix under way changes: remove the entry once the case
    /// agrees. (None today: kept for the next fix that lands in steps.)
    #[allow(dead_code)]
    Fixing(&'static str),
    /// A difference in Outrider that nothing fixes yet (docs/edge.md lists it): a bug to file.
    Open(&'static str),
    /// A difference accepted for the reason given (docs/edge.md lists it too).
    Reason(&'static str),
}

const CODEC_REFUSAL_DATE: Known = Known::Open(
    "a refusal by the HTTP/1 codec (400, 426, 431, 501) has Envoy's status, body and headers but no `date`",
);
const HTTP10_CLOSE: Known = Known::Open(
    "to an HTTP/1.0 client without keep-alive Envoy's response says `connection: close`; Outrider's does not (HTTP/1.0 closes by default)",
);
const H2_MALFORMED: Known = Known::Reason(
    "a malformed HTTP/2 request (RFC 9113 §8.2.2): Outrider resets the stream (PROTOCOL_ERROR), Envoy closes the connection (no GOAWAY); both refuse it and nothing reaches the upstream",
);
const SERVICE_TIME_ON_101: Known =
    Known::Open("Outrider adds x-envoy-upstream-service-time to a 101 response; Envoy adds it to none");

/// Cases that may differ, by name, each with its reason. A case listed here that Envoy
/// refuses and Outrider forwards still fails the test.
pub(super) const KNOWN: &[(&str, Known)] = &[
    ("upgrade: websocket, mTLS", SERVICE_TIME_ON_101),
    ("upgrade: h2c on HTTP/1.0, accept_http_10", HTTP10_CLOSE),
    ("upgrade: websocket", SERVICE_TIME_ON_101),
    ("upgrade: websocket, outbound", SERVICE_TIME_ON_101),
    ("upgrade: WebSocket (case)", SERVICE_TIME_ON_101),
    ("upgrade: websocket on HTTP/1.0", CODEC_REFUSAL_DATE),
    ("upgrade: h2c on HTTP/1.0", CODEC_REFUSAL_DATE),
    (
        "upgrade: websocket on HTTP/1.0, accept_http_10",
        Known::Reason(
            "an upgrade from an HTTP/1.0 client never gets a tunnel in Outrider (403); Envoy with accept_http_10 tunnels a WebSocket one",
        ),
    ),
    ("HTTP/1.0 with Host", CODEC_REFUSAL_DATE),
    ("HTTP/1.0 without Host", CODEC_REFUSAL_DATE),
    ("HTTP/1.0 with Host, outbound", CODEC_REFUSAL_DATE),
    ("HTTP/1.0 with Host, accept_http_10", HTTP10_CLOSE),
    ("HTTP/1.0 without Host, default_host_for_http_10", HTTP10_CLOSE),
    ("HTTP/1.0 absolute-form, accept_http_10", HTTP10_CLOSE),
    (
        "x-envoy identity headers, external",
        Known::Open("an external client's x-envoy-original-path: Envoy removes it, Outrider forwards it"),
    ),
    (
        "x-envoy identity headers, internal",
        Known::Open(
            "an internal client's x-envoy-force-trace: Envoy returns the x-request-id in the response, Outrider does not",
        ),
    ),
    (
        "absolute-form with userinfo",
        Known::Open(
            "an absolute-form target with userinfo (`http://user@host/`): Envoy's upstream Host is `host`, Outrider's keeps `user@host`",
        ),
    ),
    (
        "x-request-id twice",
        Known::Open("two x-request-id headers: Envoy replaces them with one it generates; Outrider forwards both"),
    ),
    (
        "connection nominates a header",
        Known::Open("a header named in `connection` (RFC 9110 §7.6.1) is removed by Envoy, forwarded by Outrider"),
    ),
    (
        "OPTIONS *",
        Known::Open("`OPTIONS *`: Envoy finds no route (404), Outrider refuses the target (400); neither forwards it"),
    ),
    (
        "OPTIONS *, outbound",
        Known::Open("`OPTIONS *`: Envoy finds no route (404), Outrider refuses the target (400); neither forwards it"),
    ),
    ("a header of 61 KiB", CODEC_REFUSAL_DATE),
    ("101 headers", CODEC_REFUSAL_DATE),
    ("content-length and chunked", CODEC_REFUSAL_DATE),
    ("chunked and content-length", CODEC_REFUSAL_DATE),
    ("content-length twice, equal", CODEC_REFUSAL_DATE),
    ("content-length twice, different", CODEC_REFUSAL_DATE),
    ("transfer-encoding xchunked", CODEC_REFUSAL_DATE),
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
