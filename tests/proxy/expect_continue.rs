//! `expect: 100-continue` side by side with Envoy 1.40. With `proxy_100_continue` false
//! (its default) the client gets `100 Continue` from the proxy before it sends the body, and
//! the backend never sees the expectation; with it true (Istio's setting) the backend sees
//! it and the client still gets its `100 Continue` before sending the body.

use crate::common;

use common::backends;
use common::differential::{HttpListenerExtra, Pair, ROUTE_TO_BACKEND, http_listener, parse_response, static_cluster};
use http::Response;
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn bootstrap(port: u16, backend: u16, hcm: &str) -> String {
    let listener = http_listener("l", port, "p", HttpListenerExtra { hcm, ..Default::default() }, ROUTE_TO_BACKEND);
    let clusters = static_cluster("backend", backend);
    format!("\nstatic_resources:\n  listeners:{listener}\n  clusters:{clusters}\n")
}

/// Sends the head, waits for the interim `100 Continue`, then sends the body: (the
/// interim status line, the final status, what the backend saw of `expect`, the body it
/// echoed).
async fn expect_continue(port: u16) -> (String, u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let head = "POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 4\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    // The interim response first, whole (the client sends nothing until it has it).
    let mut interim = Vec::new();
    while !interim.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(common::WAIT, stream.read(&mut byte)).await.unwrap().unwrap();
        assert_eq!(read, 1, "closed before an interim response: {}", String::from_utf8_lossy(&interim));
        interim.push(byte[0]);
    }
    let interim = String::from_utf8_lossy(&interim).lines().next().unwrap_or_default().to_owned();
    stream.write_all(b"data").await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(common::WAIT, stream.read_to_end(&mut response)).await;
    let (status, headers, body) = parse_response(&String::from_utf8_lossy(&response));
    let seen = headers.iter().find(|(k, _)| k == "x-seen-expect").map(|(_, v)| v.clone()).unwrap_or_default();
    (interim, status, seen, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_answered_by_the_proxy() {
    expect_100_continue("", "none").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_goes_to_the_upstream_with_proxy_100_continue() {
    expect_100_continue("\n          proxy_100_continue: true", "100-continue").await;
}

/// One request with `expect: 100-continue` through both proxies with `hcm` added to the
/// connection manager; `seen` is the `expect` the backend must get (`none`: none).
async fn expect_100_continue(hcm: &str, seen: &str) {
    // Echoes the body, and the request's `expect` (or `none`) in `x-seen-expect`.
    let backend = backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let seen = request.headers().get("expect").cloned().unwrap_or_else(|| "none".parse().unwrap());
        let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let mut response = Response::new(Full::new(body));
        response.headers_mut().insert("x-seen-expect", seen);
        response
    })
    .await;
    let pair = Pair::start(|port| bootstrap(port, backend.port, hcm)).await;
    let want = ("HTTP/1.1 100 Continue".to_owned(), 200, seen.to_owned(), "data".to_owned());
    for (name, port) in pair.ports() {
        assert_eq!(expect_continue(port).await, want, "{name}");
    }
}
