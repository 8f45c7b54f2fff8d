//! Around each request: the connection manager's `http.<stat_prefix>.*` stats, the
//! access log line and the span, all completed when the response ends
//! ([`crate::proxy::completion`]).

use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use rand::Rng;

use super::super::access_log::ActiveLog;
use super::super::completion::{Completed, Completion, PendingSpan};
use super::super::filters::ResponseFlagsSlot;
use super::super::filters::peer_metadata::PeerExchange;
use super::super::load_report;
use super::super::request_trace;
use super::super::response_flags::ResponseFlags;
use super::super::stream_info::{FilterState, StreamState};
use super::{Exchange, ProxyBody, forward_request};
use crate::config::overload::ActionKind;
use crate::config::tracing::{CustomTag, CustomTagValue};
use crate::telemetry::{HttpStats, RequestSpan};

/// Counts, times and logs one request around [`forward_request`].
pub(super) async fn handle(
    request: Request<Incoming>,
    exchange: Exchange<'_>,
    stats: Arc<HttpStats>,
    access_logs: &Arc<[ActiveLog]>,
) -> Response<ProxyBody> {
    let started = Instant::now();
    match request.version() {
        Version::HTTP_2 => stats.downstream_rq_http2_total.inc(),
        _ => stats.downstream_rq_http1_total.inc(),
    }
    let mut completion = Completion::start(stats, started);
    let mut stream = StreamInfo::default();
    if !access_logs.is_empty() {
        // Captured after the connection manager's header handling (see `forward_request`).
        stream.log = Some(access_logs.clone());
    }
    let mut pending = None;
    let http1 = request.version() != Version::HTTP_2;
    let closes_after = http10_closes_after(&request);
    let mut request = request;
    // For the application behind an inbound listener: counted for the load reports, and a
    // mesh caller that asked gets the report on the answer.
    let load = exchange.inbound.then_some(exchange.context.inbound_load.as_ref()).flatten();
    let mutual = exchange.connection.peer_identity.is_some();
    let wants_report = exchange.inbound && load_report::take_request(request.headers_mut(), mutual);
    let worker = exchange.context.id;
    let arrival = load.map(|load| load.started(worker));
    let mut response = forward_request(request, exchange, &mut stream, &mut pending).await;
    if let (Some(load), Some(arrival)) = (load, arrival) {
        load.answered(worker, arrival, started.elapsed());
        if wants_report && let Some(report) = exchange.context.load_report.current(load) {
            load_report::add_to_answer(response.headers_mut(), report);
        }
    }
    // Envoy's HTTP/1 codec tells an HTTP/1.0 client without keep-alive that the connection
    // closes after this response (it does, either way).
    if closes_after {
        response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    // Envoy's drain decision for a DEFAULT-drain listener while health checks fail.
    let unhealthy = exchange.health_check_drain && exchange.context.health_check_failed.is_failed();
    if let Some(drain) = exchange.overload_drain
        && (unhealthy
            || exchange.overloadable
                && exchange
                    .context
                    .overload
                    .applies(ActionKind::DisableHttpKeepalive, || exchange.context.rng.borrow_mut().random()))
    {
        // Envoy's `disable_http_keepalive` and its drain close: this response is the
        // connection's last on HTTP/1, and HTTP/2 connections drain.
        if http1 {
            response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
            if !unhealthy {
                completion.stats().downstream_cx_overload_disable_keepalive.inc();
            }
        }
        drain.notify_one();
    }
    let status = response.status().as_u16();
    if let Some(slot) = response.extensions().get::<ResponseFlagsSlot>() {
        let _ = slot.0.set(stream.flags);
    }
    let stats = completion.stats();
    stats.charge(status);
    if stream.flags.contains(ResponseFlags::OVERLOAD_MANAGER) {
        stats.downstream_rq_overload_close.inc();
    } else if stream.flags.contains(ResponseFlags::NO_ROUTE_FOUND) {
        stats.no_route.inc();
    } else if stream.flags.contains(ResponseFlags::NO_CLUSTER_FOUND) {
        stats.no_cluster.inc();
    } else if stream.direct_response {
        stats.rq_direct_response.inc();
    } else if stream.redirect {
        stats.rq_redirect.inc();
    }
    if let Some(mut log) = pending {
        log.respond(status, response.headers(), stream.flags);
        // Every local answer says why; anything else came from the upstream.
        log.traced = stream.span.as_ref().is_some_and(|s| s.sampled());
        log.span_ids = stream.span.as_ref().map(|s| s.ids());
        log.details = Some(stream.details.take().unwrap_or(std::borrow::Cow::Borrowed("via_upstream")));
        completion.log_with(Some(log));
    }
    if let Some(span) = stream.span.take() {
        if let Some(source) = stream.format_tags.take() {
            for tag in source.tags() {
                span.set(tag);
            }
        }
        let pending = PendingSpan { span, status, flags: stream.flags, retries: stream.retries };
        completion.trace_with(Some(Box::new(pending)));
    }
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, Completed::new(body, completion).boxed_unsync())
}

/// What the forwarding path tells the caller about a request besides its response.
#[derive(Default)]
pub(super) struct StreamInfo {
    /// Access log writers, when the connection manager logs.
    pub(super) log: Option<Arc<[ActiveLog]>>,
    /// Envoy's `%RESPONSE_CODE_DETAILS%` of a local answer.
    pub(super) details: Option<std::borrow::Cow<'static, str>>,
    pub(super) flags: ResponseFlags,
    pub(super) direct_response: bool,
    pub(super) redirect: bool,
    /// The request's span, when its connection manager traces and a tracer is set.
    pub(super) span: Option<RequestSpan>,
    /// What the span's format tags read, when it has any: filled in with the response.
    pub(super) format_tags: Option<Box<FormatTagSource>>,
    pub(super) retries: u32,
}

/// An HTTP/1.0 request that did not ask for `keep-alive`: its connection ends with the
/// response.
fn http10_closes_after(request: &Request<Incoming>) -> bool {
    request.version() == Version::HTTP_10
        && !request
            .headers()
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("keep-alive"))
}

/// A span's custom tags from format strings (`value`), and what they read: the request's
/// filter state as the filters left it, and its peers, of which the upstream one is known
/// only once the response's head is.
#[derive(Debug)]
pub(super) struct FormatTagSource {
    tags: Vec<CustomTag>,
    exchange: PeerExchange,
    filter_state: Option<FilterState>,
}

impl FormatTagSource {
    /// `None` when no tag is a format.
    pub(super) fn capture(tags: &[&CustomTag], request: &mut http::request::Parts) -> Option<Box<Self>> {
        let tags: Vec<CustomTag> =
            tags.iter().filter(|t| matches!(t.value, CustomTagValue::Format(_))).map(|t| (*t).clone()).collect();
        if tags.is_empty() {
            return None;
        }
        let filter_state = request.extensions.get::<StreamState>().map(|s| s.filter_state.clone());
        Some(Box::new(Self { tags, exchange: PeerExchange::of(&mut request.extensions), filter_state }))
    }

    fn tags(&self) -> Vec<crate::telemetry::KeyValue> {
        let facts = request_trace::TagFacts {
            filter_state: self.filter_state.as_ref(),
            downstream_peer: self.exchange.downstream().map(|p| p.as_ref()),
            upstream_peer: self.exchange.upstream().map(|p| p.as_ref()),
        };
        request_trace::format_tags(&self.tags.iter().collect::<Vec<_>>(), facts)
    }
}
