//! The connection's bytes as Istio's TCP telemetry sees them: counted ([`Counted`]), and
//! with the peer's metadata exchange frame taken off the front ([`PeerReader`]).

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::super::peer_metadata::tcp_frame::{self, Header};
use crate::config::filters::peer_metadata::WorkloadMetadata;

/// Bytes read from and written to a stream.
#[derive(Debug, Default)]
pub struct Meter {
    pub received: Cell<u64>,
    pub sent: Cell<u64>,
}

/// A stream that counts its bytes into a [`Meter`].
pub struct Counted<S> {
    inner: S,
    meter: Rc<Meter>,
}

impl<S> Counted<S> {
    pub fn new(inner: S, meter: Rc<Meter>) -> Self {
        Self { inner, meter }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let read = (buf.filled().len() - before) as u64;
        this.meter.received.set(this.meter.received.get().saturating_add(read));
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.inner).poll_write(cx, data))?;
        this.meter.sent.set(this.meter.sent.get().saturating_add(written as u64));
        Poll::Ready(Ok(written))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Told what the peer's first bytes said.
pub trait OnPeer {
    /// The frame was read (`None`: it named no workload) or is not coming.
    fn on_peer(&self, peer: Option<WorkloadMetadata>);
}

enum State {
    /// Collecting the first bytes until they are a frame or are not.
    Reading(Vec<u8>),
    /// Bytes read ahead that belong to the connection, from `.1` on.
    Replaying(Vec<u8>, usize),
    Passing,
}

/// A stream whose reads start after the peer's exchange frame, when `expect` is set; the
/// bytes of a peer that sends none pass through untouched (Istio then marks the peer
/// unknown).
pub struct PeerReader<S> {
    inner: S,
    state: State,
    on_peer: Option<Rc<dyn OnPeer>>,
}

impl<S> PeerReader<S> {
    pub fn new(inner: S, on_peer: Option<Rc<dyn OnPeer>>) -> Self {
        let state = if on_peer.is_some() { State::Reading(Vec::new()) } else { State::Passing };
        Self { inner, state, on_peer }
    }

    fn found(&mut self, peer: Option<WorkloadMetadata>) {
        if let Some(on_peer) = self.on_peer.take() {
            on_peer.on_peer(peer);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for PeerReader<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Passing => return Pin::new(&mut this.inner).poll_read(cx, buf),
                State::Replaying(bytes, at) => {
                    let rest = bytes.get(*at..).unwrap_or_default();
                    let n = rest.len().min(buf.remaining());
                    buf.put_slice(&rest[..n]);
                    *at += n;
                    if *at >= bytes.len() {
                        this.state = State::Passing;
                    }
                    return Poll::Ready(Ok(()));
                }
                State::Reading(collected) => {
                    let mut chunk = [0u8; 4096];
                    let mut read = ReadBuf::new(&mut chunk);
                    ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
                    let eof = read.filled().is_empty();
                    collected.extend_from_slice(read.filled());
                    let parsed = tcp_frame::parse(collected);
                    let collected = std::mem::take(collected);
                    match parsed {
                        Header::Incomplete if !eof => {
                            this.state = State::Reading(collected);
                            continue;
                        }
                        Header::Frame(length, peer) => {
                            this.found(peer.map(|p| *p));
                            let rest = collected.get(length..).unwrap_or_default().to_vec();
                            this.state = if rest.is_empty() { State::Passing } else { State::Replaying(rest, 0) };
                        }
                        Header::Incomplete | Header::NotExchange => {
                            this.found(None);
                            this.state = State::Replaying(collected, 0);
                        }
                    }
                    if eof && matches!(this.state, State::Passing) {
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for PeerReader<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::config::filters::peer_metadata::LocalNode;

    #[derive(Default)]
    struct Seen(RefCell<Vec<Option<String>>>);

    impl OnPeer for Seen {
        fn on_peer(&self, peer: Option<WorkloadMetadata>) {
            self.0.borrow_mut().push(peer.map(|p| p.workload_name));
        }
    }

    async fn through(bytes: Vec<u8>, chunk: usize) -> (Vec<u8>, Vec<Option<String>>) {
        let (mut writer, reader) = tokio::io::duplex(64);
        let seen = Rc::new(Seen::default());
        let mut reader = PeerReader::new(reader, Some(seen.clone() as Rc<dyn OnPeer>));
        let write = async move {
            for part in bytes.chunks(chunk.max(1)) {
                writer.write_all(part).await.unwrap();
            }
            drop(writer);
        };
        let mut out = Vec::new();
        let ((), read) = tokio::join!(write, reader.read_to_end(&mut out));
        read.unwrap();
        let seen = seen.0.borrow().clone();
        (out, seen)
    }

    #[tokio::test]
    async fn the_frame_is_taken_off_however_it_arrives() {
        let node = LocalNode {
            id: "a".into(),
            workload: WorkloadMetadata { workload_name: "w".into(), ..Default::default() },
        };
        let mut bytes = tcp_frame::encode(&node);
        bytes.extend_from_slice(b"payload");
        for chunk in [1, 3, 8, 1000] {
            assert_eq!(through(bytes.clone(), chunk).await, (b"payload".to_vec(), vec![Some("w".to_owned())]));
        }
    }

    #[tokio::test]
    async fn a_peer_without_the_exchange_keeps_its_bytes() {
        assert_eq!(through(b"SSH-2.0-x".to_vec(), 2).await, (b"SSH-2.0-x".to_vec(), vec![None]));
        assert_eq!(through(vec![0x3D, 0x23], 1).await, (vec![0x3D, 0x23], vec![None]), "closed mid-magic");
        assert_eq!(through(Vec::new(), 1).await, (Vec::new(), vec![None]));
    }
}
