//! The TCP proxy's `tunneling_config` (Istio's HBONE `connect_originate`), compared with
//! Envoy 1.40: a client's bytes go to the proxy's TCP listener, which opens a `CONNECT`
//! to a real HTTP server (hyper, HTTP/2 and HTTP/1.1) with the configured hostname
//! (`%DOWNSTREAM_LOCAL_ADDRESS%`, the address the client connected to) and headers; the
//! server answers 200 and echoes what comes through the tunnel after a line naming what it
//! was asked. A server that refuses the `CONNECT` closes the client's connection.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common;
use common::differential::{Pair, http2_cluster, on_loopback, static_cluster, tcp_proxy_listener};
use common::tunnel::echo_round;

/// An HTTP/1.1 and HTTP/2 server that takes `CONNECT`s: 200, then `<method> <authority>
/// <baggage>\n` and an echo of the tunnel's bytes; 403 to any other method or to an
/// authority on port 1.
async fn connect_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|mut request: Request<hyper::body::Incoming>| async move {
                    let authority = request.uri().authority().map(|a| a.to_string()).unwrap_or_default();
                    let refused = request.method() != http::Method::CONNECT || authority.ends_with(":1");
                    let mut response = Response::new(Empty::<Bytes>::new());
                    if refused {
                        *response.status_mut() = StatusCode::FORBIDDEN;
                        return Ok::<_, Infallible>(response);
                    }
                    let baggage = request.headers().get("baggage").and_then(|v| v.to_str().ok()).unwrap_or("-");
                    let line = format!("{} {authority} {baggage}\n", request.method());
                    let upgrade = hyper::upgrade::on(&mut request);
                    tokio::spawn(async move {
                        let Ok(upgraded) = upgrade.await else { return };
                        let mut tunnel = TokioIo::new(upgraded);
                        let _ = tunnel.write_all(line.as_bytes()).await;
                        let mut buffer = [0u8; 1024];
                        while let Ok(n) = tunnel.read(&mut buffer).await {
                            if n == 0 || tunnel.write_all(&buffer[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = tunnel.shutdown().await;
                    });
                    Ok(response)
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).await;
            });
        }
    });
    port
}

fn bootstrap(port: u16, server: u16, hostname: &str, http2: bool) -> String {
    let tunneling = format!(
        r#"
          tunneling_config:
            hostname: "{hostname}"
            headers_to_add:
            - header: {{ key: baggage, value: "k8s.namespace.name=default" }}"#
    );
    let cluster = if http2 { http2_cluster("connect", server) } else { static_cluster("connect", server) };
    format!(
        "static_resources:\n  listeners:{}\n  clusters:{cluster}\n",
        tcp_proxy_listener("tunnel", &on_loopback(port), "connect", &tunneling)
    )
}

/// Sends `hello` through the proxy on `port` and reads until the tunnel is closed.
async fn through(port: u16) -> String {
    let mut client = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    echo_round(&mut client, b"hello").await
}

async fn tunnels_the_bytes(http2: bool) {
    let server = connect_server().await;
    let pair = Pair::start(|port| bootstrap(port, server, "%DOWNSTREAM_LOCAL_ADDRESS%", http2)).await;
    for (who, port) in pair.ports() {
        let seen = through(port).await;
        assert_eq!(seen, format!("CONNECT 127.0.0.1:{port} k8s.namespace.name=default\nhello"), "{who}");
    }
    pair.outrider.stop();
}

#[tokio::test]
async fn tcp_is_tunnelled_in_an_http2_connect() {
    tunnels_the_bytes(true).await;
}

#[tokio::test]
async fn tcp_is_tunnelled_in_an_http1_connect() {
    tunnels_the_bytes(false).await;
}

#[tokio::test]
async fn a_refused_connect_closes_the_client_connection() {
    let server = connect_server().await;
    let pair = Pair::start(|port| bootstrap(port, server, "refused.example:1", true)).await;
    for (who, port) in pair.ports() {
        assert_eq!(through(port).await, "", "{who}: nothing comes back, the connection closes");
    }
    pair.outrider.stop();
}
