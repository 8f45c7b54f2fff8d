//! Configuration: the bootstrap, ADS (SotW and Delta) against the embedded and real control
//! planes, partial acceptance, the store and the demo.
//!
//! One test binary for this group of tests: each file is a module, linked once with
//! the library instead of once per file. The support modules are shared by every group.
// Tests stop at the first unexpected value; helpers outside a #[test] fn are tests too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;
#[path = "../tls_support/mod.rs"]
mod tls_support;

mod ads;
mod bootstrap;
mod config_scale;
mod demo;
mod envoy_acks;
mod faults_control_plane;
mod runtime_fuzz;
mod store;
mod xds_duplicate_address;
mod xds_partial_accept;
mod xds_partial_accept_sds;
mod xds_proto_constraints;
