//! The response body as it comes from an upstream connection. It holds the connection's
//! lease until the body ends or is dropped, and hands an HTTP/1.1 connection back to its
//! pool when the body ended cleanly (a connection whose response was abandoned midway
//! cannot carry another request and is closed instead).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::activity::Lease;
use super::pool::Checkin;

/// An upstream response body.
#[derive(Debug)]
pub struct UpstreamBody {
    inner: Incoming,
    lease: Option<Lease>,
    checkin: Option<Checkin>,
    /// The request's slot under the cluster's `max_requests`: a streaming response is an
    /// active request for as long as it streams.
    _request: Option<crate::lb::resources::Slot>,
}

impl UpstreamBody {
    pub(crate) fn new(inner: Incoming, lease: Lease, checkin: Option<Checkin>) -> Self {
        Self { inner, lease: Some(lease), checkin, _request: None }
    }

    /// The body, holding `slot` until it ends or drops.
    pub(crate) fn holding(mut self, slot: Option<crate::lb::resources::Slot>) -> Self {
        self._request = slot;
        self
    }

    fn finish(&mut self, ended: bool) {
        // The lease first: the connection is idle from now on.
        self.lease.take();
        if let Some(checkin) = self.checkin.take()
            && ended
        {
            checkin.put();
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            None => this.finish(true),
            Some(Err(_)) => this.finish(false),
            Some(Ok(_)) if this.inner.is_end_stream() => this.finish(true),
            Some(Ok(_)) => {}
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

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        let ended = self.inner.is_end_stream();
        self.finish(ended);
    }
}
