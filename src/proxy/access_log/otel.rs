//! Envoy's OpenTelemetry access logger: each request becomes an OTLP `LogRecord` (its
//! start time, the configured body and attributes written from their format strings, the
//! trace and span IDs of the request's span),
//! batched per worker ([`OtelLogBuffer`]) and exported with `LogsService/Export` over the
//! named cluster, through the worker's balancer and pools as any upstream request. As
//! with the gRPC access log service, nothing waits on the collector: a batch the export
//! task cannot take, or one the collector does not accept, is dropped and its records
//! counted (`outrider.access_log.otel_dropped_entries`).

use std::rc::{Rc, Weak};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, KeyValueList, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tokio::sync::mpsc;

use super::{PendingLog, format};
use crate::config::access_log::open_telemetry::{OpenTelemetryAccessLog, OtelTemplate};
use crate::lb::PickContext;
use crate::proxy::clusters::WorkerClusters;
use crate::proxy::original_dst::DestinationSources;
use crate::proxy::upstream::BoxError;
use crate::telemetry::Counter;

const PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// Batches waiting for the export task before new ones are dropped.
const QUEUE_BATCHES: usize = 16;

/// How long one export may take before its batch counts as lost.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the resource's built-in labels say about this proxy (its bootstrap `node`).
#[derive(Debug, Clone, Default)]
pub struct NodeLabels {
    pub node_name: String,
    pub cluster_name: String,
    pub zone_name: String,
}

/// One worker's records for one OpenTelemetry logger.
#[derive(Debug)]
pub struct OtelLogBuffer {
    pub config: Arc<OpenTelemetryAccessLog>,
    batch: Mutex<(Vec<LogRecord>, usize)>,
    tx: mpsc::Sender<Vec<LogRecord>>,
    dropped: Counter,
}

impl OtelLogBuffer {
    /// The logger's buffer on this worker, with its export task and flush timer on the
    /// worker's LocalSet (where connection tasks, the only callers, run).
    pub fn start(
        clusters: &Rc<WorkerClusters>,
        config: &Arc<OpenTelemetryAccessLog>,
        node: &NodeLabels,
        dropped: Counter,
    ) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(QUEUE_BATCHES);
        let buffer =
            Arc::new(Self { config: config.clone(), batch: Mutex::new((Vec::new(), 0)), tx, dropped: dropped.clone() });
        let resource = resource(config, node);
        tokio::task::spawn_local(export_task(Rc::downgrade(clusters), config.clone(), resource, rx, dropped));
        let timer = Arc::downgrade(&buffer);
        let interval = config.flush_interval;
        tokio::task::spawn_local(async move {
            let mut ticks = tokio::time::interval(interval);
            loop {
                ticks.tick().await;
                let Some(buffer) = timer.upgrade() else { break };
                buffer.flush();
            }
        });
        buffer
    }

    pub fn append(&self, record: LogRecord) {
        let mut batch = self.batch.lock().unwrap_or_else(PoisonError::into_inner);
        batch.1 = batch.1.saturating_add(record.encoded_len());
        batch.0.push(record);
        if batch.1 >= self.config.buffer_size_bytes {
            let full = std::mem::take(&mut batch.0);
            batch.1 = 0;
            drop(batch);
            self.send(full);
        }
    }

    pub fn flush(&self) {
        let mut batch = self.batch.lock().unwrap_or_else(PoisonError::into_inner);
        if batch.0.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut batch.0);
        batch.1 = 0;
        drop(batch);
        self.send(pending);
    }

    fn send(&self, records: Vec<LogRecord>) {
        if let Err(error) = self.tx.try_send(records) {
            let records = match error {
                mpsc::error::TrySendError::Full(r) | mpsc::error::TrySendError::Closed(r) => r,
            };
            self.dropped.add(records.len() as u64);
        }
    }
}

/// The request's record: its start time, body and attributes.
pub fn record(config: &OpenTelemetryAccessLog, log: &PendingLog) -> LogRecord {
    let start = log.start.duration_since(UNIX_EPOCH).unwrap_or_default();
    LogRecord {
        time_unix_nano: u64::try_from(start.as_nanos()).unwrap_or(u64::MAX),
        body: config.body.as_ref().map(|body| value(body, log)),
        attributes: key_values(&config.attributes, log),
        // The request's span, as Envoy links a record to it.
        trace_id: log.span_ids.map(|(trace, _)| trace.to_vec()).unwrap_or_default(),
        span_id: log.span_ids.map(|(_, span)| span.to_vec()).unwrap_or_default(),
        ..LogRecord::default()
    }
}

