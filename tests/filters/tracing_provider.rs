//! Traces as Istio's Telemetry API sets them: the connection manager's own
//! `tracing.provider` (OpenTelemetry over gRPC to a cluster, no bootstrap tracer) exports
//! to a real OTLP receiver; which requests are sampled follows Envoy's rules (the request
//! ID keys `random_sampling`, `x-client-trace-id`, `x-envoy-force-trace`, a caller's
//! sampled flag, `overall_sampling`); the decision is packed into `x-request-id` and the
//! context reaches the upstream sampled or not; custom tags are span attributes. The same
//! bootstrap runs on Envoy 1.40 when installed, and both must agree request by request.

use crate::common;

use std::collections::HashMap;

use bytes::Bytes;
use common::differential::{Pair, free_port, grpc_cluster, static_cluster};
use common::otlp::{self, Exported, hex, string};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::trace::v1::Span;
use outrider::config::bootstrap::Bootstrap;
use tokio::sync::mpsc;

/// A backend answering `<traceparent> <x-request-id>` as it received them.
async fn echo() -> u16 {
    common::backends::http(|request: hyper::Request<hyper::body::Incoming>| async move {
        let header = |name: &str| {
            request.headers().get(name).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_else(|| "-".into())
        };
        hyper::Response::new(Full::new(Bytes::from(format!("{} {}", header("traceparent"), header("x-request-id")))))
    })
    .await
    .port
}

fn bootstrap(port: u16, backend: u16, collector: u16, tracing: &str) -> String {
    format!(
        r#"
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
static_resources:
  listeners:{}
  clusters:{}{}
"#,
        listener("http", port, tracing),
        static_cluster("backend", backend),
        grpc_cluster("otel", collector),
    )
}

/// The OpenTelemetry provider every test uses: OTLP/gRPC to the cluster `otel`.
const GRPC_PROVIDER: &str = "                grpc_service: { envoy_grpc: { cluster_name: otel } }";

/// A listener whose connection manager traces with `tracing` (lines of the block, at
/// its indentation) and the gRPC provider.
fn listener(name: &str, port: u16, tracing: &str) -> String {
    listener_with(name, port, tracing, GRPC_PROVIDER)
}

/// [`listener`] with the provider's transport (`grpc_service` or `http_service` lines).
fn listener_with(name: &str, port: u16, tracing: &str, transport: &str) -> String {
    format!(
        r#"
  - name: {name}
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          # x-envoy-force-trace counts only from internal requests: loopback, here.
          internal_address_config: {{ cidr_ranges: [{{ address_prefix: 127.0.0.1, prefix_len: 32 }}] }}
          tracing:
{tracing}
            provider:
              name: envoy.tracers.opentelemetry
              typed_config:
                "@type": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
{transport}
                service_name: provider-under-test
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/route-" }}
                route: {{ cluster: backend }}
                # The route's sampling replaces the connection manager's; its tags add to them.
                tracing:
                  random_sampling: {{ numerator: 100, denominator: HUNDRED }}
                  custom_tags: [{{ tag: mesh.literal, literal: {{ value: route }} }}]
              - {{ match: {{ prefix: "/" }}, route: {{ cluster: backend }} }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}"#
    )
}

