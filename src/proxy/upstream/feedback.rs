//! What an upstream response tells the balancers: latency to the response headers, the
//! outcome, and the backend's own load report (ORCA) from the headers or the trailers.
//!
//! The ORCA headers are the proxy's business, not the client's: they are removed from the
//! headers and trailers passed downstream, as Envoy does. The endpoint's in-flight count
//! holds until the response body has ended (or been dropped), so a streaming response
//! counts as load for as long as it streams.
//!
//! Outcome: an HTTP 5xx is an error, anything else a success unless the body fails. For
//! gRPC the `grpc-status` decides (in the headers of a trailers-only response, else in the
//! trailers; missing means Unknown). gRPC codes count as errors when Envoy maps them to a
//! 5xx (`Grpc::Utility::grpcToHttpStatus`): Unknown, DeadlineExceeded, Unimplemented,
//! Internal, Unavailable, DataLoss. Client-side codes (NotFound, InvalidArgument, …) say
//! nothing about the endpoint's health.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use http::{HeaderMap, Response};
use hyper::body::{Body, Frame, SizeHint};

use super::error::UpstreamError;
use crate::config::cluster::OutlierDetection;
use crate::lb::endpoint::outlier_counters::{OutlierResult, Thresholds};
use crate::lb::{EndpointStats, Host, InFlight};
use crate::orca;
use crate::telemetry::{ClusterStats, GaugeGuard};

/// One request to one endpoint, from before its connection is chosen to its response.
#[derive(Debug)]
pub struct Feedback {
    in_flight: InFlight,
    started: Instant,
    /// The cluster's consecutive-failure thresholds, when it has outlier detection.
    outlier: Option<Thresholds>,
    cluster: Timing,
}

/// The cluster's view of one upstream request: `upstream_rq_active` while it lasts,
/// `upstream_rq_time` and `upstream_rq_completed` when it ends.
#[derive(Debug)]
struct Timing {
    stats: Arc<ClusterStats>,
    started: Instant,
    _active: GaugeGuard,
}

impl Timing {
    fn complete(self, now: Instant) {
        self.stats.upstream_rq_completed.inc();
        self.stats.upstream_rq_time.record(now.saturating_duration_since(self.started));
    }
}

impl Feedback {
    /// Counts the request as in flight on `host` from `now`.
    pub fn start(host: &Host, now: Instant) -> Self {
        let stats = host.cluster_stats.clone();
        stats.upstream_rq_total.inc();
        let active = stats.upstream_rq_active.track();
        let cluster = Timing { stats, started: now, _active: active };
        Self { in_flight: host.stats.start(now), started: now, outlier: None, cluster }
    }

    /// Also feeds the outcome to outlier detection, when the cluster has it.
    pub fn with_outlier(mut self, config: Option<&OutlierDetection>) -> Self {
        self.outlier = config.map(Thresholds::of);
        self
    }

