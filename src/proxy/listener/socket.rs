//! A listener's listening sockets and the options they are made with: `transparent`
//! (`IP_TRANSPARENT`, for TPROXY interception), `freebind` (`IP_FREEBIND`, to bind an
//! address the host does not have yet) and `tcp_backlog_size` (the accept queue).

use std::net::SocketAddr;

use socket2::{Domain, Socket, Type};
use tokio::net::TcpListener;

use crate::config::Listener;

/// The options a listener's sockets are made with. A listener update that changes them
/// binds new sockets (as a changed address does): options apply before `bind`/`listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketOptions {
    transparent: bool,
    freebind: bool,
    backlog: i32,
}

impl SocketOptions {
    pub fn of(listener: &Listener) -> Self {
        Self {
            transparent: listener.transparent,
            freebind: listener.freebind,
            // Unset: as long as the kernel allows (it caps the backlog at
            // net.core.somaxconn), which is Envoy's default on Linux.
            backlog: listener.tcp_backlog_size.map_or(i32::MAX, |size| i32::try_from(size).unwrap_or(i32::MAX)),
        }
    }
}

/// A non-blocking listening socket with SO_REUSEADDR and SO_REUSEPORT. IPv6 sockets accept
/// IPv6 only (Envoy's default), so `[::]:p` and `0.0.0.0:p` can both be bound.
pub fn bind(address: SocketAddr, options: SocketOptions) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)?;
    if address.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    // Set only when asked, as Envoy leaves an unset option alone; setting IP_TRANSPARENT
    // needs CAP_NET_ADMIN, and the listener does not bind without it.
    if options.transparent {
        match address {
            SocketAddr::V4(_) => socket.set_ip_transparent_v4(true)?,
            SocketAddr::V6(_) => socket.set_ip_transparent_v6(true)?,
        }
    }
    if options.freebind {
        match address {
            SocketAddr::V4(_) => socket.set_freebind_v4(true)?,
            SocketAddr::V6(_) => socket.set_freebind_v6(true)?,
        }
    }
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(options.backlog)?;
    TcpListener::from_std(socket.into())
}
