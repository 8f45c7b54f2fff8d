//! The router's `suppress_envoy_headers` side by side with Envoy 1.40: with it, the router
//! adds none of its `x-envoy-*` headers (`x-envoy-expected-rq-timeout-ms` and
//! `x-envoy-original-path` upstream, `x-envoy-upstream-service-time` and a circuit
//! breaker's `x-envoy-overloaded` downstream); `x-envoy-attempt-count`, which the virtual
//! host asks for, stays. Without it, all of them are there.

use crate::common;

use bytes::Bytes;
use common::backends;
use common::differential::{Pair, ROUTER, raw_http1, static_cluster};
use http::Response;
use http_body_util::Full;

fn bootstrap(port: u16, echo: u16, suppress: bool) -> String {
    let clusters = static_cluster("echo", echo);
    format!(
        r#"
static_resources:
  listeners:
  - name: l
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: p
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": {ROUTER}, suppress_envoy_headers: {suppress} }}
          route_config:
            virtual_hosts:
            - name: v
              domains: ["*"]
              include_request_attempt_count: true
              routes:
              - match: {{ prefix: /full }}
                route: {{ cluster: full }}
              - match: {{ prefix: /old }}
                route: {{ cluster: echo, prefix_rewrite: /new, timeout: 7s }}
  clusters:{clusters}
  - name: full
    connect_timeout: 1s
    type: STATIC
    circuit_breakers: {{ thresholds: [{{ max_requests: 0 }}] }}
    load_assignment:
      cluster_name: full
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {echo} }} }} }} }}] }}]
"#
    )
}

/// The `x-envoy-*` header names on the response, the backend's echo of the request's
/// among them prefixed `seen-`, sorted.
async fn envoy_headers(port: u16, path: &str) -> (u16, Vec<String>) {
    let (status, headers, _) =
        raw_http1(port, &format!("GET {path} HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n")).await;
    let mut names: Vec<String> = headers
        .into_iter()
        .filter_map(|(name, value)| match name.as_str() {
            "x-seen" => Some(value.split(',').filter(|v| !v.is_empty()).map(|v| format!("seen-{v}")).collect()),
            n if n.starts_with("x-envoy-") => Some(vec![name]),
            _ => None,
        })
        .flatten()
        .collect();
    names.sort();
    (status, names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_adds_no_envoy_headers_when_suppressed() {
    // Answers with the names of the request's `x-envoy-*` headers in `x-seen`.
    let echo = backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let mut seen: Vec<&str> =
            request.headers().keys().map(|k| k.as_str()).filter(|k| k.starts_with("x-envoy-")).collect();
        seen.sort_unstable();
        let mut response = Response::new(Full::new(Bytes::new()));
        response.headers_mut().insert("x-seen", seen.join(",").parse().unwrap());
        response
    })
    .await;
    let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    for suppress in [false, true] {
        let pair = Pair::start(|port| bootstrap(port, echo.port, suppress)).await;
        let (forwarded, overflowed) = if suppress {
            (names(&["seen-x-envoy-attempt-count"]), names(&[]))
        } else {
            let forwarded = names(&[
                "seen-x-envoy-attempt-count",
                "seen-x-envoy-expected-rq-timeout-ms",
                "seen-x-envoy-original-path",
                "x-envoy-upstream-service-time",
            ]);
            (forwarded, names(&["x-envoy-overloaded"]))
        };
        for (name, port) in pair.ports() {
            assert_eq!(envoy_headers(port, "/old").await, (200, forwarded.clone()), "{name} suppress={suppress}");
            assert_eq!(envoy_headers(port, "/full").await, (503, overflowed.clone()), "{name} suppress={suppress}");
        }
    }
}
