//! A raw upstream connection, for the TCP proxy and a terminated `CONNECT`: TCP to an IP
//! endpoint (its `additional_addresses` raced with it), or a pipe to an internal listener
//! of this worker. No TLS and no HTTP: the caller adds what its bytes need.

use std::net::SocketAddr;

use tokio::io::DuplexStream;
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::either::Either;

use crate::config::Address;
use crate::config::Cluster;
use crate::config::endpoint::LbEndpoint;
use crate::proxy::internal_listener;

/// A raw connection: TCP, or a pipe to an internal listener.
pub type RawConnection = Either<TcpStream, DuplexStream>;

/// A TCP connection to `address` (the endpoint's `additional_addresses` raced with it, as
/// Envoy's happy eyeballs), or a pipe to an internal listener of this worker.
pub async fn connect(address: &Address, endpoint: &LbEndpoint, cluster: &Cluster) -> std::io::Result<RawConnection> {
    let address = match address {
        Address::Socket(address) => *address,
        Address::Internal { server_listener_name, .. } => {
            return internal_listener::connect(server_listener_name).map(Either::Right);
        }
        other => return Err(std::io::Error::other(format!("no raw connection reaches {other}"))),
    };
    let bind = cluster.upstream_bind;
    let additional = &endpoint.additional_addresses;
    let stream = if !additional.is_empty() {
        let addresses: Vec<SocketAddr> = std::iter::once(address).chain(additional.iter().copied()).collect();
        crate::core::net::connect_any(&addresses, |peer| bind.map(|b| b.for_peer(peer))).await?
    } else {
        let socket = if address.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        if let Some(source) = bind.map(|b| b.for_peer(address)) {
            socket.bind(source)?;
        }
        socket.connect(address).await?
    };
    let _ = stream.set_nodelay(true);
    Ok(Either::Left(stream))
}
