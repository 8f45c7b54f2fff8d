//! Outrider: a service-mesh sidecar data plane. See DESIGN.md for the architecture.
#![forbid(unsafe_code)]
pub mod admin;
pub mod app;
pub mod config;
pub mod core;
pub mod lb;
pub mod orca;
pub mod pb;
pub mod proxy;
pub mod store;
pub mod tls;
pub mod xds;
