//! What the demo and the tests serve behind the proxy (the `testkit` feature): HTTP and gRPC
//! backends whose latency, errors, capacity and ORCA load reports follow a behaviour the
//! caller describes.

pub mod backends;