/// GET `path` with `headers`; the body is what the backend saw.
async fn get(port: u16, path: &str, headers: &[(&str, String)]) -> String {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::get(path).header("host", "example.com");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = sender.send_request(request.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
    assert_eq!(response.status(), 200);
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

/// Request IDs whose first 8 hex digits are 1000 and 9000 (modulo 10 000): inside and
/// outside a 50 % `random_sampling`; and one with 9000 that already says "sampled".
const KEY_1000: &str = "000003e8-1111-4111-8111-111111111111";
const KEY_9000: &str = "00002328-2222-4222-8222-222222222222";
const PACKED_9000: &str = "00002328-3333-9333-8333-333333333333";

/// One request of the fixed set and what Envoy's rules say about it.
struct Case {
    name: &'static str,
    request_id: &'static str,
    /// The caller's sampled flag, when it sends a `traceparent`.
    parent: Option<&'static str>,
    headers: &'static [(&'static str, &'static str)],
    exported: bool,
    /// The sampled flag of the `traceparent` the upstream receives.
    upstream_flags: &'static str,
    /// The trace reason packed into the upstream's `x-request-id`.
    upstream_reason: char,
}

/// Envoy samples a span when its own decision says so and, with a caller's
/// `traceparent`, when the caller's flag says so too.
const CASES: [Case; 10] = [
    Case {
        name: "random-hit",
        request_id: KEY_1000,
        parent: None,
        headers: &[],
        exported: true,
        upstream_flags: "01",
        upstream_reason: '9',
    },
    Case {
        name: "random-miss",
        request_id: KEY_9000,
        parent: None,
        headers: &[],
        exported: false,
        upstream_flags: "00",
        upstream_reason: '4',
    },
    Case {
        name: "parent-sampled",
        request_id: KEY_1000,
        parent: Some("01"),
        headers: &[("x-tenant", "acme")],
        exported: true,
        upstream_flags: "01",
        upstream_reason: '9',
    },
    Case {
        name: "parent-sampled-miss",
        request_id: KEY_9000,
        parent: Some("01"),
        headers: &[],
        exported: false,
        upstream_flags: "00",
        upstream_reason: '4',
    },
    Case {
        name: "parent-unsampled",
        request_id: KEY_1000,
        parent: Some("00"),
        headers: &[],
        exported: false,
        upstream_flags: "00",
        upstream_reason: '9',
    },
    Case {
        name: "client",
        request_id: KEY_9000,
        parent: None,
        headers: &[("x-client-trace-id", "c-1")],
        exported: true,
        upstream_flags: "01",
        upstream_reason: 'b',
    },
    Case {
        // Without x-forwarded-for the request is external: the header is removed.
        name: "forced-external",
        request_id: KEY_9000,
        parent: None,
        headers: &[("x-envoy-force-trace", "true")],
        exported: false,
        upstream_flags: "00",
        upstream_reason: '4',
    },
    Case {
        name: "forced-internal",
        request_id: KEY_9000,
        parent: None,
        headers: &[("x-envoy-force-trace", "true"), ("x-forwarded-for", "127.0.0.1")],
        exported: true,
        upstream_flags: "01",
        upstream_reason: 'a',
    },
    Case {
        name: "route-sampled",
        request_id: KEY_9000,
        parent: None,
        headers: &[],
        exported: true,
        upstream_flags: "01",
        upstream_reason: '9',
    },
    Case {
        name: "packed",
        request_id: PACKED_9000,
        parent: None,
        headers: &[],
        exported: true,
        upstream_flags: "01",
        upstream_reason: '9',
    },
];

const SAMPLING: &str = r#"            random_sampling: { value: 50 }
            max_path_tag_length: 8
            custom_tags:
            - { tag: mesh.literal, literal: { value: demo } }
            - { tag: mesh.header, request_header: { name: x-tenant, default_value: none } }
            - { tag: mesh.env, environment: { name: HOME, default_value: unknown } }"#;

/// What one proxy did with one case.
#[derive(Debug, PartialEq)]
struct Observed {
    exported: bool,
    upstream_flags: String,
    upstream_reason: char,
    /// Custom tags and `http.url` of the exported span.
    tags: Vec<(String, Option<String>)>,
}

/// Sends every case (trace IDs made unique by `proxy`), then a sampled marker, and
/// collects the spans up to the marker's: the exporter keeps their order, so a span that
/// has not come by then was not sampled.
async fn run_cases(port: u16, proxy: u8, spans: &mut mpsc::UnboundedReceiver<Exported>) -> Vec<(String, Observed)> {
    let mut seen = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let trace_id = format!("{proxy:02x}{i:030x}");
        let mut headers = vec![("x-request-id", case.request_id.to_owned())];
        if let Some(flags) = case.parent {
            headers.push(("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-{flags}")));
        }
        for (name, value) in case.headers {
            headers.push((name, (*value).to_owned()));
        }
        let body = get(port, &format!("/{}?x=1", case.name), &headers).await;
        let (traceparent, request_id) = body.split_once(' ').unwrap();
        let parts: Vec<&str> = traceparent.split('-').collect();
        assert_eq!(parts.len(), 4, "{}: the upstream gets a traceparent: {traceparent}", case.name);
        if case.parent.is_some() {
            assert_eq!(parts[1], trace_id, "{}: the caller's trace goes on", case.name);
        }
        seen.push((case.name, parts[1].to_owned(), parts[3].to_owned(), request_id.chars().nth(14).unwrap()));
    }
    // Sampled by its parent and by its request ID.
    let marker = format!("{proxy:02x}{:030x}", 0xffff);
    let headers = [("traceparent", format!("00-{marker}-00f067aa0ba902b7-01")), ("x-request-id", KEY_1000.to_owned())];
    get(port, "/marker", &headers).await;
    let mut exported: HashMap<String, Span> = HashMap::new();
    loop {
        let (service, span) = otlp::next_span(spans).await;
        assert_eq!(service, "provider-under-test");
        let trace_id = hex(&span.trace_id);
        if trace_id == marker {
            break;
        }
        exported.insert(trace_id, span);
    }
    seen.into_iter()
        .map(|(name, trace_id, upstream_flags, upstream_reason)| {
            let span = exported.remove(&trace_id);
            let tags = span.as_ref().map_or_else(Vec::new, |span| {
                ["mesh.literal", "mesh.header", "mesh.env", "http.url"]
                    .iter()
                    .map(|key| ((*key).to_owned(), string(&span.attributes, key)))
                    .collect()
            });
            (name.to_owned(), Observed { exported: span.is_some(), upstream_flags, upstream_reason, tags })
        })
        .collect()
}

