//! The workloads istiod's metadata discovery names (WDS, `istio.workload.Workload` over
//! Delta ADS), by address: Istio's telemetry reports a peer that sent no metadata headers
//! (an ambient workload behind ztunnel, a caller without a sidecar) as the workload at its
//! address. The xDS client writes it; Istio's peer metadata filter reads it per request
//! with one lock-free load.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::convert::workload::DiscoveredWorkload;
use crate::config::filters::peer_metadata::WorkloadMetadata;

/// The resource type, as the Delta ADS stream names it.
pub const WORKLOAD_TYPE: &str = "type.googleapis.com/istio.workload.Workload";

#[derive(Debug, Default)]
pub struct WorkloadIndex {
    by_address: ArcSwap<HashMap<IpAddr, Arc<WorkloadMetadata>>>,
    /// Every resource held, by name: its version and what it says.
    held: Mutex<BTreeMap<String, Held>>,
}

#[derive(Debug)]
struct Held {
    version: String,
    workload: Arc<WorkloadMetadata>,
    addresses: Vec<IpAddr>,
}

impl WorkloadIndex {
    /// The workload at `address`, if one is known.
    pub fn peer(&self, address: IpAddr) -> Option<Arc<WorkloadMetadata>> {
        self.by_address.load().get(&address).cloned()
    }

    /// The version of each resource held (a resumed stream's `initial_resource_versions`).
    pub fn versions(&self) -> Vec<(String, String)> {
        self.lock().iter().map(|(name, held)| (name.clone(), held.version.clone())).collect()
    }

    /// Applies one response: `added` resources (name, version, workload) replace what was
    /// held under their names; `removed` ones go.
    pub fn apply(&self, added: Vec<(String, String, DiscoveredWorkload)>, removed: &[String]) {
        let mut held = self.lock();
        for (name, version, DiscoveredWorkload { metadata, addresses }) in added {
            held.insert(name, Held { version, workload: Arc::new(metadata), addresses });
        }
        for name in removed {
            held.remove(name);
        }
        // Rebuilt whole: a push changes a handful of workloads, and readers never wait.
        // Two workloads claiming one address: the one whose name sorts first wins, so the
        // answer does not depend on the order of pushes.
        let mut by_address = HashMap::new();
        for entry in held.values() {
            for address in &entry.addresses {
                by_address.entry(*address).or_insert_with(|| entry.workload.clone());
            }
        }
        self.by_address.store(Arc::new(by_address));
    }

    /// How many workloads are held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Held>> {
        // Only the xDS client writes; a panic there leaves a consistent map.
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(name: &str, address: &str) -> DiscoveredWorkload {
        DiscoveredWorkload {
            metadata: WorkloadMetadata { name: name.into(), ..WorkloadMetadata::default() },
            addresses: vec![address.parse().unwrap()],
        }
    }

    #[test]
    fn workloads_are_found_by_address_until_removed() {
        let index = WorkloadIndex::default();
        index.apply(vec![("a".into(), "1".into(), found("pod-a", "10.0.0.1"))], &[]);
        index.apply(vec![("b".into(), "1".into(), found("pod-b", "10.0.0.2"))], &[]);
        let name = |ip: &str| index.peer(ip.parse().unwrap()).map(|w| w.name.clone());
        assert_eq!(name("10.0.0.1").as_deref(), Some("pod-a"));
        assert_eq!(name("10.0.0.2").as_deref(), Some("pod-b"));
        // A new version of `a` moves it.
        index.apply(vec![("a".into(), "2".into(), found("pod-a", "10.0.0.3"))], &[]);
        assert_eq!((name("10.0.0.1"), name("10.0.0.3").as_deref()), (None, Some("pod-a")));
        index.apply(Vec::new(), &["b".into()]);
        assert_eq!(name("10.0.0.2"), None);
        assert_eq!(index.versions(), [("a".to_owned(), "2".to_owned())]);
    }
}
