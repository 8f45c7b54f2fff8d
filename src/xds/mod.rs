//! xDS: the ADS client that keeps the store current, and a small ADS server: the SDS
//! server of the in-process agent (`crate::agent`) and, file-backed, the control plane of
//! `outrider demo` and tests.

pub mod client;
pub mod server;
