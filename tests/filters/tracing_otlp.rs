//! OpenTelemetry traces end to end: Outrider exports a span per request over OTLP/gRPC to
//! a real OTLP receiver (a tonic server built from the OpenTelemetry protos), the span is
//! the child of the request's `traceparent`, and the upstream receives the span as its
//! parent.

use std::convert::Infallible;
use std::time::Duration;

use crate::common::lab::free_port;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use outrider::config::bootstrap::Bootstrap;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(20);

/// An OTLP collector: every exported span goes to the channel.
struct Receiver(mpsc::UnboundedSender<(String, Span)>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for resource in request.into_inner().resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                    Value::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                let _ = self.0.send((service.clone(), span));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

async fn otlp_receiver() -> (u16, mpsc::UnboundedReceiver<(String, Span)>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Receiver(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (port, rx)
}

/// A backend that answers with the `traceparent` it received.
async fn echo_traceparent() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let service = service_fn(|request: hyper::Request<hyper::body::Incoming>| async move {
                    let parent =
                        request.headers().get("traceparent").map(|v| v.as_bytes().to_vec()).unwrap_or_default();
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(parent))))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

fn bootstrap(proxy: u16, backend: u16, collector: u16) -> Bootstrap {
    Bootstrap::parse(&format!(
        r#"
node: {{ id: traced, cluster: test }}
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
tracing:
  http:
    name: envoy.tracers.opentelemetry
    typed_config:
      "@type": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
      grpc_service: {{ envoy_grpc: {{ cluster_name: otel }} }}
      service_name: sidecar-under-test
static_resources:
  listeners:
  - name: http
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {proxy} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: http
          tracing: {{}}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{ name: everything, match: {{ prefix: "/" }}, route: {{ cluster: backend }} }}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {backend} }} }} }} }}] }}]
  - name: otel
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: otel
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {collector} }} }} }} }}] }}]
"#
    ))
    .unwrap()
}

/// GET through the proxy; the body is the `traceparent` the backend saw.
async fn get(port: u16, path: &str, traceparent: Option<&str>) -> String {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::get(path).header("host", "example.com");
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    let response = sender.send_request(request.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
    assert_eq!(response.status(), 200);
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<Value> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| a.value.clone()?.value)
}

async fn next_span(spans: &mut mpsc::UnboundedReceiver<(String, Span)>) -> (String, Span) {
    tokio::time::timeout(WAIT, spans.recv()).await.expect("a span is exported").unwrap()
}

#[tokio::test]
async fn spans_arrive_at_the_collector_with_the_right_parent() {
    let (collector, mut spans) = otlp_receiver().await;
    let backend = echo_traceparent().await;
    let proxy = free_port();
    let outrider = outrider::app::start_with(bootstrap(proxy, backend, collector), 1).await.unwrap();
    outrider.listeners_ready().await;

    // A request that is part of a trace: the span is its child.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let upstream_saw = get(proxy, "/traced?x=1", Some(&format!("00-{trace_id}-{caller_span}-01"))).await;
    let (service, span) = next_span(&mut spans).await;
    assert_eq!(service, "sidecar-under-test");
    assert_eq!(hex(&span.trace_id), trace_id);
    assert_eq!(hex(&span.parent_span_id), caller_span, "the caller's span is the parent");
    assert_eq!(upstream_saw, format!("00-{trace_id}-{}-01", hex(&span.span_id)), "the upstream's parent is the span");
    assert_eq!(span.name, "example.com/traced");
    assert_eq!(span.kind, 2, "SPAN_KIND_SERVER");
    assert_eq!(attribute(&span, "upstream_cluster"), Some(Value::StringValue("backend".into())));
    assert_eq!(attribute(&span, "route_name"), Some(Value::StringValue("everything".into())));
    assert_eq!(attribute(&span, "outrider.lb_policy"), Some(Value::StringValue("ROUND_ROBIN".into())));
    assert_eq!(attribute(&span, "upstream_address"), Some(Value::StringValue(format!("127.0.0.1:{backend}"))));
    assert_eq!(attribute(&span, "http.status_code"), Some(Value::IntValue(200)));
    assert_eq!(attribute(&span, "response_flags"), Some(Value::StringValue("-".into())));
    assert_eq!(attribute(&span, "outrider.retries"), Some(Value::IntValue(0)));

    // A request without a trace starts one.
    let upstream_saw = get(proxy, "/fresh", None).await;
    let (_, span) = next_span(&mut spans).await;
    assert!(span.parent_span_id.is_empty(), "a root span");
    assert_eq!(upstream_saw, format!("00-{}-{}-01", hex(&span.trace_id), hex(&span.span_id)));
    outrider.stop();
}
