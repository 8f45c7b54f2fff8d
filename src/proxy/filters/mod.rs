//! The filters of a listener, as they run: network filters between a connection's
//! handshake and its terminal filter, HTTP filters between the connection manager's
//! routing and the router.
//!
//! One mechanism for every filter (see `docs/architecture.md`, "Filters"):
//! - each filter is one file here with a runtime type built once from its converted
//!   configuration ([`crate::config::filters`]), shared by every worker and connection;
//! - HTTP filters implement [`HttpFilter`]: request headers in, a [`FilterHeadersStatus`]
//!   out (continue, or answer locally), possibly after waiting for an asynchronous check
//!   (the method is `async`); headers to add to the response go in
//!   [`RequestContext::response_headers`]; per-route settings come from
//!   [`RequestContext::per_filter`];
//! - network filters implement [`NetworkFilter`]: the connection in, continue or close;
//! - [`http::HttpFilterChain`] and [`network::NetworkFilterChain`] run them in their
//!   configured order; the router stays last.
//!
//! A filter reaches other clusters (an authorization service, a JWKS server) through
//! [`callout::Callouts`], which picks an endpoint with the cluster's balancer and sends over
//! the worker's pools like the router does.

pub mod body;
pub mod callout;
mod chance;
pub mod cluster_counters;
pub mod compressor;
pub mod context;
pub mod cors;
pub mod ext_authz;
pub mod fault;
mod header_options;
pub mod health_check;
pub mod http;
pub mod istio_stats;
pub mod istio_tcp;
pub mod jwt_authn;
pub mod local_ratelimit;
pub mod network;
pub mod peer_metadata;
pub mod ratelimit;
pub mod rbac;
pub mod registry;
pub mod route_cluster;
pub mod set_filter_state;
pub mod token_bucket;

pub use body::{DownstreamBody, RequestEnd};
pub use callout::{CalloutError, Callouts};
pub use context::{
    DownstreamConnection, DynamicMetadata, HeaderEdit, LocalResponse, ProxyBody, RequestContext, ResponseFlagsSlot,
    ResponseHook,
};
pub use http::{FilterHeadersStatus, HttpFilter, HttpFilterChain};
pub use network::{ConnectionContext, NetworkFilter, NetworkFilterChain, NetworkFilterStatus};
pub use registry::FilterChains;
