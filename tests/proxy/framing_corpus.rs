//! HTTP/1.1 request framing side by side with Envoy 1.40: a corpus of raw requests —
//! duplicate and conflicting `Content-Length`, `Transfer-Encoding` variants and positions,
//! obs-fold, bare CR and LF, NUL, oversized request lines and headers, invalid methods and
//! versions, absolute-form, CONNECT, h2c upgrade, broken chunked bodies, pipelining behind
//! a rejected request, the classic CL.TE and TE.CL smuggling shapes — goes through both
//! proxies to the same recording backend. Outrider must refuse every request Envoy refuses
//! (but for the one documented difference), and no request hidden in another (`/hidden`)
//! may ever reach the backend through Outrider.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::differential::{HttpListenerExtra, Pair, ROUTE_TO_BACKEND, http_listener, static_cluster};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a case may keep its connection open before the test stops reading. Every case
/// ends its connection (`connection: close` or a refusal); this bounds a proxy that waits.
const READ_LIMIT: Duration = Duration::from_secs(5);

/// What the backend parsed: method, path and body of each request.
type Log = Arc<Mutex<Vec<String>>>;

async fn recording_backend() -> (u16, Log) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let log: Log = Arc::default();
    let seen = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let seen = seen.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let entry =
                            format!("{} {} {:?}", parts.method, parts.uri.path(), String::from_utf8_lossy(&body));
                        seen.lock().unwrap().push(entry);
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
                    }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (port, log)
}

fn bootstrap(port: u16, backend: u16) -> String {
    let clusters = static_cluster("backend", backend);
    let listener = http_listener("l", port, "p", HttpListenerExtra::default(), ROUTE_TO_BACKEND);
    format!(
        r#"
static_resources:
  listeners:{listener}
  clusters:{clusters}
"#
    )
}

/// The corpus: (name, raw bytes).
fn corpus() -> Vec<(&'static str, Vec<u8>)> {
    let close = "connection: close\r\n";
    let long_path = format!("/{}", "a".repeat(70 * 1024));
    let long_header = "b".repeat(70 * 1024);
    let many_headers: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    let text = |s: String| s.into_bytes();
    vec![
        ("valid GET", text(format!("GET / HTTP/1.1\r\nhost: h\r\n{close}\r\n"))),
        ("valid POST", text(format!("POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 5\r\n{close}\r\nhello"))),
        (
            "duplicate equal content-length",
            text(format!("POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 5\r\ncontent-length: 5\r\n{close}\r\nhello")),
        ),
        (
            "conflicting content-length",
            text(format!("POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 5\r\ncontent-length: 6\r\n{close}\r\nhello!")),
        ),
        (
            "content-length list",
            text(format!("POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 5, 5\r\n{close}\r\nhello")),
        ),
        (
            "content-length with plus",
            text(format!("POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: +5\r\n{close}\r\nhello")),
        ),
        ("negative content-length", text(format!("POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: -1\r\n{close}\r\n"))),
        ("hex content-length", text(format!("POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 0x5\r\n{close}\r\nhello"))),
        (
            "overflowing content-length",
            text(format!("POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 99999999999999999999999\r\n{close}\r\n")),
        ),
        (
            "chunked",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n{close}\r\n5\r\nhello\r\n0\r\n\r\n"
            )),
        ),
        (
            "chunked with an extension",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n{close}\r\n5;ext=1\r\nhello\r\n0\r\n\r\n"
            )),
        ),
        (
            "transfer-encoding gzip only",
            text(format!("POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: gzip\r\n{close}\r\nhello")),
        ),
        (
            "transfer-encoding chunked, gzip",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked, gzip\r\n{close}\r\n5\r\nhello\r\n0\r\n\r\n"
            )),
        ),
        (
            "transfer-encoding gzip, chunked",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: gzip, chunked\r\n{close}\r\n5\r\nhello\r\n0\r\n\r\n"
            )),
        ),
        (
            "transfer-encoding xchunked",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: xchunked\r\n{close}\r\n5\r\nhello\r\n0\r\n\r\n"
            )),
        ),
        (
            "transfer-encoding twice",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n{close}\r\n5\r\nhello\r\n0\r\n\r\n"
            )),
        ),
        (
            "space before the colon",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding : chunked\r\n{close}\r\n5\r\nhello\r\n0\r\n\r\n"
            )),
        ),
        (
            "transfer-encoding on HTTP/1.0",
            text("POST /p HTTP/1.0\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_owned()),
        ),
        (
            "invalid chunk size",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n{close}\r\nzz\r\nhello\r\n0\r\n\r\n"
            )),
        ),
        (
            "overflowing chunk size",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n{close}\r\nfffffffffffffffffffff\r\nhello\r\n0\r\n\r\n"
            )),
        ),
        (
            "chunk without its CRLF",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n{close}\r\n5\r\nhelloXX0\r\n\r\n"
            )),
        ),
        ("obs-fold", text(format!("GET / HTTP/1.1\r\nhost: h\r\nx-a: b\r\n c\r\n{close}\r\n"))),
        ("bare CR in a value", text(format!("GET / HTTP/1.1\r\nhost: h\r\nx-a: b\rc\r\n{close}\r\n"))),
        ("NUL in a value", text(format!("GET / HTTP/1.1\r\nhost: h\r\nx-a: b\0c\r\n{close}\r\n"))),
        ("NUL in the path", text(format!("GET /a\0b HTTP/1.1\r\nhost: h\r\n{close}\r\n"))),
        ("space in a header name", text(format!("GET / HTTP/1.1\r\nhost: h\r\nx a: b\r\n{close}\r\n"))),
        ("oversized request line", text(format!("GET {long_path} HTTP/1.1\r\nhost: h\r\n{close}\r\n"))),
        ("oversized header", text(format!("GET / HTTP/1.1\r\nhost: h\r\nx-big: {long_header}\r\n{close}\r\n"))),
        ("too many headers", text(format!("GET / HTTP/1.1\r\nhost: h\r\n{many_headers}{close}\r\n"))),
        ("invalid method", text(format!("G@T / HTTP/1.1\r\nhost: h\r\n{close}\r\n"))),
        ("invalid version", text(format!("GET / HTTP/1.2\r\nhost: h\r\n{close}\r\n"))),
        ("HTTP/2.0 request line", text(format!("GET / HTTP/2.0\r\nhost: h\r\n{close}\r\n"))),
        ("garbage version", text(format!("GET / HTXP/1.1\r\nhost: h\r\n{close}\r\n"))),
        ("absolute-form", text(format!("GET http://h/abs HTTP/1.1\r\nhost: h\r\n{close}\r\n"))),
        ("CONNECT", text(format!("CONNECT h:443 HTTP/1.1\r\nhost: h:443\r\n{close}\r\n"))),
        (
            "h2c upgrade",
            text("GET / HTTP/1.1\r\nhost: h\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n".to_owned()),
        ),
        (
            "pipelined behind a rejected request",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhelloGET /hidden HTTP/1.1\r\nhost: h\r\n{close}\r\n"
            )),
        ),
        (
            "pipelined behind obs-fold",
            text(format!(
                "GET / HTTP/1.1\r\nhost: h\r\nx-a: b\r\n c\r\n\r\nGET /hidden HTTP/1.1\r\nhost: h\r\n{close}\r\n"
            )),
        ),
        (
            "two pipelined requests",
            text(format!("GET /one HTTP/1.1\r\nhost: h\r\n\r\nGET /two HTTP/1.1\r\nhost: h\r\n{close}\r\n")),
        ),
        (
            "CL.TE smuggling",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 40\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /hidden HTTP/1.1\r\nhost: h\r\n{close}\r\n"
            )),
        ),
        (
            "TE.CL smuggling",
            text("POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n5c\r\nGET /hidden HTTP/1.1\r\nhost: h\r\ncontent-length: 15\r\n\r\nx=1\r\n0\r\n\r\n".to_owned()),
        ),
        ("bare LF line endings", text(format!("GET / HTTP/1.1\nhost: h\n{}\n", close.trim_end()))),
    ]
}

