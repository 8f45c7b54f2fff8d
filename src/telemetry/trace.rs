//! OpenTelemetry traces: one span per proxied request, the W3C `traceparent` propagated to
//! the upstream, export over OTLP/gRPC.
//!
//! Export never blocks a worker: ending a span hands it to the SDK's batch processor,
//! which queues it (dropping when the queue is full) and exports batches from its own
//! thread. The OTLP client is tonic, which needs a tokio reactor: each batch is sent on
//! the control runtime (its handle is given at start-up), from the processor's thread.

use std::borrow::Cow;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
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

impl Tracing {
    /// Exports to the OTLP/gRPC collector at `endpoint` (`http://host:port`) as
    /// `service_name`. Must be called on the control runtime, which then carries the
    /// exports.
    pub fn otlp(endpoint: &str, service_name: &str) -> Result<Self, TraceError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| TraceError::Exporter(endpoint.to_owned(), e.to_string()))?;
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
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
            .build();
        let tracer = provider.tracer("outrider");
        Ok(Self { tracer, provider, propagator: TraceContextPropagator::new() })
    }

    /// Starts a server span named `name`, the child of the request's `traceparent` if any.
    pub fn start(&self, name: String, request: &HeaderMap, attributes: Vec<KeyValue>) -> RequestSpan {
        let parent = self.propagator.extract(&Headers(request));
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        RequestSpan { cx: parent.with_span(span), propagator: self.propagator.clone() }
    }

    /// Exports what is queued; waits at most a few seconds (shutdown).
    pub fn flush(&self) {
        if let Err(error) = self.provider.force_flush() {
            tracing::debug!(%error, "span flush failed");
        }
    }
}

/// One request's span.
#[derive(Debug)]
pub struct RequestSpan {
    cx: Context,
    propagator: TraceContextPropagator,
}

impl RequestSpan {
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
