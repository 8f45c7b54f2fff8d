//! The router's forwarding of one request once its route chose a cluster (what Envoy's
//! router filter does with an upstream request): each attempt picks an endpoint, takes a
//! circuit-breaker slot and goes out under the route's timeouts; the retry policy then
//! decides from its outcome whether another attempt follows or what the client gets.
//!
//! One method per step: [`Forwarding::pick`], [`Forwarding::attempt`],
//! [`Forwarding::decide`], and the replies it makes itself ([`Forwarding::reply`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::Either;
use http::{HeaderMap, Request, Response, Version};
use http_body_util::BodyExt;

use super::super::access_log::PendingLog;
use super::super::clusters::ThreadLocalCluster;
use super::super::headers::{self, LocalReply};
use super::super::load_report;
use super::super::response_flags::ResponseFlags;
use super::super::retry::{Decision, Outcome, RetryState};
use super::super::router::{self, Forward, UpstreamRequestOptions};
use super::super::upstream::{BoxError, RequestBody, ResponseBody, UpstreamError};
use super::local_reply::{CodecRefusal, attempted, codec_refusal, local, overflow, reset_reply};
use super::observed::StreamInfo;
use super::request_body::AttemptBodies;
use super::stream_timer::Elapsed;
use super::{Exchange, ProxyBody};
use crate::config::listener::HttpConnectionManager;
use crate::lb::endpoint::outlier_counters::{OutlierResult, Thresholds};
use crate::lb::resources::{Priority, Slot};
use crate::lb::{Host, PickContext};
use crate::store::Snapshot;
use crate::telemetry::{KeyValue, RequestSpan};
use crate::tls::ClientTls;

/// One request on its way to its route's cluster, from the first attempt to the reply.
pub(super) struct Forwarding<'a, 'f> {
    pub exchange: &'f Exchange<'a>,
    pub forward: &'f Forward<'a>,
    pub cluster: &'f ThreadLocalCluster,
    pub snapshot: &'a Snapshot,
    pub stream: &'f mut StreamInfo,
    pub pending: &'f mut Option<Box<PendingLog>>,
    pub options: UpstreamRequestOptions,
    pub is_grpc: bool,
    pub retry: RetryState,
    /// The request's hash, for hash-based balancers.
    pub hash: Option<u64>,
    /// The request head after the route's mutations, copied into each attempt (or moved
    /// into the only one).
    pub parts: &'f mut http::request::Parts,
    pub bodies: AttemptBodies,
}

/// The endpoint an attempt goes to, with what it holds for it.
struct Picked {
    host: Arc<Host>,
    tls: Option<Arc<ClientTls>>,
}

/// What an attempt came back with. Unboxed: it lives only between an attempt and its
/// decision, never across an `.await`.
#[allow(clippy::large_enum_variant)]
enum Attempted {
    Response(Response<ResponseBody>),
    Failed(UpstreamError),
    /// The route's timeout or the per-try timeout fired first.
    TimedOut,
}

/// What follows an attempt.
enum Next {
    Retry { backoff: Duration },
    Reply(Response<ProxyBody>),
}

/// The attempts' shared clock and history.
struct Attempts {
    started: Instant,
    /// Hosts tried so far: avoided when the retry policy asks.
    previous: Vec<Arc<Host>>,
    /// A retry's slot under `max_retries` (or the retry budget), held while it is in flight.
    retry_slot: Option<Slot>,
}

impl Forwarding<'_, '_> {
    /// Makes attempts until one gives the client its answer. `single_attempt`: no other
    /// attempt can follow (no retry policy, or a body that streams once), so the request
    /// head is moved into the attempt instead of copied.
    ///
    /// Borrows the forwarding rather than taking it: an async function keeps what it takes
    /// for as long as it runs, besides the locals made from it, and every request's future
    /// would carry the request twice.
    pub(super) async fn run(&mut self) -> Response<ProxyBody> {
        let single_attempt = !self.retry.enabled() || self.bodies.single();
        let started = Instant::now();
        let deadline = self.forward.timeout.map(|t| started + t);
        let mut attempts = Attempts { started, previous: Vec::new(), retry_slot: None };
        loop {
            let now = Instant::now();
            let remaining = deadline.map(|d| d.saturating_duration_since(now));
            if remaining == Some(Duration::ZERO) {
                return self.reply(LocalReply::UpstreamTimeout);
            }
            let picked = match self.pick(&attempts, now) {
                Ok(picked) => picked,
                Err(response) => return *response,
            };
            let Some(body) = self.bodies.next() else {
                return reset_reply(self.exchange.manager, self.stream, None, true, self.is_grpc);
            };
            let head = if single_attempt { std::mem::replace(self.parts, empty_head()) } else { self.parts.clone() };
            let (request, span) = self.upstream_request(&picked, head, body, attempts.started);
            let result = self.attempt(&picked, request, remaining).await;
            let outcome = attempted_with(result, span);
            match self.decide(picked, outcome, remaining, &mut attempts) {
                Next::Retry { backoff } => {
                    if deadline.is_some_and(|d| Instant::now() + backoff >= d) {
                        return self.reply(LocalReply::UpstreamTimeout);
                    }
                    tokio::time::sleep(backoff).await;
                }
                Next::Reply(response) => return response,
            }
        }
    }

