//! Hostile clients against the downstream HTTP side, over real loopback sockets: request
//! smuggling vectors, oversized and too many headers, slow headers, invalid HTTP/2 frames,
//! rapid reset, and the connection limit filter. After each, a normal request on a new
//! connection is answered (the worker is unharmed) and the backend saw only the requests
//! it should have.

use crate::common;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use outrider::config::ResourceType;
use outrider::telemetry::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the backend received: method, path, and the framing headers it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    method: String,
    path: String,
    content_length: Option<String>,
    body: Vec<u8>,
    /// The body arrived whole (not cut by a reset).
    complete: bool,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// An HTTP/1.1 backend that records every request and answers 200 `ok`.
async fn backend() -> (u16, Log) {
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
                        if parts.uri.path() == "/hold" {
                            // Never answers: for the stream timeouts.
                            std::future::pending::<()>().await;
                        }
                        let body = body.collect().await.map(|b| b.to_bytes().to_vec());
                        let complete = body.is_ok();
                        let body = body.unwrap_or_default();
                        seen.lock().unwrap().push(Seen {
                            method: parts.method.to_string(),
                            path: parts.uri.path().to_owned(),
                            content_length: parts
                                .headers
                                .get(http::header::CONTENT_LENGTH)
                                .map(|v| v.to_str().unwrap().to_owned()),
                            body,
                            complete,
                        });
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

/// A loopback port held for the test: bound with SO_REUSEPORT but never listening, so no
/// connection goes to it, the proxy can bind it beside it, and no other test's `bind(0)`
/// is given it meanwhile (released, it could be, and two proxies would share it).
fn reserve_port() -> (socket2::Socket, u16) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_reuse_address(true).unwrap();
    socket.set_reuse_port(true).unwrap();
    socket.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    (socket, port)
}

struct Lab {
    _control_plane: ControlPlane,
    _reserved: socket2::Socket,
    outrider: outrider::app::Running,
    port: u16,
    log: Log,
}

impl Lab {
    /// Outrider with one listener: `hcm_extra` is YAML inside the connection manager's
    /// config (6 spaces deep), `limit` a connection limit filter's `max_connections`.
    async fn start(hcm_extra: &str, limit: Option<u64>, workers: usize) -> Self {
        let (backend_port, log) = backend().await;
        let (reserved, port) = reserve_port();
        let limit_filter = limit.map_or(String::new(), |max| {
            format!(
                r#"
  - name: envoy.filters.network.connection_limit
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit
      stat_prefix: limit
      max_connections: {max}"#
            )
        });
        let listener = format!(
            r#"
name: http
address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
filter_chains:
- filters:{limit_filter}
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: http
      rds: {{ route_config_name: local_route, config_source: {{ ads: {{}}, resource_api_version: V3 }} }}
      http_filters:
      - name: envoy.filters.http.router
        typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
{hcm_extra}
"#
        );
        let control_plane = ControlPlane::start().await;
        control_plane.set(ResourceType::Cluster, &[CLUSTER]);
        control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[u32::from(backend_port)])]);
        control_plane.set(ResourceType::Listener, &[&listener]);
        control_plane.set(ResourceType::RouteConfiguration, &[ROUTE]);
        let outrider = outrider::app::start_with(bootstrap(control_plane.port, "DELTA_GRPC"), workers).await.unwrap();
        wait_snapshot(&outrider.store, |s| s.ready).await;
        let mut published = outrider.balancers.subscribe();
        while outrider.balancers.get("backend").is_none_or(|lb| lb.hosts().is_empty()) {
            published.changed().await.unwrap();
        }
        outrider.listeners_ready().await;
        Self { _control_plane: control_plane, _reserved: reserved, outrider, port, log }
    }

    fn seen(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }

    fn stat(&self, name: &str) -> u64 {
        let value = self.outrider.stats.samples().into_iter().find(|(n, _)| n.flat == name).map(|(_, v)| v);
        match value {
            Some(Value::Counter(n)) => n,
            Some(Value::Gauge(n)) => n as u64,
            _ => 0,
        }
    }

    /// Writes `bytes` on a new connection and reads until the proxy closes it.
    async fn raw(&self, bytes: &[u8]) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        stream.write_all(bytes).await.unwrap();
        read_to_close(&mut stream).await
    }

    /// A normal request on a new connection: the worker still serves.
    async fn assert_serves(&self) {
        let served = |seen: Vec<Seen>| seen.iter().filter(|s| s.complete && s.path == "/after").count();
        let before = served(self.seen());
        let stream = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        let request = http::Request::get("/after").header("host", "x").body(Full::new(Bytes::new())).unwrap();
        let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(served(self.seen()), before + 1, "{:?}", self.seen());
    }
}

