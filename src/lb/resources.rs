//! Circuit breakers: what one cluster has outstanding, per routing priority, shared by
//! every worker (atomics, no lock), and the overflows counted when a limit refused work.
//!
//! A [`Slot`] holds one unit of a resource until it drops, so no path can leak it. The
//! limits are read from the cluster's configuration at each acquisition, so a changed
//! limit applies at once; the counts survive balancer rebuilds (they live in the
//! cluster's stats registry).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::config::cluster::{CircuitBreakers, RetryBudget};

/// Routing priority (Envoy's `RoutingPriority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    Default,
    High,
}

/// The resources one cluster has in use, and its overflow counts.
#[derive(Debug, Default)]
pub struct ClusterResources {
    default: PriorityResources,
    high: PriorityResources,
    /// `upstream_rq_pending_overflow`: requests refused by `max_requests` or
    /// `max_pending_requests` (Envoy counts both here).
    pub rq_pending_overflow: AtomicU64,
    /// `upstream_rq_retry_overflow`: retries not made because of `max_retries` or the
    /// retry budget.
    pub rq_retry_overflow: AtomicU64,
}

#[derive(Debug, Default)]
struct PriorityResources {
    requests: AtomicU32,
    retries: AtomicU32,
}

/// Which counter a [`Slot`] holds.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Request(Priority),
    Retry(Priority),
}

/// One unit of a resource, released on drop.
#[derive(Debug)]
pub struct Slot {
    resources: Arc<ClusterResources>,
    kind: Kind,
}

impl ClusterResources {
    fn of(&self, priority: Priority) -> &PriorityResources {
        match priority {
            Priority::Default => &self.default,
            Priority::High => &self.high,
        }
    }

    fn counter(&self, kind: Kind) -> &AtomicU32 {
        match kind {
            Kind::Request(p) => &self.of(p).requests,
            Kind::Retry(p) => &self.of(p).retries,
        }
    }

    /// A request slot under `max_requests`; `None` (and one overflow counted) when full.
    pub fn try_request(self: &Arc<Self>, limits: &CircuitBreakers, priority: Priority) -> Option<Slot> {
        let max = thresholds(limits, priority).max_requests;
        let slot = self.try_acquire(Kind::Request(priority), max);
        if slot.is_none() {
            self.rq_pending_overflow.fetch_add(1, Ordering::Relaxed);
        }
        slot
    }

    /// A retry slot under `max_retries`, or under the retry budget when one is set:
    /// `budget_percent` of the active requests, never below `min_retry_concurrency`.
    pub fn try_retry(self: &Arc<Self>, limits: &CircuitBreakers, priority: Priority) -> Option<Slot> {
        let thresholds = thresholds(limits, priority);
        let max = match &thresholds.retry_budget {
            Some(budget) => budget_limit(budget, self.active_requests(priority)),
            None => thresholds.max_retries,
        };
        let slot = self.try_acquire(Kind::Retry(priority), max);
        if slot.is_none() {
            self.rq_retry_overflow.fetch_add(1, Ordering::Relaxed);
        }
        slot
    }

    pub fn active_requests(&self, priority: Priority) -> u32 {
        self.of(priority).requests.load(Ordering::Relaxed)
    }

    pub fn active_retries(&self, priority: Priority) -> u32 {
        self.of(priority).retries.load(Ordering::Relaxed)
    }

    fn try_acquire(self: &Arc<Self>, kind: Kind, max: u32) -> Option<Slot> {
        let counter = self.counter(kind);
        counter.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| (n < max).then_some(n + 1)).ok()?;
        Some(Slot { resources: self.clone(), kind })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.resources.counter(self.kind).fetch_sub(1, Ordering::AcqRel);
    }
}

fn thresholds(limits: &CircuitBreakers, priority: Priority) -> &crate::config::cluster::Thresholds {
    match priority {
        Priority::Default => &limits.default,
        Priority::High => &limits.high,
    }
}

/// Envoy's retry budget: `max(min_retry_concurrency, budget_percent % × active requests)`.
fn budget_limit(budget: &RetryBudget, active_requests: u32) -> u32 {
    let share = (budget.budget_percent / 100.0 * f64::from(active_requests)) as u32;
    share.max(budget.min_retry_concurrency)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn requests_overflow_at_max_requests_and_slots_release_on_drop() {
        let resources = Arc::new(ClusterResources::default());
        let mut limits = CircuitBreakers::default();
        limits.default.max_requests = 1;
        let first = resources.try_request(&limits, Priority::Default).unwrap();
        assert!(resources.try_request(&limits, Priority::Default).is_none());
        assert_eq!(resources.rq_pending_overflow.load(Ordering::Relaxed), 1);
        assert!(resources.try_request(&limits, Priority::High).is_some(), "priorities are apart");
        drop(first);
        assert!(resources.try_request(&limits, Priority::Default).is_some());
    }

    #[test]
    fn the_retry_budget_replaces_max_retries() {
        let resources = Arc::new(ClusterResources::default());
        let mut limits = CircuitBreakers::default();
        limits.default.max_retries = 0;
        assert!(resources.try_retry(&limits, Priority::Default).is_none());
        limits.default.retry_budget =
            Some(RetryBudget { budget_percent: 20.0, min_retry_concurrency: 1, budget_interval: None });
        let requests: Vec<_> = (0..10).map(|_| resources.try_request(&limits, Priority::Default).unwrap()).collect();
        // 20 % of 10 active requests: two retries.
        let retries: Vec<_> = (0..3).filter_map(|_| resources.try_retry(&limits, Priority::Default)).collect();
        assert_eq!(retries.len(), 2);
        drop(requests);
        assert_eq!(budget_limit(limits.default.retry_budget.as_ref().unwrap(), 0), 1, "the floor");
        assert_eq!(resources.rq_retry_overflow.load(Ordering::Relaxed), 2);
    }
}
