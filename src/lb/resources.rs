//! Circuit breakers: what one cluster has outstanding, per routing priority, shared by
//! every worker (atomics, no lock), and the overflows counted when a limit refused work.
//!
//! A [`Slot`] holds one unit of a resource until it drops, so no path can leak it. The
//! limits are read from the cluster's configuration at each acquisition, so a changed
//! limit applies at once; the counts survive balancer rebuilds (they live in the
//! cluster's stats registry).
//!
//! Connections and pending requests follow Envoy's connection pools: a request that finds
//! no ready connection waits as *pending* (bounded by `max_pending_requests`) while a
//! connection is opened for it or one is handed back; a new connection needs room under
//! the cluster's `max_connections` and the host's `per_host_thresholds` `max_connections`,
//! except that a pool with no connection at all to its host always gets one, so pending
//! requests are never stranded (the count may then exceed the limit, as Envoy's does).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::endpoint::EndpointStats;
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
    /// `upstream_cx_overflow`: times a pool wanted a connection that `max_connections`
    /// (the cluster's or the host's) did not allow.
    pub cx_overflow: AtomicU64,
}

#[derive(Debug, Default)]
struct PriorityResources {
    requests: AtomicU32,
    retries: AtomicU32,
    connections: AtomicU32,
    pending: AtomicU32,
}

/// Which counter a [`Slot`] holds.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Request(Priority),
    Retry(Priority),
    Connection(Priority),
    Pending(Priority),
}

/// One upstream connection, counted against the cluster's and its host's
/// `max_connections` until it drops.
#[derive(Debug)]
pub struct ConnectionSlot {
    _cluster: Slot,
    host: Arc<EndpointStats>,
    over_limit: bool,
}

impl ConnectionSlot {
    /// Whether it was granted past the limit (to a pool with no connection to its host).
    pub fn over_limit(&self) -> bool {
        self.over_limit
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.host.connection_count().fetch_sub(1, Ordering::AcqRel);
    }
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
            Kind::Connection(p) => &self.of(p).connections,
            Kind::Pending(p) => &self.of(p).pending,
        }
    }

    /// A pending-request slot under `max_pending_requests`, held while a request waits for
    /// a connection; `None` (and one `upstream_rq_pending_overflow`) when full.
    pub fn try_pending(self: &Arc<Self>, limits: &CircuitBreakers, priority: Priority) -> Option<Slot> {
        let max = thresholds(limits, priority).max_pending_requests;
        let slot = self.try_acquire(Kind::Pending(priority), max);
        if slot.is_none() {
            self.rq_pending_overflow.fetch_add(1, Ordering::Relaxed);
        }
        slot
    }

    /// Room for one more connection to `host`, under the cluster's `max_connections` and
    /// the host's per-host limit. Without room, one `upstream_cx_overflow` is counted and
    /// `None` returned, unless `pool_is_empty` (the asking pool has no connection to the
    /// host): that pool gets its connection anyway, over the limit, as in Envoy.
    pub fn try_connection(
        self: &Arc<Self>,
        limits: &CircuitBreakers,
        priority: Priority,
        host: &Arc<EndpointStats>,
        pool_is_empty: bool,
    ) -> Option<ConnectionSlot> {
        let kind = Kind::Connection(priority);
        let max = thresholds(limits, priority).max_connections;
        let per_host = limits.per_host_max_connections.unwrap_or(u32::MAX);
        let host_count = host.connection_count();
        let host_room =
            host_count.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| (n < per_host).then_some(n + 1)).is_ok();
        let cluster = if host_room { self.try_acquire(kind, max) } else { None };
        if let Some(cluster) = cluster {
            return Some(ConnectionSlot { _cluster: cluster, host: host.clone(), over_limit: false });
        }
        if host_room {
            host_count.fetch_sub(1, Ordering::AcqRel);
        }
        self.cx_overflow.fetch_add(1, Ordering::Relaxed);
        if !pool_is_empty {
            return None;
        }
        self.counter(kind).fetch_add(1, Ordering::AcqRel);
        host_count.fetch_add(1, Ordering::AcqRel);
        Some(ConnectionSlot { _cluster: Slot { resources: self.clone(), kind }, host: host.clone(), over_limit: true })
    }

    pub fn active_connections(&self, priority: Priority) -> u32 {
        self.of(priority).connections.load(Ordering::Relaxed)
    }

    pub fn pending_requests(&self, priority: Priority) -> u32 {
        self.of(priority).pending.load(Ordering::Relaxed)
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
mod tests;
