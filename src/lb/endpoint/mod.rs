//! Per-endpoint state shared by every worker: the endpoint's stats and the parts of them
//! that the policies and the resilience mechanisms keep there (active health check
//! verdicts, outlier detection's counters, CSWRR's weight state), so that they survive
//! balancer rebuilds. The modules that read and write that state (`cswrr`, `health_check`,
//! `outlier`, the balancers) use these; nothing here uses them.

mod health;
pub mod outlier_counters;
mod stats;
mod weight;

pub use health::{HealthFlags, MAX_CHECKS};
pub use stats::{EndpointStats, InFlight, MeasuredLoad, RTT_DECAY, TimedReport};
pub use weight::WeightState;
