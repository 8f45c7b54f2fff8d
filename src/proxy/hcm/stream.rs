//! Per-stream limits around each request: `max_headers_count` on HTTP/2 (HTTP/1.1's is the
//! codec's), `max_stream_duration`, `stream_idle_timeout`, and the stream's part in its
//! connection's [`Lifetime`] (`max_requests_per_connection`, premature resets),
//! `request_timeout` (until the request has been read whole) and
//! `headers_with_underscores_action`. Envoy's answers: 431 for too many headers, when a
//! timeout passes before the response began 504 if the request was read whole and 408 if
//! not, a reset stream after.

use std::future::Future;
use std::pin::Pin;

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_TYPE};
use http::{HeaderValue, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use tokio::time::{Instant, Sleep};

use super::super::headers;
use super::super::upstream::BoxError;
use super::ProxyBody;
use super::expect_continue;
use super::lifetime::{Close, Lifetime, StreamGuard};
use super::stream_timer::{Party, StreamTimer};
use super::underscores::{self, Underscores};
use crate::config::listener::HttpConnectionManager;
use crate::proxy::filters::RequestEnd;
use crate::proxy::router::StreamLimits;
use crate::telemetry::HttpStats;

/// gRPC `DEADLINE_EXCEEDED`, Envoy's status for `max_stream_duration`.
const GRPC_DEADLINE_EXCEEDED: u32 = 4;

/// Runs `handle` for `request` within the stream limits, on the stream's one `timer`
/// (which `handle` shares for the attempt's timeout).
pub(super) async fn limited<F, Fut>(
    mut request: Request<Incoming>,
    timer: &StreamTimer,
    lifetime: &Arc<Lifetime>,
    manager: &HttpConnectionManager,
    stats: &Arc<HttpStats>,
    handle: F,
) -> Result<Response<ProxyBody>, StreamReset>
where
    F: FnOnce(Request<Incoming>) -> Fut,
    Fut: Future<Output = Response<ProxyBody>>,
{
    let (mut guard, last) = lifetime.stream_started();
    let h2 = request.version() == Version::HTTP_2;
    if last {
        stats.downstream_cx_max_requests_reached.inc();
        if h2 {
            lifetime.close(Close::MaxRequests);
        }
    }
    let grpc = is_grpc(&request);
    match underscores::apply(manager.common.headers_with_underscores_action, request.headers_mut()) {
        Underscores::Pass | Underscores::Dropped(_) => {}
        Underscores::Reject if h2 => {
            guard.complete();
            return Err(StreamReset("header name with an underscore"));
        }
        Underscores::Reject => {
            // Envoy's HTTP/1 codec error: 400 `Bad Request`, and the connection closes.
            stats.downstream_cx_protocol_error.inc();
            stats.downstream_rq_total.inc();
            stats.downstream_rq_http1_total.inc();
            guard.complete();
            let mut response = reply(manager, stats, StatusCode::BAD_REQUEST, "Bad Request", false, None);
            response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
            return Ok(response);
        }
    }
    if h2 && request.headers().len() > manager.common.max_headers_count as usize {
        // HTTP/1.1's codec counts headers itself; the HTTP/2 one does not.
        stats.downstream_rq_total.inc();
        stats.downstream_rq_http2_total.inc();
        guard.complete();
        return Ok(reply(manager, stats, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "", grpc, None));
    }
    if !manager.proxy_100_continue {
        expect_continue::strip(request.headers_mut());
    }
    // Whether the whole request has been read from the client: a request with no body (or
    // one already read) is whole from the start. `request_timeout` runs until then, and a
    // stream limit passing after it is the upstream's delay (504), before it the client's (408).
    let request_end = (!request.body().is_end_stream()).then(|| {
        let end = RequestEnd::default();
        request.extensions_mut().insert(end.clone());
        end
    });
    let limits = Limits {
        idle: manager.stream_idle_timeout,
        deadline: manager.common.max_stream_duration.map(|d| guard.started() + d),
        request: manager
            .request_timeout
            .zip(request_end.clone())
            .map(|(timeout, end)| (guard.started() + timeout, end)),
    };
    let mut response = tokio::select! {
        biased;
        response = handle(request) => response,
        expired = limits.expired(timer, lifetime, guard.started()) => {
            // The request's own stats counted it; its answer is this one.
            guard.complete();
            // Envoy's `maybeRequestTimeoutCode`.
            let timeout = if request_end.as_ref().is_none_or(RequestEnd::is_marked) {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::REQUEST_TIMEOUT
            };
            return Ok(match expired {
                Expired::Idle => {
                    stats.downstream_rq_idle_timeout.inc();
                    reply(manager, stats, timeout, "stream timeout", grpc, None)
                }
                Expired::MaxDuration => {
                    stats.downstream_rq_max_duration_reached.inc();
                    let status = Some(GRPC_DEADLINE_EXCEEDED);
                    reply(manager, stats, timeout, "downstream duration timeout", grpc, status)
                }
                Expired::Request => {
                    stats.downstream_rq_timeout.inc();
                    let mut response = reply(manager, stats, StatusCode::REQUEST_TIMEOUT, "request timeout", grpc, None);
                    if !h2 {
                        // The rest of the request is still coming: HTTP/1.1 cannot go on
                        // after it, so Envoy closes the connection.
                        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
                    }
                    response
                }
            });
        }
    };
    if last && !h2 {
        // HTTP/1.1: the last response says the connection closes, and hyper closes it.
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    }
    let stats = stats.clone();
    let limits = limits.with_route(timer.route_limits(), guard.started());
    let sleep = timer.take_sleep();
    Ok(response.map(|body| LimitedBody::new(body, guard, limits, stats, sleep).boxed_unsync()))
}

/// A stream the connection manager resets before answering it (HTTP/2: `RST_STREAM`
/// `INTERNAL_ERROR`, as Envoy's codec rejects a stream while parsing its headers).
#[derive(Debug, thiserror::Error)]
#[error("stream reset: {0}")]
pub(super) struct StreamReset(&'static str);

fn is_grpc(request: &Request<Incoming>) -> bool {
    request.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/grpc"))
}

/// A local reply from the stream limits, counted by its status class.
fn reply(
    manager: &HttpConnectionManager,
    stats: &HttpStats,
    status: StatusCode,
    message: &str,
    grpc: bool,
    grpc_status: Option<u32>,
) -> Response<ProxyBody> {
    stats.charge(status.as_u16());
    let (status, mut header_map, body) =
        if grpc { headers::grpc_local_reply(status, message) } else { headers::local_reply(status, message) };
    if let (true, Some(code)) = (grpc, grpc_status) {
        header_map.insert("grpc-status", HeaderValue::from(code));
    }
    let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    *response.headers_mut() = header_map;
    headers::set_server(manager, response.headers_mut());
    response
}

#[derive(Debug, Clone)]
struct Limits {
    idle: Option<Duration>,
    deadline: Option<Instant>,
    /// `request_timeout`: when the request must have been read whole, and whether it was.
    request: Option<(Instant, RequestEnd)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expired {
    Idle,
    MaxDuration,
    Request,
}

impl Limits {
    /// With the matched route's overrides (`Some(ZERO)` disables a limit); the route's
    /// duration counts from the stream's start, as Envoy's `refreshDurationTimeout`.
    fn with_route(&self, route: StreamLimits, started: Instant) -> Self {
        let nonzero = |d: Duration| (!d.is_zero()).then_some(d);
        Self {
            idle: route.idle.map_or(self.idle, nonzero),
            deadline: route.max_duration.map_or(self.deadline, |d| nonzero(d).map(|d| started + d)),
            request: self.request.clone(),
        }
    }

    /// When the stream has nothing to wait for any more: the deadline passed, or nothing
    /// happened for the idle timeout. Activity is bytes from the client on the connection
    /// (on HTTP/2, any stream's) or the stream's own response frames (`last_frame`).
    fn check(&self, lifetime: &Lifetime, last_frame: Instant, now: Instant) -> Result<Option<Instant>, Expired> {
        if self.deadline.is_some_and(|d| now >= d) {
            return Err(Expired::MaxDuration);
        }
        let request_at = self.request.as_ref().filter(|(_, end)| !end.is_marked()).map(|(at, _)| *at);
        if request_at.is_some_and(|at| now >= at) {
            return Err(Expired::Request);
        }
        let idle_at = self.idle.map(|idle| lifetime.last_read().max(last_frame) + idle);
        if idle_at.is_some_and(|at| now >= at) {
            return Err(Expired::Idle);
        }
        Ok([idle_at, self.deadline, request_at].into_iter().flatten().min())
    }

    async fn expired(&self, timer: &StreamTimer, lifetime: &Lifetime, started: Instant) -> Expired {
        loop {
            // The route, once chosen, may change the limits (it makes them due at once).
            let limits = self.with_route(timer.route_limits(), started);
            match limits.check(lifetime, started, Instant::now()) {
                Err(expired) => return expired,
                Ok(at) => {
                    timer.set(Party::Limits, at);
                    timer.passed(Party::Limits).await;
                }
            }
        }
    }
}

/// The response body under the stream limits; holds the stream's [`StreamGuard`] until
/// it ends. A limit that passes ends the body with an error, which resets the stream
/// (HTTP/2) or closes the connection (HTTP/1.1), as Envoy resets a started response.
struct LimitedBody {
    inner: ProxyBody,
    guard: StreamGuard,
    limits: Limits,
    last_frame: Instant,
    timer: Option<Pin<Box<Sleep>>>,
    stats: Arc<HttpStats>,
}

impl LimitedBody {
    /// `sleep` is the stream's timer, when the request armed one: reset, not made anew.
    fn new(
        inner: ProxyBody,
        mut guard: StreamGuard,
        limits: Limits,
        stats: Arc<HttpStats>,
        sleep: Option<Pin<Box<Sleep>>>,
    ) -> Self {
        if inner.is_end_stream() {
            guard.complete();
        }
        let last_frame = Instant::now();
        let timer = match limits.check(guard.lifetime(), last_frame, last_frame) {
            Ok(Some(at)) => Some(match sleep {
                Some(mut sleep) => {
                    sleep.as_mut().reset(at);
                    sleep
                }
                None => Box::pin(tokio::time::sleep_until(at)),
            }),
            _ => None,
        };
        Self { inner, guard, limits, last_frame, timer, stats }
    }
}

impl Body for LimitedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.last_frame = Instant::now();
                if this.inner.is_end_stream() {
                    this.guard.complete();
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(other) => {
                // The end, or an upstream error: either way not the client's reset.
                this.guard.complete();
                return Poll::Ready(other);
            }
            Poll::Pending => {}
        }
        while let Some(timer) = this.timer.as_mut() {
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            match this.limits.check(this.guard.lifetime(), this.last_frame, Instant::now()) {
                Ok(Some(at)) => timer.as_mut().reset(at),
                Ok(None) => this.timer = None,
                Err(expired) => {
                    this.timer = None;
                    let (counter, what) = match expired {
                        Expired::Idle => (&this.stats.downstream_rq_idle_timeout, "stream idle timeout"),
                        Expired::MaxDuration => {
                            (&this.stats.downstream_rq_max_duration_reached, "max stream duration reached")
                        }
                        Expired::Request => (&this.stats.downstream_rq_timeout, "request timeout"),
                    };
                    counter.inc();
                    this.guard.complete();
                    return Poll::Ready(Some(Err(what.into())));
                }
            }
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
