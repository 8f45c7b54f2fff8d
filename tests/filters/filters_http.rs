//! The HTTP filter chain and path normalization, side by side with Envoy 1.40: the same
//! bootstrap starts both proxies, the same requests go through each, and what comes back
//! (status, `location`, the path the backend saw) must agree.

use crate::common;

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::backends::{self, Backend};
use common::differential::{Pair, raw_http1};
use http::Response;
use http_body_util::Full;

/// A backend that answers with the path (and query) it received.
async fn echo_path() -> Backend {
    backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let path = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
        Response::new(Full::new(Bytes::from(path)))
    })
    .await
}

fn bootstrap(port: u16, backend: u16, hcm_extra: &str, filters: &str) -> String {
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
          {hcm_extra}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route: {{ cluster: backend }}
          http_filters:
          {filters}
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
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

/// (status, location, body) of `GET path` through the proxy on `port`.
async fn get(port: u16, path: &str) -> (u16, String, String) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n");
    let (status, headers, body) = raw_http1(port, &request).await;
    let location = headers.iter().find(|(n, _)| n == "location").map(|(_, v)| v.clone()).unwrap_or_default();
    (status, location, body)
}

/// Runs `paths` through both proxies and asserts every answer agrees.
async fn compare(pair: &Pair, paths: &[&str]) {
    let Some(envoy) = &pair.envoy else {
        skipped(Tool::Envoy, "comparison with Envoy (Outrider's answers checked only for sanity)", "envoy not found");
        for path in paths {
            let (status, _, _) = get(pair.outrider_port, path).await;
            assert!(status > 0, "{path}: no answer");
        }
        return;
    };
    let mut disagreements = Vec::new();
    for path in paths {
        let want = get(pair.envoy_port, path).await;
        let got = get(pair.outrider_port, path).await;
        if want != got {
            disagreements.push(format!("{path}: envoy {want:?}, outrider {got:?}"));
        }
    }
    assert!(disagreements.is_empty(), "disagreements:\n{}\nenvoy log:\n{}", disagreements.join("\n"), envoy.log_tail());
}

const PATHS: &[&str] = &[
    "/public/../admin",
    "/./admin",
    "//admin",
    "/a//b///c",
    "/a/b/..",
    "/a/./b/.",
    "/a/%2e%2e/b",
    "/a/%2E/b",
    "/%61dmin?x=/../y",
    "/a%2Fb",
    "/a%2Fb/%C3%A9",
    "/a%2fb/../c",
    "/a%5Cb",
    "/a\\..\\b",
    "/a%20b",
    "/..",
    "/plain?q=1",
    "/a/%7e%41%2d",
    "/a/%zz",
    "/a/%2",
    "/a/b%2e%2E/c",
    "/a/.../b",
    "/a/..%2f../b",
    "/a;b/../c",
];

#[tokio::test(flavor = "multi_thread")]
async fn path_normalization_matches_envoy() {
    let backend = echo_path().await;
    for hcm in [
        "normalize_path: true",
        "normalize_path: true\n          merge_slashes: true",
        "merge_slashes: true\n          path_with_escaped_slashes_action: REJECT_REQUEST",
        "normalize_path: true\n          path_with_escaped_slashes_action: UNESCAPE_AND_REDIRECT",
        "path_with_escaped_slashes_action: UNESCAPE_AND_FORWARD",
        "normalize_path: false",
    ] {
        let pair = Pair::start(|port| bootstrap(port, backend.port, hcm, "")).await;
        compare(&pair, PATHS).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn health_check_filter_answers_locally_like_envoy() {
    let backend = echo_path().await;
    let filter = r#"- name: envoy.filters.http.health_check
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck
              pass_through_mode: false
              headers: [{ name: ":path", string_match: { exact: "/healthz" } }]"#;
    let pair = Pair::start(|port| bootstrap(port, backend.port, "", filter)).await;
    let before = backend.seen.requests();
    compare(&pair, &["/healthz", "/healthz?x=1", "/other"]).await;
    let forwarded = backend.seen.requests() - before;
    // Only `/other` reaches the backend (once per proxy); `/healthz?x=1` is not an exact
    // path match, so it goes through too.
    let proxies = pair.ports().len();
    assert_eq!(forwarded, 2 * proxies, "health checks must be answered by the proxy");
    let (status, _, body) = get(pair.outrider_port, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, ""));
}
