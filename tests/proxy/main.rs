//! The request path end to end: listeners, the connection manager, the router, upstream
//! connections and their faults, sizes and lifetimes.
//!
//! One test binary for this group of tests: each file is a module, linked once with
//! the library instead of once per file. The support modules are shared by every group.
// Tests stop at the first unexpected value; helpers outside a #[test] fn are tests too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;

mod accept_exhaustion;
mod additional_addresses;
mod attempt_count;
mod circuit_breakers;
mod connect_termination;
mod dns_lookup_family;
mod expect_continue;
mod faults_backend;
mod filter_chain_match;
mod flow_control;
mod framing_corpus;
mod fuzz_smoke;
mod hbone;
mod headers_with_underscores;
mod health_check;
mod hostile_http;
mod http10;
mod http_inspector;
mod internal_listeners;
mod lifecycle;
mod listener_drain_type;
mod listener_sockets;
mod listener_update_drain;
mod overload_manager;
mod proxy_e2e;
mod proxy_protocol;
mod proxy_router;
mod proxy_upstream;
mod request_timeout;
mod resilience_e2e;
mod route_mirror;
mod route_regex_rewrite;
mod route_stream_limits;
mod sizes;
mod suppress_envoy_headers;
mod tcp_proxy_timeouts;
mod tcp_tunneling;
mod upgrades;
mod upload_memory;
mod worker_seeds;
