//! The server's resources, per type URL, each with the version at which it last changed.
//!
//! Versions come from one counter for the whole server, bumped once per change set, so a
//! resource's version only moves when its bytes do; that is what lets Delta streams send
//! only what changed and honour the versions a reconnecting client already has.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::pb::google::protobuf::Any;

/// One resource as served: its version and its packed message.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned {
    pub version: String,
    pub resource: Any,
}

/// All resources of one type URL, by name. Shared by `Arc` with the streams that read it.
pub type TypeResources = Arc<BTreeMap<String, Versioned>>;

/// The current resources of every type and the version counter.
#[derive(Debug, Default)]
pub(super) struct Resources {
    version: u64,
    types: HashMap<String, TypeEntry>,
}

#[derive(Debug, Default, Clone)]
struct TypeEntry {
    /// The server version of the last change to this type ("0" when never set).
    version: u64,
    resources: TypeResources,
}

impl Resources {
    /// The server-wide version, bumped once per effective change.
    pub(super) fn version(&self) -> u64 {
        self.version
    }

    /// The version of `type_url`'s set and its resources.
    pub(super) fn get(&self, type_url: &str) -> (String, TypeResources) {
        match self.types.get(type_url) {
            Some(entry) => (entry.version.to_string(), entry.resources.clone()),
            None => ("0".to_owned(), TypeResources::default()),
        }
    }

    /// Replaces the set of `type_url`. Returns whether anything changed.
    pub(super) fn set(&mut self, type_url: &str, resources: Vec<(String, Any)>) -> bool {
        let next_version = self.version + 1;
        let previous = self.types.get(type_url).map(|e| e.resources.clone()).unwrap_or_default();
        let mut next = BTreeMap::new();
        for (name, resource) in resources {
            let version = match previous.get(&name) {
                Some(old) if old.resource == resource => old.version.clone(),
                _ => next_version.to_string(),
            };
            next.insert(name, Versioned { version, resource });
        }
        if next == *previous {
            return false;
        }
        self.version = next_version;
        self.types.insert(type_url.to_owned(), TypeEntry { version: next_version, resources: Arc::new(next) });
        true
    }

    /// Adds or replaces one resource. Returns whether anything changed.
    pub(super) fn upsert(&mut self, type_url: &str, name: &str, resource: Any) -> bool {
        let mut all = self.owned(type_url);
        all.retain(|(n, _)| n != name);
        all.push((name.to_owned(), resource));
        self.set(type_url, all)
    }

    /// Removes one resource. Returns whether it existed.
    pub(super) fn remove(&mut self, type_url: &str, name: &str) -> bool {
        let mut all = self.owned(type_url);
        all.retain(|(n, _)| n != name);
        self.set(type_url, all)
    }

    fn owned(&self, type_url: &str) -> Vec<(String, Any)> {
        let (_, resources) = self.get(type_url);
        resources.iter().map(|(n, v)| (n.clone(), v.resource.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(value: &[u8]) -> Any {
        Any { type_url: "t".into(), value: value.to_vec() }
    }

    #[test]
    fn versions_move_only_with_content() {
        let mut r = Resources::default();
        assert!(r.set("t", vec![("a".into(), any(b"1")), ("b".into(), any(b"1"))]));
        assert!(!r.set("t", vec![("a".into(), any(b"1")), ("b".into(), any(b"1"))]));
        assert!(r.set("t", vec![("a".into(), any(b"1")), ("b".into(), any(b"2"))]));
        let (version, all) = r.get("t");
        assert_eq!(version, "2");
        assert_eq!(all["a"].version, "1");
        assert_eq!(all["b"].version, "2");
        assert!(r.remove("t", "a"));
        assert!(!r.remove("t", "a"));
        assert_eq!(r.get("t").1.keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(r.get("other").0, "0");
    }
}