fn value(template: &OtelTemplate, log: &PendingLog) -> AnyValue {
    let value = match template {
        OtelTemplate::Text(pieces) => {
            let mut out = Vec::new();
            format::text(pieces, log, false, &mut out);
            any_value::Value::StringValue(String::from_utf8_lossy(&out).into_owned())
        }
        OtelTemplate::Array(values) => {
            any_value::Value::ArrayValue(ArrayValue { values: values.iter().map(|v| value(v, log)).collect() })
        }
        OtelTemplate::KvList(pairs) => any_value::Value::KvlistValue(KeyValueList { values: key_values(pairs, log) }),
    };
    AnyValue { value: Some(value) }
}

fn key_values(pairs: &[(String, OtelTemplate)], log: &PendingLog) -> Vec<KeyValue> {
    pairs
        .iter()
        .map(|(key, template)| KeyValue { key: key.clone(), value: Some(value(template, log)), ..KeyValue::default() })
        .collect()
}

/// The resource every batch carries: Envoy's built-in labels unless disabled, then the
/// configured `resource_attributes`.
fn resource(config: &OpenTelemetryAccessLog, node: &NodeLabels) -> Resource {
    let label = |key: &str, value: &str| KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.to_owned())) }),
        ..KeyValue::default()
    };
    let mut attributes = Vec::new();
    if config.builtin_labels {
        attributes.push(label("log_name", &config.log_name));
        attributes.push(label("zone_name", &node.zone_name));
        attributes.push(label("cluster_name", &node.cluster_name));
        attributes.push(label("node_name", &node.node_name));
    }
    // Encoded from the same message at conversion: decoding it cannot fail.
    attributes.extend(KeyValueList::decode(config.resource_attributes.as_slice()).unwrap_or_default().values);
    Resource { attributes, ..Resource::default() }
}

/// Exports each batch in turn; one that fails is counted as dropped.
async fn export_task(
    clusters: Weak<WorkerClusters>,
    config: Arc<OpenTelemetryAccessLog>,
    resource: Resource,
    mut batches: mpsc::Receiver<Vec<LogRecord>>,
    dropped: Counter,
) {
    while let Some(records) = batches.recv().await {
        let Some(clusters) = clusters.upgrade() else { break };
        let count = records.len() as u64;
        let request = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(resource.clone()),
                scope_logs: vec![ScopeLogs { log_records: records, ..ScopeLogs::default() }],
                ..ResourceLogs::default()
            }],
        };
        let exported = tokio::time::timeout(EXPORT_TIMEOUT, export(&clusters, &config, &request)).await;
        if !matches!(exported, Ok(true)) {
            dropped.add(count);
        }
    }
}

/// One unary `Export` call; whether the collector accepted it (HTTP 200, `grpc-status` 0).
async fn export(
    clusters: &WorkerClusters,
    config: &OpenTelemetryAccessLog,
    request: &ExportLogsServiceRequest,
) -> bool {
    let snapshot = clusters.store.load();
    let Some(local) = clusters.get(&snapshot, config.cluster.as_str()) else {
        tracing::debug!(cluster = %config.cluster, "OpenTelemetry access log: no such cluster");
        return false;
    };
    let pick = PickContext { hash: None, attempt: 0, previous: &[], now: Instant::now() };
    let Some(host) = local.pick(&pick, DestinationSources::default) else { return false };
    let Ok(tls) = local.tls(&host.endpoint, &snapshot, &clusters.tls) else { return false };
    let body = Full::new(frame(request)).map_err(|never| -> BoxError { match never {} }).boxed();
    let Ok(mut call) = Request::post(format!("http://{}{PATH}", config.authority)).body(body) else { return false };
    let headers = call.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    let response = match local.forward(&clusters.upstreams, &host, true, call, tls).await {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(%error, "OpenTelemetry access log export failed");
            return false;
        }
    };
    let (parts, body) = response.into_parts();
    // Trailers-only answers carry the status in the headers.
    let mut status = parts.headers.get("grpc-status").cloned();
    if let Ok(collected) = body.collect().await
        && let Some(trailers) = collected.trailers()
        && let Some(value) = trailers.get("grpc-status")
    {
        status = Some(value.clone());
    }
    parts.status == http::StatusCode::OK && status.is_some_and(|s| s.as_bytes() == b"0")
}

/// One gRPC message frame (uncompressed).
fn frame(message: &ExportLogsServiceRequest) -> Bytes {
    let length = message.encoded_len();
    let mut frame = BytesMut::with_capacity(5usize.saturating_add(length));
    frame.put_u8(0);
    frame.put_u32(u32::try_from(length).unwrap_or(u32::MAX));
    // Encoding into a buffer sized for the message cannot fail.
    let _ = message.encode(&mut frame);
    frame.freeze()
}
