//! The HTTP connection manager's `tracing` block: which requests get a span (Envoy's
//! three sampling percentages), where the spans go (`provider`, else the bootstrap's
//! tracer) and the custom tags each span carries.

use std::sync::Arc;

use http::HeaderName;

use crate::config::bootstrap::TracingConfig;

/// Envoy's default `max_path_tag_length`.
pub const DEFAULT_MAX_PATH_TAG_LENGTH: usize = 256;

/// `HttpConnectionManager.tracing`.
#[derive(Debug, Clone, PartialEq)]
pub struct HcmTracing {
    /// `provider` (`envoy.tracers.opentelemetry`): this connection manager's own exporter.
    /// `None`: the bootstrap's tracer.
    pub provider: Option<Arc<TracingConfig>>,
    /// `client_sampling`, in units of 1 % (Envoy's `FractionalPercent` of HUNDRED): the
    /// share of requests with `x-client-trace-id` that are traced for that reason.
    pub client_sampling: u64,
    /// `random_sampling`, in units of 0.01 % (Envoy rounds the percent to TEN_THOUSAND).
    pub random_sampling: u64,
    /// `overall_sampling`, in units of 0.01 %: the cap applied after the other two.
    pub overall_sampling: u64,
    pub custom_tags: Vec<CustomTag>,
    /// `max_path_tag_length`: the path in `http.url` is cut to this many bytes.
    pub max_path_tag_length: usize,
    /// `spawn_upstream_span`: each upstream request gets a client span of its own, the
    /// child of the request's span.
    pub spawn_upstream_span: bool,
    /// The UUID request ID's `pack_trace_reason`: the decision is written into
    /// `x-request-id` (default true).
    pub pack_trace_reason: bool,
    /// Its `use_request_id_for_trace_sampling` (default true): when false every request
    /// is sampled, as Envoy then decides without a key.
    pub request_id_sampling: bool,
}

impl Default for HcmTracing {
    /// An empty `tracing: {}`: every request sampled, Envoy's defaults.
    fn default() -> Self {
        Self {
            provider: None,
            client_sampling: 100,
            random_sampling: 10_000,
            overall_sampling: 10_000,
            custom_tags: Vec::new(),
            max_path_tag_length: DEFAULT_MAX_PATH_TAG_LENGTH,
            spawn_upstream_span: false,
            pack_trace_reason: true,
            request_id_sampling: true,
        }
    }
}

/// `envoy.type.tracing.v3.CustomTag`: one attribute added to every span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomTag {
    pub tag: String,
    pub value: CustomTagValue,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CustomTagValue {
    /// `literal`, and `environment` (read once at conversion, as Envoy reads it when the
    /// configuration is loaded).
    Literal(String),
    /// `request_header`, with `default_value` when the request lacks it.
    RequestHeader { name: HeaderName, default_value: String },
    /// `metadata` of kind `request`: the request's dynamic metadata at `namespace` (the
    /// metadata key) and `path`.
    RequestMetadata { namespace: String, path: Vec<String>, default_value: String },
}
