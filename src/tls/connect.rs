//! The client side of a handshake on an upstream connection.

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::accept::Refused;
use super::{ClientAlpn, ClientTls, Refusal};

/// Runs the client handshake on `io`, offering the ALPN protocols for `use_`. The caller
/// bounds it in time (the cluster's connect timeout covers the TCP connect and this).
pub async fn connect<S>(io: S, tls: &ClientTls, use_: ClientAlpn) -> Result<TlsStream<S>, Refused>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let connector = TlsConnector::from(tls.config(use_).clone());
    connector
        .connect(tls.server_name.clone(), io)
        .await
        .map_err(|error| Refused { refusal: Refusal::of(&error), reason: error.to_string() })
}
