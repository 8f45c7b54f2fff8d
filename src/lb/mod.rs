//! Load balancing: the `Pick` interface the proxy calls, every policy, and the shared
//! per-endpoint stats the policies read.

pub mod load;
