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
                        // A body cut by a reset is marked: such a request may be logged after
                        // the client had its answer, so it is not compared.
                        let body = body.collect().await.map(|b| b.to_bytes());
                        let cut = if body.is_err() { "cut " } else { "" };
                        let body = body.unwrap_or_default();
                        // The header the normalisation cases fold, and the Host a request got.
                        let header = |name: &str| {
                            parts.headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                        };
                        let entry = format!(
                            "{cut}{} {} {:?} x-a={:?} host={:?} http2-settings={:?} upgrade={:?}",
                            parts.method,
                            parts.uri.path(),
                            String::from_utf8_lossy(&body),
                            header("x-a"),
                            header("host"),
                            header("http2-settings"),
                            header("upgrade"),
                        );
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

/// The connection manager of the lenient listener: HTTP/1.0 taken (with a default
/// host) and `Content-Length` beside chunked dropped, as Envoy's options of those names.
const LENIENT: &str = "\n          http_protocol_options: { accept_http_10: true, default_host_for_http_10: default.example, allow_chunked_length: true }";

fn bootstrap(port: u16, backend: u16, hcm: &str) -> String {
    let clusters = static_cluster("backend", backend);
    let extra = HttpListenerExtra { hcm, ..HttpListenerExtra::default() };
    let listener = http_listener("l", port, "p", extra, ROUTE_TO_BACKEND);
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
                "GET / HTTP/1.1\r\nhost: h\r\nx-a: b\r\n c\r\n\r\nGET /second HTTP/1.1\r\nhost: h\r\n{close}\r\n"
            )),
        ),
        ("obs-fold with a tab", text(format!("GET / HTTP/1.1\r\nhost: h\r\nx-a: b \r\n\tc  d\r\n{close}\r\n"))),
        ("obs-fold twice", text(format!("GET / HTTP/1.1\r\nhost: h\r\nx-a: b\r\n   c\r\n d\r\n{close}\r\n"))),
        ("fold of the request line", text(format!("GET / HTTP/1.1\r\n x-a: b\r\nhost: h\r\n{close}\r\n"))),
        ("runs of spaces in the request line", text(format!("GET   /spaced   HTTP/1.1\r\nhost: h\r\n{close}\r\n"))),
        ("spaces after the version", text(format!("GET /trailing HTTP/1.1  \r\nhost: h\r\n{close}\r\n"))),
        (
            "content-length with transfer-encoding gzip",
            text(format!("POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 5\r\ntransfer-encoding: gzip\r\n{close}\r\nhello")),
        ),
        (
            "transfer-encoding Chunked",
            text(format!(
                "POST /p HTTP/1.1\r\nhost: h\r\ntransfer-encoding: Chunked\r\n{close}\r\n5\r\nhello\r\n0\r\n\r\n"
            )),
        ),
        (
            "CONNECT with transfer-encoding",
            text(format!("CONNECT h:443 HTTP/1.1\r\nhost: h:443\r\ntransfer-encoding: chunked\r\n{close}\r\n0\r\n\r\n")),
        ),
        (
            "CONNECT then a request as its tunnel",
            text(format!("CONNECT h:443 HTTP/1.1\r\nhost: h:443\r\n\r\nGET /hidden HTTP/1.1\r\nhost: h\r\n{close}\r\n")),
        ),
        ("HTTP/1.0", text("GET /ten HTTP/1.0\r\nhost: h\r\n\r\n".to_owned())),
        ("HTTP/1.0 without host", text("GET /ten HTTP/1.0\r\n\r\n".to_owned())),
        (
            "HTTP/1.0 h2c upgrade",
            text("GET /ten HTTP/1.0\r\nhost: h\r\nconnection: upgrade, http2-settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n".to_owned()),
        ),
        (
            "HTTP/1.0 websocket upgrade",
            text("GET /ten HTTP/1.0\r\nhost: h\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n".to_owned()),
        ),
        (
            "websocket, h2c upgrade",
            text(format!("GET / HTTP/1.1\r\nhost: h\r\nconnection: upgrade, http2-settings\r\nupgrade: websocket, h2c\r\nhttp2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\nGET /hidden HTTP/1.1\r\nhost: h\r\n{close}\r\n")),
        ),
        (
            "upgrade without connection: upgrade",
            text(format!("GET / HTTP/1.1\r\nhost: h\r\nupgrade: foo\r\n{close}\r\n")),
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

/// Where Outrider's statuses differ from Envoy's, each written down in the README's
/// "Limits" section; in each, Outrider is the stricter.
const DOCUMENTED_DIFFERENCES: &[&str] = &[
    // A bare CR inside a value: Envoy forwards it, Outrider's codec refuses it (400).
    "bare CR in a value",
];

/// More differences on the lenient listener, Outrider the stricter in each: with
/// `accept_http_10`, Envoy forwards a chunked HTTP/1.0 request and takes `HTTP/1.2` and
/// `HTTP/2.0` request lines as HTTP/1.1 (Outrider: 400 and 426); with
/// `allow_chunked_length`, Envoy keeps the connection open after a request framed by its
/// chunks and serves what follows (Outrider closes it after the answer).
const LENIENT_DIFFERENCES: &[&str] =
    &["transfer-encoding on HTTP/1.0", "invalid version", "HTTP/2.0 request line", "CL.TE smuggling"];

/// The status of each response on the connection (none: closed without one), after
/// sending `bytes` and reading until the proxy closes.
async fn exchange(port: u16, bytes: &[u8]) -> (Vec<u16>, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // The proxy may refuse before reading everything: a failed write is part of the answer.
    let _ = stream.write_all(bytes).await;
    let mut received = Vec::new();
    let _ = tokio::time::timeout(READ_LIMIT, stream.read_to_end(&mut received)).await;
    let text = String::from_utf8_lossy(&received).into_owned();
    let statuses = text.match_indices("HTTP/1.").filter_map(|(i, _)| text.get(i + 9..i + 12)?.parse().ok()).collect();
    (statuses, text)
}

/// A refusal as the client sees it, to compare with Envoy's: the status line, the header
/// lines but `date` (sorted, lower-cased) and the body.
fn refusal_shape(response: &str) -> (String, Vec<String>, String) {
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response, ""));
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("").to_owned();
    let mut headers: Vec<String> =
        lines.map(str::to_ascii_lowercase).filter(|l| !l.starts_with("date:") && !l.starts_with("server:")).collect();
    headers.sort();
    (status, headers, body.to_owned())
}

