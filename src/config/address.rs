//! Network addresses of listeners and endpoints.

use std::fmt;
use std::net::SocketAddr;
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
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Socket(addr) => write!(f, "{addr}"),
            Address::Pipe(path) => write!(f, "unix://{}", path.display()),
            Address::Dns { host, port } => write!(f, "{host}:{port}"),
        }
    }
}
