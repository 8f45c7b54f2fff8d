//! The server side of a handshake on a downstream connection: read the ClientHello, pick
//! the config (with or without ALPN, see [`ServerTls::config_for`]), finish the handshake
//! within the chain's timeout, and say why when it fails.
//!
//! A refusal is reported (counted, logged) while the connection is still open, and the
//! connection closes after: whoever sees it closed can read the count.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use super::{Refusal, ServerTls};

/// A downstream connection after its handshake.
#[derive(Debug)]
pub struct Accepted<S> {
    pub stream: TlsStream<S>,
    /// The protocol ALPN settled on, if any.
    pub alpn: Option<Vec<u8>>,
    /// The client's certificate, when it presented one.
    pub peer: Option<super::PeerIdentity>,
}

/// Why a handshake was refused, for the log line and the counters.
#[derive(Debug)]
pub struct Refused {
    pub refusal: Refusal,
    pub reason: String,
}

/// Runs the server handshake on `io` with `tls`; `timeout` bounds all of it. On failure,
/// `on_refused` runs before the connection is closed, and `None` is returned.
pub async fn accept<S>(
    io: S,
    tls: &ServerTls,
    timeout: Duration,
    on_refused: impl FnOnce(Refused),
) -> Option<Accepted<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let deadline = Instant::now() + timeout;
    let timed_out = || Refused { refusal: Refusal::Timeout, reason: format!("no handshake within {timeout:?}") };
    let failed = |error: std::io::Error| Refused { refusal: Refusal::of(&error), reason: error.to_string() };

    let mut acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
    let start = match tokio::time::timeout_at(deadline, &mut acceptor).await {
        Ok(Ok(start)) => start,
        // `acceptor` still holds the connection: it closes when this returns.
        Ok(Err(error)) => return refuse(on_refused, failed(error)),
        Err(_) => return refuse(on_refused, timed_out()),
    };
    let hello = start.client_hello();
    if tls.require_sni && hello.server_name().is_none() {
        let refused = Refused { refusal: Refusal::MissingSni, reason: "the client sent no SNI".to_owned() };
        return refuse(on_refused, refused);
    }
    let offered: Vec<Vec<u8>> =
        hello.alpn().map(|protocols| protocols.map(<[u8]>::to_vec).collect()).unwrap_or_default();
    let mut handshake = start.into_stream(tls.config_for(&offered)).into_fallible();
    match tokio::time::timeout_at(deadline, &mut handshake).await {
        Ok(Ok(stream)) => {
            let session = stream.get_ref().1;
            let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
            // The whole chain is kept: `x-forwarded-client-cert` may quote it (`Chain=`).
            let peer = session.peer_certificates().and_then(super::PeerIdentity::of_chain);
            Some(Accepted { stream, alpn, peer })
        }
        Ok(Err((error, _io))) => refuse(on_refused, failed(error)),
        Err(_) => refuse(on_refused, timed_out()),
    }
}

fn refuse<T>(on_refused: impl FnOnce(Refused), refused: Refused) -> Option<T> {
    on_refused(refused);
    None
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.reason, self.refusal)
    }
}
