//! A response body with one more trailer: how a backend sends its ORCA report after the
//! body, as gRPC servers do.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use hyper::body::{Body, Frame};

use super::{BoxError, ResponseBody};
use crate::orca::ENDPOINT_LOAD_METRICS_BIN;

/// A body with one more trailer: added to the body's own trailers, or sent as trailers
/// when the body has none.
pub(super) struct WithTrailer {
    inner: ResponseBody,
    trailer: Option<HeaderValue>,
}

impl WithTrailer {
    pub(super) fn new(inner: ResponseBody, trailer: HeaderValue) -> Self {
        Self { inner, trailer: Some(trailer) }
    }
}

impl Body for WithTrailer {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        use std::task::Poll;
        let frame = std::task::ready!(std::pin::Pin::new(&mut self.inner).poll_frame(cx));
        match frame {
            Some(Ok(frame)) => match frame.into_trailers() {
                Ok(mut trailers) => {
                    if let Some(value) = self.trailer.take() {
                        trailers.insert(ENDPOINT_LOAD_METRICS_BIN, value);
                    }
                    Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                }
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            None => match self.trailer.take() {
                Some(value) => {
                    let mut trailers = HeaderMap::new();
                    trailers.insert(ENDPOINT_LOAD_METRICS_BIN, value);
                    Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                }
                None => Poll::Ready(None),
            },
            Some(Err(error)) => Poll::Ready(Some(Err(error))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.trailer.is_none() && self.inner.is_end_stream()
    }
}
