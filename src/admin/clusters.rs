//! `/clusters`: every served cluster and its hosts, in Envoy's text or JSON form.

use std::fmt::Write;

use serde_json::{Value, json};

use crate::config::Address;
use crate::config::endpoint::HealthStatus;
use crate::store::Snapshot;

pub fn text(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    for (name, assignment) in &snapshot.endpoints {
        let _ = writeln!(out, "{name}::observability_name::{name}");
        for locality in &assignment.resource.localities {
            for endpoint in &locality.endpoints {
                let host = format!("{name}::{}", endpoint.address);
                let _ = writeln!(out, "{host}::health_flags::{}", health(endpoint.health));
                let _ = writeln!(out, "{host}::weight::{}", endpoint.weight);
                let _ = writeln!(out, "{host}::region::{}", locality.locality.region);
                let _ = writeln!(out, "{host}::zone::{}", locality.locality.zone);
                let _ = writeln!(out, "{host}::sub_zone::{}", locality.locality.sub_zone);
                let _ = writeln!(out, "{host}::priority::{}", locality.priority);
            }
        }
    }
    out
}

pub fn json(snapshot: &Snapshot) -> Value {
    let statuses: Vec<Value> = snapshot
        .endpoints
        .iter()
        .map(|(name, assignment)| {
            let hosts: Vec<Value> = assignment
                .resource
                .localities
                .iter()
                .flat_map(|l| l.endpoints.iter().map(move |e| (l, e)))
                .map(|(locality, endpoint)| {
                    json!({
                        "address": address(&endpoint.address),
                        "health_status": { "eds_health_status": eds_health(endpoint.health) },
                        "weight": endpoint.weight,
                        "locality": {
                            "region": locality.locality.region,
                            "zone": locality.locality.zone,
                            "sub_zone": locality.locality.sub_zone,
                        },
                        "priority": locality.priority,
                    })
                })
                .collect();
            json!({ "name": name, "host_statuses": hosts })
        })
        .collect();
    json!({ "cluster_statuses": statuses })
}

fn address(address: &Address) -> Value {
    match address {
        Address::Socket(addr) => {
            json!({ "socket_address": { "address": addr.ip().to_string(), "port_value": addr.port() } })
        }
        Address::Dns { host, port } => json!({ "socket_address": { "address": host, "port_value": port } }),
        Address::Pipe(path) => json!({ "pipe": { "path": path.display().to_string() } }),
    }
}

fn health(status: HealthStatus) -> &'static str {
    match status {
        HealthStatus::Healthy => "healthy",
        HealthStatus::Degraded => "/degraded_eds_health",
        HealthStatus::Unhealthy => "/failed_eds_health",
    }
}

fn eds_health(status: HealthStatus) -> &'static str {
    match status {
        HealthStatus::Healthy => "HEALTHY",
        HealthStatus::Degraded => "DEGRADED",
        HealthStatus::Unhealthy => "UNHEALTHY",
    }
}
