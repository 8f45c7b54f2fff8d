//! The HTTP connection manager: serves HTTP/1.1 and HTTP/2 (prior knowledge) on a
//! connection, routes each request, picks an endpoint with the cluster's balancer, forwards
//! with retries and timeouts over the worker's pools, and answers local errors in Envoy's
//! words.

mod codec;
mod connect;
mod expect_continue;
mod forwarding;
mod lifetime;
mod local_reply;
mod metered;
mod observed;
mod request_body;
mod serve;
mod stream;
mod stream_timer;
mod underscores;
mod upgrade;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use rand::Rng;

use super::access_log::{DownstreamLogInfo, PendingLog};
use forwarding::Forwarding;
use local_reply::{CodecRefusal, bad_request, codec_refusal, direct, filter_reply, local, reset_reply};
use observed::StreamInfo;
pub use serve::serve;

use super::clusters::ThreadLocalCluster;
use super::context::WorkerContext;
use super::filters::context::{MatchedRoute, RequestBodyTap};
use super::filters::{
    Callouts, DownstreamBody, DownstreamConnection, DynamicMetadata, FilterHeadersStatus, HeaderEdit, HttpFilterChain,
    LocalResponse, RequestContext, RequestEnd, ResponseHook,
};
use super::headers::{self, Downstream, LocalReply};
use super::original_dst::DestinationSources;
use super::path_normalization::{self, Normalized};
use super::request_trace;
use super::retry::RetryState;
use super::router::{self, DownstreamInfo, Forward, Routing, UpstreamRequestOptions};
use super::stream_info::StreamState;
use super::upstream::{BoxError, UpstreamError};
use crate::config::RouteConfiguration;
use crate::config::listener::{HttpConnectionManager, RouteSource};
use crate::config::overload::{ActionKind, LoadShedKind};
use crate::config::route::Action;
use crate::config::upgrade::upgrade_allowed;
use crate::lb::PickContext;
use crate::store::Snapshot;
use crate::telemetry::{KeyValue, Tracing};

/// What the proxy answers with: an upstream body or a local one.
pub use super::filters::ProxyBody;

/// Request bodies up to this size (and up to the listener's buffer limit) are kept so the
/// request can be retried or mirrored; larger ones stream through and are neither (Envoy
/// keeps up to its buffer limit, 1 MiB by default, then gives up retries and shadows too).
/// The first attempt streams while the copy is kept; only a shadow waits for the whole body.
const RETRY_BUFFER_LIMIT: usize = 64 * 1024;

/// The transport a downstream connection arrived on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secure {
    Plain,
    /// Terminated TLS, with the protocol ALPN settled on and the client's certificate.
    Tls {
        alpn: Option<Vec<u8>>,
        peer: Option<crate::tls::PeerIdentity>,
        /// The first URI SAN of the certificate this side presented.
        local_uri_san: Option<Arc<str>>,
    },
}

/// Everything the handling of one request borrows from its connection.
#[derive(Clone, Copy)]
pub(super) struct Exchange<'a> {
    pub downstream: Downstream,
    pub connection: &'a DownstreamConnection,
    pub original_dst: Option<SocketAddr>,
    pub manager: &'a HttpConnectionManager,
    pub context: &'a Rc<WorkerContext>,
    pub filters: &'a HttpFilterChain,
    /// HTTP/1.1 connections: where an upgraded request leaves its upstream half.
    pub upgrades: Option<&'a upgrade::UpgradeSlot>,
    /// The connection manager's tracer, when it has a `tracing` block and a tracer.
    pub tracer: Option<&'a Tracing>,
    /// The listener is INBOUND: its requests go to the application behind this sidecar.
    pub inbound: bool,
    /// The listener is OUTBOUND.
    pub outbound: bool,
    /// The overload manager's actions apply (the listener does not bypass it).
    pub overloadable: bool,
    /// `disable_http_keepalive` is configured and applies, or the listener drains on
    /// failing health checks: told to drain the connection.
    pub overload_drain: Option<&'a tokio::sync::Notify>,
    /// The listener's `drain_type` is DEFAULT (see `ConnectionInfo`).
    pub health_check_drain: bool,
    /// The listener's `per_connection_buffer_limit_bytes`.
    pub buffer_limit: u32,
    /// The stream's one timer: the attempt's timeout shares it with the stream limits.
    timer: &'a stream_timer::StreamTimer,
}

