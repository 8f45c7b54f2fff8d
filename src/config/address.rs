//! Network addresses of listeners and endpoints, and the IP prefixes that filter chains
//! and RBAC policies match.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

/// Where a listener binds or an endpoint is reached.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Address {
    /// An IP address and port (`socket_address`).
    Socket(SocketAddr),
    /// A Unix domain socket (`pipe`). Istio's agent serves xDS and SDS this way.
    Pipe(PathBuf),
    /// A host name to be resolved (STRICT_DNS clusters), with its port.
    Dns { host: String, port: u16 },
    /// An internal listener of this proxy (`envoy_internal_address`): a connection to it is
    /// served in-process by the listener named `server_listener_name`, on the worker that
    /// opened it. `endpoint_id` tells apart endpoints that reach one listener.
    Internal { server_listener_name: String, endpoint_id: String },
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Socket(addr) => write!(f, "{addr}"),
            Address::Pipe(path) => write!(f, "unix://{}", path.display()),
            Address::Dns { host, port } => write!(f, "{host}:{port}"),
            // Envoy's form, as `/clusters` shows it.
            Address::Internal { server_listener_name, endpoint_id } => {
                write!(f, "envoy://{server_listener_name}/{endpoint_id}")
            }
        }
    }
}

/// An IP prefix, its address masked to `prefix_len` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CidrRange {
    pub address: IpAddr,
    pub prefix_len: u8,
}

impl CidrRange {
    /// `None` when `prefix_len` exceeds the address width.
    pub fn new(address: IpAddr, prefix_len: u8) -> Option<Self> {
        let address = match address {
            IpAddr::V4(v4) if prefix_len <= 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix_len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) if prefix_len <= 128 => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix_len)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
            _ => return None,
        };
        Some(Self { address, prefix_len })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        Self::new(ip, self.prefix_len).is_some_and(|masked| masked.address == self.address)
    }
}
