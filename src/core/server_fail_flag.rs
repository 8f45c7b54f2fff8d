//! The server's health-check state, as Envoy keeps it: `POST /healthcheck/fail` sets it,
//! `POST /healthcheck/ok` clears it. While it is set the HTTP `health_check` filter answers
//! 503 and the server reports itself DRAINING (`/ready`, `server.state`), so a load
//! balancer takes the proxy out of rotation without the proxy stopping anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Shared by the admin server and every worker.
#[derive(Debug, Clone, Default)]
pub struct HealthCheckFailed(Arc<AtomicBool>);

impl HealthCheckFailed {
    pub fn set(&self, failed: bool) {
        self.0.store(failed, Ordering::Relaxed);
    }

    pub fn is_failed(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