impl<'a> Exchange<'a> {
    /// Where an ORIGINAL_DST cluster may find the destination of the request in `parts`.
    pub(super) fn destination_sources(&self, parts: &'a http::request::Parts) -> DestinationSources<'a> {
        DestinationSources {
            restored: self.original_dst,
            headers: Some(&parts.headers),
            streams: [parts.extensions.get::<StreamState>(), self.connection.stream.as_deref()],
        }
    }
}

/// One request: path normalization, the connection manager's header handling, route
/// selection, the HTTP filters, then the router. Edits the filters asked for apply to
/// whatever response goes back.
async fn forward_request(
    request: Request<Incoming>,
    exchange: Exchange<'_>,
    stream: &mut StreamInfo,
    pending: &mut Option<Box<PendingLog>>,
) -> Response<ProxyBody> {
    let Exchange { downstream, manager, context, .. } = exchange;
    let snapshot = context.clusters.store.load();
    // Borrowed from the snapshot (or the listener), which this request holds: no copy.
    let routes: &RouteConfiguration = match &manager.route_source {
        RouteSource::Inline(routes) => routes,
        RouteSource::Rds(name) => match snapshot.routes.get(name) {
            Some(routes) => &routes.resource,
            None => return local(manager, stream, LocalReply::NoRoute, false),
        },
    };
    let (mut parts, body) = request.into_parts();
    let is_grpc = router::is_grpc(&parts);
    if !transfer_codings_supported(&parts.headers) {
        return codec_refusal(manager, stream, CodecRefusal::UnsupportedTransferCoding, is_grpc);
    }
    // Headers nominated in an HTTP/1 `Connection` are this hop's (Envoy's codec removes
    // them from every request but an upgrade); nominating one that says who the client
    // is gets its 400.
    if parts.version < http::Version::HTTP_2
        && !headers::is_upgrade(&parts.headers)
        && headers::connection::sanitize_nominated(&mut parts.headers).is_err()
    {
        return codec_refusal(manager, stream, CodecRefusal::InvalidConnectionHeader, is_grpc);
    }
    // Only paths relative to the origin are served (`OPTIONS *` included): Envoy's 404,
    // before the path is normalized or routed.
    if parts.method != http::Method::CONNECT && !parts.uri.path().starts_with('/') {
        return filter_reply(manager, stream, LocalResponse::new(StatusCode::NOT_FOUND, "", "absolute_path"), is_grpc);
    }
    if let Some(response) = normalize_path(manager, stream, &mut parts, is_grpc) {
        return response;
    }
    // One authority for routing, the filters, the log and the upstream, settled as
    // Envoy's codec and `maybeNormalizeHost` do, after the path.
    if headers::authority::normalize(manager, &mut parts, downstream.local.port()).is_err() {
        return bad_request(manager, stream, is_grpc);
    }
    let connection = exchange.connection;
    let origin = headers::RequestOrigin {
        downstream,
        node_address: super::shadow::local_address(),
        peer_certificate: connection.peer_identity.as_ref(),
        local_uri_san: connection.local_uri_san.as_deref(),
        local_node: context.telemetry.local_node(),
    };
    let classification =
        headers::mutate_request_headers(manager, &routes.internal_only_headers, &origin, &mut parts.headers);
    if let Some(loggers) = stream.log.take() {
        *pending = Some(start_log(loggers, &exchange, classification.client, &parts));
    }
    if exchange.overloadable && overloaded(context) {
        let mut response = local(manager, stream, LocalReply::Overloaded, is_grpc);
        if manager.append_local_overload {
            response.headers_mut().insert("x-envoy-local-overloaded", HeaderValue::from_static("true"));
        }
        return response;
    }
    let selection = router::select(routes, &parts);
    // After route selection, as Envoy: a route's `tracing` replaces the sampling.
    let route_tracing = selection.and_then(|s| s.route).and_then(|r| r.tracing.as_deref());
    if let Some(tracing) = &manager.tracing {
        start_trace(tracing, route_tracing, &exchange, &mut parts, stream);
    }
    if let Some(log) = pending.as_mut() {
        log.route_name = selection.and_then(|s| s.route).map(|r| r.name.clone()).filter(|n| !n.is_empty());
    }
    // CONNECT is proxied only where a route terminates it (`hcm::connect`: an HTTP/2
    // CONNECT, the route's CONNECT entry with `connect_config`, the connection manager's
    // say as for any upgrade). Any other that a route matches gets Envoy's 403 for an
    // upgrade nobody allowed; one that none matches, the router's 404. Either way an
    // HTTP/1.1 connection closes after the answer (see `serve`), so nothing sent as the
    // tunnel is read as a request.
    let route_action = selection.and_then(|s| s.route).and_then(|r| match &r.action {
        Action::Route(action) => Some(action),
        _ => None,
    });
    let terminated = route_action.is_some_and(|action| {
        connect::terminates(&parts, action)
            && upgrade_allowed(&manager.upgrade_configs, Some(&action.upgrade_configs), "connect")
    });
    let connect = parts.method == http::Method::CONNECT && selection.and_then(|s| s.route).is_some() && !terminated;
    if let Some(kind) = upgrade::requested(&mut parts).or_else(|| connect.then(String::new)) {
        let route = route_action.map(|action| action.upgrade_configs.as_slice());
        if connect || exchange.upgrades.is_none() || !upgrade_allowed(&manager.upgrade_configs, route, &kind) {
            // Envoy's answer to an upgrade nobody allowed: 403, empty body, nothing
            // forwarded, and the connection closed.
            let mut reply = LocalResponse::new(StatusCode::FORBIDDEN, "", "upgrade_failed");
            reply.headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
            let request_id = headers::request_id_for_response(manager, &parts.headers);
            return with_request_id(filter_reply(manager, stream, reply, is_grpc), request_id);
        }
    }
    let routed = Routed { snapshot: &snapshot, routes, selection };
    let (mut body, mut edits, mut hooks) = (DownstreamBody::new(body), Vec::new(), Vec::new());
    if let Some(end) = parts.extensions.remove::<RequestEnd>() {
        body.tell_end(end);
    }
    if !exchange.filters.is_empty() {
        let client = classification.client;
        let decoding = Decoding { parts: &mut parts, body: &mut body, edits: &mut edits, hooks: &mut hooks };
        if let Some(reply) = decode_filters(decoding, &routed, &exchange, client, stream, pending, is_grpc).await {
            let request_id = headers::request_id_for_response(manager, &parts.headers);
            let response = with_request_id(filter_reply(manager, stream, reply, is_grpc), request_id);
            return finish_response(response, &edits, hooks);
        }
    }
    let request_id = headers::request_id_for_response(manager, &parts.headers);
    let response = route_and_forward(parts, body, routed, exchange, stream, pending, is_grpc).await;
    finish_response(with_request_id(response, request_id), &edits, hooks)
}

/// Sets the request's id on its response (see `headers::request_id_for_response`).
fn with_request_id(mut response: Response<ProxyBody>, request_id: Option<HeaderValue>) -> Response<ProxyBody> {
    if let Some(id) = request_id {
        response.headers_mut().insert(http::HeaderName::from_static("x-request-id"), id);
    }
    response
}

/// The access log entry of a request, begun once its headers are final: the client is the
/// one `x-forwarded-for` named when it is trusted.
fn start_log(
    loggers: Arc<[super::access_log::ActiveLog]>,
    exchange: &Exchange<'_>,
    client: std::net::IpAddr,
    parts: &http::request::Parts,
) -> Box<PendingLog> {
    let downstream = &exchange.downstream;
    let remote = if client == downstream.peer.ip() {
        downstream.peer
    } else {
        // Taken from x-forwarded-for, which carries no port: Envoy prints port 0.
        SocketAddr::new(client, 0)
    };
    let connection = exchange.connection;
    let info = DownstreamLogInfo {
        local: downstream.local,
        remote,
        server_name: connection.server_name.clone(),
        peer_uri_san: connection.peer_identity.as_ref().and_then(|p| p.uri_sans.first().cloned()),
        local_uri_san: connection.local_uri_san.clone(),
    };
    Box::new(PendingLog::new(loggers, SystemTime::now(), Instant::now(), parts, info))
}

/// The request's trace decision (packed into `x-request-id` whether a tracer is set or
/// not, as Envoy does) and, with a tracer, its span, whose context the upstream sees as
/// its parent, sampled or not. A route's `tracing` replaces the connection manager's
/// sampling.
fn start_trace(
    tracing: &crate::config::tracing::HcmTracing,
    route_tracing: Option<&crate::config::tracing::RouteTracing>,
    exchange: &Exchange<'_>,
    parts: &mut http::request::Parts,
    stream: &mut StreamInfo,
) {
    let sampling = route_tracing.map_or(&tracing.sampling, |r| &r.sampling);
    let random = || exchange.context.rng.borrow_mut().random();
    let reason = request_trace::trace_reason(tracing, sampling, &mut parts.headers, random);
    if let Some(tracer) = exchange.tracer
        && let Some(span) = request_trace::start(tracer, tracing, route_tracing, parts, reason, exchange.outbound)
    {
        span.inject(&mut parts.headers);
        stream.span = Some(span);
    }
}

/// What the HTTP filters may change of a request: its head and body, and what they ask for
/// on the way back (header edits, whole-response hooks). Borrowed: the request's future
/// holds each once.
struct Decoding<'d> {
    parts: &'d mut http::request::Parts,
    body: &'d mut DownstreamBody,
    edits: &'d mut Vec<HeaderEdit>,
    hooks: &'d mut Vec<Box<dyn ResponseHook>>,
}

