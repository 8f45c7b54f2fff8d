//! xDS: the ADS client that keeps the store current, and a small file-backed ADS server
//! for `outrider demo` and tests.

pub mod client;
#[cfg(feature = "testkit")]
pub mod server;
