//! Istio's captured configuration, kept in `tests/data/istio` (see its README), for the
//! converters' tests.

use serde_json::Value;

/// Reads one of the Istio captures as JSON.
pub fn istio_dump(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every object in `value` whose `@type` ends with `suffix`.
pub fn typed_objects(value: &Value, suffix: &str, found: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            if map.get("@type").and_then(Value::as_str).is_some_and(|t| t.ends_with(suffix)) {
                found.push(value.clone());
            }
            map.values().for_each(|v| typed_objects(v, suffix, found));
        }
        Value::Array(items) => items.iter().for_each(|v| typed_objects(v, suffix, found)),
        _ => {}
    }
}
