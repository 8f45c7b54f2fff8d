//! The server side of a handshake on a downstream connection: read the ClientHello, pick
//! the config (with or without ALPN, see [`ServerTls::config_for`]), finish the handshake
//! within the chain's timeout, and say why when it fails.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use super::{Refusal, ServerTls};

/// A downstream connection after its handshake.
#[derive(Debug)]
pub struct Accepted<S> {
    pub stream: TlsStream<S>,
    /// The protocol ALPN settled on, if any.
    pub alpn: Option<Vec<u8>>,
}

/// Why a handshake was refused, for the log line and the counters.
#[derive(Debug)]
pub struct Refused {
    pub refusal: Refusal,
    pub reason: String,
}

/// Runs the server handshake on `io` with `tls`; `timeout` bounds all of it.
pub async fn accept<S>(io: S, tls: &ServerTls, timeout: Duration) -> Result<Accepted<S>, Refused>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(timeout, handshake(io, tls)).await {
        Ok(result) => result,
        Err(_) => Err(Refused { refusal: Refusal::Timeout, reason: format!("no handshake within {timeout:?}") }),
    }
}

async fn handshake<S>(io: S, tls: &ServerTls) -> Result<Accepted<S>, Refused>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let refused = |error: std::io::Error| Refused { refusal: Refusal::of(&error), reason: error.to_string() };
    let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io).await.map_err(refused)?;
    let hello = start.client_hello();
    if tls.require_sni && hello.server_name().is_none() {
        return Err(Refused { refusal: Refusal::MissingSni, reason: "the client sent no SNI".to_owned() });
    }
    let offered: Vec<Vec<u8>> =
        hello.alpn().map(|protocols| protocols.map(<[u8]>::to_vec).collect()).unwrap_or_default();
    let config = tls.config_for(&offered);
    let stream = start.into_stream(config).await.map_err(refused)?;
    let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    Ok(Accepted { stream, alpn })
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.reason, self.refusal)
    }
}