/// Runs the HTTP filters' request side; the reply when one of them answers locally. The
/// dynamic metadata they set goes to the span's custom tags and to the access log.
async fn decode_filters(
    decoded: Decoding<'_>,
    routed: &Routed<'_>,
    exchange: &Exchange<'_>,
    client: std::net::IpAddr,
    stream: &mut StreamInfo,
    pending: &mut Option<Box<PendingLog>>,
    is_grpc: bool,
) -> Option<LocalResponse> {
    let (manager, context) = (exchange.manager, exchange.context);
    let mut metadata = DynamicMetadata::default();
    let callouts = Callouts::new(&context.clusters);
    let mut request = RequestContext {
        parts: decoded.parts,
        connection: exchange.connection,
        remote_ip: client,
        route: routed.selection.map(|s| MatchedRoute {
            config: routed.routes,
            virtual_host: s.virtual_host,
            route: s.route,
        }),
        is_grpc,
        metadata: &mut metadata,
        response_headers: decoded.edits,
        response_hooks: decoded.hooks,
        callouts: &callouts,
        stat_prefix: &manager.stat_prefix,
        draining: context.draining.is_triggered() || context.health_check_failed.is_failed(),
        flags: &mut stream.flags,
        body: decoded.body,
    };
    let status = exchange.filters.decode_headers(&mut request).await;
    if let (Some(span), Some(tracing)) = (&stream.span, &manager.tracing) {
        let route_tracing = routed.selection.and_then(|s| s.route).and_then(|r| r.tracing.as_deref());
        let tags = request_trace::custom_tags(tracing, route_tracing);
        stream.format_tags = observed::FormatTagSource::capture(&tags, request.parts);
        for tag in request_trace::metadata_tags(&tags, &metadata) {
            span.set(tag);
        }
    }
    if let Some(log) = pending.as_mut() {
        // `%FILTER_STATE(…)%`: the request's objects, then its connection's beneath them, as
        // Envoy's stream info finds a connection's objects through the request's.
        let request = decoded.parts.extensions.get::<StreamState>().map(|s| &s.filter_state);
        let connection = exchange.connection.stream.as_deref().map(|s| &s.filter_state);
        if request.is_some_and(|s| !s.is_empty()) || connection.is_some_and(|s| !s.is_empty()) {
            let mut state = request.cloned().unwrap_or_default();
            if let Some(connection) = connection {
                state.extend_absent(connection.clone());
            }
            log.filter_state = Some(state);
        }
    }
    if !metadata.0.is_empty() {
        // The access log, and the router of a forwarded request (an ORIGINAL_DST cluster's
        // `metadata_key` reads it): copied only when both want it.
        let forwarded = matches!(status, FilterHeadersStatus::Continue);
        let for_router = match pending.as_mut() {
            Some(log) if forwarded => {
                log.metadata = Some(metadata.clone());
                Some(metadata)
            }
            Some(log) => {
                log.metadata = Some(metadata);
                None
            }
            None => forwarded.then_some(metadata),
        };
        if let Some(metadata) = for_router {
            decoded.parts.extensions.get_or_insert_default::<StreamState>().metadata = metadata;
        }
    }
    match status {
        FilterHeadersStatus::LocalReply(reply) => Some(reply),
        _ => None,
    }
}

