//! Protobuf JSON for Envoy's messages, through the descriptor set that `envoy-types` ships.
//!
//! Envoy's bootstrap is written in protobuf's JSON mapping (YAML being a superset). prost's
//! generated types have no serde, so a JSON document is read as a `prost_reflect`
//! `DynamicMessage` against the descriptors, re-encoded, and decoded into the typed message.
//! Before that, the document is walked once against the descriptors so that every unknown
//! field and every `typed_config` of a type Outrider does not know is reported by its path
//! and removed, instead of failing the whole file as a strict parser would.

use std::sync::{Arc, Mutex, Weak};

use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, Kind, MessageDescriptor, SerializeOptions};
use serde_json::Value;

static ENVOY_DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptors.bin"));

/// A problem found while reading a JSON document into a protobuf message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct JsonError {
    pub path: String,
    pub reason: String,
}

/// Something in the document that was left out because Outrider's descriptors do not know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub path: String,
    pub what: String,
}

/// The descriptor pool for every Envoy, xds and Google message `envoy-types` knows, decoded
/// on demand off the data path (bootstrap load and `/config_dump` only).
///
/// Decoded, the pool takes several MiB, more than the rest of an idle proxy; it is therefore
/// not kept for the life of the process. While any caller holds the returned `Arc` (or a
/// descriptor from it), further calls share it: hold one across a batch of conversions.
pub fn pool() -> Result<Arc<DescriptorPool>, JsonError> {
    static POOL: Mutex<Weak<DescriptorPool>> = Mutex::new(Weak::new());
    let mut cached = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(pool) = cached.upgrade() {
        return Ok(pool);
    }
    let pool = DescriptorPool::decode(ENVOY_DESCRIPTORS)
        .map(Arc::new)
        .map_err(|e| JsonError { path: String::new(), reason: format!("descriptor set: {e}") })?;
    *cached = Arc::downgrade(&pool);
    Ok(pool)
}

/// The descriptor of a fully qualified message name, e.g. `envoy.config.cluster.v3.Cluster`.
pub fn descriptor(full_name: &str) -> Result<MessageDescriptor, JsonError> {
    pool()?
        .get_message_by_name(full_name)
        .ok_or_else(|| JsonError { path: String::new(), reason: format!("unknown message type {full_name}") })
}

/// Reads `value` as the message `M` (named `full_name`), dropping what the descriptors do
/// not know and reporting each drop.
pub fn from_value<M: prost::Message + Default>(
    full_name: &str,
    mut value: Value,
) -> Result<(M, Vec<Dropped>), JsonError> {
    let _shared = pool()?; // one pool for every nested `Any` below
    let desc = descriptor(full_name)?;
    let mut dropped = Vec::new();
    prune(&mut value, &desc, "", &mut dropped);
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let dynamic = DynamicMessage::deserialize_with_options(desc, value, &options)
        .map_err(|e| JsonError { path: String::new(), reason: e.to_string() })?;
    let bytes = prost::Message::encode_to_vec(&dynamic);
    let message = M::decode(bytes.as_slice())
        .map_err(|e| JsonError { path: String::new(), reason: format!("re-decoding {full_name}: {e}") })?;
    Ok((message, dropped))
}

/// Writes the protobuf binary `bytes` of the message named `full_name` as JSON, with `Any`
/// fields expanded, the way Envoy's `/config_dump` shows them.
pub fn to_value(full_name: &str, bytes: &[u8]) -> Result<Value, JsonError> {
    let desc = descriptor(full_name)?;
    let dynamic =
        DynamicMessage::decode(desc, bytes).map_err(|e| JsonError { path: String::new(), reason: e.to_string() })?;
    let options = SerializeOptions::new().use_proto_field_name(true);
    dynamic
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| JsonError { path: String::new(), reason: e.to_string() })
}

