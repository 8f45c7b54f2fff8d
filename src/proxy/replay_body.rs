//! A request body that the first attempt streams while a copy is kept for a retry, as
//! linkerd2-proxy's `ReplayBody` does and as Envoy's router buffers for retries: the
//! upstream gets the first bytes as soon as the client sends them, and a retry replays
//! what was kept, then reads on from the client where the earlier attempt stopped.
//!
//! The copy is kept up to a limit; once the body is larger, the copy is dropped and the
//! request can no longer be retried (Envoy's "request body exceeded the buffer limit,
//! retries disabled"). Only the newest attempt reads from the client: an earlier
//! attempt's body that an upstream connection still holds ends with an error when polled
//! again, so that connection cannot send a request that was cut short as if it were whole.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use hyper::body::{Body, Frame, SizeHint};

use super::upstream::{BoxError, RequestBody};
use crate::telemetry::metrics::Counter;

/// The client's body and what was kept of it, shared by the attempts.
pub struct Replay {
    shared: Arc<Mutex<Shared>>,
    /// Set when reading from the client failed (a broken chunk, a reset).
    failed: Arc<AtomicBool>,
}

struct Shared {
    /// What is still to be read from the client; `None` once it ended.
    rest: Option<RequestBody>,
    /// The data read so far, in order, while it fits the limit.
    kept: Vec<Bytes>,
    kept_bytes: usize,
    trailers: Option<HeaderMap>,
    limit: usize,
    /// The body grew past `limit`: `kept` is empty and no attempt may follow.
    over_limit: bool,
    /// The attempt that may read from the client; earlier ones are cut off.
    current: u32,
    /// Counted when the body grows past `limit` (the cluster's `retry_or_shadow_abandoned`).
    abandoned: Option<Counter>,
}

impl Replay {
    /// Keeps up to `limit` bytes of `body` for retries; `abandoned` counts a body that
    /// outgrows it.
    pub fn new(body: RequestBody, limit: usize, abandoned: Option<Counter>) -> Self {
        let shared = Shared {
            rest: (!body.is_end_stream()).then_some(body),
            kept: Vec::new(),
            kept_bytes: 0,
            trailers: None,
            limit,
            over_limit: false,
            current: 0,
            abandoned,
        };
        Self { shared: Arc::new(Mutex::new(shared)), failed: Arc::default() }
    }

    /// The body of the next attempt: what was kept, then the rest from the client. An
    /// earlier attempt's body is cut off.
    pub fn attempt(&self) -> ReplayBody {
        let attempt = {
            let mut shared = lock(&self.shared);
            shared.current = shared.current.wrapping_add(1);
            shared.current
        };
        ReplayBody { shared: self.shared.clone(), failed: self.failed.clone(), attempt, replayed: 0 }
    }

    /// Whether another attempt can send the whole body: it stayed within the limit and
    /// reading it did not fail.
    pub fn can_replay(&self) -> bool {
        !lock(&self.shared).over_limit && !self.failed.load(Ordering::Relaxed)
    }

    /// Whether reading the body from the client failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }
}

/// One attempt's body.
pub struct ReplayBody {
    shared: Arc<Mutex<Shared>>,
    failed: Arc<AtomicBool>,
    attempt: u32,
    /// How many of the kept chunks this attempt has sent.
    replayed: usize,
}

/// The lock is only ever taken by the request's own attempts, one poll at a time, so it
/// is never contended; a poisoned lock (a panic while held) still holds consistent data.
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `replayed` once an attempt sent the trailers, the body's last frame.
const TRAILERS_SENT: usize = usize::MAX;

#[derive(Debug, thiserror::Error)]
#[error("the request body was handed to a newer attempt")]
struct Superseded;

