//! What filters leave on a request or a connection for others to read (Envoy's stream
//! info): dynamic metadata, by filter namespace, and filter state, by key; and what of it
//! crosses to an internal listener's connection ([`StreamState`]).
//!
//! Istio's HBONE relies on that crossing: the `CONNECT` terminating listener sets the
//! tunnel's destination and peer identity as filter state shared with the upstream, and
//! its internal listener `main_internal` restores the destination from it; the outbound
//! side puts the destination in the endpoint's metadata, passed through to the internal
//! listener `connect_originate`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// The original destination listener filter's namespace of dynamic metadata: its `local`
/// field is the destination of an internal connection (as Envoy's `original_dst` reads it).
pub const ORIGINAL_DST_NAMESPACE: &str = "envoy.filters.listener.original_dst";
/// The field of [`ORIGINAL_DST_NAMESPACE`] holding the destination (`IP:port`).
pub const ORIGINAL_DST_LOCAL_FIELD: &str = "local";
/// Filter state: the destination of an internal connection (`IP:port`), when the metadata
/// has none.
pub const ORIGINAL_DST_LOCAL_IP: &str = "envoy.filters.listener.original_dst.local_ip";
/// Filter state: the source of an internal connection (`IP:port`).
pub const ORIGINAL_DST_REMOTE_IP: &str = "envoy.filters.listener.original_dst.remote_ip";
/// Filter state: the destination of an ORIGINAL_DST cluster (`IP:port`), before any other.
pub const ORIGINAL_DST_ADDRESS: &str = "envoy.network.transport_socket.original_dst_address";
/// Filter state: Istio's peer identity (the client's SPIFFE id), which RBAC's
/// `filter_state` principals match.
pub const PEER_PRINCIPAL: &str = "io.istio.peer_principal";

/// Per-request (or per-connection) dynamic metadata, by filter namespace
/// (`envoy.filters.http.jwt_authn`): what one filter leaves for a later one (JWT claims for
/// RBAC's `metadata` matcher).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicMetadata(pub BTreeMap<String, serde_json::Map<String, serde_json::Value>>);

impl DynamicMetadata {
    /// The value at `path` under `namespace` (`MetadataMatcher`'s `filter` and `path`).
    pub fn get<K: AsRef<str>>(&self, namespace: &str, path: &[K]) -> Option<&serde_json::Value> {
        let (first, rest) = path.split_first()?;
        let mut value = self.0.get(namespace)?.get(first.as_ref())?;
        for key in rest {
            value = value.as_object()?.get(key.as_ref())?;
        }
        Some(value)
    }

    /// Sets `key` under `namespace`.
    pub fn set(&mut self, namespace: &str, key: String, value: serde_json::Value) {
        self.0.entry(namespace.to_owned()).or_default().insert(key, value);
    }

    /// The address at `path` under `namespace`, as Envoy reads one (the first element when
    /// the value is a list): `IP:port`.
    pub fn address<K: AsRef<str>>(&self, namespace: &str, path: &[K]) -> Option<SocketAddr> {
        let value = self.get(namespace, path)?;
        let value = match value {
            serde_json::Value::Array(values) => values.first()?,
            value => value,
        };
        value.as_str()?.parse().ok()
    }
}

/// `shared_with_upstream` of a filter state object: whether an upstream connection to an
/// internal listener carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SharedWithUpstream {
    #[default]
    None,
    /// To the next internal listener only.
    Once,
    /// To it, and on from there.
    Transitive,
}

/// One filter state object. Envoy's objects are typed by their factory; the ones Outrider
/// reads are addresses and strings, both kept as their text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterStateValue {
    pub value: Arc<str>,
    pub shared: SharedWithUpstream,
    /// Set once: a later filter may not replace it.
    pub read_only: bool,
}

/// Filter state: objects by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterState(BTreeMap<String, FilterStateValue>);

