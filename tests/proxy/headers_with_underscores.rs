//! `common_http_protocol_options.headers_with_underscores_action` side by side with Envoy
//! 1.40: `ALLOW` passes `x_user` on, `DROP_HEADER` removes it (the request goes on),
//! `REJECT_REQUEST` answers HTTP/1 with 400 and closes the connection, and resets an
//! HTTP/2 stream; nothing reaches the backend.

use crate::common;

use bytes::Bytes;
use common::backends;
use common::differential::{HttpListenerExtra, Pair, ROUTE_TO_BACKEND, http_listener, raw_http1, static_cluster};
use http::Response;
use http_body_util::Full;
use hyper_util::rt::TokioIo;

fn bootstrap(port: u16, backend: u16, action: &str) -> String {
    let hcm = format!("\n          common_http_protocol_options: {{ headers_with_underscores_action: {action} }}");
    let extra = HttpListenerExtra { hcm: &hcm, ..Default::default() };
    let listener = http_listener("l", port, "p", extra, ROUTE_TO_BACKEND);
    let clusters = static_cluster("backend", backend);
    format!("\nstatic_resources:\n  listeners:{listener}\n  clusters:{clusters}\n")
}

/// (status, `connection` header, what the backend saw of `x_user` or `-` when it saw
/// no request) over HTTP/1.1. A request that `closes` asks for the connection to close
/// after it; else it is kept alive, and only the proxy's answer can end the exchange
/// before the wait runs out.
async fn http1(port: u16, closes: bool) -> (u16, Option<String>, String) {
    let close = if closes { "connection: close\r\n" } else { "" };
    let (status, headers, _) =
        raw_http1(port, &format!("GET / HTTP/1.1\r\nhost: h\r\nx_user: admin\r\n{close}\r\n")).await;
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    (status, header("connection"), header("x-seen").unwrap_or_else(|| "-".into()))
}

/// The status over HTTP/2, or `None` when the stream was reset.
async fn http2(port: u16) -> Option<u16> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = http::Request::get("http://h/").header("x_user", "admin").body(Full::new(Bytes::new())).unwrap();
    let response = tokio::time::timeout(common::WAIT, sender.send_request(request)).await.unwrap();
    response.ok().map(|r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_with_underscores_as_envoy() {
    // Echoes the request's `x_user` (or `none`) in `x-seen`.
    let backend = backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let seen = request.headers().get("x_user").cloned().unwrap_or_else(|| "none".parse().unwrap());
        let mut response = Response::new(Full::new(Bytes::new()));
        response.headers_mut().insert("x-seen", seen);
        response
    })
    .await;
    let cases = [
        ("ALLOW", (200, Some("close".to_owned()), "admin".to_owned()), Some(200)),
        ("DROP_HEADER", (200, Some("close".to_owned()), "none".to_owned()), Some(200)),
        ("REJECT_REQUEST", (400, Some("close".to_owned()), "-".to_owned()), None),
    ];
    for (action, over_http1, over_http2) in cases {
        let pair = Pair::start(|port| bootstrap(port, backend.port, action)).await;
        for (name, port) in pair.ports() {
            let closes = action != "REJECT_REQUEST";
            assert_eq!(http1(port, closes).await, over_http1, "{name} {action} HTTP/1.1");
            assert_eq!(http2(port).await, over_http2, "{name} {action} HTTP/2");
        }
    }
}
