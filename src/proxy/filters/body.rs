//! The request's body as filters may read it (ext_authz's `with_request_body`): buffered on
//! demand, up to a limit, then sent upstream unchanged — the buffered bytes first, the
//! rest as it streams.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::HeaderMap;
use http_body_util::{BodyExt, BodyStream, StreamBody};
use hyper::body::{Body, Frame, Incoming};

use crate::proxy::upstream::{BoxError, RequestBody};

/// A downstream request body, partly or wholly read by filters.
pub struct DownstreamBody {
    buffered: BytesMut,
    /// What is still to be read; `None` once the body ended.
    rest: Option<Incoming>,
    trailers: Option<HeaderMap>,
    /// Told when the last of the body has been read from the client.
    end: Option<RequestEnd>,
}

/// The body could not be read (the client reset or broke the protocol).
#[derive(Debug, thiserror::Error)]
#[error("reading the request body: {0}")]
pub struct BodyError(String);

impl DownstreamBody {
    pub fn new(body: Incoming) -> Self {
        let rest = (!body.is_end_stream()).then_some(body);
        Self { buffered: BytesMut::new(), rest, trailers: None, end: None }
    }

    /// Tells `end` once the whole body has been read from the client (at once when it
    /// already has): the connection manager's `request_timeout` stops there.
    pub fn tell_end(&mut self, end: RequestEnd) {
        if self.rest.is_none() {
            end.mark();
        }
        self.end = Some(end);
    }

    /// Whether nothing more is to come (no body, or all of it buffered).
    pub fn is_end_stream(&self) -> bool {
        self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    /// Reads until the body ends or at least `limit` bytes are buffered; returns whether
    /// the whole body is buffered.
    pub async fn buffer(&mut self, limit: usize) -> Result<bool, BodyError> {
        while self.buffered.len() < limit {
            let Some(rest) = self.rest.as_mut() else { break };
            match rest.frame().await {
                None => self.rest = None,
                Some(Err(error)) => return Err(BodyError(error.to_string())),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.buffered.extend_from_slice(&data),
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.trailers = Some(trailers);
                        }
                    }
                },
            }
        }
        if self.rest.as_ref().is_some_and(Body::is_end_stream) {
            self.rest = None;
        }
        if self.rest.is_none()
            && let Some(end) = &self.end
        {
            end.mark();
        }
        Ok(self.rest.is_none())
    }

    /// What filters have buffered so far.
    pub fn buffered(&self) -> &[u8] {
        &self.buffered
    }

    /// The whole body, when it is all buffered (or there was none).
    pub fn complete(&self) -> Option<Bytes> {
        self.rest.is_none().then(|| self.buffered.clone().freeze())
    }

    /// The body to send upstream: the buffered bytes, then the rest as it streams, then
    /// the trailers.
    pub fn into_request_body(self) -> RequestBody {
        let Self { buffered, rest, trailers, end } = self;
        let rest = rest.map(|rest| Ending { inner: rest, end });
        if buffered.is_empty()
            && trailers.is_none()
            && let Some(rest) = rest
        {
            return rest.map_err(|e| Box::new(e) as BoxError).boxed();
        }
        let head = (!buffered.is_empty()).then(|| Ok::<_, BoxError>(Frame::data(buffered.freeze())));
        let tail = trailers.map(|t| Ok::<_, BoxError>(Frame::trailers(t)));
        let rest = rest.map(|rest| BodyStream::new(rest).map(|frame| frame.map_err(|e| Box::new(e) as BoxError)));
        let frames =
            futures::stream::iter(head).chain(futures::stream::iter(rest).flatten()).chain(futures::stream::iter(tail));
        BodyExt::boxed(StreamBody::new(frames))
    }

    /// Whether no filter read any of it.
    pub fn is_untouched(&self) -> bool {
        self.buffered.is_empty() && self.trailers.is_none()
    }
}

/// Whether a request's body has been read whole from the client; shared between the
/// stream's timer and whoever reads the body. In the request's extensions until the
/// connection manager hands it to the [`DownstreamBody`].
#[derive(Debug, Clone, Default)]
pub struct RequestEnd(Arc<AtomicBool>);

impl RequestEnd {
    pub fn mark(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_marked(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The rest of a body, telling its [`RequestEnd`] when it ends.
struct Ending {
    inner: Incoming,
    end: Option<RequestEnd>,
}

impl Body for Ending {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
            _ => false,
        };
        if ended && let Some(end) = &this.end {
            end.mark();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
