//! The messages whose fields the ledger must classify: from the roots (what a bootstrap and
//! each xDS resource type is, and every message a converter destructures), every message
//! type an honoured field holds, transitively. A refused field's message or one that has
//! no effect is not entered: nothing of it reaches the model. `google.protobuf` types are
//! values (durations, wrappers, `Struct`, `Any`), not messages with fields of their own.

use std::collections::{BTreeMap, VecDeque};

use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};

use crate::ledger_data::{Class, Ledger};

/// What a bootstrap file and the five xDS resource types are.
pub const RESOURCES: [&str; 6] = [
    "envoy.config.bootstrap.v3.Bootstrap",
    "envoy.config.listener.v3.Listener",
    "envoy.config.route.v3.RouteConfiguration",
    "envoy.config.cluster.v3.Cluster",
    "envoy.config.endpoint.v3.ClusterLoadAssignment",
    "envoy.extensions.transport_sockets.tls.v3.Secret",
];

/// A field the protos have and the ledger does not list.
#[derive(Debug, Clone)]
pub struct Missing {
    pub message: String,
    pub field: String,
    /// How the walk got to the message: `Listener.filter_chains → FilterChain`, or the
    /// converter that destructures it.
    pub via: String,
}

#[derive(Debug, Default)]
pub struct Walk {
    /// Full name → how it was reached, in the order the walk met them.
    pub reached: BTreeMap<String, (MessageDescriptor, String)>,
    pub missing: Vec<Missing>,
}

/// Walks from `roots` (full name, how it is a root).
pub fn walk(pool: &DescriptorPool, roots: &[(String, String)], ledger: &Ledger) -> Walk {
    let mut out = Walk::default();
    let mut queue: VecDeque<(String, String)> = roots.iter().cloned().collect();
    while let Some((name, via)) = queue.pop_front() {
        if out.reached.contains_key(&name) || is_value(&name) {
            continue;
        }
        let Some(message) = pool.get_message_by_name(&name) else {
            out.missing.push(Missing { message: name, field: "*".into(), via: format!("{via}: no such message") });
            continue;
        };
        let rows = ledger.get(&name);
        for field in message.fields() {
            let Some(entry) = rows.and_then(|rows| rows.get(field.name())) else {
                out.missing.push(Missing { message: name.clone(), field: field.name().into(), via: via.clone() });
                continue;
            };
            if entry.class == Class::Honoured
                && let Some(held) = held_message(&field)
            {
                let step = format!("{}.{} → {}", message.name(), field.name(), held.name());
                queue.push_back((held.full_name().to_owned(), step));
            }
        }
        out.reached.insert(name, (message, via));
    }
    out
}

/// `google.protobuf.Duration`, `UInt32Value`, `Struct`, `Any`...: read as values.
fn is_value(full_name: &str) -> bool {
    full_name.starts_with("google.protobuf.")
}

/// The message a field holds: its type, or a map's value type.
fn held_message(field: &FieldDescriptor) -> Option<MessageDescriptor> {
    let Kind::Message(message) = field.kind() else { return None };
    if !message.is_map_entry() {
        return Some(message);
    }
    match message.map_entry_value_field().kind() {
        Kind::Message(value) => Some(value),
        _ => None,
    }
}
