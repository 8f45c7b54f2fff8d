//! The HTTP inspector listener filter, side by side with Envoy 1.40, on a listener shaped
//! like Istio's PERMISSIVE `virtualInbound`: plaintext HTTP/1.1 and h2c connections take
//! the chain matched on `application_protocols`, anything else the TCP chain.

use crate::common;

use bytes::Bytes;
use common::WAIT;
use common::differential::{Pair, raw_http1};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP backend that greets every connection with `tcp backend\n`.
async fn greeter() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.write_all(b"tcp backend\n").await;
                let mut sink = [0u8; 1024];
                while stream.read(&mut sink).await.unwrap_or(0) > 0 {}
            });
        }
    });
    port
}

fn bootstrap(port: u16, backend: u16) -> String {
    format!(
        r#"
static_resources:
  listeners:
  - name: inbound
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    listener_filters:
    - name: envoy.filters.listener.tls_inspector
      typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector }}
    - name: envoy.filters.listener.http_inspector
      typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector }}
    listener_filters_timeout: 0s
    continue_on_listener_filters_timeout: true
    filter_chains:
    - name: plaintext-http
      filter_chain_match: {{ transport_protocol: raw_buffer, application_protocols: [http/1.1, h2c] }}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: inbound_http
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                direct_response: {{ status: 200, body: {{ inline_string: "http chain" }} }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
    - name: plaintext-tcp
      filter_chain_match: {{ transport_protocol: raw_buffer }}
      filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: inbound_tcp
          cluster: backend
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {backend} }} }} }}
"#
    )
}

async fn h2c_body(port: u16) -> String {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(format!("http://127.0.0.1:{port}/")).body(Empty::<Bytes>::new()).unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

async fn tcp_greeting(port: u16, first_bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(first_bytes).await.unwrap();
    let mut greeting = vec![0u8; 12];
    tokio::time::timeout(WAIT, stream.read_exact(&mut greeting)).await.unwrap().unwrap();
    String::from_utf8(greeting).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn plaintext_http_takes_the_http_chain_and_other_bytes_the_tcp_chain() {
    let backend = greeter().await;
    let pair = Pair::start(|port| bootstrap(port, backend)).await;
    for (name, port) in pair.ports() {
        let (status, _, body) = raw_http1(port, "GET / HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n").await;
        assert_eq!((status, body.as_str()), (200, "http chain"), "{name}: HTTP/1.1");
        assert_eq!(h2c_body(port).await, "http chain", "{name}: h2c");
        assert_eq!(tcp_greeting(port, b"SSH-2.0-client\r\n").await, "tcp backend\n", "{name}: not HTTP");
        assert_eq!(tcp_greeting(port, b"\x00\x01binary").await, "tcp backend\n", "{name}: binary");
    }
}
