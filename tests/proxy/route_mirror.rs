//! `request_mirror_policies` (Istio's `mirror` / `mirrorPercentage`) side by side with
//! Envoy 1.40: the same bootstrap starts both proxies, the same requests go through each,
//! and what the mirror cluster's backend received (method, path, host, headers, body)
//! must agree, while the client gets the main cluster's answer whatever the mirror does
//! (down, or never answering).

use crate::common;

use std::sync::Arc;

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::WAIT;
use common::backends::{self, Backend};
use common::differential::{Pair, free_port, raw_http1, static_cluster};
use http::Response;
use http_body_util::{BodyExt, Full};
use tokio::sync::{Mutex, mpsc};

/// What a mirror backend received.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Received {
    method: String,
    path: String,
    /// Sorted, without `x-request-id` (random per request).
    headers: Vec<(String, String)>,
    body: String,
}

/// A backend that records every request into a channel, then answers `answer`, or never
/// answers when `hold` is set.
async fn recording(answer: &'static str, hold: bool) -> (Backend, mpsc::UnboundedReceiver<Received>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let backend = backends::http(move |request: http::Request<hyper::body::Incoming>| {
        let tx = tx.clone();
        async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let mut headers: Vec<_> = parts
                .headers
                .iter()
                .filter(|(n, _)| *n != "x-request-id")
                .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect();
            headers.sort();
            let _ = tx.send(Received {
                method: parts.method.to_string(),
                path: parts.uri.path_and_query().map(|p| p.to_string()).unwrap_or_default(),
                headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
            if hold {
                std::future::pending::<()>().await;
            }
            Response::new(Full::new(Bytes::from_static(answer.as_bytes())))
        }
    })
    .await;
    (backend, rx)
}

/// Routes: each path prefix exercises one policy shape.
const ROUTES: &str = r#"
              - match: { prefix: "/all" }
                route: { cluster: main, request_mirror_policies: [{ cluster: mirror }] }
              - match: { prefix: "/header" }
                route: { cluster: main, request_mirror_policies: [{ cluster_header: x-mirror-to }] }
              - match: { prefix: "/nosuffix" }
                route: { cluster: main, request_mirror_policies: [{ cluster: mirror, disable_shadow_host_suffix_append: true }] }
              - match: { prefix: "/literal" }
                route: { cluster: main, request_mirror_policies: [{ cluster: mirror, host_rewrite_literal: shadow.internal }] }
              - match: { prefix: "/none" }
                route:
                  cluster: main
                  request_mirror_policies: [{ cluster: mirror, runtime_fraction: { default_value: { numerator: 0, denominator: HUNDRED } } }]
              - match: { prefix: "/every" }
                route:
                  cluster: main
                  request_mirror_policies: [{ cluster: mirror, runtime_fraction: { default_value: { numerator: 100, denominator: HUNDRED } } }]
              - match: { prefix: "/rewrite/" }
                route:
                  cluster: main
                  prefix_rewrite: "/v2/"
                  request_mirror_policies: [{ cluster: mirror }]
                request_headers_to_add: [{ header: { key: x-route, value: added } }]
              - match: { prefix: "/down" }
                route: { cluster: main, request_mirror_policies: [{ cluster: mirror_down }] }
              - match: { prefix: "/slow" }
                route: { cluster: main, request_mirror_policies: [{ cluster: mirror_slow }] }
              - match: { prefix: "/missing" }
                route: { cluster: main, request_mirror_policies: [{ cluster: no_such_cluster }] }
"#;

fn bootstrap(port: u16, main: u16, mirror: u16, down: u16, slow: u16) -> String {
    let clusters = [
        static_cluster("main", main),
        static_cluster("mirror", mirror),
        static_cluster("mirror_down", down),
        static_cluster("mirror_slow", slow),
    ]
    .concat();
    format!(
        r#"
static_resources:
  listeners:
  - name: http
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            validate_clusters: false
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
{ROUTES}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:{clusters}
"#
    )
}

struct Setup {
    pair: Pair,
    mirror: Arc<Mutex<mpsc::UnboundedReceiver<Received>>>,
    slow: Arc<Mutex<mpsc::UnboundedReceiver<Received>>>,
}

async fn setup() -> Setup {
    let (main, _main_seen) = recording("main", false).await;
    let (mirror, mirror_rx) = recording("mirror", false).await;
    let (slow, slow_rx) = recording("slow", true).await;
    // Nothing listens there: connections are refused.
    let down = free_port();
    let pair = Pair::start(|port| bootstrap(port, main.port, mirror.port, down, slow.port)).await;
    Setup { pair, mirror: Arc::new(Mutex::new(mirror_rx)), slow: Arc::new(Mutex::new(slow_rx)) }
}

/// (status, body) of one request through the proxy on `port`.
async fn send(port: u16, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let length =
        if body.is_empty() && method == "GET" { String::new() } else { format!("content-length: {}\r\n", body.len()) };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: example.com:8080\r\n{headers}{length}connection: close\r\n\r\n{body}"
    );
    let (status, _, body) = raw_http1(port, &request).await;
    (status, body)
}

/// The next request the mirror backend received (bounded wait).
async fn next(rx: &Mutex<mpsc::UnboundedReceiver<Received>>) -> Received {
    tokio::time::timeout(WAIT, rx.lock().await.recv()).await.expect("no shadow arrived").expect("backend gone")
}

