//! Local rate limits, fault injection and CORS, side by side with Envoy 1.40: the same
//! bootstrap starts both proxies, the same requests go through each (in the same order,
//! since buckets and counters are stateful), and the statuses, bodies and headers that
//! matter must agree; the backend counts what reached it, so answers the proxy gave
//! itself are shown never to have gone upstream.

use crate::common;

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::backends::{self, Backend};
use common::differential::{Pair, raw_http1};
use http::Response;
use http_body_util::Full;

/// A backend answering 200 with the value of the request's `x-limited` header (or `ok`).
async fn backend() -> Backend {
    backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let limited = request.headers().get("x-limited").and_then(|v| v.to_str().ok()).unwrap_or("ok").to_owned();
        Response::new(Full::new(Bytes::from(limited)))
    })
    .await
}

/// A bootstrap with one HTTP listener: `network` filters before the connection manager,
/// `filters` before the router, and `routes` / `vhost_extra` in the one virtual host
/// (plus `other_vhosts`).
struct Setup<'a> {
    network: &'a str,
    filters: &'a str,
    vhost_extra: &'a str,
    routes: &'a str,
    other_vhosts: &'a str,
}

const DEFAULT_ROUTES: &str = r#"- match: { prefix: "/" }
                route: { cluster: backend }"#;

impl Default for Setup<'_> {
    fn default() -> Self {
        Self { network: "", filters: "", vhost_extra: "", routes: DEFAULT_ROUTES, other_vhosts: "" }
    }
}

