//! What a filter sees of a request and its connection, and what it can answer with.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::callout::Callouts;
use crate::config::filters::FilterOverride;
use crate::config::route::{Route, RouteConfiguration, VirtualHost};
use crate::proxy::response_flags::ResponseFlags;
pub use crate::proxy::stream_info::DynamicMetadata;
use crate::tls::PeerIdentity;

/// The downstream connection, as policies see it. Built once per connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownstreamConnection {
    /// The peer's address (Envoy's `direct_remote_ip`).
    pub peer: SocketAddr,
    /// The connection's local address: its original destination when restored (Envoy's
    /// `destination_ip` / `destination_port`).
    pub local: SocketAddr,
    /// SNI the client sent (`requested_server_name`).
    pub server_name: Option<String>,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The client's certificate, when TLS and it presented one (`authenticated`).
    pub peer_identity: Option<PeerIdentity>,
    /// The first URI SAN of the certificate Outrider presented on it (its own identity).
    pub local_uri_san: Option<std::sync::Arc<str>>,
    /// The filter state and metadata an internal connection arrived with (Istio's HBONE:
    /// the tunnel's peer identity); `None` for a socket's.
    pub stream: Option<std::sync::Arc<crate::proxy::stream_info::StreamState>>,
}

impl DownstreamConnection {
    /// The peer identity an internal connection carried across (`io.istio.peer_principal`:
    /// an HBONE tunnel's client certificate, set by the terminating listener).
    pub fn carried_peer_principal(&self) -> Option<&str> {
        self.stream.as_ref().and_then(|s| s.filter_state.get(crate::proxy::stream_info::PEER_PRINCIPAL))
    }
}

/// A change a filter asks for on the response, applied in order to the upstream's
/// response or to the local reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderEdit {
    /// Replace any value of the header.
    Set(HeaderName, HeaderValue),
    /// Add a value, keeping the ones there.
    Append(HeaderName, HeaderValue),
    /// Add only when the header is absent.
    AddIfAbsent(HeaderName, HeaderValue),
    /// Replace only when the header is present.
    OverwriteIfExists(HeaderName, HeaderValue),
    Remove(HeaderName),
}

impl HeaderEdit {
    pub fn apply(&self, headers: &mut HeaderMap) {
        match self {
            Self::Set(name, value) => {
                headers.insert(name.clone(), value.clone());
            }
            Self::Append(name, value) => {
                headers.append(name.clone(), value.clone());
            }
            Self::AddIfAbsent(name, value) => {
                if !headers.contains_key(name) {
                    headers.insert(name.clone(), value.clone());
                }
            }
            Self::OverwriteIfExists(name, value) => {
                if headers.contains_key(name) {
                    headers.insert(name.clone(), value.clone());
                }
            }
            Self::Remove(name) => {
                headers.remove(name);
            }
        }
    }
}

/// A filter's answer in place of the upstream's (Envoy's `sendLocalReply`). gRPC requests
/// get it as a trailers-only gRPC response (`grpc-status` from the HTTP status unless
/// `grpc_status` says otherwise), as Envoy does.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalResponse {
    pub status: StatusCode,
    pub body: Bytes,
    /// Headers of the reply besides `content-type` (which a non-empty body gets as
    /// `text/plain` unless set here).
    pub headers: HeaderMap,
    /// `grpc-status` for gRPC requests, when not the one Envoy maps from `status`.
    pub grpc_status: Option<u32>,
    /// Envoy's response flags for the reply (`UAEX`, `RL`, `FI`…; none for an RBAC
    /// denial), as the access log prints them.
    pub flags: ResponseFlags,
    /// Envoy's `%RESPONSE_CODE_DETAILS%` (`rbac_access_denied_matched_policy[none]`).
    pub details: String,
}

impl LocalResponse {
    /// A reply with `status` and a `text/plain` body (none when empty).
    pub fn new(status: StatusCode, body: impl Into<Bytes>, details: impl Into<String>) -> Self {
        Self {
            status,
            body: body.into(),
            headers: HeaderMap::new(),
            grpc_status: None,
            flags: ResponseFlags::NONE,
            details: details.into(),
        }
    }
}