    /// The endpoint of the next attempt, its request slot and its TLS; or the reply when
    /// there is none (no healthy upstream), the circuit breaker refuses the attempt
    /// (overflow) or its TLS cannot be set up.
    fn pick(&mut self, attempts: &Attempts, now: Instant) -> Result<Picked, Box<Response<ProxyBody>>> {
        let avoid: &[Arc<Host>] = if self.retry.avoid_previous_hosts() { &attempts.previous } else { &[] };
        let ctx = PickContext { hash: self.hash, attempt: 0, previous: avoid, now };
        let Some(host) = self.cluster.pick(&ctx, || self.exchange.destination_sources(self.parts)) else {
            if let Some(stats) = self.cluster.stats() {
                stats.upstream_cx_none_healthy.inc();
            }
            return Err(Box::new(self.reply(LocalReply::NoHealthyUpstream)));
        };
        // Circuit breakers: an attempt takes its request slot when the pool gives it a
        // connection (`upstream::limits::active_request`), every retry a retry slot here.
        if let Some(log) = self.pending.as_mut() {
            log.upstream_host = Some(host.address().to_string());
        }
        if let Some(span) = &self.stream.span {
            span.set(KeyValue::new("upstream_address", host.address().to_string()));
        }
        let clusters = &self.exchange.context.clusters;
        match self.cluster.tls(&host.endpoint, self.snapshot, &clusters.tls) {
            Ok(tls) => Ok(Picked { host, tls }),
            Err(error) => {
                let failure =
                    UpstreamError::ConnectFailure { address: host.address().to_string(), reason: error.to_string() };
                let retried = self.retry.attempts() > 1;
                let response = reset_reply(self.exchange.manager, self.stream, Some(failure), retried, self.is_grpc);
                Err(Box::new(self.after_attempts(response)))
            }
        }
    }

    /// The attempt's request: the route's attempt headers (attempt count, timeouts) and
    /// the upstream span's context on `head`.
    fn upstream_request(
        &mut self,
        picked: &Picked,
        mut head: http::request::Parts,
        body: RequestBody,
        started: Instant,
    ) -> (Request<RequestBody>, Option<RequestSpan>) {
        let host = &picked.host;
        let attempt = self.retry.attempts();
        router::set_attempt_headers(self.forward, &mut head.headers, attempt, started.elapsed(), false, &self.options);
        // An outbound request to a mesh peer (mutual TLS with this sidecar's identity)
        // asks for its sidecar's load report; only then, whatever the client wrote.
        if self.exchange.outbound {
            let mesh_peer = picked.tls.as_ref().is_some_and(|tls| tls.local_uri_san.is_some());
            if mesh_peer && self.exchange.context.inbound_load.is_some() {
                head.headers.insert(load_report::LOAD_REPORT_REQUEST, http::HeaderValue::from_static("1"));
            } else {
                head.headers.remove(load_report::LOAD_REPORT_REQUEST);
            }
        }
        let cluster = &self.cluster.cluster().name;
        let span = upstream_span(self.exchange.manager, self.stream, cluster, host, &mut head.headers);
        (Request::from_parts(head, body), span)
    }

