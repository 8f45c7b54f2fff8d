//! Outrider: a service-mesh sidecar data plane. See `docs/architecture.md` for the architecture.
// Denied, not forbidden: `core::allocator` makes the crate's one foreign call, allowed there.
#![deny(unsafe_code)]
pub mod admin;
pub mod agent;
pub mod app;
pub mod capture;
pub mod config;
pub mod control;
pub mod core;
pub mod envoy_cli;
pub mod health;
pub mod inject;
pub mod lb;
pub mod orca;
pub mod pb;
pub mod proxy;
pub mod store;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod tls;
pub mod xds;
