//! The corpus: what a hostile or merely unusual client sends to a sidecar.

use super::config::SERVICE;

/// How the client reaches the listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Client {
    Plaintext,
    /// Mutual TLS with `spiffe://cluster.local/ns/default/sa/client`.
    Mtls,
    /// TLS without a client certificate.
    TlsNoCertificate,
}

pub(super) enum Request {
    /// Raw HTTP/1 bytes; read until this many responses.
    H1(String, usize),
    /// A well-formed HTTP/2 request (method, URI, headers).
    H2(&'static str, String, Vec<(String, String)>),
    /// An HTTP/2 request as raw fields, pseudo-headers among them.
    H2Raw(Vec<(String, String)>),
}

pub(super) struct Case {
    pub(super) name: String,
    pub(super) listener: &'static str,
    pub(super) client: Client,
    pub(super) request: Request,
}

/// A client's identity forged in `x-forwarded-client-cert`.
const FORGED_XFCC: &str =
    "By=spiffe://cluster.local/ns/default/sa/app;URI=spiffe://cluster.local/ns/kube-system/sa/admin";

/// The control headers a client may try to set.
const ENVOY_CONTROL: &str = "x-envoy-max-retries: 3\r\nx-envoy-retry-on: 5xx\r\nx-envoy-upstream-rq-timeout-ms: 30000\r\nx-envoy-upstream-rq-per-try-timeout-ms: 30000\r\nx-envoy-retriable-status-codes: 200\r\nx-envoy-hedge-on-per-try-timeout: true\r\n";
const ENVOY_IDENTITY: &str = "x-envoy-external-address: 6.6.6.6\r\nx-envoy-internal: true\r\nx-envoy-original-path: /forged\r\nx-envoy-downstream-service-cluster: forged\r\nx-envoy-downstream-service-node: forged\r\nx-envoy-decorator-operation: forged\r\nx-envoy-force-trace: true\r\nx-envoy-ip-tags: forged\r\nx-envoy-original-dst-host: 10.0.0.1:80\r\n";

/// `GET path HTTP/1.1` with `host`, `extra` header lines and `connection: close`.
fn get(path: &str, host: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n{extra}connection: close\r\n\r\n")
}

fn strings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
}

