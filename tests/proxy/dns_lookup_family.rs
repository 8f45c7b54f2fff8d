//! `Cluster.dns_lookup_family` of a STRICT_DNS cluster, compared with Envoy 1.40: the
//! backend listens on 127.0.0.1 only and the cluster names it `localhost`, so it is reached
//! with `V4_ONLY` and `V4_PREFERRED` and never with `V6_ONLY`. (`AUTO`, IPv6 first, is
//! left to the unit test: Envoy's resolver answers `::1` for `localhost` whatever
//! /etc/hosts says, the system's resolver that Outrider asks may not.)

use crate::common;

use common::differential::{HttpListenerExtra, Pair, ROUTE_TO_BACKEND, http_listener, raw_http1};
use common::wait;

/// An HTTP/1.1 backend on 127.0.0.1 that answers every request 200 `ok`.
async fn backend() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(|_request: http::Request<hyper::body::Incoming>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from(
                    "ok",
                ))))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    port
}

fn bootstrap(port: u16, backend: u16, family: &str) -> String {
    format!(
        r#"static_resources:
  listeners:{}
  clusters:
  - name: backend
    type: STRICT_DNS
    dns_lookup_family: {family}
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: localhost, port_value: {backend} }} }} }}
"#,
        http_listener("http", port, "http", HttpListenerExtra::default(), ROUTE_TO_BACKEND)
    )
}

#[tokio::test]
async fn a_dns_clusters_lookup_family_decides_which_addresses_it_connects_to() {
    let backend = backend().await;
    for (family, expected) in [("V4_ONLY", 200), ("V4_PREFERRED", 200), ("V6_ONLY", 503)] {
        let pair = Pair::start(|port| bootstrap(port, backend, family)).await;
        if let Some(envoy) = &pair.envoy {
            // Envoy resolves in the background: wait for its first resolution.
            wait::until_true("Envoy resolved the cluster", async || {
                envoy.stat("cluster.backend.update_success").await >= 1
            })
            .await;
        }
        for (who, port) in pair.ports() {
            let request = "GET / HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n";
            assert_eq!(raw_http1(port, request).await.0, expected, "{who} {family}");
        }
        pair.outrider.stop();
    }
}
