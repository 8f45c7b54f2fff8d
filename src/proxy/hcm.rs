//! The HTTP connection manager: serves HTTP/1.1 and HTTP/2 (prior knowledge) on a
//! connection, routes each request, picks an endpoint with the cluster's balancer, forwards
//! with retries and timeouts over the worker's pools, and answers local errors in Envoy's
//! words.

mod codec;
mod lifetime;
mod metered;
mod observed;
mod request_body;
mod serve;
mod stream;
mod stream_timer;
mod upgrade;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use rand::Rng;

use super::access_log::{DownstreamLogInfo, PendingLog};
use observed::StreamInfo;
pub use serve::serve;

use super::context::WorkerContext;
use super::filters::context::{MatchedRoute, RequestBodyTap};
use super::filters::{
    Callouts, DownstreamBody, DownstreamConnection, DynamicMetadata, FilterHeadersStatus, HeaderEdit, HttpFilterChain,
    LocalResponse, RequestContext, ResponseHook,
};
use super::headers::{self, Downstream, LocalReply, ResetReason};
use super::path_normalization::{self, Normalized};
use super::request_trace;
use super::response_flags::ResponseFlags;
use super::retry::{Decision, Outcome, RetryState};
use super::router::{self, DownstreamInfo, Forward, Routing, UpstreamRequestOptions};
use super::upstream::{BoxError, UpstreamError};
use crate::config::RouteConfiguration;
use crate::config::listener::{HttpConnectionManager, RouteSource};
use crate::config::overload::{ActionKind, LoadShedKind};
use crate::config::route::Action;
use crate::config::upgrade::upgrade_allowed;
use crate::lb::resources::{Priority, Slot};
use crate::lb::{Host, PickContext};
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
    /// The listener is OUTBOUND.
    pub outbound: bool,
    /// The overload manager's actions apply (the listener does not bypass it).
    pub overloadable: bool,
    /// `disable_http_keepalive` is configured and applies: told to drain the connection.
    pub overload_drain: Option<&'a tokio::sync::Notify>,
    /// The listener's `per_connection_buffer_limit_bytes`.
    pub buffer_limit: u32,
    /// The stream's one timer: the attempt's timeout shares it with the stream limits.
    timer: &'a stream_timer::StreamTimer,
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
        return unsupported_transfer_coding(manager, stream, is_grpc);
    }
    if let Some(response) = normalize_path(manager, stream, &mut parts, is_grpc) {
        return response;
    }
    let classification = headers::mutate_request_headers(
        manager,
        &routes.internal_only_headers,
        &downstream,
        headers::private_address,
        &mut parts.headers,
    );
    if let Some(loggers) = stream.log.take() {
        let remote = if classification.client == downstream.peer.ip() {
            downstream.peer
        } else {
            // Taken from x-forwarded-for, which carries no port: Envoy prints port 0.
            SocketAddr::new(classification.client, 0)
        };
        let info = DownstreamLogInfo {
            local: downstream.local,
            remote,
            server_name: exchange.connection.server_name.clone(),
            peer_uri_san: exchange.connection.peer_identity.as_ref().and_then(|p| p.uri_sans.first().cloned()),
        };
        *pending = Some(Box::new(PendingLog::new(loggers, SystemTime::now(), Instant::now(), &parts, info)));
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
        // Decided (and packed into x-request-id) whether a tracer is set or not, as Envoy.
        let sampling = route_tracing.map_or(&tracing.sampling, |r| &r.sampling);
        let random = || context.rng.borrow_mut().random();
        let reason = request_trace::trace_reason(tracing, sampling, &mut parts.headers, random);
        if let Some(tracer) = exchange.tracer
            && let Some(span) = request_trace::start(tracer, tracing, route_tracing, &parts, reason, exchange.outbound)
        {
            // The upstream sees this span as its parent, sampled or not.
            span.inject(&mut parts.headers);
            stream.span = Some(span);
        }
    }
    if let Some(log) = pending.as_mut() {
        log.route_name = selection.and_then(|s| s.route).map(|r| r.name.clone()).filter(|n| !n.is_empty());
    }
    if let Some(kind) = upgrade::requested(&mut parts) {
        let route = selection.and_then(|s| s.route).and_then(|r| match &r.action {
            Action::Route(action) => Some(action.upgrade_configs.as_slice()),
            _ => None,
        });
        if exchange.upgrades.is_none() || !upgrade_allowed(&manager.upgrade_configs, route, &kind) {
            // Envoy's answer to an upgrade nobody allowed: 403, empty body, nothing forwarded.
            let reply = LocalResponse::new(StatusCode::FORBIDDEN, "", "upgrade_failed");
            return filter_reply(manager, stream, reply, is_grpc);
        }
    }
    let mut edits = Vec::new();
    let mut hooks: Vec<Box<dyn ResponseHook>> = Vec::new();
    let mut body = DownstreamBody::new(body);
    if !exchange.filters.is_empty() {
        let mut metadata = DynamicMetadata::default();
        let callouts = Callouts::new(&context.clusters);
        let mut request = RequestContext {
            parts: &mut parts,
            connection: exchange.connection,
            remote_ip: classification.client,
            route: selection.map(|s| MatchedRoute { config: routes, virtual_host: s.virtual_host, route: s.route }),
            is_grpc,
            metadata: &mut metadata,
            response_headers: &mut edits,
            response_hooks: &mut hooks,
            callouts: &callouts,
            stat_prefix: &manager.stat_prefix,
            draining: context.draining.is_triggered() || context.health_check_failed.is_failed(),
            flags: &mut stream.flags,
            body: &mut body,
        };
        let status = exchange.filters.decode_headers(&mut request).await;
        if let (Some(span), Some(tracing)) = (&stream.span, &manager.tracing) {
            for tag in request_trace::metadata_tags(&request_trace::custom_tags(tracing, route_tracing), &metadata) {
                span.set(tag);
            }
        }
        if let Some(log) = pending.as_mut()
            && !metadata.0.is_empty()
        {
            log.metadata = Some(metadata);
        }
        if let FilterHeadersStatus::LocalReply(reply) = status {
            let response = filter_reply(manager, stream, reply, is_grpc);
            return finish_response(response, &edits, hooks);
        }
    }
    let routed = Routed { snapshot: &snapshot, routes, selection };
    let response = route_and_forward(parts, body, routed, exchange, stream, pending, is_grpc).await;
    finish_response(response, &edits, hooks)
}

