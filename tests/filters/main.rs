//! HTTP and network filters, access logs, tracing, stats and the admin server.
//!
//! One test binary for this group of tests: each file is a module, linked once with
//! the library instead of once per file. The support modules are shared by every group.
// Tests stop at the first unexpected value; helpers outside a #[test] fn are tests too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;
#[path = "../tls_support/mod.rs"]
mod tls_support;

mod access_log_format;
mod access_log_grpc;
mod access_log_otel;
mod admin;
mod admin_endpoints;
mod admin_limits;
mod edge_authority;
mod edge_echo;
mod edge_trust;
mod edge_xfcc;
mod filters_compressor;
mod filters_ext_authz;
mod filters_http;
mod filters_jwt;
mod filters_local;
mod filters_network_ext_authz;
mod filters_ratelimit;
mod filters_rbac;
mod observability;
mod stats_matcher;
mod tracing_otlp;
mod tracing_provider;
