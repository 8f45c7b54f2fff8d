//! Istio's captured configuration, kept in `tests/data/istio` (see its README), for the
//! converters' tests.

use serde_json::Value;

/// Reads one of the Istio captures as JSON.
pub fn istio_dump(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