pub(super) fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut h1 = |name: &str, listener: &'static str, client: Client, text: String| {
        cases.push(Case { name: name.to_owned(), listener, client, request: Request::H1(text, 1) });
    };

    // XFCC in every mode: forged by a plaintext client, forged over mTLS, absent over mTLS.
    for (listener, mode) in [
        ("sanitize", "SANITIZE"),
        ("forward_only", "FORWARD_ONLY"),
        ("inbound", "APPEND_FORWARD"),
        ("sanitize_set", "SANITIZE_SET"),
        ("always_forward_only", "ALWAYS_FORWARD_ONLY"),
    ] {
        let forged = format!("x-forwarded-client-cert: {FORGED_XFCC}\r\n");
        h1(
            &format!("xfcc {mode}: forged, plaintext"),
            listener,
            Client::Plaintext,
            get("/", "public.example", &forged),
        );
        h1(&format!("xfcc {mode}: forged, mTLS"), listener, Client::Mtls, get("/", "public.example", &forged));
        h1(&format!("xfcc {mode}: none, mTLS"), listener, Client::Mtls, get("/", "public.example", ""));
    }
    h1(
        "xfcc APPEND_FORWARD: two forged headers, mTLS",
        "inbound",
        Client::Mtls,
        get(
            "/",
            "public.example",
            &format!("x-forwarded-client-cert: {FORGED_XFCC}\r\nx-forwarded-client-cert: URI=spiffe://x\r\n"),
        ),
    );
    h1(
        "xfcc APPEND_FORWARD with cert and chain, mTLS",
        "xfcc_cert",
        Client::Mtls,
        get("/", "public.example", &format!("x-forwarded-client-cert: {FORGED_XFCC}\r\n")),
    );
    h1(
        "xfcc APPEND_FORWARD with cert and chain, plaintext",
        "xfcc_cert",
        Client::Plaintext,
        get("/", "public.example", ""),
    );

    // Istio's inbound, PERMISSIVE and STRICT.
    h1("inbound: plaintext GET", "inbound", Client::Plaintext, get("/", "public.example", ""));
    h1("inbound: RBAC DENY on admin.example", "inbound", Client::Plaintext, get("/", "admin.example", ""));
    h1("inbound: RBAC DENY on admin.example, mTLS", "inbound", Client::Mtls, get("/", "admin.example", ""));
    h1("strict: plaintext GET", "strict", Client::Plaintext, get("/", "public.example", ""));
    h1("strict: mTLS GET", "strict", Client::Mtls, get("/", "public.example", ""));
    h1("strict: TLS without a client certificate", "strict", Client::TlsNoCertificate, get("/", "public.example", ""));

    // Upgrades.
    let upgrade = |version: &str, upgrade: &str, connection: &str, extra: &str| {
        format!(
            "GET /ws {version}\r\nhost: public.example\r\nconnection: {connection}\r\nupgrade: {upgrade}\r\n{extra}\r\n"
        )
    };
    let settings = "http2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n";
    h1("upgrade: websocket", "inbound", Client::Plaintext, upgrade("HTTP/1.1", "websocket", "upgrade", ""));
    h1("upgrade: websocket, mTLS", "inbound", Client::Mtls, upgrade("HTTP/1.1", "websocket", "upgrade", ""));
    h1(
        "upgrade: websocket, outbound",
        "outbound",
        Client::Plaintext,
        upgrade("HTTP/1.1", "websocket", "Upgrade", "").replace("public.example", SERVICE),
    );
    h1("upgrade: WebSocket (case)", "inbound", Client::Plaintext, upgrade("HTTP/1.1", "WebSocket", "Upgrade", ""));
    h1(
        "upgrade: h2c with HTTP2-Settings",
        "inbound",
        Client::Plaintext,
        upgrade("HTTP/1.1", "h2c", "Upgrade, HTTP2-Settings", settings),
    );
    h1(
        "upgrade: h2c, outbound",
        "outbound",
        Client::Plaintext,
        upgrade("HTTP/1.1", "h2c", "Upgrade, HTTP2-Settings", settings).replace("public.example", SERVICE),
    );
    h1(
        "upgrade: websocket, h2c with HTTP2-Settings",
        "inbound",
        Client::Plaintext,
        upgrade("HTTP/1.1", "websocket, h2c", "Upgrade, HTTP2-Settings", settings),
    );
    h1("upgrade: h2c, websocket", "inbound", Client::Plaintext, upgrade("HTTP/1.1", "h2c, websocket", "Upgrade", ""));
    h1("upgrade: foo (not configured)", "inbound", Client::Plaintext, upgrade("HTTP/1.1", "foo", "Upgrade", ""));
    h1(
        "upgrade: websocket without connection: upgrade",
        "inbound",
        Client::Plaintext,
        get("/ws", "public.example", "upgrade: websocket\r\n"),
    );
    h1("HTTP2-Settings without upgrade", "inbound", Client::Plaintext, get("/", "public.example", settings));
    h1("upgrade: websocket on HTTP/1.0", "inbound", Client::Plaintext, upgrade("HTTP/1.0", "websocket", "Upgrade", ""));
    h1(
        "upgrade: h2c on HTTP/1.0",
        "inbound",
        Client::Plaintext,
        upgrade("HTTP/1.0", "h2c", "Upgrade, HTTP2-Settings", settings),
    );
    h1(
        "upgrade: websocket on HTTP/1.0, accept_http_10",
        "http10",
        Client::Plaintext,
        upgrade("HTTP/1.0", "websocket", "Upgrade", ""),
    );
    h1(
        "upgrade: h2c on HTTP/1.0, accept_http_10",
        "http10",
        Client::Plaintext,
        upgrade("HTTP/1.0", "h2c", "Upgrade, HTTP2-Settings", settings),
    );

    // HTTP/1.0.
    h1("HTTP/1.0 with Host", "inbound", Client::Plaintext, "GET /ten HTTP/1.0\r\nhost: public.example\r\n\r\n".into());
    h1("HTTP/1.0 without Host", "inbound", Client::Plaintext, "GET /ten HTTP/1.0\r\n\r\n".into());
    h1(
        "HTTP/1.0 with Host, outbound",
        "outbound",
        Client::Plaintext,
        format!("GET /ten HTTP/1.0\r\nhost: {SERVICE}\r\n\r\n"),
    );
    h1(
        "HTTP/1.0 with Host, accept_http_10",
        "http10",
        Client::Plaintext,
        "GET /ten HTTP/1.0\r\nhost: public.example\r\n\r\n".into(),
    );
    h1(
        "HTTP/1.0 without Host, default_host_for_http_10",
        "http10",
        Client::Plaintext,
        "GET /ten HTTP/1.0\r\n\r\n".into(),
    );
    h1(
        "HTTP/1.0 keep-alive, accept_http_10",
        "http10",
        Client::Plaintext,
        "GET /ten HTTP/1.0\r\nhost: public.example\r\nconnection: keep-alive\r\n\r\n".into(),
    );
    h1(
        "HTTP/1.0 absolute-form, accept_http_10",
        "http10",
        Client::Plaintext,
        "GET http://admin.example/ten HTTP/1.0\r\n\r\n".into(),
    );

    // Absolute-form targets.
    h1(
        "absolute-form public.example, Host admin.example",
        "inbound",
        Client::Plaintext,
        get("http://public.example/x", "admin.example", ""),
    );
    h1(
        "absolute-form admin.example, Host public.example",
        "inbound",
        Client::Plaintext,
        get("http://admin.example/x", "public.example", ""),
    );
    h1(
        "absolute-form https on plaintext",
        "inbound",
        Client::Plaintext,
        get("https://public.example/x", "public.example", ""),
    );
    h1(
        "absolute-form with a port",
        "inbound",
        Client::Plaintext,
        get("http://public.example:8080/x", "admin.example", ""),
    );
    h1(
        "absolute-form with userinfo",
        "inbound",
        Client::Plaintext,
        get("http://user@public.example/x", "public.example", ""),
    );
    h1(
        "absolute-form service, Host elsewhere, outbound",
        "outbound",
        Client::Plaintext,
        get(&format!("http://{SERVICE}/x"), "elsewhere.example", ""),
    );

    // Control headers from external and internal clients.
    for (listener, who) in
        [("edge", "external"), ("edge_internal", "internal"), ("inbound", "inbound"), ("outbound", "outbound")]
    {
        let host = if listener == "outbound" { SERVICE } else { "public.example" };
        h1(&format!("x-envoy control headers, {who}"), listener, Client::Plaintext, get("/", host, ENVOY_CONTROL));
        h1(&format!("x-envoy identity headers, {who}"), listener, Client::Plaintext, get("/", host, ENVOY_IDENTITY));
    }
    h1("x-envoy control headers, inbound mTLS", "inbound", Client::Mtls, get("/", "public.example", ENVOY_CONTROL));

    // XFF chains and x-forwarded-proto.
    h1("xff: edge, none", "edge", Client::Plaintext, get("/", "public.example", ""));
    h1("xff: edge, one", "edge", Client::Plaintext, get("/", "public.example", "x-forwarded-for: 1.2.3.4\r\n"));
    h1(
        "xff: edge, two",
        "edge",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4, 5.6.7.8\r\n"),
    );
    h1(
        "xff: edge internal, two",
        "edge_internal",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4, 10.0.0.1\r\n"),
    );
    h1(
        "xff: trusted hops 1, remote, two",
        "hops",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4, 5.6.7.8\r\n"),
    );
    h1(
        "xff: trusted hops 1, from xff, two",
        "hops_xff",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4, 5.6.7.8\r\n"),
    );
    h1(
        "xff: trusted hops 1, from xff, one",
        "hops_xff",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4\r\n"),
    );
    h1(
        "xff: inbound, two",
        "inbound",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4, 5.6.7.8\r\n"),
    );
    h1(
        "xff: skip_xff_append, one",
        "skip_xff",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4\r\n"),
    );
    h1(
        "xff: two headers",
        "edge",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4\r\nx-forwarded-for: 5.6.7.8\r\n"),
    );
    h1(
        "x-forwarded-proto forged, edge",
        "edge",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-proto: https\r\n"),
    );
    h1(
        "x-forwarded-proto forged, inbound",
        "inbound",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-proto: https\r\n"),
    );
    h1(
        "x-forwarded-proto forged, mTLS",
        "inbound",
        Client::Mtls,
        get("/", "public.example", "x-forwarded-proto: http\r\n"),
    );

    // x-request-id.
    let id = "x-request-id: 7d2c4b8e-1111-4222-8333-944445555666\r\n";
    h1("x-request-id present, inbound", "inbound", Client::Plaintext, get("/", "public.example", id));
    h1("x-request-id absent, inbound", "inbound", Client::Plaintext, get("/", "public.example", ""));
    h1("x-request-id present, external", "edge", Client::Plaintext, get("/", "public.example", id));
    h1("x-request-id present, internal", "edge_internal", Client::Plaintext, get("/", "public.example", id));
    h1("x-request-id present, outbound", "outbound", Client::Plaintext, get("/", SERVICE, id));
    h1("x-request-id not a UUID", "inbound", Client::Plaintext, get("/", "public.example", "x-request-id: abc\r\n"));
    h1(
        "x-request-id twice",
        "inbound",
        Client::Plaintext,
        get("/", "public.example", &format!("{id}x-request-id: abc\r\n")),
    );

    // via, te and connection-specific headers on HTTP/1.1.
    h1("via on HTTP/1.1", "inbound", Client::Plaintext, get("/", "public.example", "via: 1.1 other\r\n"));
    h1(
        "te: trailers, gzip on HTTP/1.1",
        "inbound",
        Client::Plaintext,
        get("/", "public.example", "te: trailers, gzip\r\n"),
    );
    h1(
        "connection nominates a header",
        "inbound",
        Client::Plaintext,
        "GET / HTTP/1.1\r\nhost: public.example\r\nconnection: close, x-secret\r\nx-secret: v\r\n\r\n".into(),
    );
    h1(
        "connection nominates x-forwarded-for",
        "edge_internal",
        Client::Plaintext,
        "GET / HTTP/1.1\r\nhost: public.example\r\nconnection: close, x-forwarded-for\r\nx-forwarded-for: 10.0.0.1\r\n\r\n".into(),
    );
    h1(
        "connection nominates te with trailers",
        "inbound",
        Client::Plaintext,
        "GET / HTTP/1.1\r\nhost: public.example\r\nconnection: close, te, a, b\r\nte: gzip, trailers\r\na: 1\r\nb: 2\r\n\r\n".into(),
    );
    h1(
        "connection nominates ten names",
        "inbound",
        Client::Plaintext,
        "GET / HTTP/1.1\r\nhost: public.example\r\nconnection: close, a, b, c, d, e, f, g, h, i\r\na: 1\r\n\r\n".into(),
    );
    h1(
        "a target without its leading slash",
        "inbound",
        Client::Plaintext,
        "GET x/y HTTP/1.1\r\nhost: public.example\r\nconnection: close\r\n\r\n".into(),
    );
    h1(
        "keep-alive and proxy-connection on HTTP/1.1",
        "inbound",
        Client::Plaintext,
        get("/", "public.example", "keep-alive: timeout=5\r\nproxy-connection: keep-alive\r\n"),
    );

    // CONNECT and OPTIONS *.
    cases.push(Case {
        name: "CONNECT, then a request in the tunnel's bytes".into(),
        listener: "inbound",
        client: Client::Plaintext,
        request: Request::H1(
            format!(
                "CONNECT public.example:443 HTTP/1.1\r\nhost: public.example:443\r\n\r\n{}",
                get("/smuggled", "public.example", "")
            ),
            2,
        ),
    });
    cases.push(Case {
        name: "CONNECT, then a request in the tunnel's bytes, outbound".into(),
        listener: "outbound",
        client: Client::Plaintext,
        request: Request::H1(
            format!("CONNECT {SERVICE}:8080 HTTP/1.1\r\nhost: {SERVICE}:8080\r\n\r\n{}", get("/smuggled", SERVICE, "")),
            2,
        ),
    });
    let mut h1 = |name: &str, listener: &'static str, client: Client, text: String| {
        cases.push(Case { name: name.to_owned(), listener, client, request: Request::H1(text, 1) });
    };
    h1(
        "OPTIONS *",
        "inbound",
        Client::Plaintext,
        "OPTIONS * HTTP/1.1\r\nhost: public.example\r\nconnection: close\r\n\r\n".into(),
    );
    h1(
        "OPTIONS *, outbound",
        "outbound",
        Client::Plaintext,
        format!("OPTIONS * HTTP/1.1\r\nhost: {SERVICE}\r\nconnection: close\r\n\r\n"),
    );

    // Sizes and duplicates (Envoy's defaults: 60 KiB of headers, 100 headers).
    let header = |kib: usize| format!("x-big: {}\r\n", "b".repeat(kib * 1024));
    h1("a header of 59 KiB", "inbound", Client::Plaintext, get("/", "public.example", &header(59)));
    h1("a header of 61 KiB", "inbound", Client::Plaintext, get("/", "public.example", &header(61)));
    let headers = |n: usize| (0..n).map(|i| format!("x-h{i}: v\r\n")).collect::<String>();
    h1("97 headers", "inbound", Client::Plaintext, get("/", "public.example", &headers(97)));
    h1("101 headers", "inbound", Client::Plaintext, get("/", "public.example", &headers(101)));
    h1("two Host headers", "inbound", Client::Plaintext, get("/", "public.example", "host: admin.example\r\n"));
    h1(
        "two Host headers, admin first",
        "inbound",
        Client::Plaintext,
        get("/", "admin.example", "host: public.example\r\n"),
    );
    h1("a header twice", "inbound", Client::Plaintext, get("/", "public.example", "x-dup: one\r\nx-dup: two\r\n"));

    // Framing.
    let post = |extra: &str, body: &str| {
        format!("POST /p HTTP/1.1\r\nhost: public.example\r\n{extra}connection: close\r\n\r\n{body}")
    };
    h1(
        "content-length and chunked",
        "inbound",
        Client::Plaintext,
        post("content-length: 5\r\ntransfer-encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
    );
    h1(
        "chunked and content-length",
        "inbound",
        Client::Plaintext,
        post("transfer-encoding: chunked\r\ncontent-length: 5\r\n", "5\r\nhello\r\n0\r\n\r\n"),
    );
    h1(
        "content-length twice, equal",
        "inbound",
        Client::Plaintext,
        post("content-length: 5\r\ncontent-length: 5\r\n", "hello"),
    );
    h1(
        "content-length twice, different",
        "inbound",
        Client::Plaintext,
        post("content-length: 5\r\ncontent-length: 6\r\n", "hello!"),
    );
    h1("obs-fold header", "inbound", Client::Plaintext, get("/", "public.example", "x-folded: one\r\n two\r\n"));
    h1(
        "runs of spaces in the request line",
        "inbound",
        Client::Plaintext,
        "GET  /  HTTP/1.1\r\nhost: public.example\r\nconnection: close\r\n\r\n".into(),
    );
    h1("HTTP/1.1 without Host", "inbound", Client::Plaintext, "GET / HTTP/1.1\r\nconnection: close\r\n\r\n".into());
    h1(
        "transfer-encoding xchunked",
        "inbound",
        Client::Plaintext,
        post("transfer-encoding: xchunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
    );
    h1("POST chunked", "inbound", Client::Plaintext, post("transfer-encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"));

    // Host forms.
    h1("Host admin.example.", "inbound", Client::Plaintext, get("/", "admin.example.", ""));
    h1("Host admin.example:80", "inbound", Client::Plaintext, get("/", "admin.example:80", ""));
    h1("Host admin.example., strip_trailing_host_dot", "strip", Client::Plaintext, get("/", "admin.example.", ""));
    h1("Host admin.example:80, strip_any_host_port", "strip", Client::Plaintext, get("/", "admin.example:80", ""));
    h1("Host ADMIN.EXAMPLE", "inbound", Client::Plaintext, get("/", "ADMIN.EXAMPLE", ""));
    h1("Host with port, outbound", "outbound", Client::Plaintext, get("/", &format!("{SERVICE}:8080"), ""));
    h1("Host of another service, outbound", "outbound", Client::Plaintext, get("/", "elsewhere.example", ""));

    // Paths (normalize_path, escaped slashes kept).
    h1("path with ..", "inbound", Client::Plaintext, get("/a/../admin", "public.example", ""));
    h1("path with %2e%2e", "inbound", Client::Plaintext, get("/a/%2e%2e/b", "public.example", ""));
    h1("path with %2F", "inbound", Client::Plaintext, get("/a%2Fb", "public.example", ""));
    h1("path with //", "inbound", Client::Plaintext, get("/a//b", "public.example", ""));

    // HTTP/2.
    let h2 = |name: &str, listener: &'static str, client: Client, uri: &str, headers: &[(&str, &str)]| Case {
        name: name.to_owned(),
        listener,
        client,
        request: Request::H2("GET", uri.to_owned(), strings(headers)),
    };
    let raw = |name: &str, listener: &'static str, fields: &[(&str, &str)]| Case {
        name: name.to_owned(),
        listener,
        client: Client::Plaintext,
        request: Request::H2Raw(strings(fields)),
    };
    let get2 = |extra: &[(&'static str, &'static str)]| {
        let mut fields =
            vec![(":method", "GET"), (":scheme", "http"), (":authority", "public.example"), (":path", "/")];
        fields.extend_from_slice(extra);
        fields
    };
    cases.extend([
        h2("h2: GET", "inbound", Client::Plaintext, "http://public.example/", &[]),
        h2("h2: GET, mTLS", "inbound", Client::Mtls, "https://public.example/", &[]),
        h2(
            "h2: xfcc forged, mTLS",
            "inbound",
            Client::Mtls,
            "https://public.example/",
            &[("x-forwarded-client-cert", FORGED_XFCC)],
        ),
        h2(
            "h2: xfcc forged, SANITIZE_SET, mTLS",
            "sanitize_set",
            Client::Mtls,
            "https://public.example/",
            &[("x-forwarded-client-cert", FORGED_XFCC)],
        ),
        h2(
            "h2: :authority public.example, host admin.example",
            "inbound",
            Client::Plaintext,
            "http://public.example/",
            &[("host", "admin.example")],
        ),
        h2(
            "h2: :authority admin.example, host public.example",
            "inbound",
            Client::Plaintext,
            "http://admin.example/",
            &[("host", "public.example")],
        ),
        h2("h2: :authority admin.example", "inbound", Client::Plaintext, "http://admin.example/", &[]),
        h2(
            "h2: :authority public.example, host admin.example, mTLS",
            "inbound",
            Client::Mtls,
            "https://public.example/",
            &[("host", "admin.example")],
        ),
        h2("h2: via", "inbound", Client::Plaintext, "http://public.example/", &[("via", "2 other")]),
        h2("h2: te: trailers", "inbound", Client::Plaintext, "http://public.example/", &[("te", "trailers")]),
        h2(
            "h2: x-envoy control headers, external",
            "edge",
            Client::Plaintext,
            "http://public.example/",
            &[("x-envoy-max-retries", "3"), ("x-envoy-retry-on", "5xx")],
        ),
        h2("h2: x-request-id absent", "inbound", Client::Plaintext, "http://public.example/", &[]),
        h2("h2: a header of 61 KiB", "inbound", Client::Plaintext, "http://public.example/", &[]),
        raw(
            "h2 raw: host without :authority",
            "inbound",
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("host", "admin.example")],
        ),
        raw("h2 raw: te: gzip", "inbound", &get2(&[("te", "gzip")])),
        raw("h2 raw: connection: keep-alive", "inbound", &get2(&[("connection", "keep-alive")])),
        raw("h2 raw: keep-alive", "inbound", &get2(&[("keep-alive", "timeout=5")])),
        raw("h2 raw: proxy-connection", "inbound", &get2(&[("proxy-connection", "keep-alive")])),
        raw("h2 raw: transfer-encoding: chunked", "inbound", &get2(&[("transfer-encoding", "chunked")])),
        raw("h2 raw: upgrade: websocket", "inbound", &get2(&[("upgrade", "websocket")])),
        raw("h2 raw: two :authority", "inbound", &get2(&[(":authority", "admin.example")])),
        raw("h2 raw: CONNECT", "inbound", &[(":method", "CONNECT"), (":authority", "public.example:443")]),
        raw("h2 raw: uppercase header name", "inbound", &get2(&[("X-Upper", "v")])),
    ]);
    // The 61 KiB header on HTTP/2, added here to keep the table above readable.
    if let Some(case) = cases.iter_mut().find(|c| c.name == "h2: a header of 61 KiB")
        && let Request::H2(_, _, headers) = &mut case.request
    {
        headers.push(("x-big".into(), "b".repeat(61 * 1024)));
    }
    cases
}