/// `spawn_upstream_span`: a client span for one upstream attempt, named as Envoy names it,
/// whose context replaces the request span's in the attempt's headers.
fn upstream_span(
    manager: &HttpConnectionManager,
    stream: &StreamInfo,
    cluster: &str,
    host: &Host,
    headers: &mut HeaderMap,
) -> Option<crate::telemetry::RequestSpan> {
    let spawn = manager.tracing.as_ref().is_some_and(|t| t.spawn_upstream_span);
    let parent = stream.span.as_ref().filter(|_| spawn)?;
    let attributes = vec![
        KeyValue::new("component", "proxy"),
        KeyValue::new("upstream_cluster", cluster.to_owned()),
        KeyValue::new("upstream_cluster.name", cluster.to_owned()),
        KeyValue::new("upstream_address", host.address().to_string()),
    ];
    let span = parent.child(format!("router {cluster} egress"), attributes);
    span.inject(headers);
    Some(span)
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

/// Envoy's 501 for a transfer coding it does not implement; the connection closes.
fn unsupported_transfer_coding(
    manager: &HttpConnectionManager,
    stream: &mut StreamInfo,
    is_grpc: bool,
) -> Response<ProxyBody> {
    let mut reply = LocalResponse {
        flags: ResponseFlags::DOWNSTREAM_PROTOCOL_ERROR,
        ..LocalResponse::new(StatusCode::NOT_IMPLEMENTED, "Not Implemented", "http1.invalid_transfer_encoding")
    };
    reply.headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    filter_reply(manager, stream, reply, is_grpc)
}

/// Envoy's 400 for a request whose framing its codec refuses (a broken chunked body);
/// the connection closes after it, as Envoy closes it.
fn malformed_request(manager: &HttpConnectionManager, stream: &mut StreamInfo, is_grpc: bool) -> Response<ProxyBody> {
    let mut reply = LocalResponse {
        flags: ResponseFlags::DOWNSTREAM_PROTOCOL_ERROR,
        ..LocalResponse::new(StatusCode::BAD_REQUEST, "Bad Request", "http1.codec_error")
    };
    reply.headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    filter_reply(manager, stream, reply, is_grpc)
}

/// Envoy's 400 for a request it will not route (`path_normalization_failed`).
fn bad_request(manager: &HttpConnectionManager, stream: &mut StreamInfo, is_grpc: bool) -> Response<ProxyBody> {
    let reply = LocalResponse {
        flags: ResponseFlags::DOWNSTREAM_PROTOCOL_ERROR,
        ..LocalResponse::new(StatusCode::BAD_REQUEST, "", "path_normalization_failed")
    };
    filter_reply(manager, stream, reply, is_grpc)
}

/// A filter's local reply (gRPC requests get the trailers-only gRPC form).
fn filter_reply(
    manager: &HttpConnectionManager,
    info: &mut StreamInfo,
    reply: LocalResponse,
    is_grpc: bool,
) -> Response<ProxyBody> {
    info.flags.insert(reply.flags);
    info.details = Some(reply.details.clone().into());
    tracing::debug!(status = reply.status.as_u16(), details = %reply.details, "local reply");
    let message = String::from_utf8_lossy(&reply.body);
    let (status, mut header_map, body) = if is_grpc {
        headers::grpc_local_reply(reply.status, &message)
    } else {
        headers::local_reply(reply.status, &message)
    };
    if let (true, Some(code)) = (is_grpc, reply.grpc_status) {
        header_map.insert("grpc-status", HeaderValue::from(code));
    }
    // A header the filter sets replaces the default of that name (`content-type`).
    for name in reply.headers.keys() {
        header_map.remove(name);
    }
    for (name, value) in &reply.headers {
        header_map.append(name.clone(), value.clone());
    }
    let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    *response.headers_mut() = header_map;
    headers::set_server(manager, response.headers_mut());
    response
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
/// route's cluster with retries and timeouts.
async fn route_and_forward(
    mut parts: http::request::Parts,
    body: DownstreamBody,
    routed: Routed<'_>,
    exchange: Exchange<'_>,
    stream: &mut StreamInfo,
    pending: &mut Option<Box<PendingLog>>,
    is_grpc: bool,
) -> Response<ProxyBody> {
    let Exchange { downstream, original_dst, manager, context, .. } = exchange;
    let Routed { snapshot, routes, selection } = routed;
    let random = context.rng.borrow_mut().random::<u64>();
    let forward = match router::route_selected(routes, selection, &parts, random) {
        Routing::Forward(forward) => forward,
        Routing::NoRoute => return local(manager, stream, LocalReply::NoRoute, is_grpc),
        Routing::DirectResponse { status, body, .. } => {
            stream.direct_response = true;
            stream.details = Some("direct_response".into());
            return direct(manager, status, body);
        }
        Routing::Redirect { status, location, .. } => {
            stream.redirect = true;
            stream.details = Some("direct_response".into());
            let mut response = direct(manager, status, Bytes::new());
            if let Ok(location) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(http::header::LOCATION, location);
            }
            return response;
        }
    };
    let Some(cluster) = snapshot.clusters.get(forward.cluster.as_ref()) else {
        return local(manager, stream, LocalReply::ClusterNotFound(forward.cluster_not_found_status), is_grpc);
    };
    if let Some(log) = pending.as_mut() {
        log.upstream_cluster = Some(cluster.resource.name.clone());
    }
    if let Some(slot) = exchange.upgrades
        && headers::is_upgrade(&parts.headers)
    {
        // Boxed: an upgrade's connect and tunnel set-up would otherwise size every request.
        return Box::pin(forward_upgrade(parts, body, &forward, cluster, snapshot, exchange, stream, slot)).await;
    }
    if let Some(span) = &stream.span {
        span.set(KeyValue::new("upstream_cluster", cluster.resource.name.clone()));
        span.set(KeyValue::new("upstream_cluster.name", cluster.resource.name.clone()));
        span.set(KeyValue::new("outrider.lb_policy", request_trace::policy(&cluster.resource)));
        span.set(KeyValue::new("route_name", forward.route.name.clone()));
    }
    let info = DownstreamInfo {
        remote: Some(downstream.peer),
        local: Some(downstream.local),
        protocol: if parts.version == Version::HTTP_2 { "HTTP/2" } else { "HTTP/1.1" },
    };
    let options = UpstreamRequestOptions { suppress_envoy_headers: false, downstream: info };
    let hash = crate::lb::hash_policy::request_hash(forward.hash_policy, &parts, Some(downstream.peer.ip()));
    let seed = context.rng.borrow_mut().random::<u64>();
    let mut retry = RetryState::for_request(forward.retry_policy, &parts, seed);
    router::apply_request_mutations(&forward, &mut parts, &options);
    let downstream_is_h2 = parts.version == Version::HTTP_2;

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
    let abandoned =
        || context.clusters.balancers.get(&cluster.resource.name).map(|lb| lb.stats.retry_or_shadow_abandoned.clone());
    let mut bodies = match request_body::prepare(body, &parts.headers, tap, needs, abandoned).await {
        Ok(bodies) => bodies,
        Err(()) => return malformed_request(manager, stream, is_grpc),
    };

    if !forward.action.request_mirror_policies.is_empty() {
        mirror(&forward, &parts, bodies.whole(), context, stream.span.is_some(), &cluster.resource.name);
    }

    // Circuit breakers: every attempt takes a request slot, every retry a retry slot.
    // Routes carry no priority in Outrider's model: all requests are default priority.
    let resources = {
        let mut pickers = context.clusters.pickers.borrow_mut();
        pickers.balancer(&context.clusters.balancers, &cluster.resource.name).map(|lb| lb.resources().clone())
    };
    let limits = &cluster.resource.circuit_breakers;
    let mut _retry_slot = None;
    if let Some(log) = pending.as_mut() {
        let length = parts.headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
        log.bytes_received = bodies.whole().map_or(length.unwrap_or(0), |b| b.len() as u64);
    }
    // No retry condition, or a body that streams once: one attempt.
    let single_attempt = !retry.enabled() || bodies.single();
    let started = Instant::now();
    let deadline = forward.timeout.map(|t| started + t);
    let mut previous: Vec<Arc<Host>> = Vec::new();
    let mut last_failure = None;
    loop {
        let now = Instant::now();
        let remaining = deadline.map(|d| d.saturating_duration_since(now));
        if remaining == Some(Duration::ZERO) {
            return attempted(&forward, retry.attempts(), local(manager, stream, LocalReply::UpstreamTimeout, is_grpc));
        }
        let avoid: &[Arc<Host>] = if retry.avoid_previous_hosts() { &previous } else { &[] };
        let ctx = PickContext { hash, attempt: 0, previous: avoid, now };
        let picked = context.clusters.pick_host(&cluster.resource, &ctx, original_dst, Some(&parts.headers));
        let Some(host) = picked else {
            if let Some(lb) = context.clusters.balancers.get(&cluster.resource.name) {
                lb.stats.upstream_cx_none_healthy.inc();
            }
            return attempted(
                &forward,
                retry.attempts(),
                local(manager, stream, LocalReply::NoHealthyUpstream, is_grpc),
            );
        };
        let request_slot = match resources.as_ref().map(|r| r.try_request(limits, Priority::Default)) {
            Some(None) => {
                host.cluster_stats.upstream_rq_pending_overflow.inc();
                return attempted(&forward, retry.attempts(), overflow(manager, stream, is_grpc));
            }
            Some(slot) => slot,
            None => None,
        };
        if let Some(log) = pending.as_mut() {
            log.upstream_host = Some(host.address().to_string());
        }
        if let Some(span) = &stream.span {
            span.set(KeyValue::new("upstream_address", host.address().to_string()));
        }
        let Some(body) = bodies.next() else {
            return reset_reply(manager, stream, last_failure, true, is_grpc);
        };
        // The head is copied only when another attempt may need it.
        let mut attempt_parts =
            if single_attempt { std::mem::replace(&mut parts, empty_head()) } else { parts.clone() };
        router::set_attempt_headers(
            &forward,
            &mut attempt_parts.headers,
            retry.attempts(),
            started.elapsed(),
            false,
            &options,
        );
        let upstream_span = upstream_span(manager, stream, &cluster.resource.name, &host, &mut attempt_parts.headers);
        let upstream_request = Request::from_parts(attempt_parts, body);
        let try_timeout = match (forward.per_try_timeout, remaining) {
            (Some(per_try), Some(remaining)) => Some(per_try.min(remaining)),
            (per_try, remaining) => per_try.or(remaining),
        };
        let tls = match context.clusters.tls.upstream(cluster, &host.endpoint, snapshot) {
            Ok(tls) => tls,
            Err(error) => {
                let failure =
                    UpstreamError::ConnectFailure { address: host.address().to_string(), reason: error.to_string() };
                return attempted(
                    &forward,
                    retry.attempts(),
                    reset_reply(manager, stream, Some(failure), retry.attempts() > 1, is_grpc),
                );
            }
        };
        let send = context.clusters.upstreams.forward_over(
            &host,
            &cluster.resource,
            downstream_is_h2,
            upstream_request,
            tls,
            resources.as_ref(),
        );
        let result = match try_timeout {
            Some(limit) => {
                let deadline = tokio::time::Instant::now() + limit;
                exchange.timer.within(deadline, send).await.map_err(|_| Attempt::Timeout)
            }
            None => Ok(send.await),
        };
        if let Some(span) = upstream_span {
            span.end_upstream(result.as_ref().ok().and_then(|r| r.as_ref().ok()).map(|r| r.status().as_u16()));
        }
        if let Ok(Err(UpstreamError::Overflow)) = result {
            // max_pending_requests: Envoy never retries an overflow.
            return attempted(&forward, retry.attempts(), overflow(manager, stream, is_grpc));
        }
        let outcome_decision = match &result {
            Ok(Ok(response)) => {
                if let Some(log) = pending.as_mut() {
                    log.upstream_responded();
                }
                let grpc_status = grpc_status(response.headers());
                let outcome =
                    Outcome::Response { status: response.status().as_u16(), grpc_status, headers: response.headers() };
                retry.on_outcome(&outcome)
            }
            Ok(Err(error)) => retry.on_outcome(&classify(error)),
            Err(Attempt::Timeout) => {
                if let Some(config) = &cluster.resource.outlier_detection {
                    let thresholds = crate::lb::endpoint::outlier::Thresholds::of(config);
                    host.stats.outlier().record(crate::lb::endpoint::outlier::OutlierResult::Timeout, &thresholds);
                }
                retry.on_outcome(&Outcome::Timeout)
            }
        };
        let cluster_stats = &host.cluster_stats;
        if result.is_err() {
            // The attempt's future was dropped by the timeout: count it here.
            let per_try = forward.per_try_timeout.is_some_and(|p| remaining.is_none_or(|r| p < r));
            let counter =
                if per_try { &cluster_stats.upstream_rq_per_try_timeout } else { &cluster_stats.upstream_rq_timeout };
            counter.inc();
            cluster_stats.charge(504);
            cluster_stats.upstream_rq_completed.inc();
        }
        let can_resend = bodies.can_resend();
        let mut outcome_decision = outcome_decision;
        if matches!(outcome_decision, Decision::Retry { .. }) && can_resend {
            match resources.as_ref().map(|r| r.try_retry(limits, Priority::Default)) {
                // max_retries (or the budget) is reached: the client gets this outcome.
                Some(None) => {
                    host.cluster_stats.upstream_rq_retry_overflow.inc();
                    outcome_decision = Decision::Done;
                }
                Some(slot) => _retry_slot = slot,
                None => {}
            }
        }
        if retry.limit_reached() {
            stream.flags.insert(ResponseFlags::UPSTREAM_RETRY_LIMIT_EXCEEDED);
            cluster_stats.upstream_rq_retry_limit_exceeded.inc();
        }
        match (outcome_decision, result) {
            (Decision::Retry { backoff }, _) if can_resend => {
                cluster_stats.upstream_rq_retry.inc();
                stream.retries += 1;
                previous.push(host);
                let wake = Instant::now() + backoff;
                if deadline.is_some_and(|d| wake >= d) {
                    return attempted(
                        &forward,
                        retry.attempts(),
                        local(manager, stream, LocalReply::UpstreamTimeout, is_grpc),
                    );
                }
                tokio::time::sleep(backoff).await;
                continue;
            }
            (_, Ok(Ok(response))) => {
                let response = respond(manager, &forward, response, started, retry.attempts(), &options);
                return hold_until_body_ends(response, request_slot);
            }
            (_, Ok(Err(_))) if bodies.failed() => {
                return malformed_request(manager, stream, is_grpc);
            }
            (_, Ok(Err(error))) => {
                last_failure = Some(error);
                return attempted(
                    &forward,
                    retry.attempts(),
                    reset_reply(manager, stream, last_failure, retry.attempts() > 1, is_grpc),
                );
            }
            (_, Err(Attempt::Timeout)) => {
                let reply = local(manager, stream, LocalReply::UpstreamTimeout, is_grpc);
                return attempted(&forward, retry.attempts(), reply);
            }
        }
    }
}

enum Attempt {
    Timeout,
}

/// An empty request head, left in the place of one moved into its only attempt.
fn empty_head() -> http::request::Parts {
    Request::new(()).into_parts().0
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
    cluster: &str,
) {
    let random = context.rng.borrow_mut().random::<u64>();
    let shadows = router::shadows(forward, upstream, random, super::shadow::local_address(), traced);
    if shadows.is_empty() {
        return;
    }
    let stats = context.clusters.balancers.get(cluster).map(|balancer| balancer.stats.clone());
    let abandoned = stats.as_deref().map(|s| &s.retry_or_shadow_abandoned);
    match body {
        Some(body) => {
            let downstream_is_h2 = upstream.version == Version::HTTP_2;
            let (clusters, slots) = (&context.clusters, &context.shadows);
            super::shadow::send(clusters, slots, shadows, body, forward.timeout, downstream_is_h2, abandoned);
        }
        None => {
            tracing::debug!(cluster, shadows = shadows.len(), "request body streams; not mirrored");
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
    cluster: &Arc<crate::store::Versioned<crate::config::Cluster>>,
    snapshot: &Snapshot,
    exchange: Exchange<'_>,
    stream: &mut StreamInfo,
    slot: &upgrade::UpgradeSlot,
) -> Response<ProxyBody> {
    let Exchange { downstream, original_dst, manager, context, .. } = exchange;
    let info = DownstreamInfo { remote: Some(downstream.peer), local: Some(downstream.local), protocol: "HTTP/1.1" };
    let options = UpstreamRequestOptions { suppress_envoy_headers: false, downstream: info };
    router::apply_request_mutations(forward, &mut parts, &options);
    let hash = crate::lb::hash_policy::request_hash(forward.hash_policy, &parts, Some(downstream.peer.ip()));
    let ctx = PickContext { hash, attempt: 0, previous: &[], now: Instant::now() };
    let Some(host) = context.clusters.pick_host(&cluster.resource, &ctx, original_dst, Some(&parts.headers)) else {
        return local(manager, stream, LocalReply::NoHealthyUpstream, false);
    };
    let tls = match context.clusters.tls.upstream(cluster, &host.endpoint, snapshot) {
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
    let mut response = match context.clusters.upstreams.open_upgrade(&host, &cluster.resource, request, tls).await {
        Ok(response) => response,
        Err(error) => return reset_reply(manager, stream, Some(error), false, false),
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        *slot.borrow_mut() = Some(hyper::upgrade::on(&mut response));
    }
    let (mut parts, body) = response.into_parts();
    headers::strip_hop_by_hop(&mut parts.headers);
    router::apply_response_mutations(&forward.headers, &mut parts.headers, &options.downstream, None);
    headers::set_upstream_service_time(&mut parts.headers, started.elapsed(), options.suppress_envoy_headers);
    headers::mutate_response_headers(manager, Some(&request_headers), &mut parts.headers);
    Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed_unsync())
}

fn classify(error: &UpstreamError) -> Outcome<'static> {
    match error {
        UpstreamError::ConnectFailure { .. } | UpstreamError::ConnectTimeout { .. } => Outcome::ConnectFailure,
        UpstreamError::RefusedStream => Outcome::RefusedStream,
        _ => Outcome::Reset,
    }
}

fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");
    headers.get(GRPC_STATUS)?.to_str().ok()?.parse().ok()
}

fn respond(
    manager: &HttpConnectionManager,
    forward: &Forward<'_>,
    response: Response<super::upstream::ResponseBody>,
    started: Instant,
    attempts: u32,
    options: &UpstreamRequestOptions,
) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    headers::strip_hop_by_hop(&mut parts.headers);
    router::apply_response_mutations(&forward.headers, &mut parts.headers, &options.downstream, None);
    router::set_response_attempt_count(forward, &mut parts.headers, attempts);
    headers::set_upstream_service_time(&mut parts.headers, started.elapsed(), options.suppress_envoy_headers);
    headers::mutate_response_headers(manager, None, &mut parts.headers);
    Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed_unsync())
}

