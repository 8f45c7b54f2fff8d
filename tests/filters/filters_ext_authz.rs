//! `envoy.filters.http.ext_authz` side by side with Envoy 1.40: the same bootstrap starts
//! both proxies, with a gRPC Authorization service in this process that allows or denies by
//! a request header (adding and removing headers upstream, adding response headers,
//! answering a custom denial). Statuses, bodies, the headers that matter, what the backend
//! received, the checks the service saw and the stats must agree; denied requests never
//! reach the backend.

use crate::common;

use std::sync::{Arc, Mutex};

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::backends::{self, Backend};
use common::differential::{Pair, free_port, grpc_cluster, raw_http1, static_cluster};
use http::Response;
use http_body_util::Full;
use outrider::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use outrider::pb::envoy::service::auth::v3::authorization_server::{Authorization, AuthorizationServer};
use outrider::pb::envoy::service::auth::v3::check_response::HttpResponse;
use outrider::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse};
use outrider::pb::envoy::r#type::v3::HttpStatus;
use outrider::pb::google::rpc::Status;

/// What the service saw of one check: method, path, host, context extensions, and
/// whether the client's `x-authz` header was in the headers.
type Seen = (String, String, String, Vec<(String, String)>, bool);

#[derive(Clone, Default)]
struct Authz {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// The body each check carried and its `x-envoy-auth-partial-body` header.
    bodies: Arc<Mutex<Vec<(String, String)>>>,
}

fn header(key: &str, value: &str, append: Option<bool>) -> HeaderValueOption {
    #[allow(deprecated)]
    HeaderValueOption {
        header: Some(HeaderValue { key: key.into(), value: value.into(), raw_value: Vec::new() }),
        append: append.map(|value| outrider::pb::google::protobuf::BoolValue { value }),
        ..HeaderValueOption::default()
    }
}

#[tonic::async_trait]
impl Authorization for Authz {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let check = request.into_inner();
        let attributes = check.attributes.unwrap_or_default();
        let http = attributes.request.unwrap_or_default().http.unwrap_or_default();
        let mut extensions: Vec<_> = attributes.context_extensions.into_iter().collect();
        extensions.sort();
        let verdict = http.headers.get("x-authz").cloned().unwrap_or_default();
        let partial = http.headers.get("x-envoy-auth-partial-body").cloned().unwrap_or_default();
        self.bodies.lock().unwrap().push((http.body.clone(), partial));
        self.seen.lock().unwrap().push((
            http.method,
            http.path,
            http.host,
            extensions,
            http.headers.contains_key("x-authz"),
        ));
        let ok = |code| Some(Status { code, message: String::new(), details: Vec::new() });
        let response = match verdict.as_str() {
            "allow" => CheckResponse {
                status: ok(0),
                http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
                    headers: vec![
                        header("x-authz-added", "yes", None),
                        header("x-existing", "from-authz", Some(false)),
                        header("x-appended", "more", Some(true)),
                    ],
                    headers_to_remove: vec!["x-remove-me".into()],
                    response_headers_to_add: vec![header("x-authz-response", "ok", Some(false))],
                    ..OkHttpResponse::default()
                })),
                ..CheckResponse::default()
            },
            "deny-custom" => CheckResponse {
                status: ok(7),
                http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
                    status: Some(HttpStatus { code: 401 }),
                    headers: vec![
                        header("x-denied-by", "authz", None),
                        header("content-type", "application/json", None),
                    ],
                    body: r#"{"denied":true}"#.into(),
                })),
                ..CheckResponse::default()
            },
            _ => CheckResponse { status: ok(7), ..CheckResponse::default() },
        };
        Ok(tonic::Response::new(response))
    }
}

async fn authz_server() -> (u16, Authz) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let authz = Authz::default();
    let service = AuthorizationServer::new(authz.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (port, authz)
}

/// The request headers the backend received that the checks change, one per line.
async fn echo_headers() -> Backend {
    backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let mut lines: Vec<String> = request
            .headers()
            .iter()
            .filter(|(name, _)| {
                ["x-authz", "x-existing", "x-appended", "x-remove-me", "x-envoy-auth-failure-mode-allowed"]
                    .iter()
                    .any(|prefix| name.as_str().starts_with(prefix))
            })
            .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap_or("?")))
            .collect();
        lines.sort();
        Response::new(Full::new(Bytes::from(lines.join("\n"))))
    })
    .await
}

