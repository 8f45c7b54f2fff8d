//! The gRPC channel to istiod's secure port (15012): TCP, then TLS verified against the
//! mesh root with istiod's name, offering `h2`. The roots are read when the channel is made,
//! so a rotated root file is picked up on the next connection.

use std::path::Path;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tonic::transport::{Channel, Endpoint};

use crate::config::secret::DataSource;

/// Why no channel could be made: the roots, the name or the address.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChannelError(String);

/// A channel to `address` (`host:port`) whose TLS server must prove `server_name` with a
/// chain to one of the PEM roots in `root_cert`. Lazy: it connects on first use and
/// reconnects as needed.
pub fn secure_channel(address: &str, server_name: &str, root_cert: &Path) -> Result<Channel, ChannelError> {
    let roots =
        crate::tls::roots(&DataSource::Filename(root_cert.to_owned())).map_err(|e| ChannelError(e.to_string()))?;
    let mut config = rustls::ClientConfig::builder_with_provider(crate::tls::provider::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ChannelError(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from(server_name.to_owned())
        .map_err(|e| ChannelError(format!("server name {server_name:?}: {e}")))?;
    let address = address.to_owned();
    // The URI only names the authority: the connector below makes the connection.
    let endpoint = Endpoint::from_shared(format!("http://{address}")).map_err(|e| ChannelError(e.to_string()))?;
    Ok(endpoint.connect_with_connector_lazy(tower::service_fn(move |_| {
        let (connector, name, address) = (connector.clone(), name.clone(), address.clone());
        async move {
            let tcp = tokio::net::TcpStream::connect(address.as_str()).await?;
            tcp.set_nodelay(true)?;
            connector.connect(name, tcp).await.map(TokioIo::new)
        }
    })))
}