    /// One attempt: the request sent to the picked endpoint under the per-try timeout or
    /// what remains of the route's (`Err` once that fired). A future made here rather than
    /// an async function's: it holds the send, not a second copy of the request.
    fn attempt<'s>(
        &'s self,
        picked: &'s Picked,
        request: Request<RequestBody>,
        remaining: Option<Duration>,
    ) -> impl Future<Output = Result<Result<Response<ResponseBody>, UpstreamError>, Elapsed>> + 's {
        let try_timeout = match (self.forward.per_try_timeout, remaining) {
            (Some(per_try), Some(remaining)) => Some(per_try.min(remaining)),
            (per_try, remaining) => per_try.or(remaining),
        };
        let downstream_is_h2 = request.version() == Version::HTTP_2;
        let upstreams = &self.exchange.context.clusters.upstreams;
        let send = self.cluster.forward(upstreams, &picked.host, downstream_is_h2, request, picked.tls.clone());
        match try_timeout {
            Some(limit) => Either::Left(self.exchange.timer.within(tokio::time::Instant::now() + limit, send)),
            None => Either::Right(send.map(Ok)),
        }
    }

    /// What the retry policy and the circuit breakers make of an attempt's outcome: another
    /// attempt after a back-off, or the client's reply.
    fn decide(
        &mut self,
        picked: Picked,
        outcome: Attempted,
        remaining: Option<Duration>,
        attempts: &mut Attempts,
    ) -> Next {
        let Picked { host, .. } = picked;
        if let Attempted::Failed(UpstreamError::Overflow) = outcome {
            // max_pending_requests: Envoy never retries an overflow.
            let response = overflow(self.exchange.manager, self.stream, self.is_grpc);
            return Next::Reply(self.after_attempts(response));
        }
        let mut decision = match &outcome {
            Attempted::Response(response) => {
                if let Some(log) = self.pending.as_mut() {
                    log.upstream_responded();
                }
                let grpc_status = grpc_status(response.headers());
                let status = response.status().as_u16();
                self.retry.on_outcome(&Outcome::Response { status, grpc_status, headers: response.headers() })
            }
            Attempted::Failed(error) => self.retry.on_outcome(&classify(error)),
            Attempted::TimedOut => {
                if let Some(config) = &self.cluster.cluster().outlier_detection {
                    host.stats.outlier().record(OutlierResult::Timeout, &Thresholds::of(config));
                }
                self.count_timeout(&host, remaining);
                self.retry.on_outcome(&Outcome::Timeout)
            }
        };
        let can_resend = self.bodies.can_resend();
        if matches!(decision, Decision::Retry { .. }) && can_resend {
            let limits = &self.cluster.cluster().circuit_breakers;
            match self.cluster.resources().map(|r| r.try_retry(limits, Priority::Default)) {
                // max_retries (or the budget) is reached: the client gets this outcome.
                Some(None) => {
                    host.cluster_stats.upstream_rq_retry_overflow.inc();
                    decision = Decision::Done;
                }
                Some(slot) => attempts.retry_slot = slot,
                None => {}
            }
        }
        let cluster_stats = &host.cluster_stats;
        if self.retry.limit_reached() {
            self.stream.flags.insert(ResponseFlags::UPSTREAM_RETRY_LIMIT_EXCEEDED);
            cluster_stats.upstream_rq_retry_limit_exceeded.inc();
        }
        let (manager, is_grpc) = (self.exchange.manager, self.is_grpc);
        match (decision, outcome) {
            (Decision::Retry { backoff }, _) if can_resend => {
                cluster_stats.upstream_rq_retry.inc();
                self.stream.retries += 1;
                attempts.previous.push(host);
                Next::Retry { backoff }
            }
            (_, Attempted::Response(response)) => {
                let response =
                    respond(manager, self.forward, response, attempts.started, self.retry.attempts(), &self.options);
                Next::Reply(response)
            }
            (_, Attempted::Failed(_)) if self.bodies.failed() => {
                Next::Reply(codec_refusal(manager, self.stream, CodecRefusal::MalformedBody, is_grpc))
            }
            (_, Attempted::Failed(error)) => {
                let retried = self.retry.attempts() > 1;
                let response = reset_reply(manager, self.stream, Some(error), retried, is_grpc);
                Next::Reply(self.after_attempts(response))
            }
            (_, Attempted::TimedOut) => Next::Reply(self.reply(LocalReply::UpstreamTimeout)),
        }
    }

    /// An attempt dropped by a timeout never reached the pool's accounting: counted here,
    /// as the per-try timeout when that was the shorter one.
    fn count_timeout(&self, host: &Host, remaining: Option<Duration>) {
        let stats = &host.cluster_stats;
        let per_try = self.forward.per_try_timeout.is_some_and(|p| remaining.is_none_or(|r| p < r));
        let counter = if per_try { &stats.upstream_rq_per_try_timeout } else { &stats.upstream_rq_timeout };
        counter.inc();
        stats.charge(504);
        stats.upstream_rq_completed.inc();
    }

    /// A local reply once the router has tried (or tried to try) the upstream.
    fn reply(&mut self, reply: LocalReply) -> Response<ProxyBody> {
        let response = local(self.exchange.manager, self.stream, reply, self.is_grpc);
        self.after_attempts(response)
    }

    /// A reply of the router's own after its attempts: it carries the attempt count when
    /// the virtual host asks for it.
    fn after_attempts(&self, response: Response<ProxyBody>) -> Response<ProxyBody> {
        attempted(self.forward, self.retry.attempts(), response)
    }
}

/// `spawn_upstream_span`: a client span for one upstream attempt, named as Envoy names it,
/// whose context replaces the request span's in the attempt's headers.
fn upstream_span(
    manager: &HttpConnectionManager,
    stream: &StreamInfo,
    cluster: &str,
    host: &Host,
    headers: &mut HeaderMap,
) -> Option<RequestSpan> {
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

/// What an attempt's result is, once its upstream span (if any) has ended with it.
fn attempted_with(
    result: Result<Result<Response<ResponseBody>, UpstreamError>, Elapsed>,
    span: Option<RequestSpan>,
) -> Attempted {
    if let Some(span) = span {
        span.end_upstream(result.as_ref().ok().and_then(|r| r.as_ref().ok()).map(|r| r.status().as_u16()));
    }
    match result {
        Ok(Ok(response)) => Attempted::Response(response),
        Ok(Err(error)) => Attempted::Failed(error),
        Err(Elapsed) => Attempted::TimedOut,
    }
}

/// An empty request head, left in the place of one moved into its only attempt.
fn empty_head() -> http::request::Parts {
    Request::new(()).into_parts().0
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
    response: Response<ResponseBody>,
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