impl Body for ReplayBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Self { shared, failed, attempt, replayed } = self.get_mut();
        let mut shared = lock(shared);
        if shared.current != *attempt {
            return Poll::Ready(Some(Err(Superseded.into())));
        }
        if let Some(chunk) = shared.kept.get(*replayed) {
            *replayed += 1;
            return Poll::Ready(Some(Ok(Frame::data(chunk.clone()))));
        }
        let Some(rest) = shared.rest.as_mut() else {
            // Everything was read: the trailers, if any, once per attempt.
            let trailers = if *replayed == TRAILERS_SENT { None } else { shared.trailers.clone() };
            *replayed = TRAILERS_SENT;
            return Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))));
        };
        match Pin::new(rest).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                shared.rest = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(error))) => {
                failed.store(true, Ordering::Relaxed);
                shared.rest = None;
                Poll::Ready(Some(Err(error)))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if shared.rest.as_ref().is_some_and(Body::is_end_stream) {
                    shared.rest = None;
                }
                let frame = match frame.into_data() {
                    Ok(data) => {
                        shared.keep(data.clone());
                        if !shared.over_limit {
                            *replayed += 1;
                        }
                        Frame::data(data)
                    }
                    Err(frame) => {
                        if let Some(trailers) = frame.trailers_ref() {
                            shared.trailers = Some(trailers.clone());
                            *replayed = TRAILERS_SENT; // trailers come last
                        }
                        frame
                    }
                };
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        let shared = lock(&self.shared);
        shared.current == self.attempt
            && shared.rest.is_none()
            && self.replayed >= shared.kept.len()
            && (shared.trailers.is_none() || self.replayed == TRAILERS_SENT)
    }

    fn size_hint(&self) -> SizeHint {
        let shared = lock(&self.shared);
        let kept: usize = shared.kept.get(self.replayed..).map_or(0, |rest| rest.iter().map(Bytes::len).sum());
        let kept = kept as u64;
        match &shared.rest {
            None => SizeHint::with_exact(kept),
            Some(rest) => {
                let hint = rest.size_hint();
                let mut sum = SizeHint::new();
                sum.set_lower(hint.lower().saturating_add(kept));
                if let Some(upper) = hint.upper() {
                    sum.set_upper(upper.saturating_add(kept));
                }
                sum
            }
        }
    }
}

impl Shared {
    /// Keeps `data` for a later attempt while the body fits the limit.
    fn keep(&mut self, data: Bytes) {
        if self.over_limit {
            return;
        }
        self.kept_bytes = self.kept_bytes.saturating_add(data.len());
        if self.kept_bytes > self.limit {
            self.over_limit = true;
            self.kept = Vec::new();
            if let Some(counter) = &self.abandoned {
                counter.inc();
            }
        } else {
            self.kept.push(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    /// A body of `chunks`, then `trailers` if any.
    fn body(chunks: &[&'static str], trailers: Option<HeaderMap>) -> RequestBody {
        let mut frames: Vec<Result<Frame<Bytes>, BoxError>> =
            chunks.iter().map(|c| Ok(Frame::data(Bytes::from_static(c.as_bytes())))).collect();
        frames.extend(trailers.map(|t| Ok(Frame::trailers(t))));
        BodyExt::boxed(StreamBody::new(futures::stream::iter(frames)))
    }

    async fn read(body: ReplayBody) -> (Vec<u8>, Option<HeaderMap>) {
        let collected = body.collect().await.unwrap();
        let trailers = collected.trailers().cloned();
        (collected.to_bytes().to_vec(), trailers)
    }

    #[tokio::test]
    async fn a_retry_replays_the_whole_body_and_its_trailers() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        let replay = Replay::new(body(&["ab", "cd", "e"], Some(trailers.clone())), 64, None);
        assert_eq!(read(replay.attempt()).await, (b"abcde".to_vec(), Some(trailers.clone())));
        assert!(replay.can_replay());
        let second = replay.attempt();
        assert_eq!(second.size_hint().exact(), Some(5));
        assert_eq!(read(second).await, (b"abcde".to_vec(), Some(trailers)));
    }

    #[tokio::test]
    async fn a_retry_after_part_of_the_body_replays_it_then_reads_on() {
        let replay = Replay::new(body(&["one ", "two ", "three"], None), 64, None);
        let mut first = replay.attempt();
        let chunk = first.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(chunk, "one ");
        let second = replay.attempt();
        // The first attempt's connection polls again: it is cut off, not ended cleanly.
        assert!(first.frame().await.unwrap().is_err());
        assert_eq!(read(second).await.0, b"one two three");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_streams_whole_but_cannot_be_replayed() {
        let abandoned = Counter::default();
        let replay = Replay::new(body(&["12345", "67890", "x"], None), 8, Some(abandoned.clone()));
        assert_eq!(read(replay.attempt()).await.0, b"1234567890x");
        assert!(!replay.can_replay());
        assert_eq!(abandoned.get(), 1, "counted once, as Envoy's retry_or_shadow_abandoned");
    }

    #[tokio::test]
    async fn an_empty_body_is_at_its_end_at_once() {
        let empty = http_body_util::Empty::<Bytes>::new().map_err(|never| match never {}).boxed();
        let replay = Replay::new(empty, 8, None);
        let first = replay.attempt();
        assert!(first.is_end_stream());
        assert_eq!(read(first).await.0, b"");
        assert!(replay.can_replay());
    }

    #[tokio::test]
    async fn a_broken_body_marks_the_request_failed() {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> =
            vec![Ok(Frame::data(Bytes::from_static(b"a"))), Err("broken chunk".into())];
        let replay = Replay::new(BodyExt::boxed(StreamBody::new(futures::stream::iter(frames))), 64, None);
        assert!(replay.attempt().collect().await.is_err());
        assert!(replay.failed());
        assert!(!replay.can_replay());
    }
}
