//! Real OTLP/gRPC receivers on loopback (tonic servers built from the OpenTelemetry
//! protos): every exported span or log record goes to a channel, with its resource.

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{LogsService, LogsServiceServer};
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::sync::mpsc;

use super::WAIT;

/// A span with its resource's `service.name`.
pub type Exported = (String, Span);

struct Traces(mpsc::UnboundedSender<Exported>);

#[tonic::async_trait]
impl TraceService for Traces {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for resource in request.into_inner().resource_spans {
            let attributes = resource.resource.map(|r| r.attributes).unwrap_or_default();
            let service = string(&attributes, "service.name").unwrap_or_default();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                let _ = self.0.send((service.clone(), span));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// A log record with its resource's attributes and the `log_name` it came under.
#[derive(Debug, Clone)]
pub struct ExportedLog {
    pub resource: Vec<KeyValue>,
    pub record: LogRecord,
}

struct Logs(mpsc::UnboundedSender<ExportedLog>);

#[tonic::async_trait]
impl LogsService for Logs {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        for resource in request.into_inner().resource_logs {
            let attributes = resource.resource.map(|r| r.attributes).unwrap_or_default();
            for record in resource.scope_logs.into_iter().flat_map(|s| s.log_records) {
                let _ = self.0.send(ExportedLog { resource: attributes.clone(), record });
            }
        }
        Ok(tonic::Response::new(ExportLogsServiceResponse { partial_success: None }))
    }
}

/// A receiver for both signals; returns its port.
pub async fn receiver() -> (u16, mpsc::UnboundedReceiver<Exported>, mpsc::UnboundedReceiver<ExportedLog>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (spans, span_rx) = mpsc::unbounded_channel();
    let (logs, log_rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Traces(spans)))
            .add_service(LogsServiceServer::new(Logs(logs)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (port, span_rx, log_rx)
}

/// An OTLP/HTTP span as it arrived: the request's path and `x-tenant` header, the span.
pub type ExportedOverHttp = (String, Option<String>, Span);

/// A receiver of OTLP/HTTP (protobuf) trace exports; returns its port.
pub async fn http_receiver() -> (u16, mpsc::UnboundedReceiver<ExportedOverHttp>) {
    use http_body_util::BodyExt;
    use prost::Message;
    let (tx, rx) = mpsc::unbounded_channel();
    let backend = super::backends::http(move |request: hyper::Request<hyper::body::Incoming>| {
        let tx = tx.clone();
        async move {
            let path = request.uri().path().to_owned();
            let tenant = request.headers().get("x-tenant").map(|v| v.to_str().unwrap().to_owned());
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let export = ExportTraceServiceRequest::decode(body).unwrap();
            for span in export.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans) {
                let _ = tx.send((path.clone(), tenant.clone(), span));
            }
            let reply = ExportTraceServiceResponse { partial_success: None }.encode_to_vec();
            hyper::Response::builder()
                .header("content-type", "application/x-protobuf")
                .body(http_body_util::Full::new(bytes::Bytes::from(reply)))
                .unwrap()
        }
    })
    .await;
    (backend.port, rx)
}

pub async fn next_span(spans: &mut mpsc::UnboundedReceiver<Exported>) -> Exported {
    tokio::time::timeout(WAIT, spans.recv()).await.expect("a span is exported").unwrap()
}

pub async fn next_log(logs: &mut mpsc::UnboundedReceiver<ExportedLog>) -> ExportedLog {
    tokio::time::timeout(WAIT, logs.recv()).await.expect("a log record is exported").unwrap()
}

/// The string value of attribute `key`.
pub fn string(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|a| a.key == key).and_then(|a| match a.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        _ => None,
    })
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
