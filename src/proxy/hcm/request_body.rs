//! How the router sends a request's body to each attempt: streamed once when nothing can
//! send it again, streamed with a kept copy when a retry may (see
//! [`crate::proxy::replay_body`]), or read whole first when a shadow needs all of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::{BodyExt, Full, Limited};

use super::super::filters::DownstreamBody;
use super::super::filters::context::RequestBodyTap;
use super::super::replay_body::Replay;
use super::super::upstream::{BoxError, RequestBody};
use crate::telemetry::metrics::Counter;

/// The request body as the attempts get it.
pub(super) enum AttemptBodies {
    /// Read whole (or there was none): every attempt gets it, and a shadow too.
    Whole(Bytes),
    /// Streamed to one attempt (`None` once it was sent), and set when reading it failed.
    Once(Option<RequestBody>, Arc<AtomicBool>),
    /// Streamed to the first attempt while kept for the next ones, up to a limit.
    Replay(Replay),
}

/// What a request needs of its body besides the first attempt.
#[derive(Debug, Clone, Copy)]
pub(super) struct Needs {
    /// The route can retry the request.
    pub retry: bool,
    /// The route mirrors the request: a shadow is sent the whole body.
    pub shadow: bool,
    /// How much of the body is kept for a retry or a shadow.
    pub limit: usize,
}

/// The body's attempts. A body a filter read whole is kept as it is. `Err` when a body that had to be read
/// whole first could not be (larger than it said, or broken). `abandoned` gives the
/// cluster's `retry_or_shadow_abandoned`, asked for only when a body too large to keep
/// gives up a retry (a shadow counts its own).
pub(super) async fn prepare(
    body: DownstreamBody,
    headers: &HeaderMap,
    tap: Option<RequestBodyTap>,
    needs: Needs,
    abandoned: impl FnOnce() -> Option<Counter>,
) -> Result<AttemptBodies, ()> {
    if let Some(whole) = body.complete() {
        if let Some(RequestBodyTap(tap)) = tap {
            tap(&whole);
        }
        return Ok(AttemptBodies::Whole(whole));
    }
    if needs.shadow && body.is_untouched() && small(&body, headers, needs.limit) {
        let collected = Limited::new(body.into_request_body(), needs.limit).collect().await.map_err(|_| ())?;
        let whole = collected.to_bytes();
        if let Some(RequestBodyTap(tap)) = tap {
            tap(&whole);
        }
        return Ok(AttemptBodies::Whole(whole));
    }
    let mut streamed = body.into_request_body();
    // A filter watching the body sees each byte once, as it is read from the client.
    if let Some(RequestBodyTap(tap)) = tap {
        streamed = streamed
            .map_frame(move |frame| {
                if let Some(data) = frame.data_ref() {
                    tap(data);
                }
                frame
            })
            .boxed();
    }
    let length = content_length(headers);
    let counted = needs.retry && !needs.shadow;
    if needs.retry && length.is_some_and(|n| n > needs.limit) {
        // Too large to keep, known before a byte is read: streamed once, as Envoy gives up
        // the retry when its buffer limit is passed.
        if counted && let Some(counter) = abandoned() {
            counter.inc();
        }
    } else if needs.retry {
        let counter = if counted && length.is_none() { abandoned() } else { None };
        return Ok(AttemptBodies::Replay(Replay::new(streamed, needs.limit, counter)));
    }
    let failed = Arc::new(AtomicBool::new(false));
    let marked = failed.clone();
    let streamed = streamed
        .map_err(move |error: BoxError| {
            marked.store(true, Ordering::Relaxed);
            error
        })
        .boxed();
    Ok(AttemptBodies::Once(Some(streamed), failed))
}

/// Whether the body is known to be within `limit`: ended, or a size hint or
/// `content-length` that says so.
fn small(body: &DownstreamBody, headers: &HeaderMap, limit: usize) -> bool {
    body.is_end_stream() || content_length(headers).is_some_and(|n| n <= limit)
}

fn content_length(headers: &HeaderMap) -> Option<usize> {
    headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
}

impl AttemptBodies {
    /// The next attempt's body; `None` when the body was streamed and cannot be sent again.
    pub fn next(&mut self) -> Option<RequestBody> {
        match self {
            Self::Whole(bytes) => Some(Full::new(bytes.clone()).map_err(|never| match never {}).boxed()),
            Self::Once(body, _) => body.take(),
            Self::Replay(replay) => Some(replay.attempt().boxed()),
        }
    }

    /// Whether another attempt can be sent the whole body.
    pub fn can_resend(&self) -> bool {
        match self {
            Self::Whole(_) => true,
            Self::Once(..) => false,
            Self::Replay(replay) => replay.can_replay(),
        }
    }

    /// The whole body, when it was read before the first attempt.
    pub fn whole(&self) -> Option<&Bytes> {
        match self {
            Self::Whole(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// Whether reading the body from the client failed (a broken chunk, a reset).
    pub fn failed(&self) -> bool {
        match self {
            Self::Whole(_) => false,
            Self::Once(_, failed) => failed.load(Ordering::Relaxed),
            Self::Replay(replay) => replay.failed(),
        }
    }

    /// Whether only one attempt can ever be sent, whatever the retry policy says.
    pub fn single(&self) -> bool {
        matches!(self, Self::Once(..))
    }
}