fn expected() -> Vec<(String, Observed)> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "unknown".into());
    CASES
        .iter()
        .map(|case| {
            let tenant = case.headers.iter().find(|(name, _)| *name == "x-tenant").map_or("none", |(_, v)| v);
            let literal = if case.name.starts_with("route-") { "route" } else { "demo" };
            let url = format!("http://example.com{}", &format!("/{}?x=1", case.name)[..8]);
            let tags = if case.exported {
                vec![
                    ("mesh.literal".to_owned(), Some(literal.to_owned())),
                    ("mesh.header".to_owned(), Some(tenant.to_owned())),
                    ("mesh.env".to_owned(), Some(home.clone())),
                    ("http.url".to_owned(), Some(url)),
                ]
            } else {
                Vec::new()
            };
            let observed = Observed {
                exported: case.exported,
                upstream_flags: case.upstream_flags.to_owned(),
                upstream_reason: case.upstream_reason,
                tags,
            };
            (case.name.to_owned(), observed)
        })
        .collect()
}

#[tokio::test]
async fn the_providers_sampling_matches_envoys_request_by_request() {
    let (collector, mut spans, _logs) = otlp::receiver().await;
    let backend = echo().await;
    let pair = Pair::start(|port| bootstrap(port, backend, collector, SAMPLING)).await;
    let mut proxies = vec![("outrider", pair.outrider_port, 1)];
    if pair.envoy.is_some() {
        proxies.insert(0, ("envoy", pair.envoy_port, 2));
    }
    for (name, port, id) in proxies {
        let observed = run_cases(port, id, &mut spans).await;
        for ((case, observed), (_, expected)) in observed.iter().zip(expected()) {
            assert_eq!(*observed, expected, "{name}, case {case}");
        }
    }
    pair.outrider.stop();
}

