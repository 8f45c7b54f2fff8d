//! `Endpoint.additional_addresses`, compared with Envoy 1.40: an endpoint whose own address
//! refuses connections is still reached through an additional address (Envoy's happy
//! eyeballs tries them all; the first to accept wins).

use crate::common;

use common::differential::{HttpListenerExtra, Pair, ROUTE_TO_BACKEND, free_port, http_listener, raw_http1};

/// An HTTP/1.1 backend on 127.0.0.1 that answers every request 200 `ok`.
async fn backend() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(|_request: http::Request<hyper::body::Incoming>| async {
                let body = http_body_util::Full::new(bytes::Bytes::from("ok"));
                Ok::<_, std::convert::Infallible>(http::Response::new(body))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    port
}

fn bootstrap(port: u16, refusing: u16, accepting: u16) -> String {
    format!(
        r#"static_resources:
  listeners:{}
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint:
            address: {{ socket_address: {{ address: 127.0.0.1, port_value: {refusing} }} }}
            additional_addresses:
            - address: {{ socket_address: {{ address: 127.0.0.1, port_value: {accepting} }} }}
"#,
        http_listener("http", port, "http", HttpListenerExtra::default(), ROUTE_TO_BACKEND)
    )
}

#[tokio::test]
async fn an_endpoint_is_reached_through_an_additional_address_when_its_own_refuses() {
    let accepting = backend().await;
    let refusing = free_port(); // bound then released: connections are refused
    let pair = Pair::start(|port| bootstrap(port, refusing, accepting)).await;
    for (who, port) in pair.ports() {
        let request = "GET / HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n";
        let (status, _, body) = raw_http1(port, request).await;
        assert_eq!((status, body.as_str()), (200, "ok"), "{who}");
    }
    pair.outrider.stop();
}