/// The JSON of an `Any` (`type_url` plus bytes), as `/config_dump` writes it.
pub fn any_to_value(type_url: &str, bytes: &[u8]) -> Result<Value, JsonError> {
    let full_name = type_url.rsplit('/').next().unwrap_or(type_url);
    let mut value = to_value(full_name, bytes)?;
    if let Value::Object(map) = &mut value {
        let mut with_type = serde_json::Map::with_capacity(map.len() + 1);
        with_type.insert("@type".into(), Value::String(type_url.into()));
        with_type.extend(std::mem::take(map));
        *map = with_type;
    }
    Ok(value)
}

/// Removes unknown fields and `Any`s of unknown types from `value`, recording each.
fn prune(value: &mut Value, desc: &MessageDescriptor, path: &str, dropped: &mut Vec<Dropped>) {
    let Value::Object(map) = value else { return };
    let full_name = desc.full_name();
    if full_name == "google.protobuf.Any" {
        prune_any(map, path, dropped);
        return;
    }
    if full_name.starts_with("google.protobuf.") {
        // Well-known types have their own JSON forms (Duration strings, Struct, wrappers).
        return;
    }
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        if key == "@type" {
            continue; // the type of an Any, checked by the caller
        }
        let field = desc.get_field_by_json_name(&key).or_else(|| desc.get_field_by_name(&key));
        let child_path = join(path, &key);
        let Some(field) = field else {
            map.remove(&key);
            dropped.push(Dropped { path: child_path, what: format!("unknown field of {full_name}") });
            continue;
        };
        let Kind::Message(child) = field.kind() else { continue };
        let Some(child_value) = map.get_mut(&key) else { continue };
        if field.is_map() {
            let value_desc = child.map_entry_value_field();
            if let (Kind::Message(value_msg), Value::Object(entries)) = (value_desc.kind(), child_value) {
                entries.retain(|k, v| {
                    let entry_path = format!("{child_path}[{k}]");
                    if value_msg.full_name() == "google.protobuf.Any" && !any_type_known(v) {
                        dropped.push(Dropped { path: entry_path, what: unknown_any_what(v) });
                        return false;
                    }
                    prune(v, &value_msg, &entry_path, dropped);
                    true
                });
            }
        } else if field.is_list() {
            if let Value::Array(items) = child_value {
                let mut index = 0;
                items.retain_mut(|item| {
                    let item_path = format!("{child_path}[{index}]");
                    index += 1;
                    let unknown_any = child.full_name() == "google.protobuf.Any" && !any_type_known(item);
                    if unknown_any {
                        dropped.push(Dropped { path: item_path, what: unknown_any_what(item) });
                        return false;
                    }
                    prune(item, &child, &item_path, dropped);
                    true
                });
            }
        } else if child.full_name() == "google.protobuf.Any" && !any_type_known(child_value) {
            dropped.push(Dropped { path: child_path, what: unknown_any_what(child_value) });
            map.remove(&key);
        } else {
            prune(child_value, &child, &child_path, dropped);
        }
    }
}

fn prune_any(map: &mut serde_json::Map<String, Value>, path: &str, dropped: &mut Vec<Dropped>) {
    let Some(Value::String(type_url)) = map.get("@type") else { return };
    let name = type_url.rsplit('/').next().unwrap_or(type_url).to_owned();
    let Ok(desc) = descriptor(&name) else { return };
    if name.starts_with("google.protobuf.") {
        return;
    }
    let mut inner = Value::Object(std::mem::take(map));
    prune(&mut inner, &desc, path, dropped);
    if let Value::Object(inner) = inner {
        *map = inner;
    }
}

fn any_type_known(value: &Value) -> bool {
    match value.get("@type") {
        Some(Value::String(type_url)) => descriptor(type_url.rsplit('/').next().unwrap_or(type_url)).is_ok(),
        _ => true,
    }
}

fn unknown_any_what(value: &Value) -> String {
    match value.get("@type") {
        Some(Value::String(type_url)) => format!("typed config of unknown type {type_url}"),
        _ => "typed config without @type".into(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}
