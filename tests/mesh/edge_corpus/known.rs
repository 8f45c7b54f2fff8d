//! The differences from Envoy the corpus knows of, each with its reason.

/// Why a case may differ from Envoy today.
#[derive(Debug, Clone, Copy)]
pub(super) enum Known {
    /// A difference in Outrider that a fix under way changes: remove the entry once the case
    /// agrees.
    Fixing(&'static str),
    /// A difference in Outrider that nothing fixes yet (docs/edge.md lists it): a bug to file.
    Open(&'static str),
    /// A difference accepted for the reason given (docs/edge.md lists it too).
    Reason(&'static str),
}

const UPGRADE: Known =
    Known::Fixing("upgrades: only the first Upgrade token is checked and h2c/HTTP2-Settings are forwarded");
const CONNECT: Known = Known::Fixing(
    "CONNECT: without a CONNECT config Envoy answers 404 and closes; Outrider keeps the connection and serves the tunnel's bytes as a request",
);
const HTTP10: Known = Known::Fixing(
    "HTTP/1.0: accept_http_10 and default_host_for_http_10 are not read; Envoy also says `connection: close`",
);
const FRAMING: Known = Known::Fixing(
    "framing: Content-Length with Transfer-Encoding and repeated Content-Length are forwarded; errors lack Envoy's body",
);
const H2_MALFORMED: Known = Known::Reason(
    "a malformed HTTP/2 request (RFC 9113 §8.2.2): Outrider resets the stream (PROTOCOL_ERROR), Envoy closes the connection (no GOAWAY); both refuse it and nothing reaches the upstream",
);
const SERVICE_TIME_ON_101: Known =
    Known::Open("Outrider adds x-envoy-upstream-service-time to a 101 response; Envoy adds it to none");
const LOCAL_REPLY_431: Known = Known::Open(
    "431 from the HTTP/1 codec: Envoy's local reply has a body (`Request Header Fields Too Large`), content-type and server; Outrider's has none",
);

/// Cases that may differ, by name, each with its reason. A case listed here that Envoy
/// refuses and Outrider forwards still fails the test.
pub(super) const KNOWN: &[(&str, Known)] = &[
    ("upgrade: websocket, mTLS", SERVICE_TIME_ON_101),
    ("upgrade: websocket, h2c with HTTP2-Settings", UPGRADE),
    ("upgrade: h2c, websocket", UPGRADE),
    ("upgrade: h2c on HTTP/1.0, accept_http_10", UPGRADE),
    (
        "upgrade: foo (not configured)",
        Known::Fixing("upgrades: Envoy closes the connection after refusing an upgrade (`connection: close`)"),
    ),
    ("upgrade: websocket", SERVICE_TIME_ON_101),
    ("upgrade: websocket, outbound", SERVICE_TIME_ON_101),
    ("upgrade: WebSocket (case)", SERVICE_TIME_ON_101),
    ("CONNECT, then a request in the tunnel's bytes", CONNECT),
    ("CONNECT, then a request in the tunnel's bytes, outbound", CONNECT),
    ("upgrade: websocket on HTTP/1.0", HTTP10),
    ("upgrade: h2c on HTTP/1.0", HTTP10),
    (
        "upgrade: websocket on HTTP/1.0, accept_http_10",
        Known::Fixing("HTTP/1.0: Outrider's 101 to an HTTP/1.0 client lacks `connection: upgrade` and `upgrade`"),
    ),
    ("HTTP/1.0 with Host", HTTP10),
    ("HTTP/1.0 without Host", HTTP10),
    ("HTTP/1.0 with Host, outbound", HTTP10),
    ("HTTP/1.0 with Host, accept_http_10", HTTP10),
    ("HTTP/1.0 without Host, default_host_for_http_10", HTTP10),
    ("HTTP/1.0 absolute-form, accept_http_10", HTTP10),
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
    ("a header of 61 KiB", LOCAL_REPLY_431),
    ("101 headers", LOCAL_REPLY_431),
    ("content-length and chunked", FRAMING),
    ("chunked and content-length", FRAMING),
    ("content-length twice, equal", FRAMING),
    ("content-length twice, different", FRAMING),
    (
        "obs-fold header",
        Known::Fixing(
            "framing: Envoy accepts an obs-fold continuation and joins it with a space; Outrider answers 400",
        ),
    ),
    (
        "runs of spaces in the request line",
        Known::Fixing("framing: Envoy accepts runs of spaces in the request line; Outrider answers 400"),
    ),
    (
        "HTTP/1.1 without Host",
        Known::Open(
            "HTTP/1.1 without Host (RFC 9112 §3.2): Envoy answers 400; Outrider forwards it with the endpoint's address as Host",
        ),
    ),
    (
        "transfer-encoding xchunked",
        Known::Fixing("framing: an unknown transfer coding gets Envoy's 501, Outrider's 400"),
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
];

pub(super) fn known(name: &str) -> Option<Known> {
    KNOWN.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
}