fn bootstrap(port: u16, backend: u16, authz_port: u16, authz_cluster: &str, filter_extra: &str) -> String {
    let clusters = [static_cluster("backend", backend), grpc_cluster("authz", authz_port)].concat();
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
            typed_per_filter_config:
              envoy.filters.http.ext_authz:
                "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
                check_settings: {{ context_extensions: {{ level: config, config_only: c }} }}
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/off" }}
                route: {{ cluster: backend }}
                typed_per_filter_config:
                  envoy.filters.http.ext_authz:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
                    disabled: true
              - match: {{ prefix: "/" }}
                route: {{ cluster: backend }}
                typed_per_filter_config:
                  envoy.filters.http.ext_authz:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
                    check_settings: {{ context_extensions: {{ level: route, route_only: r }} }}
          http_filters:
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              transport_api_version: V3
              grpc_service: {{ envoy_grpc: {{ cluster_name: {authz_cluster} }}, timeout: 2s }}
              {filter_extra}
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:{clusters}
"#
    )
}

/// What a client sees that must agree: status, the headers the checks set, the body.
type Answer = (u16, Vec<(String, String)>, String);

async fn get(port: u16, path: &str, headers: &str) -> Answer {
    let request = format!("GET {path} HTTP/1.1\r\nhost: example.com\r\n{headers}connection: close\r\n\r\n");
    let (status, response_headers, body) = raw_http1(port, &request).await;
    let kept = response_headers
        .into_iter()
        .filter(|(name, _)| matches!(name.as_str(), "x-authz-response" | "x-denied-by" | "content-type"))
        .collect();
    (status, kept, body)
}

/// The requests of the corpus: (path, extra request headers).
const CORPUS: &[(&str, &str)] = &[
    ("/allowed", "x-authz: allow\r\nx-existing: original\r\nx-appended: first\r\nx-remove-me: secret\r\n"),
    ("/allowed?q=1", "x-authz: allow\r\n"),
    ("/denied", "x-authz: no\r\n"),
    ("/custom", "x-authz: deny-custom\r\n"),
    ("/none", ""),
    ("/off/unchecked", "x-authz: no\r\n"),
];

/// Runs the corpus through each proxy; returns the answers per proxy.
async fn run(pair: &Pair) -> Vec<(&'static str, Vec<Answer>)> {
    let mut out = Vec::new();
    for (name, port) in pair.ports() {
        let mut answers = Vec::new();
        for (path, headers) in CORPUS {
            answers.push(get(port, path, headers).await);
        }
        out.push((name, answers));
    }
    out
}

