//! `/balancing`: a live page of how each cluster balances — every endpoint's share of the
//! picks, in-flight requests, latency estimate, error rate, ORCA utilization and ejection
//! over the last minutes — and `/balancing.json`, the counters it polls every second.
//!
//! The JSON holds cumulative counters and the server's monotonic time, for the clusters that
//! serve requests (or that the page's filter names), busiest first; the page (one file,
//! `balancing.html`, nothing loaded from elsewhere) keeps the history and turns differences
//! between polls into shares and rates, so the proxy keeps no history for it.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use serde_json::{Value, json};

use super::endpoints::EndpointView;
use crate::config::cluster::LbPolicy;
use crate::config::endpoint::HealthStatus;
use crate::lb::{Balancers, ClusterLb};
use crate::store::Snapshot;

/// The page, served as it is.
pub const PAGE: &str = include_str!("balancing.html");

/// How many clusters one answer holds, the busiest first: the page shows as many, and with
/// Istio's thousands of clusters an answer with every endpoint of every cluster, polled each
/// second, would be megabytes of work for the control thread.
pub const MAX_CLUSTERS: usize = 20;

/// The endpoints' counters at `now` of the clusters worth showing: those whose name contains
/// `wanted` (the page's filter, in any case) when given, else every cluster that has served
/// requests; the [`MAX_CLUSTERS`] busiest of them, in name order.
pub fn json(snapshot: &Snapshot, balancers: &Balancers, wanted: Option<&str>, now: Instant) -> Value {
    let all = balancers.all();
    let wanted = wanted.map(str::to_lowercase);
    let mut chosen: Vec<(u64, &String, &Arc<ClusterLb>)> = all
        .iter()
        .filter(|(name, _)| wanted.as_deref().is_none_or(|w| name.to_lowercase().contains(w)))
        .map(|(name, lb)| (served(lb), name, lb))
        .filter(|(requests, _, _)| wanted.is_some() || *requests > 0)
        .collect();
    chosen.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    chosen.truncate(MAX_CLUSTERS);
    chosen.sort_by(|a, b| a.1.cmp(b.1));
    let clusters: Vec<Value> = chosen.into_iter().map(|(_, name, lb)| cluster(snapshot, name, lb, now)).collect();
    json!({ "time_ms": since_start(now), "clusters": clusters })
}

/// Requests the cluster's endpoints have answered or are answering.
fn served(lb: &ClusterLb) -> u64 {
    lb.hosts().iter().map(|h| h.stats.successes() + h.stats.errors() + u64::from(h.stats.in_flight())).sum()
}

fn cluster(snapshot: &Snapshot, name: &str, lb: &ClusterLb, now: Instant) -> Value {
    let config = snapshot.clusters.get(name);
    let health_checked = config.is_some_and(|c| !c.resource.health_checks.is_empty());
    // What runs, which the proxy-wide choice may have put in place of what was received.
    let policy = policy_name(lb.policy());
    let endpoints: Vec<Value> = lb
        .hosts()
        .iter()
        .map(|host| {
            let view = EndpointView::of(host, now);
            let health = match host.coarse_health(now, health_checked) {
                HealthStatus::Healthy => "healthy",
                HealthStatus::Degraded => "degraded",
                HealthStatus::Unhealthy => "unhealthy",
            };
            json!({
                "address": host.address().to_string(),
                "weight": host.weight(),
                "reported_weight": view.reported_weight,
                "requests": view.successes + view.errors,
                "errors": view.errors,
                "in_flight": view.in_flight,
                "latency_ms": view.ewma_latency.map(|d| d.as_secs_f64() * 1e3),
                "utilization": view.utilization,
                "ejected": view.ejected,
                "health": health,
            })
        })
        .collect();
    json!({ "name": name, "policy": policy, "endpoints": endpoints })
}

/// Milliseconds since the first call: a clock that only moves forward, for the page's rates.
fn since_start(now: Instant) -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(|| now);
    u64::try_from(now.saturating_duration_since(start).as_millis()).unwrap_or(u64::MAX)
}

/// The policy as Envoy's `lb_policy` names it (Outrider's own in capitals too).
pub fn policy_name(policy: Option<&LbPolicy>) -> &'static str {
    let Some(policy) = policy else { return "CLUSTER_PROVIDED" };
    match policy {
        LbPolicy::RoundRobin(_) => "ROUND_ROBIN",
        LbPolicy::LeastRequest(_) => "LEAST_REQUEST",
        LbPolicy::Random => "RANDOM",
        LbPolicy::RingHash(_) => "RING_HASH",
        LbPolicy::Maglev(_) => "MAGLEV",
        LbPolicy::ClientSideWeightedRoundRobin(_) => "CLIENT_SIDE_WEIGHTED_ROUND_ROBIN",
        LbPolicy::PeakEwma(_) => "PEAK_EWMA",
        LbPolicy::Adaptive(_) => "ADAPTIVE",
    }
}