fn bootstrap(port: u16, backend: u16, setup: &Setup<'_>) -> String {
    let Setup { network, filters, vhost_extra, routes, other_vhosts } = setup;
    format!(
        r#"
static_resources:
  listeners:
  - name: http
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      {network}
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              {vhost_extra}
              routes:
              {routes}
            {other_vhosts}
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

/// One request of a corpus.
struct Request<'a> {
    method: &'a str,
    path: &'a str,
    host: &'a str,
    headers: &'a [(&'a str, &'a str)],
}

fn get<'a>(path: &'a str, headers: &'a [(&'a str, &'a str)]) -> Request<'a> {
    Request { method: "GET", path, host: "example.com", headers }
}

/// What is compared of an answer: status, body, and the headers that matter (sorted).
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

const COMPARED_HEADERS: &[&str] =
    &["x-local", "x-envoy-ratelimited", "grpc-status", "grpc-message", "content-type", "content-length"];

async fn send(port: u16, request: &Request<'_>) -> Answer {
    let mut text =
        format!("{} {} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n", request.method, request.path, request.host);
    for (name, value) in request.headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("content-length: 0\r\n\r\n");
    let (status, headers, body) = raw_http1(port, &text).await;
    let mut headers: Vec<_> = headers
        .into_iter()
        .filter(|(n, _)| n.starts_with("access-control-") || COMPARED_HEADERS.contains(&n.as_str()))
        .collect();
    headers.sort();
    Answer { status, headers, body }
}

/// Sends the corpus through Envoy (when installed), then Outrider, and asserts they
/// agree answer by answer. Returns Outrider's answers.
async fn compare(pair: &Pair, corpus: &[Request<'_>]) -> Vec<Answer> {
    let mut got = Vec::new();
    for request in corpus {
        got.push(send(pair.outrider_port, request).await);
    }
    let Some(envoy) = &pair.envoy else {
        skipped(Tool::Envoy, "comparison with Envoy (Outrider's answers checked alone)", "envoy not found");
        return got;
    };
    let mut disagreements = Vec::new();
    for (request, got) in corpus.iter().zip(&got) {
        let want = send(pair.envoy_port, request).await;
        if want != *got {
            disagreements.push(format!(
                "{} {} {:?}:\n  envoy    {want:?}\n  outrider {got:?}",
                request.method, request.path, request.headers
            ));
        }
    }
    assert!(disagreements.is_empty(), "disagreements:\n{}\nenvoy log:\n{}", disagreements.join("\n"), envoy.log_tail());
    got
}

/// A stat on both proxies (Envoy's only when installed): asserts they agree and equal `want`.
async fn assert_stat(pair: &Pair, name: &str, want: u64) {
    let outrider = pair.outrider_stat(name).await;
    assert_eq!(outrider, want, "outrider {name}");
    if let Some(envoy) = &pair.envoy {
        assert_eq!(envoy.stat(name).await, want, "envoy {name}");
    }
}

/// Asserts each proxy forwarded `per_proxy` requests to the backend since `before`.
fn assert_forwarded(pair: &Pair, backend: &Backend, before: usize, per_proxy: usize) {
    let forwarded = backend.seen.requests() - before;
    assert_eq!(forwarded, per_proxy * pair.ports().len(), "requests that reached the backend");
}

const RATE_LIMIT: &str = r#"- name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: lrl
              token_bucket: { max_tokens: 3, tokens_per_fill: 1, fill_interval: 3600s }
              filter_enabled: { runtime_key: lrl_enabled, default_value: { numerator: 100 } }
              filter_enforced: { runtime_key: lrl_enforced, default_value: { numerator: 100 } }
              response_headers_to_add: [{ header: { key: x-local, value: "yes" } }]"#;

#[tokio::test(flavor = "multi_thread")]
async fn local_rate_limit_burst_matches_envoy() {
    let backend = backend().await;
    let setup = Setup { filters: RATE_LIMIT, ..Setup::default() };
    let pair = Pair::start(|port| bootstrap(port, backend.port, &setup)).await;
    let grpc: &[(&str, &str)] = &[("content-type", "application/grpc")];
    let corpus = [get("/", &[]), get("/", &[]), get("/a", &[]), get("/", &[]), get("/", grpc)];
    let got = compare(&pair, &corpus).await;
    let statuses: Vec<_> = got.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [200, 200, 200, 429, 200]);
    assert_eq!(got[3].body, "local_rate_limited");
    assert!(got[3].headers.contains(&("x-local".into(), "yes".into())));
    assert!(got[4].headers.contains(&("grpc-status".into(), "14".into())), "{:?}", got[4]);
    assert_forwarded(&pair, &backend, 0, 3);
    assert_stat(&pair, "lrl.http_local_rate_limit.enabled", 5).await;
    assert_stat(&pair, "lrl.http_local_rate_limit.ok", 3).await;
    assert_stat(&pair, "lrl.http_local_rate_limit.rate_limited", 2).await;
    assert_stat(&pair, "lrl.http_local_rate_limit.enforced", 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn local_rate_limit_not_enforced_marks_the_request_and_per_route_buckets_stand_alone() {
    let backend = backend().await;
    // Not enforced on the connection manager: limited requests go on, marked.
    let filters = r#"- name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: shadow
              token_bucket: { max_tokens: 1, fill_interval: 3600s }
              filter_enabled: { default_value: { numerator: 100 } }
              rate_limited_as_resource_exhausted: true
              request_headers_to_add_when_not_enforced: [{ header: { key: x-limited, value: "over" } }]"#;
    // `/strict` has its own bucket of 2, enforced, with its own stat prefix.
    let routes = r#"- match: { prefix: "/strict" }
                route: { cluster: backend }
                typed_per_filter_config:
                  envoy.filters.http.local_ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
                    stat_prefix: strict
                    token_bucket: { max_tokens: 2, fill_interval: 3600s }
                    filter_enabled: { default_value: { numerator: 100 } }
                    filter_enforced: { default_value: { numerator: 100 } }
                    rate_limited_as_resource_exhausted: true
              - match: { prefix: "/" }
                route: { cluster: backend }"#;
    let setup = Setup { filters, routes, ..Setup::default() };
    let pair = Pair::start(|port| bootstrap(port, backend.port, &setup)).await;
    let grpc: &[(&str, &str)] = &[("content-type", "application/grpc")];
    let corpus = [
        get("/", &[]),
        get("/", &[]),
        get("/strict", &[]),
        get("/strict", &[]),
        get("/strict", grpc),
        get("/strict", &[]),
    ];
    let got = compare(&pair, &corpus).await;
    let answers: Vec<_> = got.iter().map(|a| (a.status, a.body.as_str())).collect();
    assert_eq!(answers[..4], [(200, "ok"), (200, "over"), (200, "ok"), (200, "ok")]);
    assert!(got[4].headers.contains(&("grpc-status".into(), "8".into())), "{:?}", got[4]);
    assert_eq!(answers[5], (429, "local_rate_limited"));
    assert_forwarded(&pair, &backend, 0, 4);
    assert_stat(&pair, "shadow.http_local_rate_limit.rate_limited", 1).await;
    assert_stat(&pair, "shadow.http_local_rate_limit.enforced", 0).await;
    assert_stat(&pair, "strict.http_local_rate_limit.enforced", 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn network_local_rate_limit_closes_connections_beyond_the_bucket() {
    let backend = backend().await;
    let network = r#"- name: envoy.filters.network.local_ratelimit
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit
          stat_prefix: conns
          token_bucket: { max_tokens: 2, fill_interval: 3600s }"#;
    let setup = Setup { network, ..Setup::default() };
    let pair = Pair::start(|port| bootstrap(port, backend.port, &setup)).await;
    let got = compare(&pair, &[get("/", &[]), get("/", &[]), get("/", &[])]).await;
    let statuses: Vec<_> = got.iter().map(|a| a.status).collect();
    // The third connection is closed before any byte is answered.
    assert_eq!(statuses, [200, 200, 0]);
    assert_forwarded(&pair, &backend, 0, 2);
    assert_stat(&pair, "local_rate_limit.conns.rate_limited", 1).await;
}

const FAULT_ABORT_ALL: &str = r#"- name: envoy.filters.http.fault
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault
              abort: { http_status: 503, percentage: { numerator: 100 } }
              headers: [{ name: x-fault, present_match: true }]"#;

#[tokio::test(flavor = "multi_thread")]
async fn fault_abort_matches_envoy_and_never_reaches_the_backend() {
    let backend = backend().await;
    let setup = Setup { filters: FAULT_ABORT_ALL, ..Setup::default() };
    let pair = Pair::start(|port| bootstrap(port, backend.port, &setup)).await;
    let fault: &[(&str, &str)] = &[("x-fault", "1")];
    let grpc_fault: &[(&str, &str)] = &[("x-fault", "1"), ("content-type", "application/grpc")];
    let got = compare(&pair, &[get("/", fault), get("/", &[]), get("/", grpc_fault)]).await;
    assert_eq!((got[0].status, got[0].body.as_str()), (503, "fault filter abort"));
    assert_eq!(got[1].status, 200);
    assert!(got[2].headers.contains(&("grpc-status".into(), "14".into())), "{:?}", got[2]);
    assert_forwarded(&pair, &backend, 0, 1);
    assert_stat(&pair, "http.ingress.fault.aborts_injected", 2).await;
    assert_stat(&pair, "http.ingress.fault.delays_injected", 0).await;
    assert_stat(&pair, "http.ingress.fault.active_faults", 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn header_controlled_faults_match_envoy() {
    let backend = backend().await;
    let filters = r#"- name: envoy.filters.http.fault
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault
              abort: { header_abort: {}, percentage: { numerator: 100 } }
              delay: { header_delay: {}, percentage: { numerator: 100 } }
              max_active_faults: 100"#;
    let setup = Setup { filters, ..Setup::default() };
    let pair = Pair::start(|port| bootstrap(port, backend.port, &setup)).await;
    let corpus = [
        get("/", &[]),
        get("/", &[("x-envoy-fault-abort-request", "418")]),
        get("/", &[("x-envoy-fault-abort-request", "700")]),
        get("/", &[("x-envoy-fault-abort-request", "abc")]),
        get("/", &[("x-envoy-fault-abort-request", "503"), ("x-envoy-fault-abort-request-percentage", "0")]),
        get("/", &[("x-envoy-fault-abort-grpc-request", "5"), ("content-type", "application/grpc")]),
        get("/", &[("x-envoy-fault-abort-grpc-request", "5")]),
        get("/", &[("x-envoy-fault-delay-request", "20")]),
        get("/", &[("x-envoy-fault-delay-request", "20"), ("x-envoy-fault-abort-request", "429")]),
        get("/", &[("x-envoy-fault-delay-request", "0")]),
    ];
    let got = compare(&pair, &corpus).await;
    let statuses: Vec<_> = got.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [200, 418, 200, 200, 200, 200, 200, 200, 429, 200]);
    assert!(got[5].headers.contains(&("grpc-status".into(), "5".into())), "{:?}", got[5]);
    // 418, the two gRPC aborts (200 + grpc-status) and the 429 after its delay.
    assert_forwarded(&pair, &backend, 0, 6);
    assert_stat(&pair, "http.ingress.fault.aborts_injected", 4).await;
    assert_stat(&pair, "http.ingress.fault.delays_injected", 2).await;
    assert_stat(&pair, "http.ingress.fault.active_faults", 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn per_route_fault_as_istio_renders_it() {
    let backend = backend().await;
    // Istio: an empty fault filter on the connection manager, the VirtualService's fault
    // in the route's typed_per_filter_config.
    let filters = r#"- name: envoy.filters.http.fault
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault }"#;
    let routes = r#"- match: { prefix: "/faulty" }
                route: { cluster: backend }
                typed_per_filter_config:
                  envoy.filters.http.fault:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault
                    abort: { http_status: 503, percentage: { numerator: 1000000, denominator: MILLION } }
                    delay: { fixed_delay: 0.01s, percentage: { numerator: 0, denominator: MILLION } }
              - match: { prefix: "/" }
                route: { cluster: backend }"#;
    let setup = Setup { filters, routes, ..Setup::default() };
    let pair = Pair::start(|port| bootstrap(port, backend.port, &setup)).await;
    let got = compare(&pair, &[get("/faulty", &[]), get("/ok", &[]), get("/faulty/x", &[])]).await;
    let statuses: Vec<_> = got.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [503, 200, 503]);
    assert_forwarded(&pair, &backend, 0, 1);
    assert_stat(&pair, "http.ingress.fault.aborts_injected", 2).await;
}

const CORS_FILTER: &str = r#"- name: envoy.filters.http.cors
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors }"#;

#[tokio::test(flavor = "multi_thread")]
async fn cors_preflights_and_actual_requests_match_envoy() {
    let backend = backend().await;
    // The modern form on the default virtual host; the route-config form on another.
    let vhost_extra = r#"typed_per_filter_config:
                envoy.filters.http.cors:
                  "@type": type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy
                  allow_origin_string_match: [{ exact: "https://good.test" }, { suffix: ".friends.test" }]
                  allow_methods: "GET, PUT"
                  allow_headers: "x-a, x-b"
                  expose_headers: "x-exposed"
                  max_age: "600"
                  allow_credentials: true
                  allow_private_network_access: true"#;
    let other_vhosts = r#"- name: legacy
              domains: ["legacy.test"]
              cors:
                allow_origin_string_match: [{ safe_regex: { regex: ".*" } }]
                allow_methods: "*"
                allow_headers: "*"
                forward_not_matching_preflights: false
              routes:
              - match: { prefix: "/" }
                route: { cluster: backend }"#;
    let setup = Setup { filters: CORS_FILTER, vhost_extra, other_vhosts, ..Setup::default() };
    let pair = Pair::start(|port| bootstrap(port, backend.port, &setup)).await;
    let preflight = |host, headers| Request { method: "OPTIONS", path: "/res", host, headers };
    let corpus = [
        preflight("example.com", &[("origin", "https://good.test"), ("access-control-request-method", "PUT")]),
        preflight(
            "example.com",
            &[
                ("origin", "https://a.friends.test"),
                ("access-control-request-method", "PUT"),
                ("access-control-request-private-network", "true"),
            ],
        ),
        // Not allowed: forwarded upstream (Envoy's default), answered by the backend.
        preflight("example.com", &[("origin", "https://evil.test"), ("access-control-request-method", "PUT")]),
        // Not a preflight: no access-control-request-method.
        preflight("example.com", &[("origin", "https://good.test")]),
        get("/res", &[("origin", "https://good.test")]),
        get("/res", &[("origin", "https://evil.test")]),
        get("/res", &[]),
        preflight(
            "legacy.test",
            &[
                ("origin", "https://any.test"),
                ("access-control-request-method", "DELETE"),
                ("access-control-request-headers", "x-z"),
            ],
        ),
        Request { method: "GET", path: "/res", host: "legacy.test", headers: &[("origin", "https://any.test")] },
    ];
    let got = compare(&pair, &corpus).await;
    let allow_origin =
        |a: &Answer| a.headers.iter().find(|(n, _)| n == "access-control-allow-origin").map(|(_, v)| v.clone());
    assert_eq!(got[0].status, 200);
    assert_eq!(allow_origin(&got[0]).as_deref(), Some("https://good.test"));
    assert!(got[0].headers.contains(&("access-control-max-age".into(), "600".into())), "{:?}", got[0]);
    assert!(got[1].headers.contains(&("access-control-allow-private-network".into(), "true".into())), "{:?}", got[1]);
    assert_eq!((got[2].status, got[2].body.as_str(), allow_origin(&got[2])), (200, "ok", None));
    assert_eq!(allow_origin(&got[4]).as_deref(), Some("https://good.test"));
    assert_eq!(allow_origin(&got[5]), None);
    assert!(got[7].headers.contains(&("access-control-allow-methods".into(), "DELETE".into())), "{:?}", got[7]);
    // Two preflights answered by the proxy on the default host, one on the legacy host.
    assert_forwarded(&pair, &backend, 0, corpus.len() - 3);
    assert_stat(&pair, "http.ingress.cors.origin_valid", 6).await;
    assert_stat(&pair, "http.ingress.cors.origin_invalid", 2).await;
}
