//! The OpenTelemetry access logger (`envoy.access_loggers.open_telemetry`) end to end:
//! each request's record reaches a real OTLP logs receiver (a tonic `LogsService` server)
//! over the cluster the logger names, with its body and attributes written from format
//! strings, the resource's labels and the IDs of the request's span. The same bootstrap
//! runs on Envoy 1.40 when
//! installed, and both proxies' records must be the same.

use crate::common;

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::differential::{Pair, grpc_cluster, static_cluster};
use common::otlp::{self, ExportedLog};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;

fn bootstrap(port: u16, backend: u16, collector: u16) -> String {
    format!(
        r#"
node: {{ id: sidecar-1, cluster: reviews.default, locality: {{ zone: zone-a }} }}
static_resources:
  listeners:
  - name: http
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: http
          tracing:
            provider:
              name: envoy.tracers.opentelemetry
              typed_config:
                "@type": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
                grpc_service: {{ envoy_grpc: {{ cluster_name: otel }} }}
          access_log:
          - name: envoy.access_loggers.open_telemetry
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig
              common_config:
                log_name: otel_envoy_accesslog
                transport_api_version: V3
                grpc_service: {{ envoy_grpc: {{ cluster_name: otel, authority: otel-collector.observability }} }}
                filter_state_objects_to_log: [upstream_peer, downstream_peer]
              resource_attributes:
                values: [{{ key: mesh, value: {{ string_value: "%NOT_FORMATTED%" }} }}]
              body:
                string_value: "%REQ(:METHOD)% %REQ(:PATH)% %PROTOCOL% %RESPONSE_CODE% %UPSTREAM_CLUSTER% [%REQ(X-TENANT)%]"
              attributes:
                values:
                - {{ key: status, value: {{ string_value: "%RESPONSE_CODE%" }} }}
                - {{ key: request, value: {{ kvlist_value: {{ values: [{{ key: path, value: {{ string_value: "%REQ(:PATH)%" }} }}, {{ key: tenant, value: {{ string_value: "%REQ(X-TENANT)%" }} }}] }} }} }}
                - {{ key: flags, value: {{ array_value: {{ values: [{{ string_value: "%RESPONSE_FLAGS%" }}, {{ string_value: "literal" }}] }} }} }}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - {{ match: {{ prefix: "/missing" }}, direct_response: {{ status: 404 }} }}
              - {{ match: {{ prefix: "/" }}, route: {{ cluster: backend }} }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:{}{}
"#,
        static_cluster("backend", backend),
        grpc_cluster("otel", collector),
    )
}

/// The caller's trace: the request's span is its child, and the record says so.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

async fn get(port: u16, path: &str, tenant: Option<&str>) -> u16 {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::get(path)
        .header("host", "example.com")
        .header("traceparent", format!("00-{TRACE_ID}-00f067aa0ba902b7-01"));
    if let Some(tenant) = tenant {
        request = request.header("x-tenant", tenant);
    }
    let response = sender.send_request(request.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
    response.status().as_u16()
}

/// An `AnyValue` as comparable text: strings as they are, lists and key-value lists
/// spelled out in order.
fn show(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        None => "<none>".into(),
        Some(Value::StringValue(s)) => format!("{s:?}"),
        Some(Value::ArrayValue(array)) => {
            let values: Vec<String> = array.values.iter().map(|v| show(&Some(v.clone()))).collect();
            format!("[{}]", values.join(", "))
        }
        Some(Value::KvlistValue(list)) => {
            let values: Vec<String> = list.values.iter().map(|kv| format!("{}={}", kv.key, show(&kv.value))).collect();
            format!("{{{}}}", values.join(", "))
        }
        Some(other) => format!("{other:?}"),
    }
}

/// A record as comparable text: resource labels, body, attributes.
fn describe(log: &ExportedLog) -> (Vec<String>, String, Vec<String>) {
    let resource = log.resource.iter().map(|kv| format!("{}={}", kv.key, show(&kv.value))).collect();
    let attributes = log.record.attributes.iter().map(|kv| format!("{}={}", kv.key, show(&kv.value))).collect();
    (resource, show(&log.record.body), attributes)
}

#[tokio::test]
async fn records_reach_the_collector_formatted_as_envoys() {
    let (collector, _spans, mut logs) = otlp::receiver().await;
    let backend = common::backends::healthy("backend").await.port;
    let pair = Pair::start(|port| bootstrap(port, backend, collector)).await;
    let requests = [("/a?x=1", Some("acme")), ("/b", None), ("/missing", Some("globex"))];
    let mut results = Vec::new();
    for (name, port) in pair.ports() {
        for (path, tenant) in requests {
            get(port, path, tenant).await;
        }
        let mut records = Vec::new();
        for _ in requests {
            let log = otlp::next_log(&mut logs).await;
            assert!(log.record.time_unix_nano > 0, "{name}: the record has the request's start time");
            assert_eq!(otlp::hex(&log.record.trace_id), TRACE_ID, "{name}: the record is in the caller's trace");
            assert_eq!(log.record.span_id.len(), 8, "{name}: and names the request's span");
            assert_ne!(otlp::hex(&log.record.span_id), "00f067aa0ba902b7");
            records.push(describe(&log));
        }
        // Batches keep the order of one worker's requests; sort anyway for the comparison.
        records.sort_by(|a, b| a.1.cmp(&b.1));
        results.push((name, records));
    }
    let (_, outrider) = results.last().unwrap();
    assert_eq!(
        outrider[0],
        (
            vec![
                "log_name=\"otel_envoy_accesslog\"".to_owned(),
                "zone_name=\"zone-a\"".to_owned(),
                "cluster_name=\"reviews.default\"".to_owned(),
                "node_name=\"sidecar-1\"".to_owned(),
                "mesh=\"%NOT_FORMATTED%\"".to_owned(),
            ],
            "\"GET /a?x=1 HTTP/1.1 200 backend [acme]\"".to_owned(),
            vec![
                "status=\"200\"".to_owned(),
                "request={path=\"/a?x=1\", tenant=\"acme\"}".to_owned(),
                "flags=[\"-\", \"literal\"]".to_owned(),
            ],
        )
    );
    assert_eq!(outrider[1].1, "\"GET /b HTTP/1.1 200 backend [-]\"", "a missing value is -");
    if let [(_, envoy), (_, outrider)] = results.as_slice() {
        assert_eq!(envoy, outrider, "Envoy 1.40 and Outrider write the same records");
    } else {
        skipped(Tool::Envoy, "the comparison with Envoy", "envoy not found");
    }
    pair.outrider.stop();
}
