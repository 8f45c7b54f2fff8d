//! The data path: workers, listeners, the HTTP connection manager, routing, retries and
//! timeouts, upstream connection pools, the TCP proxy.

pub mod headers;
pub mod retry;
pub mod router;
pub mod upstream;
