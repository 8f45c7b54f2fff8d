//! One request's access log record: its request's part is captured when it arrives
//! (after the connection manager's own header handling, so a generated `x-request-id` is
//! logged), the response's when its headers are sent, and the lines are written when the
//! response ends ([`super::completion`]) into the worker's buffer of each logger, in that
//! logger's format ([`format`]).

mod entry;
mod filter;
pub mod format;
pub mod grpc;
pub mod otel;
mod time;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::request::Parts;
use http::{HeaderMap, Method, Uri, Version};

use super::filters::DynamicMetadata;
use super::response_flags::ResponseFlags;
use super::stream_info::FilterState;
use crate::config::access_log::{AccessLogFilter, LogFormat};
use crate::telemetry::WorkerLineBuffer;

/// A connection manager's access logger on one worker: its parsed format and the
/// worker's buffer for its destination.
#[derive(Debug, Clone)]
pub struct ActiveLog {
    pub format: Arc<LogFormat>,
    pub filter: Option<Arc<AccessLogFilter>>,
    pub out: LogOutput,
}

/// Where a logger's entries go on this worker.
#[derive(Debug, Clone)]
pub enum LogOutput {
    /// A line in the logger's format (stdout, stderr, a file).
    Lines(Arc<WorkerLineBuffer>),
    /// An entry for the access log service.
    Grpc(Arc<grpc::GrpcLogBuffer>),
    /// An OTLP log record.
    OpenTelemetry(Arc<otel::OtelLogBuffer>),
}

/// What the downstream connection tells the log.
#[derive(Debug, Clone)]
pub struct DownstreamLogInfo {
    pub local: SocketAddr,
    /// The client's address after `x-forwarded-for` handling (Envoy's
    /// `DOWNSTREAM_REMOTE_ADDRESS`).
    pub remote: SocketAddr,
    pub server_name: Option<String>,
    pub peer_uri_san: Option<String>,
    /// The first URI SAN of the certificate this side presented.
    pub local_uri_san: Option<Arc<str>>,
}

/// One request's log record, waiting for the end of its response.
#[derive(Debug)]
pub struct PendingLog {
    loggers: Arc<[ActiveLog]>,
    pub start: SystemTime,
    started: Instant,
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub request_headers: HeaderMap,
    pub downstream: DownstreamLogInfo,
    pub bytes_received: u64,
    pub response_code: u16,
    pub flags: ResponseFlags,
    pub response_headers: HeaderMap,
    pub trailers: Option<HeaderMap>,
    pub details: Option<Cow<'static, str>>,
    pub upstream_host: Option<String>,
    pub upstream_cluster: Option<String>,
    pub route_name: Option<String>,
    pub metadata: Option<DynamicMetadata>,
    /// The request's filter state as the filters left it, then its connection's (for
    /// `%FILTER_STATE(…)%`), when either has any.
    pub filter_state: Option<FilterState>,
    /// From the start to the end of the request (Envoy's last downstream byte received).
    pub request_duration: Option<Duration>,
    /// From the start to the upstream's response head (none for a local reply).
    pub response_duration: Option<Duration>,
    pub bytes_sent: u64,
    pub duration: Duration,
    /// The request carries a sampled span (`traceable_filter`).
    pub traced: bool,
    /// The trace and span IDs of the request's span, if it has one.
    pub span_ids: Option<([u8; 16], [u8; 8])>,
}

impl PendingLog {
    /// Captures the request's fields.
    pub fn new(
        loggers: Arc<[ActiveLog]>,
        start: SystemTime,
        started: Instant,
        parts: &Parts,
        downstream: DownstreamLogInfo,
    ) -> Self {
        Self {
            loggers,
            start,
            started,
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            version: parts.version,
            request_headers: parts.headers.clone(),
            downstream,
            bytes_received: 0,
            response_code: 0,
            flags: ResponseFlags::NONE,
            response_headers: HeaderMap::new(),
            trailers: None,
            details: None,
            upstream_host: None,
            upstream_cluster: None,
            route_name: None,
            metadata: None,
            filter_state: None,
            request_duration: None,
            response_duration: None,
            bytes_sent: 0,
            duration: Duration::ZERO,
            traced: false,
            span_ids: None,
        }
    }

    /// The request's body has been read (or the request is answered without it).
    pub fn request_done(&mut self) {
        if self.request_duration.is_none() {
            self.request_duration = Some(self.started.elapsed());
        }
    }

    /// The upstream's response head arrived.
    pub fn upstream_responded(&mut self) {
        self.response_duration = Some(self.started.elapsed());
    }

    /// Records the response head.
    pub fn respond(&mut self, status: u16, headers: &HeaderMap, flags: ResponseFlags) {
        self.response_code = status;
        self.flags.insert(flags);
        self.response_headers = headers.clone();
        self.request_done();
    }

    /// Writes the line of every logger whose filter passes into its worker buffer.
    pub fn write(&mut self, bytes_sent: u64, duration: Duration) {
        self.bytes_sent = bytes_sent;
        self.duration = duration;
        let loggers = self.loggers.clone();
        for logger in loggers.iter() {
            if logger.filter.as_ref().is_some_and(|f| !filter::passes(f, self)) {
                continue;
            }
            match &logger.out {
                LogOutput::Lines(lines) => lines.append(|out| format::write(&logger.format, self, out)),
                LogOutput::Grpc(grpc) => grpc.append(entry::http_entry(self, &grpc.config)),
                LogOutput::OpenTelemetry(otel) => otel.append(otel::record(&otel.config, self)),
            }
        }
    }

    /// A request header by its lower-cased name; the pseudo-headers come from the
    /// request line (`:path` with its query, as Envoy has it).
    pub fn request_header(&self, name: &str) -> Option<Cow<'_, str>> {
        match name {
            ":method" => Some(Cow::Borrowed(self.method.as_str())),
            ":path" => Some(Cow::Borrowed(self.uri.path_and_query().map_or("/", |p| p.as_str()))),
            ":authority" => match self.uri.authority() {
                Some(authority) => Some(Cow::Borrowed(authority.as_str())),
                None => header(&self.request_headers, "host"),
            },
            ":scheme" => self.uri.scheme_str().map(Cow::Borrowed),
            _ => header(&self.request_headers, name),
        }
    }

    pub fn response_header(&self, name: &str) -> Option<Cow<'_, str>> {
        header(&self.response_headers, name)
    }

    pub fn trailer(&self, name: &str) -> Option<Cow<'_, str>> {
        header(self.trailers.as_ref()?, name)
    }
}

/// All the values of a header, joined with `,` as Envoy joins repeated headers.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<Cow<'a, str>> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    let mut text = String::from_utf8_lossy(first.as_bytes());
    for more in values {
        let joined = text.to_mut();
        joined.push(',');
        joined.push_str(&String::from_utf8_lossy(more.as_bytes()));
    }
    Some(text)
}

/// `%PROTOCOL%`.
pub fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}