/// What the filters asked for on the way back: header edits, then whole-response changes
/// from the last filter to the first.
fn finish_response(
    mut response: Response<ProxyBody>,
    edits: &[HeaderEdit],
    hooks: Vec<Box<dyn ResponseHook>>,
) -> Response<ProxyBody> {
    apply_edits(edits, response.headers_mut());
    hooks.into_iter().rev().fold(response, |response, hook| hook.on_response(response))
}

/// `normalize_path`, `merge_slashes`, `path_with_escaped_slashes_action`: the new path,
/// or the answer when the request may not go on (400, or the 307 of
/// `UNESCAPE_AND_REDIRECT`).
fn normalize_path(
    manager: &HttpConnectionManager,
    stream: &mut StreamInfo,
    parts: &mut http::request::Parts,
    is_grpc: bool,
) -> Option<Response<ProxyBody>> {
    let path_and_query = parts.uri.path_and_query()?;
    match path_normalization::normalize(manager, path_and_query.as_str()) {
        Normalized::Continue(None) => None,
        Normalized::Continue(Some(path)) => {
            let mut uri = std::mem::take(&mut parts.uri).into_parts();
            match http::uri::PathAndQuery::try_from(path.as_str()) {
                Ok(path) => uri.path_and_query = Some(path),
                Err(_) => return Some(bad_request(manager, stream, is_grpc)),
            }
            match Uri::from_parts(uri) {
                Ok(uri) => parts.uri = uri,
                Err(_) => return Some(bad_request(manager, stream, is_grpc)),
            }
            None
        }
        Normalized::Reject => Some(bad_request(manager, stream, is_grpc)),
        Normalized::Redirect(location) => {
            stream.redirect = true;
            let mut response = direct(manager, StatusCode::TEMPORARY_REDIRECT, Bytes::new());
            if let Ok(location) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(http::header::LOCATION, location);
            }
            Some(response)
        }
    }
}

