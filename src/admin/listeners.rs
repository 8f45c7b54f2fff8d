//! `/listeners`: each listener's name and address, as text (`name::address` lines) or in
//! Envoy's `ListenerStatus` JSON shape.

use serde_json::{Value, json};

use crate::store::Snapshot;

pub fn text(snapshot: &Snapshot) -> String {
    snapshot.listeners.values().map(|l| format!("{}::{}\n", l.resource.name, l.resource.address)).collect()
}

pub fn json(snapshot: &Snapshot) -> Value {
    let statuses: Vec<Value> = snapshot
        .listeners
        .values()
        .map(|l| {
            let listener = &l.resource;
            let mut status = json!({
                "name": listener.name,
                "local_address": super::clusters::address(&listener.address),
            });
            if !listener.additional_addresses.is_empty() {
                let extra: Vec<Value> = listener.additional_addresses.iter().map(super::clusters::address).collect();
                status["additional_local_addresses"] = Value::Array(extra);
            }
            status
        })
        .collect();
    json!({ "listener_statuses": statuses })
}
