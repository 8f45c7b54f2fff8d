//! Outgoing TCP connections as the proxy and its health checks open them.

use std::net::SocketAddr;

use tokio::net::{TcpSocket, TcpStream};

/// Connects to `addr` with Nagle off, from `bind` if given (`upstream_bind_config`).
pub async fn connect_tcp(addr: SocketAddr, bind: Option<SocketAddr>) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_nodelay(true)?;
    if let Some(source) = bind {
        socket.bind(source)?;
    }
    socket.connect(addr).await
}
