//! Outrider: a service-mesh sidecar data plane. See DESIGN.md for the architecture.
pub mod config;
pub mod pb;
pub mod xds;
