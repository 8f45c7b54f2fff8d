//! ORCA (Open Request Cost Aggregation): backends telling the proxy how loaded they are.
//! Reports arrive per request in response headers or trailers ([`from_headers`]) or on an
//! out-of-band gRPC stream ([`OobClient`]). Either way they are validated, converted to
//! [`LoadReport`](crate::lb::load::LoadReport) and handed to a
//! [`LoadSink`](crate::lb::load::LoadSink); what the balancers make of them is theirs.

mod error;
mod header;
mod json;
mod oob;
mod report;
mod text;

pub use error::OrcaError;
pub use header::{ENDPOINT_LOAD_METRICS, ENDPOINT_LOAD_METRICS_BIN, from_headers};
pub use oob::{OobClient, OobExit, spawn_oob_stream};
pub use report::from_proto;
