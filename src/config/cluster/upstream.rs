//! How connections to a cluster's endpoints are made: the transport (plain or TLS, chosen
//! per endpoint by metadata) and the HTTP protocol spoken over it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::tls::UpstreamTlsContext;

/// Envoy's `common_http_protocol_options.idle_timeout` for upstream connections.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// The transport socket of upstream connections.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamTransport {
    /// `envoy.transport_sockets.raw_buffer`, or no transport socket at all.
    Plain,
    /// `envoy.transport_sockets.tls`.
    Tls(Box<UpstreamTlsContext>),
    /// `envoy.transport_sockets.internal_upstream`: to an internal listener, carrying
    /// metadata across to the connection it serves.
    Internal(Box<InternalUpstream>),
}

impl UpstreamTransport {
    /// The TLS this transport originates, through an internal upstream's inner socket.
    pub fn tls(&self) -> Option<&UpstreamTlsContext> {
        match self {
            Self::Plain => None,
            Self::Tls(context) => Some(context),
            Self::Internal(internal) => internal.inner.tls(),
        }
    }
}

/// `envoy.transport_sockets.internal_upstream`: the connection to an internal listener
/// carries, as that connection's own dynamic metadata, the namespaces of metadata named by
/// `passthrough_metadata` (Istio passes the endpoint's `envoy.filters.listener.original_dst`,
/// the tunnel's destination, to `connect_originate`).
#[derive(Debug, Clone, PartialEq)]
pub struct InternalUpstream {
    /// Namespaces of the endpoint's metadata (kind `host`).
    pub host_metadata: Vec<String>,
    /// The cluster's metadata namespaces (kind `cluster`), taken from the cluster when it is
    /// converted: namespace → its fields.
    pub cluster_metadata: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
    /// The socket inside (`transport_socket`): plain, or TLS over the internal connection.
    pub inner: UpstreamTransport,
}

/// One `transport_socket_matches` entry: endpoints whose
/// `metadata.filter_metadata["envoy.transport_socket_match"]` contains every key/value of
/// `criteria` use `transport`. An empty `criteria` matches every endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct TransportSocketMatch {
    /// For stats and logs only.
    pub name: String,
    /// Istio writes `{"tlsMode": "istio"}`; only string values are accepted.
    pub criteria: BTreeMap<String, String>,
    pub transport: UpstreamTransport,
}

/// The HTTP protocol spoken to the endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 (Envoy's default).
    #[default]
    Http1,
    /// HTTP/2 (with prior knowledge over plain TCP, or ALPN `h2` over TLS).
    Http2,
    /// Whatever the downstream request used (`use_downstream_protocol_config`).
    UseDownstream,
}

/// HTTP connection settings of a cluster, from the `envoy.extensions.upstreams.http.v3.
/// HttpProtocolOptions` extension or the cluster's legacy fields.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamHttpOptions {
    pub protocol: UpstreamProtocol,
    /// Close an upstream connection idle for this long; `None` never does (Envoy's `0s`).
    pub idle_timeout: Option<Duration>,
    /// Drain a connection once it is this old.
    pub max_connection_duration: Option<Duration>,
    /// Reset a stream that lasts longer than this.
    pub max_stream_duration: Option<Duration>,
    /// Requests per connection before it is drained; `None` is unlimited. Istio's bootstrap
    /// sets 1 on `xds-grpc`.
    pub max_requests_per_connection: Option<u32>,
    /// Used when the protocol is HTTP/2 (or the downstream's is).
    pub http2: Http2Settings,
    /// Set TLS SNI from the request's host header (or `override_auto_sni_header`).
    pub auto_sni: bool,
    /// Verify the upstream certificate against that SNI.
    pub auto_san_validation: bool,
    pub override_auto_sni_header: Option<String>,
}

impl Default for UpstreamHttpOptions {
    fn default() -> Self {
        Self {
            protocol: UpstreamProtocol::Http1,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_connection_duration: None,
            max_stream_duration: None,
            max_requests_per_connection: None,
            http2: Http2Settings::default(),
            auto_sni: false,
            auto_san_validation: false,
            override_auto_sni_header: None,
        }
    }
}

/// HTTP/2 settings Outrider applies; Envoy's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Http2Settings {
    pub max_concurrent_streams: u32,
    pub initial_stream_window_size: u32,
    pub initial_connection_window_size: u32,
    pub hpack_table_size: u32,
    pub keepalive: Option<Http2Keepalive>,
}

impl Default for Http2Settings {
    fn default() -> Self {
        Self {
            max_concurrent_streams: 2_147_483_647,
            initial_stream_window_size: 268_435_456,
            initial_connection_window_size: 268_435_456,
            hpack_table_size: 4096,
            keepalive: None,
        }
    }
}

/// HTTP/2 PING keepalive (`connection_keepalive`).
#[derive(Debug, Clone, PartialEq)]
pub struct Http2Keepalive {
    /// Ping this often; `None` pings only after `connection_idle_interval`.
    pub interval: Option<Duration>,
    /// Close the connection when a ping is not answered within this.
    pub timeout: Duration,
    /// Percent of `interval` added at random (default 15).
    pub interval_jitter_percent: f64,
    /// Ping before using a connection idle for this long.
    pub connection_idle_interval: Option<Duration>,
}