/// The shadow one request produces through each proxy; they must agree.
async fn shadow_of(setup: &Setup, method: &str, path: &str, headers: &str, body: &str) -> Received {
    let mut seen: Vec<(&str, Received)> = Vec::new();
    for (name, port) in setup.pair.ports() {
        assert_eq!(send(port, method, path, headers, body).await, (200, "main".to_owned()), "{name} {path}");
        seen.push((name, next(&setup.mirror).await));
    }
    if let [(_, envoy), (_, outrider)] = seen.as_slice() {
        assert_eq!(envoy, outrider, "{path}: the mirror saw different requests (left: envoy, right: outrider)");
    } else {
        skipped(Tool::Envoy, &format!("comparison with Envoy for {path}"), "envoy not found");
    }
    seen.pop().unwrap().1
}

fn header<'a>(received: &'a Received, name: &str) -> Option<&'a str> {
    received.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread")]
async fn mirrors_match_envoy() {
    let setup = setup().await;

    let shadow = shadow_of(&setup, "GET", "/all?q=1", "", "").await;
    assert_eq!((shadow.method.as_str(), shadow.path.as_str()), ("GET", "/all?q=1"));
    assert_eq!(header(&shadow, "host"), Some("example.com-shadow:8080"));
    // Envoy's async client marks shadows internal and appends the node's address.
    assert_eq!(header(&shadow, "x-envoy-internal"), Some("true"));
    assert!(header(&shadow, "x-forwarded-for").is_some_and(|v| !v.is_empty()));

    // The body is mirrored too.
    let shadow = shadow_of(&setup, "POST", "/all/post", "content-type: text/plain\r\n", "hello mirror").await;
    assert_eq!((shadow.method.as_str(), shadow.body.as_str()), ("POST", "hello mirror"));

    let shadow = shadow_of(&setup, "GET", "/header", "x-mirror-to: mirror\r\n", "").await;
    assert_eq!(header(&shadow, "host"), Some("example.com-shadow:8080"));

    let shadow = shadow_of(&setup, "GET", "/nosuffix", "", "").await;
    assert_eq!(header(&shadow, "host"), Some("example.com:8080"));

    let shadow = shadow_of(&setup, "GET", "/literal", "", "").await;
    assert_eq!(header(&shadow, "host"), Some("shadow.internal"));

    // The shadow is the request as the route sends it: rewritten, with the route's headers.
    let shadow = shadow_of(&setup, "GET", "/rewrite/a", "", "").await;
    assert_eq!(shadow.path, "/v2/a");
    assert_eq!(header(&shadow, "x-route"), Some("added"));
    assert_eq!(header(&shadow, "x-envoy-original-path"), Some("/rewrite/a"));

    // 0%: nothing mirrored. The next shadow to arrive is the 100% request sent after it.
    for (name, port) in setup.pair.ports() {
        assert_eq!(send(port, "GET", "/none", "", "").await, (200, "main".to_owned()), "{name}");
        assert_eq!(send(port, "GET", "/every", "", "").await, (200, "main".to_owned()), "{name}");
        assert_eq!(next(&setup.mirror).await.path, "/every", "{name}: the 0% route was mirrored");
    }

    // A missing cluster header, a cluster that does not exist, a mirror that is down:
    // the client gets the main answer.
    for (name, port) in setup.pair.ports() {
        assert_eq!(send(port, "GET", "/header", "", "").await, (200, "main".to_owned()), "{name}");
        assert_eq!(send(port, "GET", "/missing", "", "").await, (200, "main".to_owned()), "{name}");
        assert_eq!(send(port, "GET", "/down", "", "").await, (200, "main".to_owned()), "{name}");
    }

    // A mirror that never answers: the main answer comes while the shadow is still held.
    for (name, port) in setup.pair.ports() {
        assert_eq!(send(port, "GET", "/slow", "", "").await, (200, "main".to_owned()), "{name}");
        assert_eq!(next(&setup.slow).await.path, "/slow", "{name}");
    }

    // A deliberate difference: a body too large to keep (over 64 KiB) streams to the main
    // cluster and is not mirrored; Envoy 1.40 streams it to the shadow as well. Outrider
    // counts the shadow it gave up.
    let large = "x".repeat(100 * 1024);
    if let Some(envoy) = &setup.pair.envoy {
        assert_eq!(send(setup.pair.envoy_port, "POST", "/all/large", "", &large).await, (200, "main".to_owned()));
        assert_eq!(next(&setup.mirror).await.body.len(), large.len());
        assert_eq!(envoy.stat("cluster.main.retry_or_shadow_abandoned").await, 0);
    }
    assert_eq!(send(setup.pair.outrider_port, "POST", "/all/large", "", &large).await, (200, "main".to_owned()));
    assert_eq!(send(setup.pair.outrider_port, "GET", "/every", "", "").await, (200, "main".to_owned()));
    assert_eq!(next(&setup.mirror).await.path, "/every", "the large body was mirrored");
    assert_eq!(setup.pair.outrider_stat("cluster.main.retry_or_shadow_abandoned").await, 1);

    // The mirror cluster's stats come from the pool, as for any request (counted before
    // the backend saw each shadow).
    let mirrored = 7;
    assert_eq!(setup.pair.outrider_stat("cluster.mirror.upstream_rq_total").await, mirrored + 1);
    if let Some(envoy) = &setup.pair.envoy {
        assert_eq!(envoy.stat("cluster.mirror.upstream_rq_total").await, mirrored + 1);
    }
    assert!(setup.mirror.lock().await.try_recv().is_err(), "no other shadow arrived");
}
