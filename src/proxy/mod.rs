//! The data path: workers, listeners, original-destination hand-off, the HTTP connection
//! manager, routing, retries and timeouts, upstream connection pools, the TCP proxy, TLS on
//! both sides.

mod accept_backoff;
pub mod access_log;
pub mod byte_count;
pub mod chain_drain;
pub mod clusters;
pub mod completion;
pub mod connection;
pub mod connection_limit;
pub mod context;
pub mod drain;
pub mod exec;
pub mod filter_chain;
pub mod filters;
pub mod flow_control;
pub mod hcm;
pub mod headers;
pub mod http_inspector;
pub mod internal_listener;
pub mod listener;
pub mod load_report;
pub mod observe;
pub mod original_dst;
pub mod overload;
pub mod path_normalization;
pub mod proxy_protocol;
pub mod replay_body;
pub mod request_trace;
pub mod response_flags;
pub mod retry;
pub mod router;
pub mod shadow;
pub mod stream_info;
pub mod tcp_proxy;
mod tracers;
pub mod transport;
pub mod upstream;
pub mod worker;

pub use transport::HandshakeStats;
pub use worker::{WorkerOptions, Workers};