/// The response flags the connection manager settles for a request, for a filter that
/// reports when the response ends (`istio.stats`): the filter's response hook puts one in
/// the response's extensions and the connection manager fills it before sending.
#[derive(Debug, Clone, Default)]
pub struct ResponseFlagsSlot(pub std::sync::Arc<std::sync::OnceLock<ResponseFlags>>);

/// The body of every response the proxy sends downstream (the upstream's or its own).
pub type ProxyBody = http_body_util::combinators::UnsyncBoxBody<Bytes, crate::proxy::upstream::BoxError>;

/// A change a filter makes to the whole response, body included (a compressor), decided
/// while the request passed through it. Applied to whichever response goes downstream,
/// after the header edits, in the reverse order of the filters, as Envoy encodes.
pub trait ResponseHook {
    fn on_response(&self, response: http::Response<ProxyBody>) -> http::Response<ProxyBody>;
}

/// The route a request matched, for per-route filter settings.
#[derive(Debug, Clone, Copy)]
pub struct MatchedRoute<'a> {
    pub config: &'a RouteConfiguration,
    pub virtual_host: &'a VirtualHost,
    /// `None` when the virtual host matched but no route in it.
    pub route: Option<&'a Route>,
}

/// One request as a filter sees it.
pub struct RequestContext<'a> {
    /// Method, URI (normalized path) and headers; a filter may change them (an added
    /// header reaches the upstream).
    pub parts: &'a mut http::request::Parts,
    pub connection: &'a DownstreamConnection,
    /// The client's address: the peer, or from `x-forwarded-for` as the connection
    /// manager's `use_remote_address` / `xff_num_trusted_hops` say (Envoy's `remote_ip`).
    pub remote_ip: IpAddr,
    /// The route the request matched, if any.
    pub route: Option<MatchedRoute<'a>>,
    /// Whether the request is gRPC (`content-type: application/grpc…`).
    pub is_grpc: bool,
    pub metadata: &'a mut DynamicMetadata,
    /// Edits applied to the response, whichever way it comes.
    pub response_headers: &'a mut Vec<HeaderEdit>,
    /// Changes to the whole response (see [`ResponseHook`]); empty for most requests.
    pub response_hooks: &'a mut Vec<Box<dyn ResponseHook>>,
    /// Requests to other clusters.
    pub callouts: &'a Callouts<'a>,
    /// The stat prefix of the connection manager (`http.<stat_prefix>.…`).
    pub stat_prefix: &'a str,
    /// The proxy is draining, or `/healthcheck/fail` was posted (health checks fail).
    pub draining: bool,
    /// The request's body, for filters that read it (ext_authz `with_request_body`).
    pub body: &'a mut super::body::DownstreamBody,
    /// Response flags of the request (`DI` for a fault delay), for requests a filter lets
    /// through; a local reply carries its own in [`LocalResponse::flags`].
    pub flags: &'a mut ResponseFlags,
}

impl RequestContext<'_> {
    /// This filter's per-route settings: the route's, else the virtual host's, else the
    /// route configuration's (`typed_per_filter_config`, most specific first).
    pub fn per_filter(&self, filter_name: &str) -> Option<&FilterOverride> {
        let route = self.route?;
        route
            .route
            .and_then(|r| r.per_filter.get(filter_name))
            .or_else(|| route.virtual_host.per_filter.get(filter_name))
            .or_else(|| route.config.per_filter.get(filter_name))
    }

    /// The request's `:path` with its query.
    pub fn path(&self) -> &str {
        self.parts.uri.path_and_query().map_or("/", |p| p.as_str())
    }
}

/// In a request's extensions: called with the request body's bytes as they go upstream,
/// once each (a retry's resend is not seen again). A filter that counts what the body
/// carries (`istio.stats`' gRPC messages) sets it in `decode_headers`.
#[derive(Clone)]
pub struct RequestBodyTap(pub std::sync::Arc<BodyTapFn>);

/// What a [`RequestBodyTap`] calls with each chunk.
pub type BodyTapFn = dyn Fn(&[u8]) + Send + Sync;

impl std::fmt::Debug for RequestBodyTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestBodyTap")
    }
}
