//! OpenTelemetry traces: one span per proxied request, the W3C `traceparent` propagated to
//! the upstream, export over OTLP/gRPC.
//!
//! Export never blocks a worker: ending a span hands it to the SDK's batch processor,
//! which queues it (dropping when the queue is full) and exports batches from its own
//! thread. The OTLP client is tonic, which needs a tokio reactor: each batch is sent on
//! the control runtime (its handle is given at start-up), from the processor's thread.
//!
//! Which requests are sampled is the connection manager's decision (Envoy's trace
//! reason); the sampler here only carries it out, as Envoy's OpenTelemetry tracer does: a
//! root span is sampled when the decision says so, a span with a caller's `traceparent`
//! when the decision and the caller's sampled flag both say so. An unsampled span still
//! has its identifiers, so the upstream gets its context with the sampled flag 0.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{Link, SpanKind, Status, TraceContextExt, TraceId, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SamplingDecision, SamplingResult, SdkTracer, SdkTracerProvider,
    ShouldSample, SpanData, SpanExporter,
};

/// Spans queued for export before new ones are dropped.
pub const QUEUE_SPANS: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot build the OTLP exporter for {0}: {1}")]
    Exporter(String, String),
}

/// The tracer: starts request spans. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Tracing {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
    propagator: TraceContextPropagator,
}

/// How spans travel to the collector.
#[derive(Debug, Clone)]
pub enum Transport {
    /// OTLP/gRPC (`TraceService/Export`).
    Grpc,
    /// OTLP/HTTP with protobuf bodies, POSTed to `path` with `headers`.
    Http { path: String, headers: std::collections::HashMap<String, String> },
}

/// Finds the collector's `http://host:port` when a batch is exported (a cluster's
/// endpoint in the current configuration); `None` while there is none.
pub type Resolve = Arc<dyn Fn() -> Option<String> + Send + Sync>;

impl Tracing {
    /// Exports to the OTLP/gRPC collector at `endpoint` (`http://host:port`) as
    /// `service_name`. Must be called on the control runtime, which then carries the
    /// exports.
    pub fn otlp(endpoint: &str, service_name: &str) -> Result<Self, TraceError> {
        let exporter = otlp_exporter(endpoint)?;
        Ok(Self::with_exporter(exporter, service_name))
    }

    /// Exports to wherever `resolve` says when each batch leaves, reconnecting when that
    /// changes (a collector cluster's endpoints come and go with the configuration).
    /// Must be called within the control runtime's context, which carries the exports.
    pub fn otlp_resolved(resolve: Resolve, transport: Transport, service_name: &str) -> Self {
        let exporter = Resolving { resolve, transport, resource: None, current: Mutex::new(None) };
        Self::with_exporter(exporter, service_name)
    }

    fn with_exporter(exporter: impl SpanExporter + 'static, service_name: &str) -> Self {
        let exporter = OnRuntime { inner: exporter, runtime: tokio::runtime::Handle::current() };
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(QUEUE_SPANS)
            .with_scheduled_delay(Duration::from_millis(500))
            .build();
        let processor = BatchSpanProcessor::builder(exporter).with_batch_config(batch).build();
        let resource = opentelemetry_sdk::Resource::builder().with_service_name(service_name.to_owned()).build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource)
            .with_sampler(Decided)
            .build();
        let tracer = provider.tracer("outrider");
        Self { tracer, provider, propagator: TraceContextPropagator::new() }
    }

    /// Starts a span named `name`, the child of the request's `traceparent` if any (whose
    /// sampled flag then decides), else a root span recorded when `sampled`. `None` when
    /// the request's `traceparent` cannot be parsed: Envoy then starts no span and leaves
    /// the header as it came.
    pub fn start(
        &self,
        name: String,
        request: &HeaderMap,
        kind: SpanKind,
        sampled: bool,
        attributes: Vec<KeyValue>,
    ) -> Option<RequestSpan> {
        let parent = self.propagator.extract(&Headers(request));
        if request.contains_key(TRACEPARENT) && !parent.span().span_context().is_valid() {
            return None;
        }
        let parent = parent.with_value(Traced(sampled));
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        Some(RequestSpan { cx: parent.with_span(span), propagator: self.propagator.clone(), tracer: self.clone() })
    }

    /// Exports what is queued; waits at most a few seconds (shutdown).
    pub fn flush(&self) {
        if let Err(error) = self.provider.force_flush() {
            tracing::debug!(%error, "span flush failed");
        }
    }
}

const TRACEPARENT: &str = "traceparent";

/// OTLP/HTTP (protobuf) to `url`, the collector's whole address with its path.
fn otlp_http_exporter(
    url: &str,
    headers: &std::collections::HashMap<String, String>,
) -> Result<opentelemetry_otlp::SpanExporter, TraceError> {
    use opentelemetry_otlp::WithHttpConfig;
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .with_headers(headers.clone())
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| TraceError::Exporter(url.to_owned(), e.to_string()))
}

fn otlp_exporter(endpoint: &str) -> Result<opentelemetry_otlp::SpanExporter, TraceError> {
    opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| TraceError::Exporter(endpoint.to_owned(), e.to_string()))
}

/// The connection manager's sampling decision for a root span, carried in its parent
/// context.
#[derive(Debug, Clone, Copy)]
struct Traced(bool);

