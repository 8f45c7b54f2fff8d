//! Load balancing: the `Pick` interface the proxy calls, every policy, and the shared
//! per-endpoint stats the policies read.
//!
//! Per cluster, a [`ClusterLb`] is built off the hot path (on the control runtime) and
//! shared by `Arc`; each worker keeps a [`Picker`] with its own cursors and RNG, and notices
//! a rebuilt balancer by a pointer comparison. Picking never locks.

pub mod adaptive;
pub mod balancer;
pub mod bounded_load;
pub mod cswrr;
pub mod edf;
pub mod endpoint;
pub mod hash_policy;
pub mod hashing;
pub mod health_check;
pub mod host;
pub mod least_request;
pub mod load;
pub mod maglev;
pub mod original_dst;
pub mod outlier;
pub mod peak_ewma;
pub mod pick_context;
pub mod policy;
pub mod priority;
pub mod random;
pub mod registry;
pub mod resources;
pub mod ring_hash;
pub mod round_robin;
pub mod slow_start;
pub mod stats_registry;
pub mod subset;
#[cfg(test)]
mod test_hosts;

pub use balancer::{ClusterLb, Picker};
pub use endpoint::{EndpointStats, InFlight};
pub use host::Host;
pub use pick_context::PickContext;
pub use registry::{BalancerBuilder, BalancerMap, Balancers, Shared};
pub use stats_registry::StatsRegistry;
