//! `/clusters`: every served cluster and its hosts, in Envoy's text or JSON form, with
//! each host's live state (Envoy's `rq_active`, `rq_success`, `rq_error`, `rq_total`,
//! `health_flags` with `/failed_active_hc`, `/failed_outlier_check`, …) and what only Outrider knows (EWMA latency, the last ORCA
//! report, the utilization and weight taken from it).

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::endpoints::EndpointView;
use crate::config::Address;
use crate::config::endpoint::HealthStatus;
use crate::lb::{Balancers, Host};
use crate::store::Snapshot;

/// The live hosts of `cluster` by address.
fn live_hosts(balancers: &Balancers, cluster: &str) -> HashMap<Address, Arc<Host>> {
    balancers
        .get(cluster)
        .map(|lb| lb.hosts().iter().map(|h| (h.address().clone(), h.clone())).collect())
        .unwrap_or_default()
}

pub fn text(snapshot: &Snapshot, balancers: &Balancers) -> String {
    let now = Instant::now();
    let mut out = String::new();
    for (name, assignment) in &snapshot.endpoints {
        let _ = writeln!(out, "{name}::observability_name::{name}");
        if let Some(lb) = balancers.get(name) {
            // Outrider's own line: the policy that runs (see `/balancing`).
            let _ = writeln!(out, "{name}::lb_policy::{}", super::balancing::policy_name(lb.policy()));
        }
        let live = live_hosts(balancers, name);
        let checked = health_checked(snapshot, name);
        for locality in &assignment.resource.localities {
            for endpoint in &locality.endpoints {
                let host = format!("{name}::{}", endpoint.address);
                let view = live.get(&endpoint.address).map(|h| EndpointView::of(h, now));
                if let Some(view) = &view {
                    let _ = writeln!(out, "{host}::rq_active::{}", view.in_flight);
                    let _ = writeln!(out, "{host}::rq_success::{}", view.successes);
                    let _ = writeln!(out, "{host}::rq_error::{}", view.errors);
                    let _ = writeln!(out, "{host}::rq_total::{}", view.successes + view.errors);
                }
                let flags = Flags::of(endpoint.health, view.as_ref(), checked && endpoint.actively_checked());
                let _ = writeln!(out, "{host}::health_flags::{}", flags.text());
                let _ = writeln!(out, "{host}::weight::{}", endpoint.weight);
                let _ = writeln!(out, "{host}::region::{}", locality.locality.region);
                let _ = writeln!(out, "{host}::zone::{}", locality.locality.zone);
                let _ = writeln!(out, "{host}::sub_zone::{}", locality.locality.sub_zone);
                let _ = writeln!(out, "{host}::priority::{}", locality.priority);
                if let Some(view) = &view {
                    let ewma = view.ewma_latency.map_or(String::from("-"), |d| format!("{:.3}", d.as_secs_f64() * 1e3));
                    let _ = writeln!(out, "{host}::ewma_latency_ms::{ewma}");
                    let utilization = view.utilization.map_or(String::from("-"), |u| u.to_string());
                    let _ = writeln!(out, "{host}::utilization::{utilization}");
                    let _ = writeln!(out, "{host}::reported_weight::{}", view.reported_weight);
                    if let Some((report, age)) = &view.last_report {
                        let _ = writeln!(out, "{host}::last_orca_report::{}", report_json(report, age.as_secs_f64()));
                    }
                }
            }
        }
    }
    out
}