/// Whether the request's `Transfer-Encoding` is one Envoy's codec takes: `chunked`, once,
/// and nothing else. The HTTP/1 codec only checks that `chunked` comes last, so
/// `gzip, chunked` would reach the upstream with its gzip coding silently dropped.
fn transfer_codings_supported(headers: &HeaderMap) -> bool {
    let mut chunked = 0;
    for value in headers.get_all(http::header::TRANSFER_ENCODING) {
        let Ok(value) = value.to_str() else { return false };
        for coding in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !coding.eq_ignore_ascii_case("chunked") {
                return false;
            }
            chunked += 1;
        }
    }
    chunked <= 1
}

fn apply_edits(edits: &[HeaderEdit], headers: &mut HeaderMap) {
    for edit in edits {
        edit.apply(headers);
    }
}

/// The route configuration and what [`router::select`] found in it.
struct Routed<'a> {
    snapshot: &'a Snapshot,
    routes: &'a RouteConfiguration,
    selection: Option<router::Selection<'a>>,
}

/// The router: answers locally (no route, direct response, redirect) or forwards to the
/// route's cluster with retries and timeouts (see [`Forwarding`]).
/// The matched route's response header mutations on its local answer (a direct response
/// or a redirect), as Envoy applies them, `%REQ(…)%` answered from the request.
fn local_answer_mutations(
    layers: &router::HeaderLayers<'_>,
    response: &mut Response<ProxyBody>,
    downstream: Downstream,
    request: &http::request::Parts,
) {
    let protocol = if request.version == Version::HTTP_2 { "HTTP/2" } else { "HTTP/1.1" };
    let info = DownstreamInfo { remote: Some(downstream.peer), local: Some(downstream.local), protocol };
    router::apply_response_mutations(layers, response.headers_mut(), &info, Some(&request.headers));
}