/// Reads until EOF (or a reset), bounded by [`WAIT`].
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut read = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let reading = async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(WAIT, reading).await.expect("the proxy did not close the connection");
    String::from_utf8_lossy(&read).into_owned()
}

/// The status codes of the HTTP/1.1 responses in `response`, in order.
fn statuses(response: &str) -> Vec<u16> {
    response.match_indices("HTTP/1.1 ").filter_map(|(i, _)| response.get(i + 9..i + 12)?.parse().ok()).collect()
}

#[tokio::test]
async fn smuggling_vectors_are_refused_and_reach_no_backend() {
    let lab = Lab::start("", None, 1).await;
    let refused: &[(&str, &str)] = &[
        (
            "differing content lengths",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        ),
        ("content length not a number", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5a\r\n\r\nhello"),
        ("signed content length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello"),
        ("negative content length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"),
        ("equal content lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
        (
            "content length then chunked",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ),
        (
            "chunked then content length",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        ),
        ("space in a header name", "GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n"),
        ("space before the colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n"),
        ("NUL in a header value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n"),
    ];
    for (name, request) in refused {
        // A pipelined request behind each: never read, the connection closes.
        let request = format!("{request}GET /hidden HTTP/1.1\r\nHost: x\r\n\r\n");
        let response = lab.raw(request.as_bytes()).await;
        assert_eq!(statuses(&response), vec![400], "{name}: {response:?}");
        assert!(response.ends_with("connection: close\r\n\r\nBad Request"), "{name}: {response:?}");
        assert!(lab.seen().is_empty(), "{name}: {:?}", lab.seen());
    }
    // Envoy's 501 for a coding it does not implement, and its 426 for HTTP/1.0.
    let other: &[(&str, &str, u16, &str)] = &[
        (
            "coding not chunked",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nxx",
            501,
            "Not Implemented",
        ),
        (
            "xchunked",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
            501,
            "Not Implemented",
        ),
        (
            "HTTP/1.0 with chunked",
            "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            426,
            "Upgrade Required",
        ),
        ("HTTP/1.0", "GET / HTTP/1.0\r\nHost: x\r\n\r\n", 426, "Upgrade Required"),
    ];
    for (name, request, status, body) in other {
        let response = lab.raw(request.as_bytes()).await;
        assert_eq!(statuses(&response), vec![*status], "{name}: {response:?}");
        assert!(response.ends_with(&format!("connection: close\r\n\r\n{body}")), "{name}: {response:?}");
        assert!(lab.seen().is_empty(), "{name}: {:?}", lab.seen());
    }
    assert_eq!(lab.stat("http.http.downstream_rq_4xx"), (refused.len() + 2) as u64);
    assert_eq!(lab.stat("http.http.downstream_rq_5xx"), 2);
    assert_eq!(lab.stat("http.http.downstream_cx_protocol_error"), (refused.len() + other.len()) as u64);

    // Bodies whose chunk framing is broken never reach the backend whole: no 2xx, and the
    // backend receives no complete request (a body already streaming is cut by a reset, as
    // Envoy resets the upstream stream on a codec error).
    let broken_chunks: &[(&str, &str)] = &[
        (
            "invalid chunk size",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        ),
        (
            "chunk size overflow",
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
        ),
        ("chunk without CRLF", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n"),
    ];
    for (name, request) in broken_chunks {
        let response = lab.raw(request.as_bytes()).await;
        assert!(statuses(&response).iter().all(|s| *s >= 400), "{name}: {response:?}");
        assert!(lab.seen().iter().all(|s| !s.complete), "{name}: {:?}", lab.seen());
    }
    lab.assert_serves().await;
    assert!(lab.seen().iter().filter(|s| s.complete).all(|s| s.path == "/after"));
    lab.outrider.stop();
}

#[tokio::test]
async fn with_allow_chunked_length_content_length_beside_chunked_is_dropped() {
    // As Envoy with `allow_chunked_length`: the request is framed by its chunks and its
    // Content-Length dropped, so the upstream sees one unambiguous framing; Outrider also
    // closes the connection after answering, so nothing after the chunks is read.
    let lab = Lab::start("      http_protocol_options: { allow_chunked_length: true }", None, 1).await;
    let inner = "GET /pipelined HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let body = format!("0\r\n\r\n{inner}");
    let request = format!(
        "POST /outer HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{body}",
        body.len()
    );
    let response = lab.raw(request.as_bytes()).await;
    assert_eq!(statuses(&response), vec![200], "{response:?}");
    assert!(response.contains("connection: close"), "{response:?}");
    let seen = lab.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!((seen[0].method.as_str(), seen[0].path.as_str()), ("POST", "/outer"));
    // Empty by the chunks, never the client's Content-Length.
    assert!(seen[0].body.is_empty());
    assert_ne!(seen[0].content_length, Some(body.len().to_string()));
    // Repeated Content-Length stays refused: the option only concerns chunks.
    let response = lab.raw(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na").await;
    assert_eq!(statuses(&response), vec![400], "{response:?}");
    lab.assert_serves().await;
    lab.outrider.stop();
}

#[tokio::test]
async fn bare_lf_line_endings_make_one_request() {
    let lab = Lab::start("", None, 1).await;
    let response = lab.raw(b"GET /bare-lf HTTP/1.1\nHost: x\nConnection: close\n\n").await;
    assert_eq!(statuses(&response), vec![200], "{response:?}");
    let seen = lab.seen();
    assert_eq!(seen.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(), vec!["/bare-lf"]);
    lab.assert_serves().await;
    lab.outrider.stop();
}

#[tokio::test]
async fn oversized_and_too_many_headers_get_431_and_the_connection_closes() {
    let extra = "      max_request_headers_kb: 16\n      common_http_protocol_options: { max_headers_count: 20 }";
    let lab = Lab::start(extra, None, 1).await;
    // Over 16 KiB of headers: 431, whether the head ends or not.
    let big = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(17 * 1024));
    assert_eq!(statuses(&lab.raw(big.as_bytes()).await), vec![431]);
    let unfinished = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}", "a".repeat(40 * 1024));
    assert_eq!(statuses(&lab.raw(unfinished.as_bytes()).await), vec![431]);
    // 21 headers: one over the count.
    let many: String = (0..20).map(|i| format!("X-H{i}: v\r\n")).collect();
    let request = format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    assert_eq!(statuses(&lab.raw(request.as_bytes()).await), vec![431]);
    assert!(lab.seen().is_empty());
    assert_eq!(lab.stat("http.http.downstream_rq_4xx"), 3);
    // Within both limits: served.
    let fine: String = (0..18).map(|i| format!("X-H{i}: {}\r\n", "v".repeat(512))).collect();
    let request = format!("GET /fine HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{fine}\r\n");
    assert_eq!(statuses(&lab.raw(request.as_bytes()).await), vec![200]);
    lab.assert_serves().await;

    // HTTP/2: the header count is checked per request, and answered 431 on the stream.
    let stream = TcpStream::connect(("127.0.0.1", lab.port)).await.unwrap();
    let (client, connection) = h2::client::handshake(stream).await.unwrap();
    let driver = tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let mut request = http::Request::get(format!("http://x:{}/many", lab.port));
    for i in 0..25 {
        request = request.header(format!("x-h{i}"), "v");
    }
    let (response, _) = client.send_request(request.body(()).unwrap(), true).unwrap();
    let status = tokio::time::timeout(WAIT, response).await.unwrap().unwrap().status();
    assert_eq!(status, 431);
    let (response, _) = client.send_request(http::Request::get("http://x/h2-fine").body(()).unwrap(), true).unwrap();
    assert_eq!(tokio::time::timeout(WAIT, response).await.unwrap().unwrap().status(), 200);
    assert_eq!(lab.seen().iter().filter(|s| s.path == "/many").count(), 0);
    // Closed before the proxy stops (stopping waits for open connections).
    drop(client);
    tokio::time::timeout(WAIT, driver).await.unwrap().unwrap().unwrap();
    lab.outrider.stop();
}

#[tokio::test]
async fn slow_headers_get_408_after_request_headers_timeout() {
    let lab = Lab::start("      request_headers_timeout: 0.2s", None, 1).await;
    let response = lab.raw(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ").await;
    assert_eq!(statuses(&response), vec![408], "{response:?}");
    assert!(response.ends_with("request header timeout"), "{response:?}");
    assert_eq!(lab.stat("http.http.downstream_rq_header_timeout"), 1);
    assert!(lab.seen().is_empty());
    lab.assert_serves().await;
    lab.outrider.stop();
}

/// The HTTP/2 frame types in `bytes` (frames from the server), in order.
fn frame_types(bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 9 {
        let length = (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
        types.push(rest[3]);
        rest = rest.get(9 + length..).unwrap_or_default();
    }
    types
}

const GOAWAY: u8 = 0x7;

#[tokio::test]
async fn invalid_http2_frames_get_goaway() {
    let lab = Lab::start("", None, 1).await;
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    // A SETTINGS frame whose length is not a multiple of 6 (FRAME_SIZE_ERROR), a DATA frame
    // on stream 0 and plain garbage (PROTOCOL_ERROR).
    let invalid: [&[u8]; 3] = [
        b"\x00\x00\x05\x04\x00\x00\x00\x00\x00hello",
        b"\x00\x00\x05\x00\x00\x00\x00\x00\x00hello",
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    ];
    for frames in invalid {
        let mut stream = TcpStream::connect(("127.0.0.1", lab.port)).await.unwrap();
        stream.write_all(preface).await.unwrap();
        stream.write_all(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00").await.unwrap(); // empty SETTINGS
        stream.write_all(frames).await.unwrap();
        let mut read = Vec::new();
        let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut read)).await.unwrap();
        assert!(frame_types(&read).contains(&GOAWAY), "{frames:?}: {:?}", frame_types(&read));
    }
    assert!(lab.seen().is_empty());
    lab.assert_serves().await;
    lab.outrider.stop();
}

#[tokio::test]
async fn rapid_reset_closes_the_connection_and_later_ones_work() {
    let lab = Lab::start("", None, 1).await;
    let stream = TcpStream::connect(("127.0.0.1", lab.port)).await.unwrap();
    let (mut client, connection) = h2::client::handshake(stream).await.unwrap();
    let driver = tokio::spawn(connection);
    let mut opened = 0;
    let closed = loop {
        if opened == 10_000 {
            break false;
        }
        client = match tokio::time::timeout(WAIT, client.ready()).await.unwrap() {
            Ok(client) => client,
            Err(_) => break true,
        };
        let request = http::Request::get("http://x/reset").body(()).unwrap();
        match client.send_request(request, true) {
            Ok((_, mut stream)) => stream.send_reset(h2::Reason::CANCEL),
            Err(_) => break true,
        }
        opened += 1;
        // Lets the connection task write the frames out.
        tokio::task::yield_now().await;
    };
    assert!(closed, "{opened} streams opened and reset without the connection closing");
    // The connection ends: with GOAWAY (the h2 library's guard) or closed (Envoy's rule).
    let _ = tokio::time::timeout(WAIT, driver).await.unwrap().unwrap();
    lab.assert_serves().await;
    lab.outrider.stop();
}

#[tokio::test]
async fn connection_limit_closes_the_connection_over_it_until_one_ends() {
    let lab = Lab::start("", Some(2), 2).await;
    // Two connections, each proven accepted by a request.
    let mut open = Vec::new();
    for _ in 0..2 {
        let stream = TcpStream::connect(("127.0.0.1", lab.port)).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        let driver = tokio::spawn(connection);
        let request = http::Request::get("/held").header("host", "x").body(Full::new(Bytes::new())).unwrap();
        let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
        assert_eq!(response.status(), 200);
        open.push((sender, driver));
    }
    assert_eq!(lab.stat("connection_limit.limit.active_connections"), 2);
    // The third is closed without an answer, whichever worker took it.
    let response = lab.raw(b"GET /third HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(response, "");
    assert_eq!(lab.stat("connection_limit.limit.limited_connections"), 1);
    assert!(lab.seen().iter().all(|s| s.path != "/third"));

    // One ends; once the proxy has seen it end, a new connection is accepted.
    let (sender, driver) = open.pop().unwrap();
    drop(sender);
    tokio::time::timeout(WAIT, driver).await.unwrap().unwrap().unwrap();
    wait::until_sync("the ended connection to be no longer counted", || {
        lab.stat("connection_limit.limit.active_connections") == 1
    })
    .await;
    lab.assert_serves().await;
    assert_eq!(lab.stat("connection_limit.limit.limited_connections"), 1);
    lab.outrider.stop();
}

#[tokio::test]
async fn max_requests_per_connection_closes_after_the_last_answer() {
    let lab = Lab::start("      common_http_protocol_options: { max_requests_per_connection: 2 }", None, 1).await;
    // HTTP/1.1: two pipelined requests answered, the second with `connection: close`, then
    // the connection closes; a third never reaches the backend.
    let two = "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\nGET /3 HTTP/1.1\r\nHost: x\r\n\r\n";
    let response = lab.raw(two.as_bytes()).await;
    assert_eq!(statuses(&response), vec![200, 200], "{response:?}");
    assert_eq!(response.matches("connection: close").count(), 1, "{response:?}");
    assert!(lab.seen().iter().all(|s| s.path != "/3"));
    assert_eq!(lab.stat("http.http.downstream_cx_max_requests_reached"), 1);

    // HTTP/2: GOAWAY after the second request; both are answered.
    let stream = TcpStream::connect(("127.0.0.1", lab.port)).await.unwrap();
    let (client, connection) = h2::client::handshake(stream).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut client = client.ready().await.unwrap();
    for path in ["/h2-1", "/h2-2"] {
        let request = http::Request::get(format!("http://x{path}")).body(()).unwrap();
        let (response, _) = client.send_request(request, true).unwrap();
        assert_eq!(tokio::time::timeout(WAIT, response).await.unwrap().unwrap().status(), 200);
        match client.clone().ready().await {
            Ok(ready) => client = ready,
            Err(e) => assert!(path == "/h2-2" && e.is_go_away(), "{path}: {e:?}"),
        }
    }
    drop(client);
    tokio::time::timeout(WAIT, driver).await.unwrap().unwrap();
    assert_eq!(lab.stat("http.http.downstream_cx_max_requests_reached"), 2);
    lab.assert_serves().await;
    lab.outrider.stop();
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_idle_timeout() {
    let lab = Lab::start("      common_http_protocol_options: { idle_timeout: 0.2s }", None, 1).await;
    // One request, then nothing: the kept-alive connection is closed by the proxy.
    let response = lab.raw(b"GET /once HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(statuses(&response), vec![200]);
    // A connection that never speaks is closed too.
    assert_eq!(lab.raw(b"").await, "");
    assert_eq!(lab.stat("http.http.downstream_cx_idle_timeout"), 2);
    lab.assert_serves().await;
    lab.outrider.stop();
}

/// Before the response began: 504 once the request was read whole (the upstream is late),
/// 408 while its body is still coming (the client is), as Envoy's `maybeRequestTimeoutCode`.
#[tokio::test]
async fn stream_timeouts_answer_504_or_408_before_the_response() {
    for (extra, body, stat) in [
        ("      stream_idle_timeout: 0.2s", "stream timeout", "http.http.downstream_rq_idle_timeout"),
        (
            "      common_http_protocol_options: { max_stream_duration: 0.2s }",
            "downstream duration timeout",
            "http.http.downstream_rq_max_duration_reached",
        ),
    ] {
        let lab = Lab::start(extra, None, 1).await;
        let response = lab.raw(b"GET /hold HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert_eq!(statuses(&response), vec![504], "{response:?}");
        assert!(response.ends_with(body), "{response:?}");
        let partial = b"POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nConnection: close\r\n\r\nabc";
        let response = lab.raw(partial).await;
        assert_eq!(statuses(&response), vec![408], "{response:?}");
        assert!(response.ends_with(body), "{response:?}");
        assert_eq!(lab.stat(stat), 2);
        lab.assert_serves().await;
        lab.outrider.stop();
    }
}
