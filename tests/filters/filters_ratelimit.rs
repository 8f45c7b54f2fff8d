//! `envoy.filters.http.ratelimit` side by side with Envoy 1.40: the same bootstrap starts
//! both proxies, with a gRPC RateLimitService in this process that says OVER_LIMIT for some
//! descriptors. The descriptors each proxy sends (from route and virtual host
//! `rate_limits`), the statuses, bodies and headers that matter, what the backend received
//! and the stats must agree; limited requests never reach the backend.

use crate::common;

use std::sync::{Arc, Mutex};

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::backends::{self, Backend};
use common::differential::{Pair, free_port, grpc_cluster, raw_http1, static_cluster};
use http::Response;
use http_body_util::Full;
use outrider::pb::envoy::config::core::v3::HeaderValue;
use outrider::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use outrider::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use outrider::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// One call as the service saw it: the domain and each descriptor's entries.
type Call = (String, Vec<Vec<(String, String)>>);

#[derive(Clone, Default)]
struct Limiter {
    calls: Arc<Mutex<Vec<Call>>>,
}

fn header(key: &str, value: &str) -> HeaderValue {
    HeaderValue { key: key.into(), value: value.into(), raw_value: Vec::new() }
}

#[tonic::async_trait]
impl RateLimitService for Limiter {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let request = request.into_inner();
        let descriptors: Vec<Vec<(String, String)>> = request
            .descriptors
            .iter()
            .map(|d| d.entries.iter().map(|e| (e.key.clone(), e.value.clone())).collect())
            .collect();
        let over = descriptors.iter().flatten().any(|(k, v)| {
            (k, v) == (&"generic_key".into(), &"limited".into()) || (k, v) == (&"user".into(), &"over".into())
        });
        self.calls.lock().unwrap().push((request.domain, descriptors));
        let response = if over {
            RateLimitResponse {
                overall_code: Code::OverLimit as i32,
                response_headers_to_add: vec![
                    header("x-rl-service", "over"),
                    header("content-type", "application/json"),
                ],
                raw_body: br#"{"limited":true}"#.to_vec(),
                ..RateLimitResponse::default()
            }
        } else {
            RateLimitResponse {
                overall_code: Code::Ok as i32,
                request_headers_to_add: vec![header("x-rl-request", "ok")],
                response_headers_to_add: vec![header("x-rl-service", "ok")],
                ..RateLimitResponse::default()
            }
        };
        Ok(tonic::Response::new(response))
    }
}

async fn limiter() -> (u16, Limiter) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let limiter = Limiter::default();
    let service = RateLimitServiceServer::new(limiter.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (port, limiter)
}

/// Answers with the `x-rl-*` request headers it received.
async fn echo_headers() -> Backend {
    backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let mut lines: Vec<String> = request
            .headers()
            .iter()
            .filter(|(name, _)| name.as_str().starts_with("x-rl-"))
            .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap_or("?")))
            .collect();
        lines.sort();
        Response::new(Full::new(Bytes::from(lines.join("\n"))))
    })
    .await
}

fn bootstrap(port: u16, backend: u16, rls_port: u16, filter_extra: &str) -> String {
    let clusters = [static_cluster("backend", backend), grpc_cluster("rls", rls_port)].concat();
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
              rate_limits:
              - actions:
                - request_headers: {{ header_name: x-user, descriptor_key: user }}
              routes:
              - match: {{ prefix: "/route" }}
                route:
                  cluster: backend
                  rate_limits:
                  - actions:
                    - generic_key: {{ descriptor_value: route }}
                    - request_headers: {{ header_name: x-user, descriptor_key: user, skip_if_absent: true }}
                  - stage: 1
                    actions: [{{ generic_key: {{ descriptor_value: limited }} }}]
              - match: {{ prefix: "/both" }}
                route:
                  cluster: backend
                  include_vh_rate_limits: true
                  rate_limits:
                  - actions:
                    - destination_cluster: {{}}
                    - remote_address: {{}}
                    - header_value_match: {{ descriptor_value: tiered, headers: [{{ name: x-tier, present_match: true }}] }}
              - match: {{ prefix: "/limited" }}
                route:
                  cluster: backend
                  rate_limits: [{{ actions: [{{ generic_key: {{ descriptor_value: limited }} }}] }}]
              - match: {{ prefix: "/" }}
                route: {{ cluster: backend }}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: test
              timeout: 2s
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {{ envoy_grpc: {{ cluster_name: rls }} }}
              {filter_extra}
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:{clusters}
"#
    )
}

type Answer = (u16, Vec<(String, String)>, String);

async fn get(port: u16, path: &str, headers: &str) -> Answer {
    let request = format!("GET {path} HTTP/1.1\r\nhost: example.com\r\n{headers}connection: close\r\n\r\n");
    let (status, response_headers, body) = raw_http1(port, &request).await;
    let kept = response_headers
        .into_iter()
        .filter(|(name, _)| matches!(name.as_str(), "x-envoy-ratelimited" | "x-rl-service" | "content-type"))
        .collect();
    (status, kept, body)
}