async fn route_and_forward(
    mut parts: http::request::Parts,
    body: DownstreamBody,
    routed: Routed<'_>,
    exchange: Exchange<'_>,
    stream: &mut StreamInfo,
    pending: &mut Option<Box<PendingLog>>,
    is_grpc: bool,
) -> Response<ProxyBody> {
    let Exchange { downstream, manager, context, .. } = exchange;
    let Routed { snapshot, routes, selection } = routed;
    let random = context.rng.borrow_mut().random::<u64>();
    let forward = match router::route_selected(routes, selection, &parts, random) {
        Routing::Forward(forward) => forward,
        Routing::NoRoute => return local(manager, stream, LocalReply::NoRoute, is_grpc),
        Routing::DirectResponse { status, body, response_headers } => {
            stream.direct_response = true;
            stream.details = Some("direct_response".into());
            let mut response = direct(manager, status, body);
            local_answer_mutations(&response_headers, &mut response, downstream, &parts);
            return response;
        }
        Routing::Redirect { status, location, response_headers } => {
            stream.redirect = true;
            stream.details = Some("direct_response".into());
            let mut response = direct(manager, status, Bytes::new());
            if let Ok(location) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(http::header::LOCATION, location);
            }
            local_answer_mutations(&response_headers, &mut response, downstream, &parts);
            return response;
        }
    };
    exchange.timer.set_route_limits(router::stream_limits(forward.action, &parts));
    // The worker's view of the cluster, resolved once per publication: its balancer,
    // breakers, pool and TLS need no further look-up by name.
    let Some(cluster) = context.clusters.get(snapshot, forward.cluster.as_ref()) else {
        return local(manager, stream, LocalReply::ClusterNotFound(forward.cluster_not_found_status), is_grpc);
    };
    let name = &cluster.cluster().name;
    if let Some(log) = pending.as_mut() {
        log.upstream_cluster = Some(name.clone());
    }
    if connect::terminates(&parts, forward.action) {
        // Allowed by the connection manager: checked before the filters ran.
        return Box::pin(connect::terminate(parts, &forward, &cluster, snapshot, exchange, stream)).await;
    }
    if let Some(slot) = exchange.upgrades
        && headers::is_upgrade(&parts.headers)
    {
        // Boxed: an upgrade's connect and tunnel set-up would otherwise size every request.
        return Box::pin(forward_upgrade(parts, body, &forward, &cluster, snapshot, exchange, stream, slot)).await;
    }
    if let Some(span) = &stream.span {
        span.set(KeyValue::new("upstream_cluster", name.clone()));
        span.set(KeyValue::new("upstream_cluster.name", name.clone()));
        span.set(KeyValue::new("outrider.lb_policy", request_trace::policy(cluster.running_policy().as_ref())));
        span.set(KeyValue::new("route_name", forward.route.name.clone()));
    }
    // What the attempts need, made in a block of its own: its locals end with it, so the
    // request's future does not hold them beside the forwarding they moved into.
    let mut forwarding = {
        let info = DownstreamInfo {
            remote: Some(downstream.peer),
            local: Some(downstream.local),
            protocol: if parts.version == Version::HTTP_2 { "HTTP/2" } else { "HTTP/1.1" },
        };
        let options =
            UpstreamRequestOptions { suppress_envoy_headers: manager.suppress_envoy_headers, downstream: info };
        let hash = crate::lb::hash_policy::request_hash(forward.hash_policy, &parts, Some(downstream.peer.ip()));
        let seed = context.rng.borrow_mut().random::<u64>();
        let retry = RetryState::for_request(forward.retry_policy, &parts, seed);
        router::apply_request_mutations(&forward, &mut parts, &options);

        // The first attempt streams the body as the client sends it; a copy is kept when a
        // retry may send it again, and a shadow gets it read whole first (see `request_body`).
        // When the client's body turns out malformed (a broken chunk) while it streams
        // upstream, the client gets Envoy's 400, not an upstream reset.
        let needs = request_body::Needs {
            retry: retry.enabled(),
            shadow: !forward.action.request_mirror_policies.is_empty(),
            limit: super::flow_control::retry_buffer(exchange.buffer_limit, RETRY_BUFFER_LIMIT),
        };
        let tap = parts.extensions.remove::<RequestBodyTap>();
        let abandoned = || cluster.stats().map(|stats| stats.retry_or_shadow_abandoned.clone());
        let bodies = match request_body::prepare(body, &parts.headers, tap, needs, abandoned).await {
            Ok(bodies) => bodies,
            Err(()) => return codec_refusal(manager, stream, CodecRefusal::MalformedBody, is_grpc),
        };
        if !forward.action.request_mirror_policies.is_empty() {
            mirror(&forward, &parts, bodies.whole(), context, stream.span.is_some(), &cluster);
        }
        if let Some(log) = pending.as_mut() {
            let length = parts.headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
            log.bytes_received = bodies.whole().map_or(length.unwrap_or(0), |b| b.len() as u64);
        }
        Forwarding {
            exchange: &exchange,
            forward: &forward,
            cluster: &cluster,
            snapshot,
            stream,
            pending,
            options,
            is_grpc,
            retry,
            hash,
            parts: &mut parts,
            bodies,
        }
    };
    forwarding.run().await
}

