//! The HTTP connection manager (`envoy.filters.network.http_connection_manager`): HTTP
//! codec settings, timeouts, forwarding headers, and where the routes come from.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use super::SkippedFilter;
use crate::config::address::CidrRange;
use crate::config::filters::HttpFilter;
use crate::config::route::RouteConfiguration;

/// Envoy's default `stream_idle_timeout`.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Envoy's default connection `idle_timeout` (`common_http_protocol_options`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);
/// Envoy's default `drain_timeout`.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Envoy's default `delayed_close_timeout`.
pub const DEFAULT_DELAYED_CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Envoy's default `max_request_headers_kb`.
pub const DEFAULT_MAX_REQUEST_HEADERS_KB: u32 = 60;
/// Envoy's default `max_headers_count`.
pub const DEFAULT_MAX_HEADERS_COUNT: u32 = 100;

/// `envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager`.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConnectionManager {
    pub stat_prefix: String,
    pub codec_type: CodecType,
    pub route_source: RouteSource,
    /// The HTTP filters before the router, in their configured order.
    pub http_filters: Vec<HttpFilter>,
    /// HTTP filters before the router that Outrider does not run: only ones that observe
    /// traffic without changing it (telemetry, peer metadata).
    pub skipped_http_filters: Vec<SkippedFilter>,
    /// The router's `suppress_envoy_headers`: no `x-envoy-*` headers are added.
    pub suppress_envoy_headers: bool,
    /// `append_local_overload`: the overload manager's 503 carries
    /// `x-envoy-local-overloaded: true`.
    pub append_local_overload: bool,
    /// Trust the connection's peer address as the client (edge); otherwise take it from
    /// `x-forwarded-for`, `xff_num_trusted_hops` from the right.
    pub use_remote_address: bool,
    pub xff_num_trusted_hops: u32,
    pub skip_xff_append: bool,
    /// `internal_address_config`: which client addresses are internal (their `x-envoy-*`
    /// control headers obeyed, `x-envoy-internal: true` set).
    pub internal_address: InternalAddresses,
    /// Value appended to `via`; empty: none.
    pub via: String,
    /// Default true: set `x-request-id` when missing (or when not trusted).
    pub generate_request_id: bool,
    pub preserve_external_request_id: bool,
    pub always_set_request_id_in_response: bool,
    /// `None`: disabled (configured 0). Default 5 min.
    pub stream_idle_timeout: Option<Duration>,
    /// Whole-request receive timeout; `None` (default) disabled.
    pub request_timeout: Option<Duration>,
    pub request_headers_timeout: Option<Duration>,
    pub drain_timeout: Duration,
    /// `None`: disabled.
    pub delayed_close_timeout: Option<Duration>,
    pub common: CommonHttpOptions,
    pub http1: Http1Options,
    pub http2: Http2Options,
    pub max_request_headers_kb: u32,
    /// `server` response header value (default `envoy`).
    pub server_name: String,
    pub server_header_transformation: ServerHeaderTransformation,
    /// RFC 3986 path normalization before routing.
    pub normalize_path: bool,
    pub merge_slashes: bool,
    pub path_with_escaped_slashes_action: EscapedSlashesAction,
    pub strip_port: StripPort,
    pub strip_trailing_host_dot: bool,
    pub forward_client_cert_details: ForwardClientCertDetails,
    /// Fields added to `x-forwarded-client-cert` with `SANITIZE_SET` / `APPEND_FORWARD`.
    pub set_current_client_cert_details: ClientCertDetails,
    pub proxy_100_continue: bool,
    pub append_x_forwarded_port: bool,
    /// Access logs (none by default): one line per request.
    pub access_log: Vec<AccessLog>,
    /// `upgrade_configs`: the `Upgrade:` types requests may ask for.
    pub upgrade_configs: Vec<crate::config::upgrade::UpgradeConfig>,
    /// The `tracing` block: requests get a span, exported to its provider or to the
    /// bootstrap's tracer.
    pub tracing: Option<crate::config::tracing::HcmTracing>,
}

pub use crate::config::access_log::{AccessLog, AccessLogSink};

