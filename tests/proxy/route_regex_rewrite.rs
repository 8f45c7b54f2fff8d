//! `regex_rewrite` (Istio's `uriRegexRewrite`) side by side with Envoy 1.40: the same
//! bootstrap starts both proxies, the same requests go through each, and the path and
//! `x-envoy-original-path` the backend saw must agree.

use crate::common;

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::backends::{self, Backend};
use common::differential::{Pair, raw_http1, static_cluster};
use http::Response;
use http_body_util::Full;

/// A backend that answers with the path it received and its `x-envoy-original-path`.
async fn echo_path() -> Backend {
    backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let path = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
        let original = request
            .headers()
            .get("x-envoy-original-path")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_else(|| "-".into());
        Response::new(Full::new(Bytes::from(format!("{path} original={original}"))))
    })
    .await
}

/// Routes written in YAML flow style; substitutions use RE2's `\1` (YAML single quotes
/// keep the backslash).
const ROUTES: &str = r#"
              - match: { prefix: "/service/" }
                route:
                  cluster: backend
                  regex_rewrite: { pattern: { regex: '^/service/([^/]+)(/.*)$' }, substitution: '\2/instance/\1' }
              - match: { prefix: "/all/" }
                route:
                  cluster: backend
                  regex_rewrite: { pattern: { regex: 'one' }, substitution: 'two' }
              - match: { prefix: "/case/" }
                route:
                  cluster: backend
                  regex_rewrite: { pattern: { regex: '(?i)/xxx/' }, substitution: '/yyy/' }
              - match: { prefix: "/dollar/" }
                route:
                  cluster: backend
                  regex_rewrite: { pattern: { regex: '/dollar/(\w+)' }, substitution: '/$1/\\/\0/\1' }
              - match: { prefix: "/empty/" }
                route:
                  cluster: backend
                  regex_rewrite: { pattern: { regex: '(^/)?z*' }, substitution: '\1-' }
              - match: { prefix: "/noslash/" }
                route:
                  cluster: backend
                  regex_rewrite: { pattern: { regex: '^/noslash/' }, substitution: '' }
              - match: { prefix: "/" }
                route: { cluster: backend }
"#;

fn bootstrap(port: u16, backend: u16) -> String {
    let clusters = static_cluster("backend", backend);
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

/// (status, body) of `GET path` through the proxy on `port`.
async fn get(port: u16, path: &str) -> (u16, String) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n");
    let (status, _, body) = raw_http1(port, &request).await;
    (status, body)
}

/// (request path, status, what the backend saw).
const CASES: &[(&str, u16, &str)] = &[
    ("/service/foo/v1/api", 200, "/v1/api/instance/foo original=/service/foo/v1/api"),
    // The query is kept and never rewritten.
    ("/service/foo/v1/api?one=1", 200, "/v1/api/instance/foo?one=1 original=/service/foo/v1/api?one=1"),
    // Every match is replaced, not only the first; the query keeps its `one`.
    ("/all/one/x/one?one", 200, "/all/two/x/two?one original=/all/one/x/one?one"),
    ("/case/XxX/b", 200, "/case/yyy/b original=/case/XxX/b"),
    // `$1` is literal in RE2's syntax, `\\` a backslash, `\0` the whole match.
    ("/dollar/abc", 200, "/$1/\\//dollar/abc/abc original=/dollar/abc"),
    // Empty matches: one between each character, none right after a match.
    ("/empty/a", 200, "/-e-m-p-t-y-/-a- original=/empty/a"),
    // No match: the path is unchanged, but the original path is still recorded.
    ("/service/", 200, "/service/ original=/service/"),
    // A route without a rewrite sets no original path.
    ("/other?x", 200, "/other?x original=-"),
];

#[tokio::test(flavor = "multi_thread")]
async fn regex_rewrite_matches_envoy() {
    let backend = echo_path().await;
    let pair = Pair::start(|port| bootstrap(port, backend.port)).await;
    if pair.envoy.is_none() {
        skipped(
            Tool::Envoy,
            "comparison with Envoy (Outrider checked against the expected paths only)",
            "envoy not found",
        );
    }
    let mut disagreements = Vec::new();
    for (path, status, expected) in CASES {
        let got = get(pair.outrider_port, path).await;
        if got != (*status, (*expected).to_owned()) {
            disagreements.push(format!("{path}: expected {expected:?}, outrider {got:?}"));
        }
        if pair.envoy.is_some() {
            let want = get(pair.envoy_port, path).await;
            if want != got {
                disagreements.push(format!("{path}: envoy {want:?}, outrider {got:?}"));
            }
        }
    }
    // A deliberate difference: a rewrite that eats the leading `/` leaves no origin-form
    // path. Envoy sends `abc` as the request target anyway (hyper reads it as an
    // authority, so the backend sees no path); Outrider answers 400 rather than send it
    // or fall back to the unrewritten path.
    assert_eq!(get(pair.outrider_port, "/noslash/abc").await, (400, String::new()));
    assert_eq!(backend.seen.requests(), CASES.len() * pair.ports().len(), "the 400 reached no backend");
    let log = pair.envoy.as_ref().map(|e| e.log_tail()).unwrap_or_default();
    assert!(disagreements.is_empty(), "disagreements:\n{}\nenvoy log:\n{log}", disagreements.join("\n"));
}