const CORPUS: &[(&str, &str)] = &[
    ("/vh", "x-user: alice\r\n"),
    ("/vh", "x-user: over\r\n"),
    ("/vh", ""),
    ("/route", "x-user: over\r\n"),
    ("/route", ""),
    ("/both", "x-tier: gold\r\nx-user: bob\r\n"),
    ("/both", "x-user: over\r\n"),
    ("/limited", ""),
];

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

fn outrider(runs: &[(&str, Vec<Answer>)]) -> Vec<Answer> {
    runs.iter().find(|(name, _)| *name == "outrider").unwrap().1.clone()
}

fn assert_agree(runs: &[(&str, Vec<Answer>)], pair: &Pair) {
    let Some((_, want)) = runs.iter().find(|(name, _)| *name == "envoy") else {
        skipped(Tool::Envoy, "comparison with Envoy", "envoy not found");
        return;
    };
    let got = outrider(runs);
    let disagreements: Vec<String> = CORPUS
        .iter()
        .zip(want.iter().zip(&got))
        .filter(|(_, (w, g))| w != g)
        .map(|((path, headers), (w, g))| format!("{path} {headers:?}: envoy {w:?}, outrider {g:?}"))
        .collect();
    let log = pair.envoy.as_ref().map(|e| e.log_tail()).unwrap_or_default();
    assert!(disagreements.is_empty(), "disagreements:\n{}\nenvoy log:\n{log}", disagreements.join("\n"));
}

async fn assert_stats(pair: &Pair, want: &[(&str, u64)]) {
    for (stat, value) in want {
        let name = format!("cluster.backend.ratelimit.{stat}");
        let ours = pair.outrider_stat(&name).await;
        if let Some(envoy) = &pair.envoy {
            assert_eq!(ours, envoy.stat(&name).await, "{name}");
        }
        assert_eq!(ours, *value, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn descriptors_and_over_limit_answers_match_envoy() {
    let backend = echo_headers().await;
    let (rls_port, limiter) = limiter().await;
    let pair = Pair::start(|port| bootstrap(port, backend.port, rls_port, "")).await;
    let runs = run(&pair).await;
    assert_agree(&runs, &pair);
    let answers = outrider(&runs);
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses, [200, 429, 200, 429, 200, 200, 429, 429]);
    assert_eq!(answers[1].2, r#"{"limited":true}"#);
    assert!(answers[1].1.contains(&("x-envoy-ratelimited".into(), "true".into())), "{:?}", answers[1].1);
    assert_eq!(answers[0].2, "x-rl-request: ok", "the service's request headers reach the backend");
    // Four requests per proxy were allowed and reached the backend.
    assert_eq!(backend.seen.requests(), 4 * pair.ports().len());

    // Both proxies sent the same descriptors; `/vh` without `x-user` sends no call.
    let calls = limiter.calls.lock().unwrap().clone();
    let per_proxy = CORPUS.len() - 1;
    assert_eq!(calls.len(), per_proxy * pair.ports().len(), "{calls:#?}");
    let (first, rest) = calls.split_at(per_proxy);
    for other in rest.chunks(per_proxy) {
        assert_eq!(first, other, "the proxies sent different descriptors");
    }
    let entry = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(first[0], ("test".into(), vec![vec![entry("user", "alice")]]));
    assert_eq!(first[3].1, vec![vec![entry("generic_key", "route")]], "stage 1 and the virtual host do not apply");
    assert_eq!(
        first[4].1,
        vec![
            vec![
                entry("destination_cluster", "backend"),
                entry("remote_address", "127.0.0.1"),
                entry("header_match", "tiered")
            ],
            vec![entry("user", "bob")]
        ]
    );
    assert_stats(&pair, &[("ok", 3), ("over_limit", 4), ("error", 0)]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_service_allows_unless_failure_mode_deny() {
    let backend = echo_headers().await;
    let closed = free_port();
    let pair = Pair::start(|port| bootstrap(port, backend.port, closed, "")).await;
    let runs = run(&pair).await;
    assert_agree(&runs, &pair);
    assert!(outrider(&runs).iter().all(|a| a.0 == 200));
    assert_stats(&pair, &[("error", 7), ("failure_mode_allowed", 7), ("ok", 0)]).await;
    drop(pair);

    let pair = Pair::start(|port| bootstrap(port, backend.port, closed, "failure_mode_deny: true")).await;
    let runs = run(&pair).await;
    assert_agree(&runs, &pair);
    let statuses: Vec<u16> = outrider(&runs).iter().map(|a| a.0).collect();
    assert_eq!(statuses, [500, 500, 200, 500, 500, 500, 500, 500]);
    assert_stats(&pair, &[("error", 7), ("failure_mode_allowed", 0)]).await;
}
