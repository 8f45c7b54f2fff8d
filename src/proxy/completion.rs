//! The end of one downstream request. The response body is wrapped so that the request
//! is counted and timed when its last byte is sent (or the client goes away): the
//! connection manager's `downstream_rq_active` and `downstream_rq_time`, and the access
//! log line, which needs the bytes sent and the whole duration.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::Buf;
use hyper::body::{Body, Frame, SizeHint};

use super::access_log::PendingLog;
use super::response_flags::ResponseFlags;
use crate::telemetry::{GaugeGuard, HttpStats, KeyValue, RequestSpan};

/// A span waiting for the end of its response.
#[derive(Debug)]
pub struct PendingSpan {
    pub span: RequestSpan,
    pub status: u16,
    pub flags: ResponseFlags,
    pub retries: u32,
}

/// What is recorded when the response ends.
#[derive(Debug)]
pub struct Completion {
    stats: Arc<HttpStats>,
    started: Instant,
    _active: GaugeGuard,
    log: Option<Box<PendingLog>>,
    span: Option<Box<PendingSpan>>,
}

impl Completion {
    /// Counts a request that arrived at `started` as active.
    pub fn start(stats: Arc<HttpStats>, started: Instant) -> Self {
        stats.downstream_rq_total.inc();
        let active = stats.downstream_rq_active.track();
        Self { stats, started, _active: active, log: None, span: None }
    }

    pub fn log_with(&mut self, log: Option<Box<PendingLog>>) {
        self.log = log;
    }

    pub fn trace_with(&mut self, span: Option<Box<PendingSpan>>) {
        self.span = span;
    }

    pub fn stats(&self) -> &HttpStats {
        &self.stats
    }

    fn finish(self, bytes_sent: u64, end: End) {
        let now = Instant::now();
        self.stats.downstream_rq_time.record(now.saturating_duration_since(self.started));
        let cut = match end {
            End::Complete => ResponseFlags::NONE,
            End::DownstreamGone => ResponseFlags::DOWNSTREAM_CONNECTION_TERMINATION,
            End::UpstreamFailed => ResponseFlags::UPSTREAM_CONNECTION_TERMINATION,
        };
        if let Some(mut log) = self.log {
            log.flags.insert(cut);
            log.write(bytes_sent, now.saturating_duration_since(self.started));
        }
        if let Some(pending) = self.span {
            let PendingSpan { span, status, mut flags, retries } = *pending;
            flags.insert(cut);
            span.end(
                status,
                vec![
                    KeyValue::new("response_flags", flags.to_string()),
                    KeyValue::new("response_size", bytes_sent as i64),
                    KeyValue::new("outrider.retries", i64::from(retries)),
                ],
            );
        }
    }
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Complete,
    /// Dropped before its end: the client went away (`DC`).
    DownstreamGone,
    /// The body failed midway: the upstream connection died or reset the stream after
    /// the headers were sent, which Envoy flags `UC` (nothing can be retried then).
    UpstreamFailed,
}

/// A response body that completes its request when it ends or is dropped.
#[derive(Debug)]
pub struct Completed<B> {
    inner: B,
    completion: Option<Completion>,
    bytes_sent: u64,
}

impl<B: Body> Completed<B> {
    /// Wraps `inner`; a body that is already at its end (hyper may never poll it) completes
    /// the request now.
    pub fn new(inner: B, completion: Completion) -> Self {
        let mut completed = Self { inner, completion: Some(completion), bytes_sent: 0 };
        if completed.inner.is_end_stream() {
            completed.finish(End::Complete);
        }
        completed
    }
}

impl<B> Completed<B> {
    fn finish(&mut self, end: End) {
        if let Some(completion) = self.completion.take() {
            completion.finish(self.bytes_sent, end);
        }
    }
}

impl<B> Body for Completed<B>
where
    B: Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    this.bytes_sent += data.remaining() as u64;
                }
                if let Some(trailers) = frame.trailers_ref()
                    && let Some(log) = this.completion.as_mut().and_then(|c| c.log.as_mut())
                {
                    log.trailers = Some(trailers.clone());
                }
                if this.inner.is_end_stream() {
                    this.finish(End::Complete);
                }
            }
            Some(Err(_)) => this.finish(End::UpstreamFailed),
            None => this.finish(End::Complete),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for Completed<B> {
    /// Dropped before its end: the client went away (`DC`).
    fn drop(&mut self) {
        self.finish(End::DownstreamGone);
    }
}