/// Outrider alone: the boundary percentages over a fixed set of requests. The marker
/// goes through a second listener naming the same provider, so the same exporter: its
/// span comes after every sampled one of the first listener.
async fn exported_of(tracing: &str, requests: &[(&str, Vec<(&'static str, String)>)]) -> Vec<String> {
    let (collector, mut spans, _logs) = otlp::receiver().await;
    let backend = echo().await;
    let (port, marker_port) = (free_port(), free_port());
    let mut text = bootstrap(port, backend, collector, tracing);
    let marker_listener = listener("marker", marker_port, "            random_sampling: { value: 100 }");
    text = text.replace("\n  clusters:", &format!("{marker_listener}\n  clusters:"));
    let outrider = outrider::app::start_with(Bootstrap::parse(&text).unwrap(), 1).await.unwrap();
    outrider.listeners_ready().await;
    let mut flags = Vec::new();
    for (path, headers) in requests {
        let body = get(port, path, headers).await;
        flags.push(body.split(['-', ' ']).nth(3).unwrap().to_owned());
    }
    let marker = "ffffffffffffffffffffffffffffffff";
    get(marker_port, "/marker", &[("traceparent", format!("00-{marker}-00f067aa0ba902b7-01"))]).await;
    let mut exported = Vec::new();
    loop {
        let (_, span) = otlp::next_span(&mut spans).await;
        if hex(&span.trace_id) == marker {
            break;
        }
        exported.push(span.name);
    }
    outrider.stop();
    assert_eq!(flags.iter().filter(|f| *f == "01").count(), exported.len(), "sampled upstream = exported");
    exported
}

#[tokio::test]
async fn boundary_percentages_over_fixed_requests() {
    let plain: Vec<(&str, Vec<(&'static str, String)>)> =
        (0..10).map(|_| ("/plain", Vec::new())).chain([("/client", vec![("x-client-trace-id", "c".into())])]).collect();
    // 0 %: only the client-traced request (client_sampling defaults to 100 %).
    let none = exported_of("            random_sampling: { value: 0 }", &plain).await;
    assert_eq!(none, ["example.com/client"]);
    // 100 %: all of them.
    let all = exported_of("            random_sampling: { value: 100 }", &plain).await;
    assert_eq!(all.len(), 11);
    // client_sampling 0 %: not even the client-traced one.
    let no_client =
        exported_of("            random_sampling: { value: 0 }\n            client_sampling: { value: 0 }", &plain)
            .await;
    assert!(no_client.is_empty());
    // overall_sampling 0 % caps everything, whatever the reason.
    let capped = exported_of("            overall_sampling: { value: 0 }", &plain).await;
    assert!(capped.is_empty());
}

#[tokio::test]
async fn upstream_spans_are_children_of_the_request_span() {
    let (collector, mut spans, _logs) = otlp::receiver().await;
    let backend = echo().await;
    let port = free_port();
    let tracing = "            spawn_upstream_span: true";
    let outrider =
        outrider::app::start_with(Bootstrap::parse(&bootstrap(port, backend, collector, tracing)).unwrap(), 1)
            .await
            .unwrap();
    outrider.listeners_ready().await;
    let body = get(port, "/child", &[]).await;
    let (_, first) = otlp::next_span(&mut spans).await;
    let (_, second) = otlp::next_span(&mut spans).await;
    // The upstream span ends first.
    let (upstream, request) = (first, second);
    assert_eq!(upstream.name, "router backend egress");
    assert_eq!(upstream.kind, 3, "SPAN_KIND_CLIENT");
    assert_eq!(request.kind, 2, "SPAN_KIND_SERVER");
    assert_eq!(upstream.parent_span_id, request.span_id);
    let traceparent = body.split(' ').next().unwrap();
    assert_eq!(traceparent, format!("00-{}-{}-01", hex(&request.trace_id), hex(&upstream.span_id)));
    outrider.stop();
}

#[tokio::test]
async fn spans_travel_over_otlp_http_to_a_cluster_and_path() {
    let (collector, mut spans) = otlp::http_receiver().await;
    let backend = echo().await;
    let transport = r#"                http_service:
                  http_uri: { uri: "http://otel-collector.observability:4318/v1/traces", cluster: otel_http, timeout: 5s }
                  request_headers_to_add: [{ header: { key: x-tenant, value: t1 } }]"#;
    let pair = Pair::start(|port| {
        format!(
            r#"
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
static_resources:
  listeners:{}
  clusters:{}{}
"#,
            listener_with("http", port, "            random_sampling: { value: 100 }", transport),
            static_cluster("backend", backend),
            static_cluster("otel_http", collector),
        )
    })
    .await;
    for (name, port) in pair.ports() {
        let trace_id = if name == "envoy" { "0e" } else { "0a" }.repeat(16);
        let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
        get(port, "/over-http", &[("traceparent", traceparent)]).await;
        let (path, tenant, span) = tokio::time::timeout(common::WAIT, spans.recv()).await.unwrap().unwrap();
        assert_eq!(hex(&span.trace_id), trace_id, "{name}");
        assert_eq!(path, "/v1/traces", "{name}: the URI's path");
        assert_eq!(tenant.as_deref(), Some("t1"), "{name}: request_headers_to_add");
    }
    pair.outrider.stop();
}