    /// Records what the upstream answered (`now` is when the headers or the error came) and
    /// wraps the body so that trailers are observed and the in-flight count is held until
    /// the body ends. The ORCA headers are removed from the response.
    pub fn observe<B>(
        self,
        result: Result<Response<B>, UpstreamError>,
        now: Instant,
    ) -> Result<Response<ObservedBody<B>>, UpstreamError> {
        let latency = now.saturating_duration_since(self.started);
        let stats = self.in_flight.stats().clone();
        let response = match result {
            Ok(response) => response,
            // A circuit breaker refused it before the endpoint saw it: nothing to learn.
            Err(UpstreamError::Overflow) => return Err(UpstreamError::Overflow),
            Err(error) => {
                stats.record(now, latency, false);
                let result = match error {
                    UpstreamError::ConnectFailure { .. } | UpstreamError::ConnectTimeout { .. } => {
                        OutlierResult::ConnectFailed
                    }
                    _ => OutlierResult::Reset,
                };
                record_outlier(&stats, self.outlier.as_ref(), result);
                self.cluster.stats.charge(503);
                self.cluster.complete(now);
                return Err(error);
            }
        };
        self.cluster.stats.charge(response.status().as_u16());
        let (mut parts, body) = response.into_parts();
        take_load_report(&mut parts.headers, &stats, now);
        let outlier = self.outlier;
        let outcome = if parts.status.is_server_error() {
            stats.record(now, latency, false);
            record_outlier(&stats, outlier.as_ref(), OutlierResult::Status(parts.status.as_u16()));
            Outcome::Recorded
        } else if is_grpc(&parts.headers) {
            match parts.headers.get("grpc-status") {
                Some(status) => {
                    stats.record(now, latency, grpc_success(Some(status.as_bytes())));
                    record_outlier(&stats, outlier.as_ref(), grpc_outlier_result(Some(status.as_bytes())));
                    Outcome::Recorded
                }
                None => Outcome::Grpc(latency),
            }
        } else {
            record_outlier(&stats, outlier.as_ref(), OutlierResult::Status(parts.status.as_u16()));
            Outcome::Http(latency)
        };
        let body =
            ObservedBody { inner: body, in_flight: Some(self.in_flight), outcome, outlier, timing: Some(self.cluster) };
        Ok(Response::from_parts(parts, body))
    }
}

/// Whether the outcome of the request is still to be recorded, and by which rule.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Recorded,
    /// Success unless the body fails; the latency to the headers.
    Http(Duration),
    /// Decided by `grpc-status` in the trailers.
    Grpc(Duration),
}

/// A response body whose trailers are observed (and stripped of ORCA headers) and which
/// holds the endpoint's in-flight count until it ends or is dropped.
#[derive(Debug)]
pub struct ObservedBody<B> {
    inner: B,
    in_flight: Option<InFlight>,
    outcome: Outcome,
    outlier: Option<Thresholds>,
    timing: Option<Timing>,
}

impl<B> ObservedBody<B> {
    /// Releases the in-flight count and records the outcome `success` decides from the
    /// pending rule (`None`: nothing to record).
    fn finish(&mut self, success: impl FnOnce(Outcome) -> Option<bool>) {
        if let Some(timing) = self.timing.take() {
            timing.complete(Instant::now());
        }
        let Some(in_flight) = self.in_flight.take() else { return };
        let outcome = std::mem::replace(&mut self.outcome, Outcome::Recorded);
        if let Outcome::Http(latency) | Outcome::Grpc(latency) = outcome
            && let Some(success) = success(outcome)
        {
            in_flight.stats().record(Instant::now(), latency, success);
        }
    }

    fn on_trailers(&mut self, trailers: &mut HeaderMap) {
        if let Some(in_flight) = &self.in_flight {
            take_load_report(trailers, in_flight.stats(), Instant::now());
        }
        let status = trailers.get("grpc-status").map(|v| v.as_bytes().to_vec());
        if let (Outcome::Grpc(_), Some(in_flight)) = (self.outcome, &self.in_flight) {
            record_outlier(in_flight.stats(), self.outlier.as_ref(), grpc_outlier_result(status.as_deref()));
        }
        self.finish(|outcome| match outcome {
            Outcome::Grpc(_) => Some(grpc_success(status.as_deref())),
            _ => Some(true),
        });
    }

    /// The body ended without trailers.
    fn on_end(&mut self) {
        self.finish(|outcome| Some(!matches!(outcome, Outcome::Grpc(_))));
    }
}