/// The cases where Outrider accepts what Envoy refuses, each written down in the README's
/// "Limits" section: a request with both `Content-Length` and `Transfer-Encoding: chunked` is
/// framed by its chunks alone and the connection closed after it (RFC 9112 §6.3); equal
/// repeated `Content-Length`s are taken as one (RFC 9110 §8.6).
const DOCUMENTED_DIFFERENCES: &[&str] = &["CL.TE smuggling", "TE.CL smuggling", "duplicate equal content-length"];

/// The status of each response on the connection (none: closed without one), after
/// sending `bytes` and reading until the proxy closes.
async fn exchange(port: u16, bytes: &[u8]) -> Vec<u16> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // The proxy may refuse before reading everything: a failed write is part of the answer.
    let _ = stream.write_all(bytes).await;
    let mut received = Vec::new();
    let _ = tokio::time::timeout(READ_LIMIT, stream.read_to_end(&mut received)).await;
    let text = String::from_utf8_lossy(&received);
    text.match_indices("HTTP/1.").filter_map(|(i, _)| text.get(i + 9..i + 12)?.parse().ok()).collect()
}

/// No answer, or an error status (Envoy answers 501 for transfer codings it lacks).
fn refused(statuses: &[u16]) -> bool {
    statuses.first().is_none_or(|s| *s >= 400)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outrider_refuses_what_envoy_refuses_and_nothing_hidden_gets_through() {
    let (backend, log) = recording_backend().await;
    let pair = Pair::start(|port| bootstrap(port, backend)).await;
    let mut table = Vec::new();
    let mut disagreements = Vec::new();
    for (name, bytes) in corpus() {
        let mut row = Vec::new();
        for (proxy, port) in pair.ports() {
            let statuses = exchange(port, &bytes).await;
            let reached = std::mem::take(&mut *log.lock().unwrap());
            if proxy == "outrider" {
                assert!(
                    !reached.iter().any(|r| r.contains("/hidden")),
                    "{name}: a hidden request reached the backend through Outrider: {reached:?}"
                );
            }
            row.push((proxy, statuses, reached));
        }
        if let [(_, envoy, _), (_, outrider, _)] = row.as_slice()
            && refused(envoy)
            && !refused(outrider)
            && !DOCUMENTED_DIFFERENCES.contains(&name)
        {
            disagreements.push(format!("{name}: Envoy refused ({envoy:?}), Outrider answered {outrider:?}"));
        }
        table.push((name, row));
    }
    let mut agree = 0;
    for (name, row) in &table {
        let cells: Vec<String> = row.iter().map(|(p, s, r)| format!("{p} {s:?} backend {r:?}")).collect();
        println!("{name:40} | {}", cells.join(" | "));
        if let [(_, envoy, _), (_, outrider, _)] = row.as_slice()
            && refused(envoy) == refused(outrider)
        {
            agree += 1;
        }
    }
    if pair.envoy.is_some() {
        println!("refusal agrees with Envoy on {agree} of {} cases", table.len());
    } else {
        skipped(Tool::Envoy, "the comparison with Envoy (only Outrider's side was checked)", "envoy not found");
    }
    assert!(table.len() >= 30);
    assert!(disagreements.is_empty(), "Outrider is laxer than Envoy:\n{}", disagreements.join("\n"));
}
