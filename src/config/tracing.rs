//! Tracing: the tracer spans are exported to (the bootstrap's `tracing.http`, or a
//! connection manager's `provider`), and the HTTP connection manager's and routes'
//! `tracing` blocks: which requests get a span (Envoy's three sampling percentages) and
//! the custom tags each span carries.

use std::sync::Arc;

use http::HeaderName;

use crate::config::filters::fractional_percent::FractionalPercent;

/// An OpenTelemetry tracer (`envoy.tracers.opentelemetry`): the bootstrap's, or a
/// connection manager's `tracing.provider`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TracingConfig {
    pub collector: TraceCollector,
    /// `service.name` of the exported spans (default `outrider`).
    pub service_name: String,
}

/// Where the OTLP/gRPC collector is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TraceCollector {
    /// `envoy_grpc.cluster_name`: the bootstrap's tracer, a static cluster's first
    /// endpoint; a connection manager's provider, the cluster's in the current snapshot.
    Cluster(String),
    /// `google_grpc.target_uri`, as `http://host:port`.
    Uri(String),
    /// `http_service`: OTLP over HTTP (protobuf) to a cluster, as `Cluster` finds it, at
    /// `path`, with `request_headers_to_add`.
    HttpCluster { cluster: String, path: String, headers: Vec<(String, String)> },
}

/// Envoy's default `max_path_tag_length`.
pub const DEFAULT_MAX_PATH_TAG_LENGTH: usize = 256;

/// `HttpConnectionManager.tracing`.
#[derive(Debug, Clone, PartialEq)]
pub struct HcmTracing {
    /// `provider` (`envoy.tracers.opentelemetry`): this connection manager's own exporter.
    /// `None`: the bootstrap's tracer.
    pub provider: Option<Arc<TracingConfig>>,
    pub sampling: Sampling,
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
            sampling: Sampling::default(),
            custom_tags: Vec::new(),
            max_path_tag_length: DEFAULT_MAX_PATH_TAG_LENGTH,
            spawn_upstream_span: false,
            pack_trace_reason: true,
            request_id_sampling: true,
        }
    }
}

/// Envoy's three sampling percentages, as a connection manager or a route sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    /// `client_sampling`: the share of requests with `x-client-trace-id` traced for that
    /// reason (a connection manager's is over HUNDRED, its percent truncated).
    pub client: FractionalPercent,
    /// `random_sampling` (a connection manager's is rounded to TEN_THOUSAND).
    pub random: FractionalPercent,
    /// `overall_sampling`: the cap applied after the other two.
    pub overall: FractionalPercent,
}

impl Default for Sampling {
    /// Everything: the connection manager's defaults, and a route's.
    fn default() -> Self {
        let all = FractionalPercent { numerator: 10_000, denominator: 10_000 };
        Self { client: FractionalPercent::ALL, random: all, overall: all }
    }
}

/// A route's `tracing`: its sampling replaces the connection manager's; its custom tags
/// are added to (or replace, by name) the connection manager's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTracing {
    pub sampling: Sampling,
    pub custom_tags: Vec<CustomTag>,
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
    /// `value`: a text format whose commands are filter state objects (Istio's waypoint
    /// tags spans with fields of its peers, `%FILTER_STATE(upstream_peer_obj:FIELD:app)%`)
    /// and constants, filled in once the response's head is known.
    Format(Vec<crate::config::format::Piece>),
}

/// The filter state objects that name a request's peers, with fields (Istio's
/// `downstream_peer_obj` and `upstream_peer_obj`).
pub const PEER_OBJECTS: [&str; 2] = ["downstream_peer_obj", "upstream_peer_obj"];

/// The fields of Istio's peer objects that Outrider's peer metadata answers.
pub const PEER_FIELDS: [&str; 9] =
    ["namespace", "cluster", "service", "revision", "app", "version", "workload", "type", "name"];