/// A reply the router makes itself once it has tried (or tried to try) the upstream: it
/// carries `x-envoy-attempt-count` when the virtual host asks for it, as Envoy's do.
fn attempted(forward: &Forward<'_>, attempts: u32, mut response: Response<ProxyBody>) -> Response<ProxyBody> {
    router::set_response_attempt_count(forward, response.headers_mut(), attempts);
    response
}

fn reset_reply(
    manager: &HttpConnectionManager,
    info: &mut StreamInfo,
    failure: Option<UpstreamError>,
    retried: bool,
    is_grpc: bool,
) -> Response<ProxyBody> {
    let reason = match failure {
        Some(UpstreamError::ConnectFailure { .. }) => ResetReason::RemoteConnectionFailure,
        Some(UpstreamError::ConnectTimeout { .. }) => ResetReason::ConnectionTimeout,
        Some(UpstreamError::RefusedStream) => ResetReason::RemoteRefusedStreamReset,
        Some(UpstreamError::RemoteReset(_)) => ResetReason::RemoteReset,
        Some(UpstreamError::Protocol(_)) => ResetReason::ProtocolError,
        _ => ResetReason::ConnectionTermination,
    };
    local(manager, info, LocalReply::UpstreamReset { reason, retried }, is_grpc)
}

/// Keeps `slot` (a circuit-breaker request slot) until the response body ends or drops:
/// a streaming response counts as an active request for as long as it streams.
fn hold_until_body_ends(response: Response<ProxyBody>, slot: Option<Slot>) -> Response<ProxyBody> {
    let Some(slot) = slot else { return response };
    response.map(|body| {
        body.map_frame(move |frame| {
            let _held = &slot;
            frame
        })
        .boxed_unsync()
    })
}

