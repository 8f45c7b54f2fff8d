//! A cluster's stats, with Envoy's names (`cluster.<name>.…`, Prometheus label
//! `envoy_cluster_name`). Resolved once when the cluster is first built and kept across
//! rebuilds; every host of the cluster carries the handle, so the request path updates
//! them without a look-up. The response stats (`upstream_rq_<class>xx`,
//! `upstream_rq_<code>`, `upstream_rq_time`) exist from the cluster's first response on,
//! as in Envoy.

use std::sync::Arc;

use super::code_stats::CodeCounters;
use super::connection::SslStats;
use super::lazy::{LazyCounter, LazyHistogram};
use super::metrics::{Counter, Gauge, Histogram};
use super::stats::{Scope, Stats};

/// `cluster.<name>.*`. `Default` gives cells registered nowhere (for tests and tools).
#[derive(Debug, Clone, Default)]
pub struct ClusterStats {
    /// Upstream requests started, retries included.
    pub upstream_rq_total: Counter,
    /// Upstream requests that ended (with a response, an error or a timeout).
    pub upstream_rq_completed: Counter,
    pub upstream_rq_active: Gauge,
    /// `upstream_rq_1xx` … `upstream_rq_5xx`: by response class; a reset or connect
    /// failure counts as 503 and a timeout as 504, as Envoy charges them.
    upstream_rq_class: [LazyCounter; 5],
    /// `upstream_rq_<code>`, created per code on its first response.
    upstream_rq_code: CodeCounters,
    /// Milliseconds from sending the request to the end of the response.
    pub upstream_rq_time: LazyHistogram,
    pub upstream_rq_timeout: Counter,
    pub upstream_rq_per_try_timeout: Counter,
    pub upstream_rq_retry: Counter,
    pub upstream_rq_retry_limit_exceeded: Counter,
    /// Retries or shadows given up: a request body too large to keep for a shadow, or too
    /// many shadows in flight.
    pub retry_or_shadow_abandoned: Counter,
    /// Circuit breakers: requests refused by `max_pending_requests` or `max_requests`,
    /// retries refused by `max_retries` or the budget, connections `max_connections` held back.
    pub upstream_rq_pending_overflow: Counter,
    pub upstream_rq_retry_overflow: Counter,
    pub upstream_cx_overflow: Counter,
    pub upstream_cx_total: Counter,
    pub upstream_cx_active: Gauge,
    pub upstream_cx_destroy: Counter,
    /// Milliseconds from a connection's establishment to its end.
    pub upstream_cx_length_ms: Histogram,
    /// Bytes read from and written to upstream connections (after TLS, as Envoy counts).
    pub upstream_cx_rx_bytes_total: Counter,
    pub upstream_cx_tx_bytes_total: Counter,
    /// `cluster.<name>.ssl.*`, for TLS origination.
    pub ssl: SslStats,
    pub upstream_cx_connect_fail: Counter,
    pub upstream_cx_connect_timeout: Counter,
    /// Requests that found no healthy host.
    pub upstream_cx_none_healthy: Counter,
    /// Picks made while a priority level was in panic.
    pub lb_healthy_panic: Counter,
    pub membership_healthy: Gauge,
    pub membership_degraded: Gauge,
    pub membership_total: Gauge,
    pub membership_change: Counter,
    /// EDS updates accepted for this cluster.
    pub update_success: Counter,
}

impl ClusterStats {
    pub fn scope(cluster: &str) -> Scope {
        Scope::envoy().child("cluster").tagged("envoy_cluster_name", cluster)
    }

    pub fn register(stats: &Arc<Stats>, cluster: &str) -> Self {
        let scope = Self::scope(cluster);
        let counter = |name: &str| stats.counter(scope.name(name));
        let gauge = |name: &str| stats.gauge(scope.name(name));
        let class = |n: usize| {
            let class = (n + 1).to_string();
            let flat = format!("upstream_rq_{class}xx");
            LazyCounter::counter(stats, scope.name_tagged(&flat, "upstream_rq_xx", "envoy_response_code_class", &class))
        };
        Self {
            upstream_rq_total: counter("upstream_rq_total"),
            upstream_rq_completed: counter("upstream_rq_completed"),
            upstream_rq_active: gauge("upstream_rq_active"),
            upstream_rq_class: std::array::from_fn(class),
            upstream_rq_code: CodeCounters::new(stats, scope.clone(), "upstream_rq"),
            upstream_rq_time: LazyHistogram::histogram(stats, scope.name("upstream_rq_time")),
            upstream_rq_timeout: counter("upstream_rq_timeout"),
            upstream_rq_per_try_timeout: counter("upstream_rq_per_try_timeout"),
            upstream_rq_retry: counter("upstream_rq_retry"),
            upstream_rq_retry_limit_exceeded: counter("upstream_rq_retry_limit_exceeded"),
            retry_or_shadow_abandoned: counter("retry_or_shadow_abandoned"),
            upstream_rq_pending_overflow: counter("upstream_rq_pending_overflow"),
            upstream_rq_retry_overflow: counter("upstream_rq_retry_overflow"),
            upstream_cx_overflow: counter("upstream_cx_overflow"),
            upstream_cx_total: counter("upstream_cx_total"),
            upstream_cx_active: gauge("upstream_cx_active"),
            upstream_cx_destroy: counter("upstream_cx_destroy"),
            upstream_cx_length_ms: stats.histogram(scope.name("upstream_cx_length_ms")),
            upstream_cx_rx_bytes_total: counter("upstream_cx_rx_bytes_total"),
            upstream_cx_tx_bytes_total: counter("upstream_cx_tx_bytes_total"),
            ssl: SslStats::register(stats, &scope),
            upstream_cx_connect_fail: counter("upstream_cx_connect_fail"),
            upstream_cx_connect_timeout: counter("upstream_cx_connect_timeout"),
            upstream_cx_none_healthy: counter("upstream_cx_none_healthy"),
            lb_healthy_panic: counter("lb_healthy_panic"),
            membership_healthy: gauge("membership_healthy"),
            membership_degraded: gauge("membership_degraded"),
            membership_total: gauge("membership_total"),
            membership_change: counter("membership_change"),
            update_success: counter("update_success"),
        }
    }

    /// Counts a response (or a local 503/504 standing for one) by its class and code.
    pub fn charge(&self, status: u16) {
        self.upstream_rq_code.charge(status);
        if let Some(counter) = (status / 100).checked_sub(1).and_then(|i| self.upstream_rq_class.get(usize::from(i))) {
            counter.inc();
        }
    }

    /// `upstream_rq_<code>` so far.
    pub fn upstream_rq_code(&self, code: u16) -> u64 {
        self.upstream_rq_code.get(code)
    }

    pub fn upstream_rq_class(&self, class: u16) -> u64 {
        class.checked_sub(1).and_then(|i| self.upstream_rq_class.get(usize::from(i))).map_or(0, LazyCounter::get)
    }
}