/// Starts the route's shadows of the request whose upstream head is `upstream`, before
/// the request itself goes (Envoy sends them once the request is whole). A shadow carries
/// the whole body, so a body too large to keep (one that streams) is not mirrored: that
/// is counted as `retry_or_shadow_abandoned` of the route's cluster, as Envoy counts a
/// shadow it gives up over its buffer limit.
fn mirror(
    forward: &Forward<'_>,
    upstream: &http::request::Parts,
    body: Option<&Bytes>,
    context: &Rc<WorkerContext>,
    traced: bool,
    cluster: &ThreadLocalCluster,
) {
    let name = &cluster.cluster().name;
    let random = context.rng.borrow_mut().random::<u64>();
    let shadows = router::shadows(forward, upstream, random, super::shadow::local_address(), traced);
    if shadows.is_empty() {
        return;
    }
    let abandoned = cluster.stats().map(|s| &s.retry_or_shadow_abandoned);
    match body {
        Some(body) => {
            let downstream_is_h2 = upstream.version == Version::HTTP_2;
            let (clusters, slots) = (&context.clusters, &context.shadows);
            super::shadow::send(clusters, slots, shadows, body, forward.timeout, downstream_is_h2, abandoned);
        }
        None => {
            tracing::debug!(cluster = %name, shadows = shadows.len(), "request body streams; not mirrored");
            if let Some(counter) = abandoned {
                counter.add(shadows.len() as u64);
            }
        }
    }
}

