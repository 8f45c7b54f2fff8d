//! The bootstrap as `/config_dump` shows it, kept compressed.
//!
//! A mesh-sized static bootstrap is tens of MiB of JSON: held as a `serde_json::Value` it
//! took several times that for the life of the process, and even as compact text it was
//! one of the largest things a sidecar kept, for a page that is rarely asked for. Protobuf
//! JSON of many similar clusters compresses well, and reads back in milliseconds when the
//! page is asked for.

use serde_json::Value;

use crate::store::Raw;

/// A JSON document, compressed as received resources are ([`Raw`]).
#[derive(Debug, Clone, Default)]
pub struct KeptDocument {
    text: Raw,
}

impl KeptDocument {
    /// Keeps `text`, a JSON document, compressed.
    pub fn new(text: &str) -> Self {
        Self { text: Raw::new(text.as_bytes()) }
    }

    /// The document again; `Value::Null` if there is none.
    pub fn document(&self) -> Value {
        // Outrider wrote the text from a `Value`: it reads back.
        serde_json::from_slice(&self.text.bytes()).unwrap_or(Value::Null)
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.text.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_reads_back_as_kept_and_smaller() {
        let clusters: Vec<Value> = (0..500)
            .map(|k| {
                serde_json::json!({"name": format!("outbound|80||svc-{k}.ns.svc.cluster.local"), "type": "EDS",
                                        "connect_timeout": "10s", "lb_policy": "LEAST_REQUEST"})
            })
            .collect();
        let document = serde_json::json!({"static_resources": {"clusters": clusters}});
        let kept = KeptDocument::new(&document.to_string());
        assert_eq!(kept.document(), document);
        assert!(kept.size() * 10 < document.to_string().len(), "{} bytes kept", kept.size());
    }

    #[test]
    fn nothing_kept_reads_as_null() {
        assert_eq!(KeptDocument::default().document(), Value::Null);
        assert_eq!(KeptDocument::new("null").document(), Value::Null);
    }
}
