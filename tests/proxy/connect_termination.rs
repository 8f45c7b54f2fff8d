//! `CONNECT` termination (Istio's HBONE shape on 15008), compared with Envoy 1.40: an
//! HTTP/2 `CONNECT` to a route whose `CONNECT` entry has a `connect_config` gets 200, and
//! its stream's bytes reach a TCP echo server through an internal listener; then the whole
//! HBONE path, a TCP proxy tunnelling into the terminating listener of the same proxy.

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::common;
use common::WAIT;
use common::differential::{
    INTERNAL, INTERNAL_LISTENER_EXTENSION, Pair, free_port, http2_cluster, internal_cluster, on_loopback, raw_http1,
    static_cluster, tcp_proxy_listener,
};
use common::tunnel::{connect_terminate_listener, echo_round, echo_server};

/// The terminating listener on `port`: a connection manager allowing `CONNECT`, whose one
/// route sends it to `main_internal` (an internal listener proxying TCP to `echo`).
fn terminating_listener(name: &str, port: u16) -> String {
    connect_terminate_listener(name, port, "")
}

/// The internal listener the terminated `CONNECT`s go to, proxying TCP to `echo`, and the
/// clusters of both (`extra`: more clusters).
fn inner_half(echo: u16, extra: &str) -> String {
    format!(
        "{}\n  clusters:{}{}{extra}\n",
        tcp_proxy_listener("main_internal", INTERNAL, "echo", ""),
        internal_cluster("main_internal", "main_internal"),
        static_cluster("echo", echo)
    )
}

/// An HTTP/2 `CONNECT` to `port`: its status, and what came back through the tunnel for
/// `hello` (empty when refused).
async fn connect(port: u16) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    let driver = tokio::spawn(connection);
    let request = http::Request::connect("10.0.0.5:8080").body(Empty::<Bytes>::new()).unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    if status != 200 {
        return (status, String::new());
    }
    let mut tunnel = TokioIo::new(hyper::upgrade::on(response).await.unwrap());
    let echoed = echo_round(&mut tunnel, b"hello").await;
    // The connection closes with its last sender, before the proxy stops.
    drop((tunnel, sender));
    let _ = tokio::time::timeout(WAIT, driver).await;
    (status, echoed)
}

#[tokio::test]
async fn an_http2_connect_is_terminated_into_an_internal_listener() {
    let echo = echo_server("echo:").await;
    let bootstrap = |port: u16| {
        format!(
            "{INTERNAL_LISTENER_EXTENSION}static_resources:\n  listeners:{}{}",
            terminating_listener("connect_terminate", port),
            inner_half(echo, "")
        )
    };
    let pair = Pair::start(bootstrap).await;
    for (who, port) in pair.ports() {
        assert_eq!(connect(port).await, (200, "echo:hello".to_owned()), "{who}");
    }
    // Outrider only (Envoy terminates it too): an HTTP/1.1 CONNECT gets 403 and nothing
    // sent after it reaches the echo server.
    let request = "CONNECT 10.0.0.5:8080 HTTP/1.1\r\nhost: 10.0.0.5:8080\r\n\r\nhello";
    let (status, _, body) = raw_http1(pair.outrider_port, request).await;
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains("echo:"), "{body}");
    pair.outrider.stop();
}

#[tokio::test]
async fn tcp_tunnelled_into_a_terminating_listener_reaches_the_application() {
    // Outbound and inbound HBONE in one proxy: TCP on `port` is tunnelled in a CONNECT to
    // the terminating listener, which hands the stream to `main_internal`, which proxies
    // it to the echo server.
    let echo = echo_server("echo:").await;
    let bootstrap = |port: u16| {
        let terminate = free_port();
        let tunnel = r#"
          tunneling_config: { hostname: "10.0.0.5:8080" }"#;
        format!(
            "{INTERNAL_LISTENER_EXTENSION}static_resources:\n  listeners:{}{}{}",
            tcp_proxy_listener("connect_originate", &on_loopback(port), "hbone", tunnel),
            terminating_listener("connect_terminate", terminate),
            inner_half(echo, &http2_cluster("hbone", terminate))
        )
    };
    let pair = Pair::start(bootstrap).await;
    for (who, port) in pair.ports() {
        let mut client = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        assert_eq!(echo_round(&mut client, b"hello").await, "echo:hello", "{who}");
    }
    pair.outrider.stop();
}