fn assert_agree(runs: &[(&str, Vec<Answer>)], pair: &Pair) {
    let Some((_, want)) = runs.iter().find(|(name, _)| *name == "envoy") else {
        skipped(Tool::Envoy, "comparison with Envoy", "envoy not found");
        return;
    };
    let (_, got) = runs.iter().find(|(name, _)| *name == "outrider").unwrap();
    let disagreements: Vec<String> = CORPUS
        .iter()
        .zip(want.iter().zip(got))
        .filter(|(_, (w, g))| w != g)
        .map(|((path, _), (w, g))| format!("{path}: envoy {w:?}, outrider {g:?}"))
        .collect();
    let log = pair.envoy.as_ref().map(|e| e.log_tail()).unwrap_or_default();
    assert!(disagreements.is_empty(), "disagreements:\n{}\nenvoy log:\n{log}", disagreements.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_checks_allow_deny_and_edit_like_envoy() {
    let backend = echo_headers().await;
    let (authz_port, authz) = authz_server().await;
    let pair = Pair::start(|port| bootstrap(port, backend.port, authz_port, "authz", "")).await;
    let runs = run(&pair).await;
    assert_agree(&runs, &pair);

    let (_, outrider) = runs.iter().find(|(name, _)| *name == "outrider").unwrap();
    let statuses: Vec<u16> = outrider.iter().map(|a| a.0).collect();
    assert_eq!(statuses, [200, 200, 403, 401, 403, 200]);
    assert_eq!(outrider[3].2, r#"{"denied":true}"#);
    assert!(outrider[0].2.contains("x-authz-added: yes"), "{}", outrider[0].2);
    assert!(!outrider[0].2.contains("x-remove-me"), "removed upstream: {}", outrider[0].2);
    // Three allowed requests per proxy reached the backend; no denied one did.
    assert_eq!(backend.seen.requests(), 3 * pair.ports().len());

    // The checks each proxy sent: the same per request (the per-route disabled one sends
    // none), with context extensions merged from the route configuration and the route.
    let seen = authz.seen.lock().unwrap().clone();
    let checks = CORPUS.len() - 1;
    assert_eq!(seen.len(), checks * pair.ports().len());
    let (first, rest) = seen.split_at(checks);
    for other in rest.chunks(checks) {
        assert_eq!(first, other, "the proxies sent different checks");
    }
    let extensions =
        |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
    assert_eq!(
        first[0],
        (
            "GET".into(),
            "/allowed".into(),
            "example.com".into(),
            extensions(&[("config_only", "c"), ("level", "route"), ("route_only", "r")]),
            true
        )
    );
    assert_eq!(first[1].1, "/allowed?q=1");

    for stat in ["ok", "denied", "error"] {
        let name = format!("http.ingress.ext_authz.{stat}");
        let cluster = format!("cluster.backend.ext_authz.{stat}");
        let (ours, ours_cluster) = (pair.outrider_stat(&name).await, pair.outrider_stat(&cluster).await);
        if let Some(envoy) = &pair.envoy {
            assert_eq!((ours, ours_cluster), (envoy.stat(&name).await, envoy.stat(&cluster).await), "{name}");
        }
        let want = match stat {
            "ok" => 2,
            "denied" => 3,
            _ => 0,
        };
        assert_eq!(ours, want, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_service_denies_unless_failure_mode_allow() {
    let backend = echo_headers().await;
    let closed = free_port();
    let pair = Pair::start(|port| bootstrap(port, backend.port, closed, "authz", "")).await;
    let runs = run(&pair).await;
    assert_agree(&runs, &pair);
    let (_, outrider) = runs.iter().find(|(name, _)| *name == "outrider").unwrap();
    assert_eq!(outrider.iter().map(|a| a.0).collect::<Vec<_>>(), [403, 403, 403, 403, 403, 200]);
    assert_eq!(pair.outrider_stat("http.ingress.ext_authz.error").await, 5);
    drop(pair);

    let extra = "failure_mode_allow: true\n              failure_mode_allow_header_add: true\n              status_on_error: { code: 503 }";
    let pair = Pair::start(|port| bootstrap(port, backend.port, closed, "authz", extra)).await;
    let runs = run(&pair).await;
    assert_agree(&runs, &pair);
    let (_, outrider) = runs.iter().find(|(name, _)| *name == "outrider").unwrap();
    assert!(outrider.iter().all(|a| a.0 == 200), "{outrider:?}");
    assert!(outrider[2].2.contains("x-envoy-auth-failure-mode-allowed: true"), "{}", outrider[2].2);
    for stat in ["error", "failure_mode_allowed"] {
        let name = format!("http.ingress.ext_authz.{stat}");
        let ours = pair.outrider_stat(&name).await;
        if let Some(envoy) = &pair.envoy {
            assert_eq!(ours, envoy.stat(&name).await, "{name}");
        }
        assert_eq!(ours, 5, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_service_cluster_fails_at_request_time_like_envoy() {
    // Envoy accepts an ext_authz filter whose cluster does not exist and fails each check
    // (the cluster could come later through CDS); so does Outrider.
    let backend = echo_headers().await;
    let pair =
        Pair::start(|port| bootstrap(port, backend.port, free_port(), "nowhere", "status_on_error: { code: 503 }"))
            .await;
    let runs = run(&pair).await;
    assert_agree(&runs, &pair);
    let (_, outrider) = runs.iter().find(|(name, _)| *name == "outrider").unwrap();
    assert_eq!(outrider.iter().map(|a| a.0).collect::<Vec<_>>(), [503, 503, 503, 503, 503, 200]);
}

/// `with_request_body`: the check carries the body (cut to `max_request_bytes` with
/// `allow_partial_message`, else a longer body gets 413), as on Envoy.
#[tokio::test(flavor = "multi_thread")]
async fn request_bodies_go_with_the_check_like_envoy() {
    let backend = echo_headers().await;
    for (settings, long_status) in [
        ("with_request_body: { max_request_bytes: 10, allow_partial_message: true }", 200),
        ("with_request_body: { max_request_bytes: 10 }", 413),
    ] {
        let (authz_port, authz) = authz_server().await;
        let pair = Pair::start(|port| bootstrap(port, backend.port, authz_port, "authz", settings)).await;
        let mut per_proxy = Vec::new();
        for (name, port) in pair.ports() {
            let before = authz.bodies.lock().unwrap().len();
            let mut statuses = Vec::new();
            for body in ["hello", "0123456789abcdef"] {
                let request = format!(
                    "POST /allowed HTTP/1.1\r\nhost: example.com\r\nx-authz: allow\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                statuses.push(raw_http1(port, &request).await.0);
            }
            assert_eq!(statuses, [200, long_status], "{name}: {settings}");
            let bodies = authz.bodies.lock().unwrap()[before..].to_vec();
            per_proxy.push((name, bodies));
        }
        let (_, outrider) = per_proxy.iter().find(|(n, _)| *n == "outrider").unwrap();
        let mut want = vec![("hello".to_owned(), "false".to_owned())];
        if long_status == 200 {
            want.push(("0123456789".to_owned(), "true".to_owned()));
        }
        assert_eq!(outrider, &want, "{settings}");
        if let Some((_, envoy)) = per_proxy.iter().find(|(n, _)| *n == "envoy") {
            assert_eq!(envoy, outrider, "{settings}: the checks differ");
        }
    }
}
