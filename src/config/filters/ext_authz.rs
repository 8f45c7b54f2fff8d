//! `envoy.filters.http.ext_authz` and `envoy.filters.network.ext_authz`: each request (or
//! connection) is allowed or denied by an external authorization service.

use std::collections::BTreeMap;
use std::time::Duration;

use http::HeaderName;

use super::grpc_service::EnvoyGrpc;
use crate::config::matcher::StringMatcher;

/// `envoy.extensions.filters.http.ext_authz.v3.ExtAuthz`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtAuthz {
    pub service: AuthzService,
    /// `failure_mode_allow`: let the request through when the service fails.
    pub failure_mode_allow: bool,
    /// `failure_mode_allow_header_add`: and mark it with
    /// `x-envoy-auth-failure-mode-allowed: true`.
    pub failure_mode_allow_header_add: bool,
    /// `status_on_error`: the status when the service fails (default 403).
    pub status_on_error: u16,
    /// `stat_prefix`: `http.<hcm>.ext_authz.<stat_prefix>.ok` (with its dot, or empty).
    pub stat_prefix: String,
    /// Which request headers the service sees: `None` is every header (the gRPC service
    /// without `allowed_headers`); with the HTTP service the list includes
    /// `authorization`, `:method`, `:path` and `:authority`, as in Envoy.
    pub allowed_headers: Option<Vec<StringMatcher>>,
    /// `disallowed_headers`: never sent, whatever `allowed_headers` says.
    pub disallowed_headers: Vec<StringMatcher>,
    /// `include_tls_session`: send the SNI in `attributes.tls_session`.
    pub include_tls_session: bool,
    /// `encode_raw_headers`: headers go in `header_map` (each value on its own) instead of
    /// `headers`.
    pub encode_raw_headers: bool,
    /// `metadata_context_namespaces`: dynamic metadata namespaces copied into
    /// `attributes.metadata_context`.
    pub metadata_context_namespaces: Vec<String>,
    /// `enable_dynamic_metadata_ingestion` (default true): keep the service's
    /// `dynamic_metadata` under `envoy.filters.http.ext_authz`.
    pub dynamic_metadata_ingestion: bool,
    /// `max_denied_response_body_bytes`: a denied response's body is cut to this length (0:
    /// no limit).
    pub max_denied_response_body_bytes: u32,
    /// `with_request_body`: send (up to a limit of) the request body with the check.
    pub with_request_body: Option<BufferSettings>,
    /// `filter_enabled_metadata`: check only requests whose dynamic metadata matches (Istio's
    /// CUSTOM action: the RBAC filter's shadow rules mark the requests a policy applies to).
    pub filter_enabled_metadata: Option<crate::config::filters::rbac::MetadataMatcher>,
}

/// `BufferSettings`: how much of the request body a check carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSettings {
    /// `max_request_bytes` (> 0): the most the check carries.
    pub max_request_bytes: u32,
    /// `allow_partial_message`: a longer body is cut to `max_request_bytes`; otherwise the
    /// request gets 413.
    pub allow_partial_message: bool,
    /// `pack_as_bytes`: the body goes in `raw_body` (bytes) instead of `body` (UTF-8).
    pub pack_as_bytes: bool,
}

/// Where the checks go.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthzService {
    /// `grpc_service`: `envoy.service.auth.v3.Authorization/Check`; the timeout defaults
    /// to 200 ms.
    Grpc { service: EnvoyGrpc, timeout: Duration },
    /// `http_service`: the request's headers, as a bodiless request to another cluster.
    Http(HttpAuthzService),
}

/// `envoy.extensions.filters.http.ext_authz.v3.HttpService`.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpAuthzService {
    /// `server_uri.cluster`.
    pub cluster: String,
    /// `server_uri.timeout`.
    pub timeout: Duration,
    /// `path_prefix`: put before the request's path.
    pub path_prefix: String,
    /// `authorization_request.headers_to_add`: set on the check request.
    pub headers_to_add: Vec<(HeaderName, String)>,
    /// `authorization_response.allowed_upstream_headers`: on OK, these headers of the
    /// service's response replace the request's.
    pub allowed_upstream_headers: Vec<StringMatcher>,
    /// `allowed_upstream_headers_to_append`: on OK, these are added to the request's.
    pub allowed_upstream_headers_to_append: Vec<StringMatcher>,
    /// `allowed_client_headers`: on denial, these go to the client (empty: all of them;
    /// otherwise `:status`, `content-length`, `www-authenticate` and `location` as well).
    pub allowed_client_headers: Vec<StringMatcher>,
    /// `allowed_client_headers_on_success`: on OK, these are added to the response.
    pub allowed_client_headers_on_success: Vec<StringMatcher>,
}

/// `envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExtAuthzPerRoute {
    /// `disabled: true`: no check for this route.
    pub disabled: bool,
    /// `check_settings.context_extensions`: merged across the route configuration, the
    /// virtual host and the route (the most specific wins per key), sent in
    /// `attributes.context_extensions`.
    pub context_extensions: BTreeMap<String, String>,
    /// `check_settings.disable_request_body_buffering`: no body in this route's checks.
    pub disable_request_body_buffering: bool,
    /// `check_settings.with_request_body`: this route's body settings, instead of the
    /// filter's.
    pub with_request_body: Option<BufferSettings>,
}

/// `envoy.extensions.filters.network.ext_authz.v3.ExtAuthz`.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkExtAuthz {
    /// `ext_authz.<stat_prefix>.*`.
    pub stat_prefix: String,
    pub service: EnvoyGrpc,
    /// The gRPC service's timeout (default 200 ms).
    pub timeout: Duration,
    pub failure_mode_allow: bool,
    pub include_tls_session: bool,
}
