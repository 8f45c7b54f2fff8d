//! The connection manager's `request_timeout` side by side with Envoy 1.40: a request
//! whose body has not all arrived when it passes gets 408 `request timeout` and its
//! HTTP/1.1 connection closes; a request read whole in time is not limited by it, however
//! long the backend then takes.

use std::time::Duration;

use crate::common;

use bytes::Bytes;
use common::backends;
use common::differential::{HttpListenerExtra, Pair, ROUTE_TO_BACKEND, http_listener, parse_response, static_cluster};
use http::Response;
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Long enough that the slow backend below answers well after it.
const REQUEST_TIMEOUT: &str = "0.3s";
/// How long the backend takes with a body of `slow`: over twice the request timeout.
const SLOW_BACKEND: Duration = Duration::from_millis(700);

fn bootstrap(port: u16, backend: u16) -> String {
    let hcm = format!("\n          request_timeout: {REQUEST_TIMEOUT}");
    let extra = HttpListenerExtra { hcm: &hcm, ..Default::default() };
    let listener = http_listener("l", port, "p", extra, ROUTE_TO_BACKEND);
    let clusters = static_cluster("backend", backend);
    format!("\nstatic_resources:\n  listeners:{listener}\n  clusters:{clusters}\n")
}

/// Sends `head` and `body`, then waits (without closing its side) for the answer and the
/// connection's end: (status, `connection` header, body).
async fn exchange(port: u16, head: &str, body: &str) -> (u16, Option<String>, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(common::WAIT, stream.read_to_end(&mut response)).await;
    let (status, headers, body) = parse_response(&String::from_utf8_lossy(&response));
    let connection = headers.iter().find(|(k, _)| k == "connection").map(|(_, v)| v.clone());
    (status, connection, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_as_envoy() {
    // Reads the whole body; a body of `slow` is answered only after SLOW_BACKEND.
    let backend = backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        if body.as_ref() == b"slow" {
            tokio::time::sleep(SLOW_BACKEND).await;
        }
        Response::new(Full::new(Bytes::from_static(b"done")))
    })
    .await;
    let pair = Pair::start(|port| bootstrap(port, backend.port)).await;
    for (name, port) in pair.ports() {
        // Ten bytes promised, four sent: the rest never comes.
        let head = "POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 10\r\n\r\n";
        let (status, connection, body) = exchange(port, head, "part").await;
        assert_eq!((status, connection.as_deref(), body.as_str()), (408, Some("close"), "request timeout"), "{name}");
        // Whole in time: the backend's slowness is not the request timeout's business.
        let head = "POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 4\r\nconnection: close\r\n\r\n";
        let (status, _, body) = exchange(port, head, "slow").await;
        assert_eq!((status, body.as_str()), (200, "done"), "{name}");
    }
    assert_eq!(pair.outrider_stat("http.p.downstream_rq_timeout").await, 1);
}