/// Samples a span when the connection manager decided to ([`Traced`], which children
/// inherit with their parent's context) and its parent, if any, is sampled.
#[derive(Debug, Clone)]
struct Decided;

impl ShouldSample for Decided {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        _trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        let traced = parent_context.and_then(|cx| cx.get::<Traced>()).is_none_or(|t| t.0);
        let parent = parent_context.map(|cx| cx.span().span_context().clone()).filter(|p| p.is_valid());
        let sampled = traced && parent.as_ref().is_none_or(|p| p.is_sampled());
        SamplingResult {
            decision: if sampled { SamplingDecision::RecordAndSample } else { SamplingDecision::Drop },
            attributes: Vec::new(),
            trace_state: parent.map(|p| p.trace_state().clone()).unwrap_or_default(),
        }
    }
}

/// One request's span.
#[derive(Debug)]
pub struct RequestSpan {
    cx: Context,
    propagator: TraceContextPropagator,
    tracer: Tracing,
}

impl RequestSpan {
    /// The span's trace and span IDs (sampled or not).
    pub fn ids(&self) -> ([u8; 16], [u8; 8]) {
        let span = self.cx.span();
        let context = span.span_context();
        (context.trace_id().to_bytes(), context.span_id().to_bytes())
    }

    /// Whether the span is recorded and exported.
    pub fn sampled(&self) -> bool {
        self.cx.span().span_context().is_sampled()
    }

    /// A client span for one upstream request (`spawn_upstream_span`), the child of this
    /// one.
    pub fn child(&self, name: String, attributes: Vec<KeyValue>) -> RequestSpan {
        let span = self
            .tracer
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer.tracer, &self.cx);
        RequestSpan { cx: self.cx.with_span(span), propagator: self.propagator.clone(), tracer: self.tracer.clone() }
    }

    /// Sets `traceparent` (and `tracestate`) of an upstream request to this span.
    pub fn inject(&self, headers: &mut HeaderMap) {
        self.propagator.inject_context(&self.cx, &mut HeadersMut(headers));
    }

    pub fn set(&self, attribute: KeyValue) {
        self.cx.span().set_attribute(attribute);
    }

    /// Ends the span with the response status (5xx: error, as Envoy marks it).
    pub fn end(self, status: u16, attributes: Vec<KeyValue>) {
        let span = self.cx.span();
        span.set_attributes(attributes);
        span.set_attribute(KeyValue::new("http.status_code", i64::from(status)));
        if status >= 500 {
            span.set_status(Status::error(Cow::Owned(format!("{status}"))));
        }
        span.end();
    }
}

impl RequestSpan {
    /// Ends an upstream attempt's span: the upstream's status, or none when the attempt
    /// got no response (an error, as Envoy marks a reset).
    pub fn end_upstream(self, status: Option<u16>) {
        match status {
            Some(status) => self.end(status, Vec::new()),
            None => {
                let span = self.cx.span();
                span.set_attribute(KeyValue::new("error", true));
                span.set_status(Status::error("upstream reset"));
                span.end();
            }
        }
    }
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct HeadersMut<'a>(&'a mut HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(key), HeaderValue::try_from(value)) {
            self.0.insert(name, value);
        }
    }
}

/// The OTLP exporter, run on the control runtime from the batch processor's thread.
#[derive(Debug)]
struct OnRuntime<E> {
    inner: E,
    runtime: tokio::runtime::Handle,
}

impl<E: SpanExporter> SpanExporter for OnRuntime<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        // The processor's own thread: blocking it is what it is for. The control
        // runtime's thread drives the connection's I/O meanwhile.
        self.runtime.block_on(self.inner.export(batch))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// An OTLP/gRPC exporter to wherever [`Resolve`] says at the time of each export.
struct Resolving {
    resolve: Resolve,
    transport: Transport,
    /// Given by the provider once; each new exporter gets it.
    resource: Option<opentelemetry_sdk::Resource>,
    current: Mutex<Option<(String, Arc<opentelemetry_otlp::SpanExporter>)>>,
}

impl std::fmt::Debug for Resolving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolving").finish_non_exhaustive()
    }
}

impl Resolving {
    /// The exporter for the endpoint resolved now, built when the endpoint changed.
    fn exporter(&self) -> Option<Arc<opentelemetry_otlp::SpanExporter>> {
        let endpoint = (self.resolve)()?;
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, exporter)) = current.as_ref()
            && *at == endpoint
        {
            return Some(exporter.clone());
        }
        let built = match &self.transport {
            Transport::Grpc => otlp_exporter(&endpoint),
            Transport::Http { path, headers } => otlp_http_exporter(&format!("{endpoint}{path}"), headers),
        };
        match built {
            Ok(mut exporter) => {
                if let Some(resource) = &self.resource {
                    exporter.set_resource(resource);
                }
                let exporter = Arc::new(exporter);
                *current = Some((endpoint, exporter.clone()));
                Some(exporter)
            }
            Err(error) => {
                tracing::debug!(%error, "spans not exported");
                None
            }
        }
    }
}

impl SpanExporter for Resolving {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        match self.exporter() {
            Some(exporter) => exporter.export(batch).await,
            None => Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                "the collector's cluster has no endpoint".to_owned(),
            )),
        }
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.resource = Some(resource.clone());
    }
}
