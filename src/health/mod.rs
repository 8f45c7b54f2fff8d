//! Active health checking, the I/O half (the verdicts and intervals are `lb::health_check`):
//! per health-checked cluster and host, a task on the control runtime that probes the host
//! over HTTP/1.1, HTTP/2, gRPC (`grpc.health.v1.Health/Check`) or TCP with Envoy's
//! semantics, writes the verdict into the host's shared flags, and asks the balancing task
//! to rebuild the cluster's balancer when a host's health changes.
//!
//! [`HealthCheckers`] follows the configuration and the published balancers as the outlier
//! detectors do: checkers start, restart on a changed cluster, follow membership by diff
//! (a host that stays keeps its session and verdict) and stop with their cluster.

mod checkers;
mod grpc;
mod http;
mod session;
mod tcp;
mod transport;

pub use checkers::HealthCheckers;
pub use grpc::{HealthCheckRequest, HealthCheckResponse, SERVING};

use crate::config::Address;

/// What a session tells the balancing task: the host's health changed (`changed`), or it
/// passed while ejected by outlier detection, which may return it
/// (`successful_active_health_check_uneject_host`); either may need a balancer rebuild.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthEvent {
    pub cluster: String,
    pub address: Address,
    pub passed: bool,
    pub changed: bool,
}
