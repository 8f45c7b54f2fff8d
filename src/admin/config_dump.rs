//! `/config_dump`, shaped like Envoy's `envoy.admin.v3.ConfigDump`: bootstrap, clusters,
//! listeners, routes, endpoints and secrets, with versions and last-updated times.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::config::ResourceType;
use crate::store::{Snapshot, Versioned};

const DUMP: &str = "type.googleapis.com/envoy.admin.v3.";

pub fn dump(snapshot: &Snapshot, bootstrap: &Value) -> Value {
    // Decode Envoy's descriptors once for the whole dump, not once per resource.
    let _descriptors = crate::pb::json::pool();
    json!({ "configs": [
        json!({ "@type": format!("{DUMP}BootstrapConfigDump"), "bootstrap": bootstrap }),
        clusters(snapshot, bootstrap),
        listeners(snapshot, bootstrap),
        routes(snapshot),
        endpoints(snapshot),
        secrets(snapshot),
    ]})
}

fn clusters(snapshot: &Snapshot, bootstrap: &Value) -> Value {
    let type_url = ResourceType::Cluster.type_url();
    let statics = static_items(bootstrap, "clusters");
    let mut static_clusters = Vec::new();
    let mut dynamic_active = Vec::new();
    for (name, cluster) in &snapshot.clusters {
        match statics.iter().find(|c| c["name"] == name.as_str()) {
            Some(c) => static_clusters.push(json!({ "cluster": c, "last_updated": time(cluster.last_updated) })),
            None => dynamic_active.push(dynamic_entry("cluster", type_url, cluster)),
        }
    }
    let warming: Vec<Value> =
        snapshot.warming_clusters.values().map(|c| dynamic_entry("cluster", type_url, c)).collect();
    json!({
        "@type": format!("{DUMP}ClustersConfigDump"),
        "version_info": version(snapshot, ResourceType::Cluster),
        "static_clusters": static_clusters,
        "dynamic_active_clusters": dynamic_active,
        "dynamic_warming_clusters": warming,
    })
}

fn listeners(snapshot: &Snapshot, bootstrap: &Value) -> Value {
    let type_url = ResourceType::Listener.type_url();
    let statics = static_items(bootstrap, "listeners");
    let mut static_listeners = Vec::new();
    let mut dynamic = std::collections::BTreeMap::<&str, Value>::new();
    for (name, listener) in &snapshot.listeners {
        match statics.iter().find(|l| l["name"] == name.as_str()) {
            Some(l) => static_listeners.push(json!({ "listener": l, "last_updated": time(listener.last_updated) })),
            None => {
                dynamic
                    .insert(name, json!({ "name": name, "active_state": state_entry(type_url, listener, "listener") }));
            }
        }
    }
    for (name, listener) in &snapshot.warming_listeners {
        let entry = dynamic.entry(name).or_insert_with(|| json!({ "name": name }));
        entry["warming_state"] = state_entry(type_url, listener, "listener");
    }
    json!({
        "@type": format!("{DUMP}ListenersConfigDump"),
        "version_info": version(snapshot, ResourceType::Listener),
        "static_listeners": static_listeners,
        "dynamic_listeners": dynamic.into_values().collect::<Vec<_>>(),
    })
}

fn routes(snapshot: &Snapshot) -> Value {
    let type_url = ResourceType::RouteConfiguration.type_url();
    let dynamic: Vec<Value> = snapshot.routes.values().map(|r| dynamic_entry("route_config", type_url, r)).collect();
    json!({ "@type": format!("{DUMP}RoutesConfigDump"), "dynamic_route_configs": dynamic })
}

fn endpoints(snapshot: &Snapshot) -> Value {
    let type_url = ResourceType::ClusterLoadAssignment.type_url();
    let mut static_configs = Vec::new();
    let mut dynamic = Vec::new();
    for assignment in snapshot.endpoints.values() {
        if assignment.raw.is_empty() {
            // Static clusters' inline endpoints: shown by cluster name and count.
            static_configs.push(json!({
                "endpoint_config": { "cluster_name": assignment.resource.cluster_name },
                "endpoint_count": assignment.resource.endpoint_count(),
            }));
        } else {
            dynamic.push(dynamic_entry("endpoint_config", type_url, assignment));
        }
    }
    json!({
        "@type": format!("{DUMP}EndpointsConfigDump"),
        "static_endpoint_configs": static_configs,
        "dynamic_endpoint_configs": dynamic,
    })
}

fn secrets(snapshot: &Snapshot) -> Value {
    let type_url = ResourceType::Secret.type_url();
    let dynamic: Vec<Value> = snapshot
        .secrets
        .iter()
        .filter(|(_, s)| !s.raw.is_empty())
        .map(|(name, s)| {
            let mut secret = any_json(type_url, &s.raw.bytes());
            redact(&mut secret);
            json!({ "name": name, "version_info": s.version, "last_updated": time(s.last_updated), "secret": secret })
        })
        .collect();
    json!({ "@type": format!("{DUMP}SecretsConfigDump"), "dynamic_active_secrets": dynamic })
}

fn dynamic_entry<T>(field: &str, type_url: &str, item: &Arc<Versioned<T>>) -> Value {
    json!({ "version_info": item.version, field: any_json(type_url, &item.raw.bytes()), "last_updated": time(item.last_updated) })
}

fn state_entry<T>(type_url: &str, item: &Arc<Versioned<T>>, field: &str) -> Value {
    dynamic_entry(field, type_url, item)
}

fn any_json(type_url: &str, raw: &[u8]) -> Value {
    crate::pb::json::any_to_value(type_url, raw)
        .unwrap_or_else(|e| json!({ "@type": type_url, "error": e.to_string() }))
}

fn static_items(bootstrap: &Value, kind: &str) -> Vec<Value> {
    bootstrap["static_resources"][kind].as_array().cloned().unwrap_or_default()
}

fn version(snapshot: &Snapshot, resource_type: ResourceType) -> String {
    snapshot.versions.get(&resource_type).map(|v| v.version_info.clone()).unwrap_or_default()
}

fn time(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// Private keys never leave the process, as in Envoy's dump.
fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if key == "private_key" {
                    *child = json!({ "inline_string": "[redacted]" });
                } else {
                    redact(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}