impl FilterState {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| &*v.value)
    }

    /// The object at `key` read as an `IP:port` address.
    pub fn address(&self, key: &str) -> Option<SocketAddr> {
        self.get(key)?.parse().ok()
    }

    pub fn set(&mut self, key: String, value: Arc<str>, shared: SharedWithUpstream) {
        self.insert(key, FilterStateValue { value, shared, read_only: false });
    }

    /// Sets `key` unless a read-only object holds it already (Envoy refuses to replace
    /// one); `false` then.
    pub fn insert(&mut self, key: String, value: FilterStateValue) -> bool {
        if self.0.get(&key).is_some_and(|v| v.read_only) {
            return false;
        }
        self.0.insert(key, value);
        true
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds the objects of `other` whose keys this state does not have.
    pub fn extend_absent(&mut self, other: FilterState) {
        for (key, value) in other.0 {
            self.0.entry(key).or_insert(value);
        }
    }

    /// What an upstream connection to an internal listener carries of this state: the
    /// shared objects, those shared `ONCE` no longer shared on the other side.
    pub fn shared_with_upstream(&self) -> FilterState {
        let shared = self.0.iter().filter_map(|(key, v)| {
            let shared = match v.shared {
                SharedWithUpstream::None => return None,
                SharedWithUpstream::Once => SharedWithUpstream::None,
                SharedWithUpstream::Transitive => SharedWithUpstream::Transitive,
            };
            Some((key.clone(), FilterStateValue { value: v.value.clone(), shared, read_only: v.read_only }))
        });
        FilterState(shared.collect())
    }
}

/// The filter state and dynamic metadata of a request or a connection. A connection to an
/// internal listener starts with what the side that opened it carries across: its filter
/// state shared with the upstream, and the metadata its transport socket passes through
/// (`passthrough_metadata`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamState {
    pub filter_state: FilterState,
    pub metadata: DynamicMetadata,
}

impl StreamState {
    pub fn is_empty(&self) -> bool {
        self.filter_state.is_empty() && self.metadata.0.is_empty()
    }

    /// The destination an `original_dst` listener filter restores on an internal
    /// connection: the metadata's `local`, else the filter state's `local_ip`.
    pub fn original_destination(&self) -> Option<SocketAddr> {
        let from_metadata = self.metadata.0.get(ORIGINAL_DST_NAMESPACE).and_then(|m| m.get(ORIGINAL_DST_LOCAL_FIELD));
        match from_metadata {
            // Envoy takes a string here whether or not it parses, and then no filter state.
            Some(serde_json::Value::String(local)) => local.parse().ok(),
            _ => self.filter_state.address(ORIGINAL_DST_LOCAL_IP),
        }
    }

    /// The source an `original_dst` listener filter restores on an internal connection.
    pub fn original_source(&self) -> Option<SocketAddr> {
        self.filter_state.address(ORIGINAL_DST_REMOTE_IP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(entries: &[(&str, &str, SharedWithUpstream)]) -> FilterState {
        let mut state = FilterState::default();
        for (key, value, shared) in entries {
            state.set((*key).to_owned(), (*value).into(), *shared);
        }
        state
    }

    #[test]
    fn once_crosses_one_internal_listener_and_transitive_every_one() {
        use SharedWithUpstream::*;
        let state = state(&[("a", "1", None), ("b", "2", Once), ("c", "3", Transitive)]);
        let next = state.shared_with_upstream();
        assert_eq!(next, super::tests::state(&[("b", "2", None), ("c", "3", Transitive)]));
        let after = next.shared_with_upstream();
        assert_eq!(after.get("b"), Option::None);
        assert_eq!(after.get("c"), Some("3"));
    }

    #[test]
    fn the_destination_comes_from_metadata_first_then_filter_state() {
        let mut carried = StreamState {
            filter_state: state(&[
                (ORIGINAL_DST_LOCAL_IP, "10.0.0.2:8080", SharedWithUpstream::None),
                (ORIGINAL_DST_REMOTE_IP, "10.0.0.9:40000", SharedWithUpstream::None),
            ]),
            metadata: DynamicMetadata::default(),
        };
        assert_eq!(carried.original_destination(), "10.0.0.2:8080".parse().ok());
        assert_eq!(carried.original_source(), "10.0.0.9:40000".parse().ok());
        carried.metadata.set(ORIGINAL_DST_NAMESPACE, "local".into(), "10.0.0.3:9090".into());
        assert_eq!(carried.original_destination(), "10.0.0.3:9090".parse().ok());
        // A string that is no address restores nothing, as in Envoy.
        carried.metadata.set(ORIGINAL_DST_NAMESPACE, "local".into(), "not-an-address".into());
        assert_eq!(carried.original_destination(), Option::None);
    }

    #[test]
    fn metadata_addresses_take_the_first_of_a_list() {
        let mut metadata = DynamicMetadata::default();
        metadata.set("ns", "waypoint".into(), serde_json::json!(["10.0.0.4:15008", "10.0.0.5:15008"]));
        assert_eq!(metadata.address("ns", &["waypoint"]), "10.0.0.4:15008".parse().ok());
        assert_eq!(metadata.address("ns", &["missing"]), Option::None);
    }
}
