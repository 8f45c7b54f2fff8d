//! Envoy's gRPC access log service client (`AccessLogService/StreamAccessLogs`): each
//! worker batches its entries ([`GrpcLogBuffer`]) and hands a batch to its stream task
//! when it reaches `buffer_size_bytes` or when the flush timer fires. The task keeps one
//! client stream open over the named cluster, through the worker's balancer and pools as
//! any upstream request, and sends the identifier (`log_name`) first on each new stream.
//! Nothing here waits on the collector: a batch the task cannot take, or one sent while
//! the collector is down, is dropped and its entries counted
//! (`outrider.access_log.grpc_dropped_entries`).

use std::rc::{Rc, Weak};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::config::access_log::GrpcAccessLog;
use crate::lb::PickContext;
use crate::pb::envoy::data::accesslog::v3::HttpAccessLogEntry;
use crate::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
use crate::pb::envoy::service::accesslog::v3::stream_access_logs_message::{
    HttpAccessLogEntries, Identifier, LogEntries,
};
use crate::proxy::clusters::WorkerClusters;
use crate::proxy::original_dst::DestinationSources;
use crate::proxy::upstream::BoxError;
use crate::telemetry::Counter;

const PATH: &str = "/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs";

/// Batches waiting for the stream task before new ones are dropped.
const QUEUE_BATCHES: usize = 16;

/// Messages waiting in an open stream's body before the stream counts as slow.
const STREAM_MESSAGES: usize = 16;

/// One worker's entries for one gRPC logger.
#[derive(Debug)]
pub struct GrpcLogBuffer {
    pub config: GrpcAccessLog,
    batch: Mutex<(Vec<HttpAccessLogEntry>, usize)>,
    limit: usize,
    tx: mpsc::Sender<Vec<HttpAccessLogEntry>>,
    dropped: Counter,
}

impl GrpcLogBuffer {
    /// The logger's buffer on this worker, with its stream task and flush timer on the
    /// worker's LocalSet (where connection tasks, the only callers, run).
    pub fn start(clusters: &Rc<WorkerClusters>, config: &GrpcAccessLog, dropped: Counter) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(QUEUE_BATCHES);
        let buffer = Arc::new(Self {
            config: config.clone(),
            batch: Mutex::new((Vec::new(), 0)),
            limit: config.buffer_size_bytes,
            tx,
            dropped: dropped.clone(),
        });
        tokio::task::spawn_local(stream_task(Rc::downgrade(clusters), config.clone(), rx, dropped));
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

    pub fn append(&self, entry: HttpAccessLogEntry) {
        let mut batch = self.batch.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        batch.1 = batch.1.saturating_add(entry.encoded_len());
        batch.0.push(entry);
        if batch.1 >= self.limit {
            let full = std::mem::take(&mut batch.0);
            batch.1 = 0;
            drop(batch);
            self.send(full);
        }
    }

    pub fn flush(&self) {
        let mut batch = self.batch.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if batch.0.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut batch.0);
        batch.1 = 0;
        drop(batch);
        self.send(pending);
    }

    fn send(&self, entries: Vec<HttpAccessLogEntry>) {
        if let Err(error) = self.tx.try_send(entries) {
            let entries = match error {
                mpsc::error::TrySendError::Full(e) | mpsc::error::TrySendError::Closed(e) => e,
            };
            self.dropped.add(entries.len() as u64);
        }
    }
}

/// Sends each batch on the open stream, opening one (identifier first) when there is
/// none or the last one ended.
async fn stream_task(
    clusters: Weak<WorkerClusters>,
    config: GrpcAccessLog,
    mut batches: mpsc::Receiver<Vec<HttpAccessLogEntry>>,
    dropped: Counter,
) {
    let mut stream: Option<mpsc::Sender<Bytes>> = None;
    while let Some(entries) = batches.recv().await {
        let Some(clusters) = clusters.upgrade() else { break };
        let count = entries.len() as u64;
        let mut identifier = None;
        if stream.as_ref().is_none_or(mpsc::Sender::is_closed) {
            stream = open(&clusters, &config);
            identifier = Some(Identifier { node: None, log_name: config.log_name.clone() });
        }
        let message = StreamAccessLogsMessage {
            identifier,
            log_entries: Some(LogEntries::HttpLogs(HttpAccessLogEntries { log_entry: entries })),
        };
        let sent = stream.as_ref().is_some_and(|s| s.try_send(frame(&message)).is_ok());
        if !sent {
            dropped.add(count);
            stream = None;
        }
    }
}

/// One gRPC message frame (uncompressed).
fn frame(message: &StreamAccessLogsMessage) -> Bytes {
    let length = message.encoded_len();
    let mut frame = BytesMut::with_capacity(5 + length);
    frame.put_u8(0);
    frame.put_u32(u32::try_from(length).unwrap_or(u32::MAX));
    // Encoding into a buffer sized for the message cannot fail.
    let _ = message.encode(&mut frame);
    frame.freeze()
}

/// Opens a stream to the cluster: the request goes out with a body fed by the returned
/// sender, and a task holds the call until the collector ends it (the sender then
/// reports closed). `None` when the cluster or a healthy endpoint is missing.
fn open(clusters: &Rc<WorkerClusters>, config: &GrpcAccessLog) -> Option<mpsc::Sender<Bytes>> {
    let snapshot = clusters.store.load();
    let local = clusters.get(&snapshot, config.cluster.as_str())?;
    let pick = PickContext { hash: None, attempt: 0, previous: &[], now: Instant::now() };
    let host = local.pick(&pick, DestinationSources::default)?;
    let tls = local.tls(&host.endpoint, &snapshot, &clusters.tls).ok()?;
    let (tx, rx) = mpsc::channel::<Bytes>(STREAM_MESSAGES);
    let body = BodyExt::boxed(StreamBody::new(ReceiverStream::new(rx).map(|b| Ok::<_, BoxError>(Frame::data(b)))));
    let mut request = Request::post(format!("http://{}{PATH}", config.authority)).body(body).ok()?;
    let headers = request.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    let clusters = clusters.clone();
    tokio::task::spawn_local(async move {
        let call = local.forward(&clusters.upstreams, &host, true, request, tls);
        match call.await {
            Ok(response) => {
                let _ = response.into_body().collect().await;
            }
            Err(error) => tracing::debug!(%error, "gRPC access log stream failed"),
        }
    });
    Some(tx)
}