/// A circuit breaker refused the request: 503 `… reset reason: overflow` with
/// `x-envoy-overloaded: true`, as Envoy answers (response flag UO).
fn overflow(manager: &HttpConnectionManager, stream: &mut StreamInfo, is_grpc: bool) -> Response<ProxyBody> {
    let mut response = local(manager, stream, LocalReply::Overflow, is_grpc);
    response.headers_mut().insert("x-envoy-overloaded", HeaderValue::from_static("true"));
    response
}

/// `stop_accepting_requests` is saturated, or the `http_connection_manager_decode_headers`
/// load-shed point sheds this request.
fn overloaded(context: &WorkerContext) -> bool {
    let overload = &context.overload;
    overload.is_saturated(ActionKind::StopAcceptingRequests)
        || overload.sheds(LoadShedKind::HttpConnectionManagerDecodeHeaders, || context.rng.borrow_mut().random())
}

/// A local reply (gRPC requests get a trailers-only gRPC status instead).
fn local(
    manager: &HttpConnectionManager,
    info: &mut StreamInfo,
    reply: LocalReply,
    is_grpc: bool,
) -> Response<ProxyBody> {
    info.flags.insert(ResponseFlags::for_local_reply(&reply));
    info.details = Some(reply.details().into());
    let (status, headers, body) =
        if is_grpc { headers::grpc_local_reply(reply.status(), &reply.message()) } else { reply.build() };
    let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    headers::set_server(manager, response.headers_mut());
    response
}

fn direct(manager: &HttpConnectionManager, status: StatusCode, body: Bytes) -> Response<ProxyBody> {
    let empty = body.is_empty();
    let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    if !empty {
        response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    headers::set_server(manager, response.headers_mut());
    response
}
