//! Active health checking, the pure half: what one probe result does to a host (Envoy's
//! `ActiveHealthCheckSession::handleSuccess` / `handleFailure`) and when the next probe is
//! due (`HealthCheckerImplBase::interval`). The probes themselves (sockets, HTTP, gRPC) live
//! in the `health` module, on the control runtime.
//!
//! A host's verdicts are written into its [`HealthFlags`](super::endpoint::HealthFlags)
//! (shared atomics in its `EndpointStats`), one bit per configured health check, so the
//! balancer sees a host failed by any of its checks as unhealthy. Envoy's semantics:
//! - a new host of a health-checked cluster starts failed; its first passing check makes it
//!   healthy whatever `healthy_threshold` says (Envoy's `first_check_`);
//! - a non-retriable "active" failure (an unexpected HTTP status, a gRPC answer other than
//!   SERVING) fails a healthy host at once; network failures, timeouts and
//!   `retriable_statuses` count towards `unhealthy_threshold`;
//! - after a passed check of a failed host, `healthy_threshold` passes in a row return it.

mod interval;
mod stats;

pub use interval::{initial_delay, next_interval};
pub use stats::HealthCheckStats;

use std::sync::Arc;

use super::endpoint::EndpointStats;

/// How a probe ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    /// The host answered as expected; `degraded` when it said so (`x-envoy-degraded`).
    Passed {
        degraded: bool,
    },
    Failed {
        kind: FailureKind,
        retriable: bool,
    },
}

/// Envoy's `HealthCheckFailureType`, as far as the verdict cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Connect failure, reset, closed connection.
    Network,
    /// No answer within `timeout`.
    Timeout,
    /// The host answered, and the answer says unhealthy.
    Active,
}

/// Envoy's `HealthTransition`: what a result did to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Unchanged,
    /// A threshold is being counted towards.
    ChangePending,
    /// The host changed between healthy and failed (or degraded and not): the balancer
    /// must be rebuilt.
    Changed,
}

/// One health check's view of one host: counts in a row and whether this is its first
/// result. The verdict itself lives in the host's flags (bit `check`).
#[derive(Debug)]
pub struct Session {
    check: usize,
    stats: Arc<EndpointStats>,
    counters: Arc<HealthCheckStats>,
    healthy_threshold: u32,
    unhealthy_threshold: u32,
    first_check: bool,
    num_healthy: u32,
    num_unhealthy: u32,
}

impl Session {
    /// Starts following the host as health check number `check` of its cluster; the host
    /// keeps whatever verdict its flags hold (new hosts start failed).
    pub fn new(
        check: usize,
        stats: Arc<EndpointStats>,
        counters: Arc<HealthCheckStats>,
        healthy_threshold: u32,
        unhealthy_threshold: u32,
    ) -> Self {
        if !stats.health().failed_by(check) {
            counters.healthy.inc();
        }
        if stats.health().degraded_by(check) {
            counters.degraded.inc();
        }
        Self {
            check,
            stats,
            counters,
            // A threshold of 0 would never be reached counting up from 1; Envoy's proto
            // requires the field, and 0 behaves as 1 here.
            healthy_threshold: healthy_threshold.max(1),
            unhealthy_threshold: unhealthy_threshold.max(1),
            first_check: true,
            num_healthy: 0,
            num_unhealthy: 0,
        }
    }

    /// Whether this check currently fails the host.
    pub fn failed(&self) -> bool {
        self.stats.health().failed_by(self.check)
    }

    /// Applies one probe result; counts `success` / `failure` / `network_failure`.
    pub fn on_result(&mut self, result: ProbeResult) -> Transition {
        let transition = match result {
            ProbeResult::Passed { degraded } => self.on_success(degraded),
            ProbeResult::Failed { kind, retriable } => self.on_failure(kind, retriable),
        };
        self.first_check = false;
        transition
    }

    fn on_success(&mut self, degraded: bool) -> Transition {
        let flags = self.stats.health();
        self.num_unhealthy = 0;
        let mut transition = Transition::Unchanged;
        if flags.failed_by(self.check) {
            self.num_healthy += 1;
            // The first result of a new session makes the host healthy at once: start-up
            // (and a new host) gets traffic sooner, as in Envoy.
            if self.first_check || self.num_healthy >= self.healthy_threshold {
                flags.set_timeout(self.check, false);
                flags.set_failed(self.check, false);
                self.counters.healthy.inc();
                transition = Transition::Changed;
            } else {
                transition = Transition::ChangePending;
            }
        }
        if degraded != flags.degraded_by(self.check) {
            flags.set_degraded(self.check, degraded);
            if degraded {
                self.counters.degraded.inc()
            } else {
                self.counters.degraded.dec()
            }
            if transition == Transition::Unchanged {
                transition = Transition::Changed;
            }
        }
        self.counters.success.inc();
        transition
    }

    fn on_failure(&mut self, kind: FailureKind, retriable: bool) -> Transition {
        let flags = self.stats.health();
        self.num_healthy = 0;
        let network = matches!(kind, FailureKind::Network | FailureKind::Timeout);
        let mut transition = Transition::Unchanged;
        if !flags.failed_by(self.check) {
            self.num_unhealthy += 1;
            if (!network && !retriable) || self.num_unhealthy >= self.unhealthy_threshold {
                flags.set_failed(self.check, true);
                self.counters.healthy.dec();
                transition = Transition::Changed;
            } else {
                transition = Transition::ChangePending;
            }
        }
        // A failed host shows whether it is failing by timeouts right now.
        flags.set_timeout(self.check, kind == FailureKind::Timeout && flags.failed_by(self.check));
        self.counters.failure.inc();
        if network {
            self.counters.network_failure.inc();
        }
        transition
    }
}

impl Drop for Session {
    /// The host leaves this check (removed, or the check was reconfigured): it no longer
    /// counts in the check's gauges.
    fn drop(&mut self) {
        if !self.stats.health().failed_by(self.check) {
            self.counters.healthy.dec();
        }
        if self.stats.health().degraded_by(self.check) {
            self.counters.degraded.dec();
        }
    }
}

#[cfg(test)]
mod tests;
