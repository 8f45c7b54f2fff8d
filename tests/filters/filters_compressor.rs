//! The compressor filter side by side with Envoy 1.40: Istio's three chained compressors
//! (brotli, zstd, gzip, with the stats listener's content types) in front of a backend,
//! the same corpus of `accept-encoding` values and responses through both proxies. The
//! status, `content-encoding`, `vary`, `etag` and whether `content-length` survives must
//! agree, and every body must decompress (with the codec it names) to what the backend
//! sent; then the filters' counters must agree.

use crate::common;

use std::io::Read;

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::backends;
use common::differential::Pair;
use http::Response;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A few KiB of text.
fn text() -> String {
    (0..200).map(|i| format!("metric_{i}{{label=\"value\"}} {i}\n")).collect()
}

/// What the backend answers for each path.
fn answer(path: &str) -> Response<Full<Bytes>> {
    let body = match path {
        "/tiny" => "tiny".to_owned(),
        _ => text(),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    let headers = response.headers_mut();
    let content_type = match path {
        "/image" => "image/png",
        "/openmetrics" => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        "/untyped" => "",
        _ => "text/plain; charset=utf-8",
    };
    if !content_type.is_empty() {
        headers.insert("content-type", content_type.parse().unwrap());
    }
    match path {
        "/encoded" => {
            headers.insert("content-encoding", "identity-ish".parse().unwrap());
        }
        "/etag" => {
            headers.insert("etag", "\"v1\"".parse().unwrap());
        }
        "/weak-etag" => {
            headers.insert("etag", "W/\"v1\"".parse().unwrap());
        }
        "/vary" => {
            headers.insert("vary", "Origin".parse().unwrap());
        }
        "/no-transform" => {
            headers.insert("cache-control", "public, no-transform".parse().unwrap());
        }
        _ => {}
    }
    response
}

/// A backend that streams the text in chunks, without `content-length`.
async fn chunked_backend() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let mut response =
                    String::from("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n");
                response.push_str("connection: close\r\n\r\n");
                for piece in text().as_bytes().chunks(1000) {
                    response.push_str(&format!("{:x}\r\n{}\r\n", piece.len(), String::from_utf8_lossy(piece)));
                }
                response.push_str("0\r\n\r\n");
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    port
}

/// Istio's stats listener's filters, in front of the two backends.
fn bootstrap(port: u16, backend: u16, chunked: u16) -> String {
    let compressor = |name: &str, library: &str, kind: &str| {
        format!(
            r#"
          - name: envoy.filters.http.compressor.{name}
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.compressor.v3.Compressor
              compressor_library:
                name: stats_{name}
                typed_config: {{ "@type": type.googleapis.com/envoy.extensions.compression.{library}.compressor.v3.{kind} }}
              response_direction_config:
                common_config:
                  content_type: [text/plain, application/vnd.google.protobuf, application/openmetrics-text, application/openmetrics-protobuf]"#
        )
    };
    let filters = [
        compressor("brotli", "brotli", "Brotli"),
        compressor("zstd", "zstd", "Zstd"),
        compressor("gzip", "gzip", "Gzip"),
    ]
    .concat();
    let cluster = |name: &str, port: u16| {
        format!(
            r#"
  - name: {name}
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}"#
        )
    };
    format!(
        r#"
static_resources:
  listeners:
  - name: stats
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: stats
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/chunked" }}
                route: {{ cluster: chunked }}
              - match: {{ prefix: "/" }}
                route: {{ cluster: backend }}
          http_filters:{filters}
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:{}{}
"#,
        cluster("backend", backend),
        cluster("chunked", chunked)
    )
}

/// What is compared of one answer.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    content_encoding: Option<String>,
    vary: Option<String>,
    etag: Option<String>,
    has_content_length: bool,
    /// The body, decompressed with the codec `content-encoding` names.
    body: String,
}