impl<B> Body for ObservedBody<B>
where
    B: Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => match frame.into_trailers() {
                Ok(mut trailers) => {
                    this.on_trailers(&mut trailers);
                    if trailers.is_empty() {
                        // Nothing left for the client but the end of the stream.
                        return Poll::Ready(None);
                    }
                    Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                }
                Err(frame) => {
                    if this.inner.is_end_stream() {
                        this.on_end();
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
            },
            Some(Err(error)) => {
                this.finish(|_| Some(false));
                Poll::Ready(Some(Err(error)))
            }
            None => {
                this.on_end();
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for ObservedBody<B> {
    /// Dropped before the end: the client went away, which says nothing about the
    /// endpoint. An HTTP response had good headers and counts as a success; a gRPC
    /// outcome is unknown and is not recorded.
    fn drop(&mut self) {
        self.finish(|outcome| match outcome {
            Outcome::Http(_) => Some(true),
            _ => None,
        });
    }
}

/// Feeds the ORCA report in `headers` (if any) to the endpoint and removes the ORCA
/// headers, valid or not.
fn take_load_report(headers: &mut HeaderMap, stats: &Arc<EndpointStats>, now: Instant) {
    match orca::from_headers(headers) {
        None => return,
        Some(Ok(report)) => stats.record_load(report, now),
        Some(Err(error)) => {
            stats.refuse_load_report();
            tracing::debug!(%error, "upstream load report refused");
        }
    }
    headers.remove(orca::ENDPOINT_LOAD_METRICS);
    headers.remove(orca::ENDPOINT_LOAD_METRICS_BIN);
}

fn record_outlier(stats: &EndpointStats, thresholds: Option<&Thresholds>, result: OutlierResult) {
    if let Some(thresholds) = thresholds {
        stats.outlier().record(result, thresholds);
    }
}

/// A `grpc-status` as the HTTP status Envoy's outlier detection sees
/// (`Grpc::Utility::grpcToHttpStatus`); missing or unparsable is Unknown (500).
fn grpc_outlier_result(status: Option<&[u8]>) -> OutlierResult {
    let code = status.and_then(|s| std::str::from_utf8(s).ok()).and_then(|s| s.trim().parse::<u32>().ok());
    OutlierResult::Status(match code {
        Some(0) => 200,
        Some(1) => 499,
        Some(3 | 9 | 11) => 400,
        Some(4) => 504,
        Some(5) => 404,
        Some(6 | 10) => 409,
        Some(7) => 403,
        Some(8) => 429,
        Some(12) => 501,
        Some(14) => 503,
        Some(16) => 401,
        _ => 500,
    })
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// Whether a `grpc-status` value says the endpoint did its job (see the module docs).
fn grpc_success(status: Option<&[u8]>) -> bool {
    let code = status.and_then(|s| std::str::from_utf8(s).ok()).and_then(|s| s.trim().parse::<u32>().ok());
    !matches!(code, None | Some(2 | 4 | 12 | 13 | 14 | 15))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_codes_that_blame_the_endpoint() {
        assert!(grpc_success(Some(b"0")));
        assert!(grpc_success(Some(b"5")), "NotFound is the client's problem");
        assert!(!grpc_success(Some(b"14")));
        assert!(!grpc_success(Some(b"13")));
        assert!(!grpc_success(None), "missing status is Unknown");
        assert!(!grpc_success(Some(b"x")));
    }

    #[test]
    fn a_refused_load_report_is_counted_and_removed() {
        let now = Instant::now();
        let stats = Arc::new(EndpointStats::new(now));
        let mut headers = HeaderMap::new();
        headers.insert(orca::ENDPOINT_LOAD_METRICS, http::HeaderValue::from_static("TEXT rps_fractional=-1"));
        take_load_report(&mut headers, &stats, now);
        assert_eq!(stats.load_reports_refused(), 1);
        assert!(stats.load_report().is_none());
        assert!(headers.is_empty(), "not passed downstream");
        headers.insert(orca::ENDPOINT_LOAD_METRICS, http::HeaderValue::from_static("TEXT application_utilization=1e9"));
        take_load_report(&mut headers, &stats, now);
        assert_eq!(stats.load_reports_refused(), 2, "decoded, but beyond reason");
        assert!(stats.load_report().is_none());
    }
}
