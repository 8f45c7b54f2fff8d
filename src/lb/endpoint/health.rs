//! A host's active health check verdicts: Envoy's `FAILED_ACTIVE_HC`,
//! `DEGRADED_ACTIVE_HC` and `ACTIVE_HC_TIMEOUT` flags, one bit per health check of the
//! cluster, so several checks can fail a host independently. Written by the host's check
//! sessions on the control runtime, read when the balancer is built and by `/clusters`.

use std::sync::atomic::{AtomicU32, Ordering};

/// Health checks per cluster that can hold a verdict (one bit each).
pub const MAX_CHECKS: usize = 32;

#[derive(Debug, Default)]
pub struct HealthFlags {
    failed: AtomicU32,
    degraded: AtomicU32,
    timeout: AtomicU32,
}

impl HealthFlags {
    /// Flags of a new host of a cluster with `checks` health checks: failed by each until
    /// its first check passes (Envoy initialises new hosts to unhealthy).
    pub fn failed_by_first(checks: usize) -> Self {
        let flags = Self::default();
        flags.failed.store(mask(checks), Ordering::Relaxed);
        flags
    }

    /// Whether any active health check fails the host (Envoy's `/failed_active_hc`).
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed) != 0
    }

    /// Whether any active health check finds the host degraded (`/degraded_active_hc`).
    pub fn degraded(&self) -> bool {
        self.degraded.load(Ordering::Relaxed) != 0
    }

    /// Whether a failed host's last check timed out (`/active_hc_timeout`).
    pub fn timed_out(&self) -> bool {
        self.timeout.load(Ordering::Relaxed) != 0
    }

    pub fn failed_by(&self, check: usize) -> bool {
        self.failed.load(Ordering::Relaxed) & bit(check) != 0
    }

    pub fn degraded_by(&self, check: usize) -> bool {
        self.degraded.load(Ordering::Relaxed) & bit(check) != 0
    }

    pub fn set_failed(&self, check: usize, on: bool) {
        set(&self.failed, check, on);
    }

    pub fn set_degraded(&self, check: usize, on: bool) {
        set(&self.degraded, check, on);
    }

    pub fn set_timeout(&self, check: usize, on: bool) {
        set(&self.timeout, check, on);
    }

    /// Forgets the verdicts of checks `checks` and above (the cluster has fewer checks
    /// now); true if the host's health changed.
    pub fn keep_checks(&self, checks: usize) -> bool {
        let keep = mask(checks);
        let before = (self.failed(), self.degraded());
        for flags in [&self.failed, &self.degraded, &self.timeout] {
            flags.fetch_and(keep, Ordering::Relaxed);
        }
        before != (self.failed(), self.degraded())
    }
}

fn bit(check: usize) -> u32 {
    u32::try_from(check).ok().and_then(|c| 1u32.checked_shl(c)).unwrap_or(0)
}

fn mask(checks: usize) -> u32 {
    if checks >= MAX_CHECKS { u32::MAX } else { bit(checks).wrapping_sub(1) }
}

fn set(flags: &AtomicU32, check: usize, on: bool) {
    if on {
        flags.fetch_or(bit(check), Ordering::Relaxed);
    } else {
        flags.fetch_and(!bit(check), Ordering::Relaxed);
    }
}
