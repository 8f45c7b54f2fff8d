//! A listener's `drain_type`, side by side with Envoy 1.40. While the server fails health
//! checks (`POST /healthcheck/fail`), Envoy drain-closes the connections of DEFAULT
//! listeners (an HTTP/1.1 response says `connection: close`) and leaves MODIFY_ONLY ones
//! alone: those drain only when the listener is changed or removed (or the whole server
//! drains, which drains every listener alike).

use crate::common;

use common::differential::{HttpListenerExtra, Pair, http_listener, parse_response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DIRECT: &str =
    "              routes:\n              - match: { prefix: / }\n                direct_response: { status: 200 }\n";

fn bootstrap(port: u16, drain_type: &str) -> String {
    let listener = format!("\n    drain_type: {drain_type}");
    let extra = HttpListenerExtra { listener: &listener, hcm: "" };
    format!("static_resources:\n  listeners:{}\n", http_listener("l", port, "l", extra, DIRECT))
}

async fn fail_health_checks(admin: std::net::SocketAddr) {
    let mut stream = tokio::net::TcpStream::connect(admin).await.unwrap();
    let request = "POST /healthcheck/fail HTTP/1.1\r\nhost: admin\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(common::WAIT, stream.read_to_string(&mut response)).await.unwrap().unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

/// A keep-alive `GET /`, read up to the end of the (bodiless) response's head: the
/// connection may stay open.
async fn keep_alive_get(port: u16) -> (u16, Vec<(String, String)>, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 1024];
    while !response.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(common::WAIT, stream.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "closed before the response: {}", String::from_utf8_lossy(&response));
        response.extend_from_slice(&buf[..n]);
    }
    parse_response(&String::from_utf8_lossy(&response))
}

/// The `connection` header of a keep-alive request's response, once health checks fail.
async fn connection_header(drain_type: &str) -> Vec<(&'static str, Option<String>)> {
    let pair = Pair::start(|port| bootstrap(port, drain_type)).await;
    let mut seen = Vec::new();
    for (name, port) in pair.ports() {
        let admin = match name {
            "envoy" => pair.envoy.as_ref().unwrap().admin,
            _ => pair.outrider.admin_address,
        };
        fail_health_checks(admin).await;
        let (status, headers, _) = keep_alive_get(port).await;
        assert_eq!(status, 200, "{name}");
        let connection = headers.into_iter().find(|(n, _)| n == "connection").map(|(_, v)| v);
        seen.push((name, connection));
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_health_checks_drain_default_listeners_only() {
    for (name, connection) in connection_header("DEFAULT").await {
        assert_eq!(connection.as_deref(), Some("close"), "{name}: DEFAULT");
    }
    for (name, connection) in connection_header("MODIFY_ONLY").await {
        assert_eq!(connection, None, "{name}: MODIFY_ONLY");
    }
}