/// Where an HTTP connection manager gets its routes.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteSource {
    /// `rds.route_config_name`, subscribed over the ADS stream.
    Rds(String),
    /// `route_config`.
    Inline(Arc<RouteConfiguration>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CodecType {
    /// HTTP/1.1 or HTTP/2 by ALPN, else by the h2 preface.
    #[default]
    Auto,
    Http1,
    Http2,
}

/// `common_http_protocol_options` (downstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonHttpOptions {
    /// Connection idle timeout: default 1 h; `None` disabled (configured 0).
    pub idle_timeout: Option<Duration>,
    pub max_connection_duration: Option<Duration>,
    pub max_headers_count: u32,
    pub max_stream_duration: Option<Duration>,
    pub max_requests_per_connection: Option<u32>,
    pub headers_with_underscores_action: HeadersWithUnderscoresAction,
}

impl Default for CommonHttpOptions {
    fn default() -> Self {
        Self {
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_connection_duration: None,
            max_headers_count: DEFAULT_MAX_HEADERS_COUNT,
            max_stream_duration: None,
            max_requests_per_connection: None,
            headers_with_underscores_action: HeadersWithUnderscoresAction::Allow,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeadersWithUnderscoresAction {
    #[default]
    Allow,
    RejectRequest,
    DropHeader,
}

/// `http_protocol_options` (HTTP/1.1 downstream).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Http1Options {
    pub accept_http_10: bool,
    pub default_host_for_http_10: String,
    pub enable_trailers: bool,
    pub allow_chunked_length: bool,
}

/// `http2_protocol_options` with Envoy's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Options {
    pub hpack_table_size: u32,
    pub max_concurrent_streams: u32,
    pub initial_stream_window_size: u32,
    pub initial_connection_window_size: u32,
    /// Accept extended CONNECT (RFC 8441) and CONNECT over HTTP/2.
    pub allow_connect: bool,
    /// `connection_keepalive`: PING interval and timeout.
    pub keepalive: Option<Http2Keepalive>,
}

impl Default for Http2Options {
    fn default() -> Self {
        Self {
            hpack_table_size: 4096,
            max_concurrent_streams: 2_147_483_647,
            initial_stream_window_size: 268_435_456,
            initial_connection_window_size: 268_435_456,
            allow_connect: false,
            keepalive: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Keepalive {
    pub interval: Option<Duration>,
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServerHeaderTransformation {
    #[default]
    Overwrite,
    AppendIfAbsent,
    PassThrough,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EscapedSlashesAction {
    /// Envoy's default is `KEEP_UNCHANGED`.
    #[default]
    KeepUnchanged,
    RejectRequest,
    UnescapeAndRedirect,
    UnescapeAndForward,
}

/// `strip_matching_host_port` / `strip_any_host_port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StripPort {
    #[default]
    None,
    /// Remove the port from `:authority` when it equals the listener's port.
    Matching,
    Any,
}

/// `internal_address_config`, as Envoy 1.40 applies it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum InternalAddresses {
    /// Not configured: no address is internal, so every client's `x-envoy-*` control
    /// headers are removed (Envoy stopped trusting private addresses by default).
    #[default]
    None,
    /// Configured. `cidr_ranges` empty: Envoy's old list (RFC 1918, `127.0.0.1`,
    /// `fd00::/8`, `::1`). (Its `unix_sockets` has nothing to apply to: Outrider's
    /// listeners accept on IP sockets only, so no client comes from a Unix socket.)
    Configured { cidr_ranges: Vec<CidrRange> },
}

impl InternalAddresses {
    /// Whether a client at `ip` is internal.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match self {
            Self::None => false,
            Self::Configured { cidr_ranges } if cidr_ranges.is_empty() => rfc1918_or_loopback(ip),
            Self::Configured { cidr_ranges } => cidr_ranges.iter().any(|r| r.contains(ip)),
        }
    }
}

/// Envoy's `Network::Utility::isInternalAddress`: 10/8, 172.16/12, 192.168/16 and
/// `127.0.0.1` itself (not all of 127/8); `fd00::/8` and `::1`.
fn rfc1918_or_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_private() || v4 == Ipv4Addr::LOCALHOST,
        IpAddr::V6(v6) => v6.octets()[0] == 0xfd || v6 == Ipv6Addr::LOCALHOST,
    }
}

/// `forward_client_cert_details`: what to do with `x-forwarded-client-cert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardClientCertDetails {
    #[default]
    Sanitize,
    ForwardOnly,
    AppendForward,
    SanitizeSet,
    AlwaysForwardOnly,
}

/// `set_current_client_cert_details`: what Envoy adds of the client's certificate, in
/// its order (`Cert`, `Chain`, `Subject`, `URI`, `DNS`) after `By` and `Hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClientCertDetails {
    pub subject: bool,
    pub cert: bool,
    pub chain: bool,
    pub dns: bool,
    pub uri: bool,
}
