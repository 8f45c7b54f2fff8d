//! Internal listeners (`internal_listener`) reached through `envoy_internal_address`
//! endpoints, compared with Envoy 1.40: a request to the outer listener goes to a cluster
//! whose endpoint is an internal listener, which serves it with its own connection manager
//! (its route adds a header only it knows) and sends it on to a real backend; the same for
//! a TCP proxy into a TCP proxy. An endpoint naming no internal listener is a connect
//! failure on both.

use crate::common;

use common::backends;
use common::differential::{
    HttpListenerExtra, INTERNAL, INTERNAL_LISTENER_EXTENSION, Pair, ROUTER, http_listener, internal_cluster,
    on_loopback, raw_http1, static_cluster, tcp_proxy_listener,
};

/// The internal listener `inner`: a connection manager whose route marks the response
/// and sends the request to `backend`.
const INNER_HTTP: &str = r#"
  - name: inner
    internal_listener: {}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: inner
          http_filters: [{ name: envoy.filters.http.router, typed_config: { "@type": ROUTER } }]
          route_config:
            virtual_hosts:
            - name: inner
              domains: ["*"]
              response_headers_to_add:
              - header: { key: x-served-by, value: inner }
              routes:
              - match: { prefix: / }
                route: { cluster: backend }"#;

fn http_bootstrap(port: u16, backend: u16) -> String {
    let route = "              routes:\n              - match: { prefix: /missing }\n                route: { cluster: nowhere }\n              - match: { prefix: / }\n                route: { cluster: to_inner }\n";
    format!(
        "{INTERNAL_LISTENER_EXTENSION}static_resources:\n  listeners:{}{}\n  clusters:{}{}{}\n",
        http_listener("outer", port, "outer", HttpListenerExtra::default(), route),
        INNER_HTTP.replace("ROUTER", ROUTER),
        internal_cluster("to_inner", "inner"),
        internal_cluster("nowhere", "no_such_listener"),
        static_cluster("backend", backend),
    )
}

#[tokio::test]
async fn http_through_an_internal_listener_reaches_the_backend() {
    let backend = backends::http(|request| async move {
        let body = format!("backend saw {}", request.uri().path());
        http::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)))
    })
    .await;
    let pair = Pair::start(|port| http_bootstrap(port, backend.port)).await;
    for (who, port) in pair.ports() {
        let (status, headers, body) = raw_http1(port, "GET /a HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n").await;
        assert_eq!((status, body.as_str()), (200, "backend saw /a"), "{who}");
        let served_by = headers.iter().find(|(name, _)| name == "x-served-by").map(|(_, v)| v.as_str());
        assert_eq!(served_by, Some("inner"), "{who}: the internal listener's route ran: {headers:?}");
        // An endpoint naming no internal listener: the connection fails, as to a closed port.
        let (status, _, _) = raw_http1(port, "GET /missing HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n").await;
        assert_eq!(status, 503, "{who}");
    }
    assert_eq!(pair.outrider_stat("http.inner.downstream_rq_total").await, 1, "served inside: /a, not /missing");
    pair.outrider.stop();
}

#[tokio::test]
async fn tcp_through_an_internal_listener_reaches_the_backend() {
    let backend = backends::http(|request| async move {
        let body = format!("backend saw {}", request.uri().path());
        http::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)))
    })
    .await;
    let bootstrap = |port: u16| {
        format!(
            "{INTERNAL_LISTENER_EXTENSION}static_resources:\n  listeners:{}{}\n  clusters:{}{}\n",
            tcp_proxy_listener("outer", &on_loopback(port), "to_inner", ""),
            tcp_proxy_listener("inner", INTERNAL, "backend", ""),
            internal_cluster("to_inner", "inner"),
            static_cluster("backend", backend.port),
        )
    };
    let pair = Pair::start(bootstrap).await;
    for (who, port) in pair.ports() {
        let (status, _, body) = raw_http1(port, "GET /b HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n").await;
        assert_eq!((status, body.as_str()), (200, "backend saw /b"), "{who}");
    }
    assert_eq!(pair.outrider_stat("cluster.to_inner.upstream_cx_total").await, 1);
    pair.outrider.stop();
}