/// An allowed upgrade request: one attempt (upgrades are never retried), on a connection
/// of its own; a `101` leaves the upstream half of the tunnel in `slot`.
#[allow(clippy::too_many_arguments)]
async fn forward_upgrade(
    mut parts: http::request::Parts,
    body: DownstreamBody,
    forward: &Forward<'_>,
    cluster: &ThreadLocalCluster,
    snapshot: &Snapshot,
    exchange: Exchange<'_>,
    stream: &mut StreamInfo,
    slot: &upgrade::UpgradeSlot,
) -> Response<ProxyBody> {
    let Exchange { downstream, manager, context, .. } = exchange;
    let info = DownstreamInfo { remote: Some(downstream.peer), local: Some(downstream.local), protocol: "HTTP/1.1" };
    let options = UpstreamRequestOptions { suppress_envoy_headers: manager.suppress_envoy_headers, downstream: info };
    router::apply_request_mutations(forward, &mut parts, &options);
    let hash = crate::lb::hash_policy::request_hash(forward.hash_policy, &parts, Some(downstream.peer.ip()));
    let ctx = PickContext { hash, attempt: 0, previous: &[], now: Instant::now() };
    let Some(host) = cluster.pick(&ctx, || exchange.destination_sources(&parts)) else {
        return local(manager, stream, LocalReply::NoHealthyUpstream, false);
    };
    let tls = match cluster.tls(&host.endpoint, snapshot, &context.clusters.tls) {
        Ok(tls) => tls,
        Err(error) => {
            let failure =
                UpstreamError::ConnectFailure { address: host.address().to_string(), reason: error.to_string() };
            return reset_reply(manager, stream, Some(failure), false, false);
        }
    };
    // Kept for the response's header handling (which keeps `upgrade` only for upgrades).
    let request_headers = parts.headers.clone();
    let request = Request::from_parts(parts, body.into_request_body());
    let started = Instant::now();
    let mut response = match context.clusters.upstreams.open_upgrade(&host, cluster.cluster(), request, tls).await {
        Ok(response) => response,
        Err(error) => return reset_reply(manager, stream, Some(error), false, false),
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        *slot.borrow_mut() = Some(hyper::upgrade::on(&mut response));
    }
    let (mut parts, body) = response.into_parts();
    headers::strip_hop_by_hop(&mut parts.headers);
    router::apply_response_mutations(&forward.headers, &mut parts.headers, &options.downstream, None);
    // A switch of protocols has no service time in Envoy (its router adds it to final
    // responses only).
    if parts.status != StatusCode::SWITCHING_PROTOCOLS {
        headers::set_upstream_service_time(&mut parts.headers, started.elapsed(), options.suppress_envoy_headers);
    }
    headers::mutate_response_headers(manager, Some(&request_headers), &mut parts.headers);
    Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed_unsync())
}

/// `stop_accepting_requests` is saturated, or the `http_connection_manager_decode_headers`
/// load-shed point sheds this request.
fn overloaded(context: &WorkerContext) -> bool {
    let overload = &context.overload;
    overload.is_saturated(ActionKind::StopAcceptingRequests)
        || overload.sheds(LoadShedKind::HttpConnectionManagerDecodeHeaders, || context.rng.borrow_mut().random())
}