/// No answer, or an error status (Envoy answers 501 for transfer codings it lacks).
fn refused(statuses: &[u16]) -> bool {
    statuses.first().is_none_or(|s| *s >= 400)
}

/// Runs the corpus through both proxies on a listener whose connection manager has `hcm`
/// added; returns the rows (name, and per proxy its statuses, first response and what the
/// backend received) after checking that nothing hidden reached the backend through
/// Outrider.
async fn run_corpus(hcm: &str) -> (bool, Vec<(&'static str, Vec<Row>)>) {
    let (backend, log) = recording_backend().await;
    let pair = Pair::start(|port| bootstrap(port, backend, hcm)).await;
    let mut table = Vec::new();
    for (name, bytes) in corpus() {
        let mut row = Vec::new();
        for (proxy, port) in pair.ports() {
            let (statuses, response) = exchange(port, &bytes).await;
            let reached = std::mem::take(&mut *log.lock().unwrap());
            if proxy == "outrider" {
                assert!(
                    !reached.iter().any(|r| r.contains("/hidden")),
                    "{name}: a hidden request reached the backend through Outrider: {reached:?}"
                );
                assert!(
                    !reached.iter().any(|r| r.contains("http2-settings=Some")),
                    "{name}: HTTP2-Settings left the proxy: {reached:?}"
                );
            }
            row.push(Row { proxy, statuses, response, reached });
        }
        table.push((name, row));
    }
    (pair.envoy.is_some(), table)
}

/// The requests the backend received whole.
fn complete(reached: &[String]) -> Vec<&String> {
    reached.iter().filter(|r| !r.starts_with("cut ")).collect()
}

struct Row {
    proxy: &'static str,
    statuses: Vec<u16>,
    response: String,
    reached: Vec<String>,
}

/// Compares each row with Envoy's: the same statuses (but for `differences`), the same
/// refusal (status line, headers, body), and when both forwarded, the same requests at the
/// backend (method, path, body, the folded header, the host). Returns the disagreements.
fn compare(table: &[(&'static str, Vec<Row>)], differences: &[&str]) -> Vec<String> {
    let mut disagreements = Vec::new();
    let mut agree = 0;
    for (name, row) in table {
        let cells: Vec<String> =
            row.iter().map(|r| format!("{} {:?} backend {:?}", r.proxy, r.statuses, r.reached)).collect();
        println!("{name:40} | {}", cells.join(" | "));
        let [envoy, outrider] = row.as_slice() else { continue };
        if refused(&envoy.statuses) && !refused(&outrider.statuses) {
            disagreements.push(format!(
                "{name}: Envoy refused ({:?}), Outrider answered {:?}",
                envoy.statuses, outrider.statuses
            ));
            continue;
        }
        if differences.contains(name) {
            continue;
        }
        if envoy.statuses != outrider.statuses {
            disagreements.push(format!(
                "{name}: Envoy {:?}, Outrider {:?} ({:?})",
                envoy.statuses, outrider.statuses, outrider.response
            ));
        } else if refused(&envoy.statuses) && !envoy.statuses.is_empty() {
            let (e, o) = (refusal_shape(&envoy.response), refusal_shape(&outrider.response));
            if e != o {
                disagreements.push(format!("{name}: Envoy answered {e:?}, Outrider {o:?}"));
            } else {
                agree += 1;
            }
        } else if complete(&envoy.reached) != complete(&outrider.reached) && !envoy.statuses.is_empty() {
            disagreements.push(format!(
                "{name}: the backend got {:?} from Envoy, {:?} from Outrider",
                envoy.reached, outrider.reached
            ));
        } else {
            agree += 1;
        }
    }
    println!("agrees with Envoy (statuses, refusals, what the backend got) on {agree} of {} cases", table.len());
    disagreements
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outrider_frames_requests_as_envoy_and_nothing_hidden_gets_through() {
    let (envoy, table) = run_corpus("").await;
    assert!(table.len() >= 50);
    if !envoy {
        skipped(Tool::Envoy, "the comparison with Envoy (only Outrider's side was checked)", "envoy not found");
        return;
    }
    let disagreements = compare(&table, DOCUMENTED_DIFFERENCES);
    assert!(disagreements.is_empty(), "Outrider differs from Envoy:\n{}", disagreements.join("\n"));
}

/// With `accept_http_10` (and `default_host_for_http_10`) and `allow_chunked_length`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_http_10_and_chunked_length_allowed_outrider_frames_requests_as_envoy() {
    let (envoy, table) = run_corpus(LENIENT).await;
    if !envoy {
        skipped(Tool::Envoy, "the comparison with Envoy (only Outrider's side was checked)", "envoy not found");
        return;
    }
    let differences = [DOCUMENTED_DIFFERENCES, LENIENT_DIFFERENCES].concat();
    let disagreements = compare(&table, &differences);
    assert!(disagreements.is_empty(), "Outrider differs from Envoy:\n{}", disagreements.join("\n"));
}
