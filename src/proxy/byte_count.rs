//! A connection's bytes, counted as they pass (`*_cx_rx_bytes_total`,
//! `*_cx_tx_bytes_total`): one relaxed atomic add per read or write, on cells resolved
//! when the connection opened.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::telemetry::Counter;

pub struct ByteCounted<S> {
    inner: S,
    rx: Counter,
    tx: Counter,
}

impl<S> ByteCounted<S> {
    pub fn new(inner: S, rx: &Counter, tx: &Counter) -> Self {
        Self { inner, rx: rx.clone(), tx: tx.clone() }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ByteCounted<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            self.rx.add(buf.filled().len().saturating_sub(before) as u64);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ByteCounted<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(written)) = polled {
            self.tx.add(written as u64);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(written)) = polled {
            self.tx.add(written as u64);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn reads_and_writes_are_counted() {
        let (a, mut b) = tokio::io::duplex(64);
        let (rx, tx) = (Counter::default(), Counter::default());
        let mut counted = ByteCounted::new(a, &rx, &tx);
        counted.write_all(b"hello").await.unwrap();
        b.write_all(b"hi").await.unwrap();
        let mut buf = [0u8; 2];
        counted.read_exact(&mut buf).await.unwrap();
        assert_eq!((rx.get(), tx.get()), (2, 5));
    }
}
