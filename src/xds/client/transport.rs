//! The gRPC channel to the control plane: TCP, or a Unix socket (Istio's agent).

use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::config::Address;

/// Connects to `address`. Errors are transient from the caller's point of view.
pub async fn connect(address: &Address) -> Result<Channel, tonic::transport::Error> {
    match address {
        Address::Socket(addr) => Endpoint::from_shared(format!("http://{addr}"))?.connect().await,
        Address::Dns { host, port } => Endpoint::from_shared(format!("http://{host}:{port}"))?.connect().await,
        Address::Pipe(path) => {
            let path: PathBuf = path.clone();
            // The URI is required by the API but unused: the connector ignores it.
            Endpoint::from_static("http://xds.local")
                .connect_with_connector(tower::service_fn(move |_| {
                    let path = path.clone();
                    async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
                }))
                .await
        }
        // An internal listener is served by a worker, for the connections the worker opens:
        // the xDS client, which configures the workers, cannot reach one.
        Address::Internal { .. } => {
            Endpoint::from_static("http://xds.local")
                .connect_with_connector(tower::service_fn(|_| async {
                    Err::<TokioIo<tokio::net::TcpStream>, _>(std::io::Error::other(
                        "an internal listener cannot serve xDS",
                    ))
                }))
                .await
        }
    }
}