pub fn json(snapshot: &Snapshot, balancers: &Balancers) -> Value {
    let now = Instant::now();
    let statuses: Vec<Value> = snapshot
        .endpoints
        .iter()
        .map(|(name, assignment)| {
            let live = live_hosts(balancers, name);
            let checked = health_checked(snapshot, name);
            let hosts: Vec<Value> = assignment
                .resource
                .localities
                .iter()
                .flat_map(|l| l.endpoints.iter().map(move |e| (l, e)))
                .map(|(locality, endpoint)| {
                    let view = live.get(&endpoint.address).map(|h| EndpointView::of(h, now));
                    let flags = Flags::of(endpoint.health, view.as_ref(), checked && endpoint.actively_checked());
                    let ejected = flags.failed_outlier_check;
                    let mut host = json!({
                        "address": address(&endpoint.address),
                        "health_status": {
                            "eds_health_status": eds_health(endpoint.health),
                            "failed_outlier_check": ejected,
                            "failed_active_health_check": flags.failed_active_hc,
                            "failed_active_degraded_check": flags.degraded_active_hc,
                            "active_hc_timeout": flags.active_hc_timeout,
                        },
                        "weight": endpoint.weight,
                        "locality": {
                            "region": locality.locality.region,
                            "zone": locality.locality.zone,
                            "sub_zone": locality.locality.sub_zone,
                        },
                        "priority": locality.priority,
                    });
                    if let Some(view) = view {
                        host["stats"] = json!([
                            { "name": "rq_active", "type": "GAUGE", "value": view.in_flight },
                            { "name": "rq_success", "value": view.successes },
                            { "name": "rq_error", "value": view.errors },
                            { "name": "rq_total", "value": view.successes + view.errors },
                        ]);
                        host["outrider"] = json!({
                            "in_flight": view.in_flight,
                            "ewma_latency_ms": view.ewma_latency.map(|d| d.as_secs_f64() * 1e3),
                            "utilization": view.utilization,
                            "reported_weight": view.reported_weight,
                            "ejected": ejected,
                            "last_orca_report": view.last_report.as_ref().map(|(r, age)| report_json(r, age.as_secs_f64())),
                        });
                    }
                    host
                })
                .collect();
            let mut status = json!({ "name": name, "host_statuses": hosts });
            if let Some(lb) = balancers.get(name) {
                status["outrider"] = json!({ "lb_policy": super::balancing::policy_name(lb.policy()) });
            }
            status
        })
        .collect();
    json!({ "cluster_statuses": statuses })
}

fn report_json(report: &crate::lb::load::LoadReport, age_seconds: f64) -> Value {
    json!({
        "cpu_utilization": report.cpu_utilization,
        "mem_utilization": report.mem_utilization,
        "application_utilization": report.application_utilization,
        "rps_fractional": report.rps_fractional,
        "eps": report.eps,
        "named_metrics": report.named_metrics,
        "utilization": report.utilization,
        "age_seconds": age_seconds,
    })
}

pub(super) fn address(address: &Address) -> Value {
    match address {
        Address::Socket(addr) => {
            json!({ "socket_address": { "address": addr.ip().to_string(), "port_value": addr.port() } })
        }
        Address::Dns { host, port } => json!({ "socket_address": { "address": host, "port_value": port } }),
        Address::Pipe(path) => json!({ "pipe": { "path": path.display().to_string() } }),
        Address::Internal { server_listener_name, endpoint_id } => json!({
            "envoy_internal_address": { "server_listener_name": server_listener_name, "endpoint_id": endpoint_id }
        }),
    }
}

/// Whether `cluster` runs active health checks (its hosts' check flags mean something).
fn health_checked(snapshot: &Snapshot, cluster: &str) -> bool {
    snapshot.clusters.get(cluster).is_some_and(|c| !c.resource.health_checks.is_empty())
}

/// A host's health flags, as Envoy names them.
#[derive(Debug, Default)]
struct Flags {
    failed_active_hc: bool,
    failed_outlier_check: bool,
    eds: Option<HealthStatus>,
    degraded_active_hc: bool,
    active_hc_timeout: bool,
}

impl Flags {
    fn of(eds: HealthStatus, view: Option<&EndpointView>, checked: bool) -> Self {
        let active = |flag: fn(&EndpointView) -> bool| checked && view.is_some_and(flag);
        Self {
            failed_active_hc: active(|v| v.failed_active_hc),
            failed_outlier_check: view.is_some_and(|v| v.ejected),
            eds: Some(eds),
            degraded_active_hc: active(|v| v.degraded_active_hc),
            active_hc_timeout: active(|v| v.active_hc_timeout),
        }
    }

    /// Envoy's `health_flags`: `healthy`, or the reasons a host is not, joined in Envoy's
    /// order.
    fn text(&self) -> String {
        let flags = [
            (self.failed_active_hc, "/failed_active_hc"),
            (self.failed_outlier_check, "/failed_outlier_check"),
            (self.eds == Some(HealthStatus::Unhealthy), "/failed_eds_health"),
            (self.degraded_active_hc, "/degraded_active_hc"),
            (self.eds == Some(HealthStatus::Degraded), "/degraded_eds_health"),
            (self.active_hc_timeout, "/active_hc_timeout"),
        ];
        let joined: String = flags.iter().filter(|(on, _)| *on).map(|(_, name)| *name).collect();
        if joined.is_empty() { "healthy".to_owned() } else { joined }
    }
}

fn eds_health(status: HealthStatus) -> &'static str {
    match status {
        HealthStatus::Healthy => "HEALTHY",
        HealthStatus::Degraded => "DEGRADED",
        HealthStatus::Unhealthy => "UNHEALTHY",
    }
}
