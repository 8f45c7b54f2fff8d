//! The response body as `istio.stats` watches it: its bytes, its gRPC messages and its
//! trailers' `grpc-status`, reported once when it ends — or when it is dropped, which is
//! also how a body nobody polls (an empty one) ends.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Buf;
use hyper::body::{Body, Frame, SizeHint};

use super::Pending;
use crate::proxy::response_flags::ResponseFlags;

/// Counts gRPC's length-prefixed messages (1 flag byte, 4 length bytes, the message)
/// across however the bytes are split.
#[derive(Debug, Default)]
pub struct GrpcFrames {
    /// Bytes of the current prefix seen so far (0..5).
    prefix: [u8; 5],
    prefix_len: usize,
    /// Message bytes still to skip.
    remaining: u64,
    pub messages: u64,
}

impl GrpcFrames {
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.remaining > 0 {
                let skip = usize::try_from(self.remaining).unwrap_or(usize::MAX).min(data.len());
                data = &data[skip..];
                self.remaining -= skip as u64;
                continue;
            }
            let take = (5 - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + take].copy_from_slice(&data[..take]);
            self.prefix_len += take;
            data = &data[take..];
            if self.prefix_len == 5 {
                let [_, a, b, c, d] = self.prefix;
                self.remaining = u64::from(u32::from_be_bytes([a, b, c, d]));
                self.prefix_len = 0;
                self.messages = self.messages.saturating_add(1);
            }
        }
    }
}

/// A response body that reports its request to `istio.stats` when it ends.
pub struct Observed<B> {
    inner: B,
    pending: Option<Pending>,
}

impl<B: Body> Observed<B> {
    pub fn new(inner: B, pending: Pending) -> Self {
        Self { inner, pending: Some(pending) }
    }
}

impl<B> Observed<B> {
    fn finish(&mut self, flags: ResponseFlags) {
        if let Some(pending) = self.pending.take() {
            pending.report(flags);
        }
    }
}

impl<B> Body for Observed<B>
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
                if let Some(pending) = this.pending.as_mut() {
                    if let Some(data) = frame.data_ref() {
                        pending.response_body(data.chunk(), data.remaining());
                    }
                    if let Some(trailers) = frame.trailers_ref() {
                        pending.trailers(trailers);
                    }
                }
                if this.inner.is_end_stream() {
                    this.finish(ResponseFlags::NONE);
                }
            }
            Some(Err(_)) => this.finish(ResponseFlags::UPSTREAM_CONNECTION_TERMINATION),
            None => this.finish(ResponseFlags::NONE),
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

impl<B> Drop for Observed<B> {
    /// Dropped before its end: the client went away (`DC`) — unless nothing was left.
    fn drop(&mut self) {
        let ended = self.pending.as_ref().is_some_and(|p| p.body_was_empty);
        self.finish(if ended { ResponseFlags::NONE } else { ResponseFlags::DOWNSTREAM_CONNECTION_TERMINATION });
    }
}

#[cfg(test)]
mod tests {
    use super::GrpcFrames;

    #[test]
    fn messages_are_counted_however_the_bytes_are_split() {
        let mut one = vec![0u8, 0, 0, 0, 3, 1, 2, 3];
        one.extend_from_slice(&[0, 0, 0, 0, 0]); // an empty message
        one.extend_from_slice(&[0, 0, 0, 0, 2, 9, 9]);
        for split in 0..one.len() {
            let mut frames = GrpcFrames::default();
            frames.feed(&one[..split]);
            frames.feed(&one[split..]);
            assert_eq!(frames.messages, 3, "split at {split}");
        }
        let mut frames = GrpcFrames::default();
        for byte in &one {
            frames.feed(std::slice::from_ref(byte));
        }
        assert_eq!(frames.messages, 3);
    }
}