/// One HTTP/1.1 request on its own connection; the whole answer as bytes.
async fn exchange(port: u16, method: &str, path: &str, accept_encoding: Option<&str>) -> Answer {
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: stats\r\nconnection: close\r\n");
    if let Some(value) = accept_encoding {
        request.push_str(&format!("accept-encoding: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(common::WAIT, stream.read_to_end(&mut raw)).await.unwrap().unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4;
    let (head, body) = raw.split_at(split);
    let head = String::from_utf8_lossy(head);
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let body =
        if header("transfer-encoding").is_some_and(|t| t.contains("chunked")) { dechunk(body) } else { body.to_vec() };
    let content_encoding = header("content-encoding");
    let body = match content_encoding.as_deref() {
        Some("gzip") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(body.as_slice()).read_to_end(&mut out).unwrap();
            out
        }
        Some("br") => {
            let mut out = Vec::new();
            brotli::Decompressor::new(body.as_slice(), 4096).read_to_end(&mut out).unwrap();
            out
        }
        Some("zstd") => zstd::decode_all(body.as_slice()).unwrap(),
        _ => body,
    };
    Answer {
        status,
        content_encoding,
        vary: header("vary"),
        etag: header("etag"),
        has_content_length: header("content-length").is_some(),
        body: String::from_utf8(body).unwrap(),
    }
}

/// A chunked body's data.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").expect("a chunk size line");
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&body[..line_end]).split(';').next().unwrap().trim(), 16)
                .unwrap();
        body = &body[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

const ACCEPT_ENCODINGS: &[Option<&str>] = &[
    Some("gzip"),
    Some("br"),
    Some("zstd"),
    Some("gzip;q=0.5, br;q=0.9"),
    Some("*"),
    Some("identity"),
    Some("gzip;q=0"),
    Some("br;q=0, *"),
    Some("deflate, gzip;q=0.2"),
    Some("GZIP"),
    None,
];

const PATHS: &[&str] = &[
    "/text",
    "/tiny",
    "/encoded",
    "/image",
    "/etag",
    "/weak-etag",
    "/vary",
    "/no-transform",
    "/openmetrics",
    "/untyped",
    "/chunked",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_responses_match_envoy() {
    let backend =
        backends::http(|request: http::Request<hyper::body::Incoming>| async move { answer(request.uri().path()) })
            .await;
    let chunked = chunked_backend().await;
    let pair = Pair::start(|port| bootstrap(port, backend.port, chunked)).await;
    let original = text();
    let mut compressed = 0;
    for path in PATHS {
        for accept in ACCEPT_ENCODINGS {
            let mut answers = Vec::new();
            for (who, port) in pair.ports() {
                let answer = exchange(port, "GET", path, *accept).await;
                let expected = if *path == "/tiny" { "tiny" } else { original.as_str() };
                assert_eq!(answer.body, expected, "{who} {path} {accept:?}: the body must come back whole");
                answers.push((who, answer));
            }
            if let [(_, envoy), (_, outrider)] = answers.as_slice() {
                assert_eq!(outrider, envoy, "{path} accept-encoding {accept:?}");
            }
            let (_, last) = answers.last().unwrap();
            compressed += usize::from(last.content_encoding.as_deref().is_some_and(|e| e != "identity-ish"));
        }
    }
    assert!(compressed >= 20, "only {compressed} answers were compressed");
    // HEAD: never compressed (the response ends with its headers), but `vary` still says
    // the resource varies.
    let mut heads = Vec::new();
    for (_, port) in pair.ports() {
        let answer = exchange(port, "HEAD", "/text", Some("gzip")).await;
        assert_eq!(answer.content_encoding, None);
        assert_eq!(answer.vary.as_deref(), Some("Accept-Encoding"));
        heads.push(answer);
    }
    if let [envoy, outrider] = heads.as_slice() {
        assert_eq!(outrider, envoy);
    }
    let Some(envoy) = &pair.envoy else {
        skipped(Tool::Envoy, "comparing the compressor counters with Envoy's", "envoy not found");
        return;
    };
    for library in ["brotli.brotli", "zstd.zstd", "gzip.gzip"] {
        for stat in [
            "response.compressed",
            "response.not_compressed",
            "response.content_length_too_small",
            "request.not_compressed",
            "no_accept_header",
            "header_identity",
            "header_compressor_used",
            "header_compressor_overshadowed",
            "header_wildcard",
            "header_not_valid",
            "not_compressed_etag",
        ] {
            let name = format!("http.stats.compressor.stats_{library}.{stat}");
            assert_eq!(pair.outrider_stat(&name).await, envoy.stat(&name).await, "{name}");
        }
        let name = format!("http.stats.compressor.stats_{library}.response.total_uncompressed_bytes");
        assert!(pair.outrider_stat(&name).await > 0, "{name}");
    }
}
