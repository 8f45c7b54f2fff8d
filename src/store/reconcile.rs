//! Endpoint reconciliation: an EDS update reuses the allocation of every endpoint that did
//! not change, so per-endpoint state keyed on it (load, latency, ORCA weights, outlier
//! state) survives the push. The work is linear in the number of endpoints.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::ClusterLoadAssignment;
use crate::config::endpoint::LbEndpoint;

/// Rewrites `next` so that every endpoint equal to one in `previous` shares its `Arc`.
/// Returns the number of endpoint operations performed (one hash insert per previous
/// endpoint, one lookup per next endpoint), which tests use to pin the complexity.
pub fn reconcile_endpoints(previous: &ClusterLoadAssignment, next: &mut ClusterLoadAssignment) -> usize {
    let mut operations = 0;
    let mut known: HashMap<&LbEndpoint, &Arc<LbEndpoint>> = HashMap::with_capacity(previous.endpoint_count());
    for endpoint in previous.endpoints() {
        known.insert(endpoint.as_ref(), endpoint);
        operations += 1;
    }
    for locality in &mut next.localities {
        for endpoint in &mut locality.endpoints {
            operations += 1;
            if let Some(existing) = known.get(endpoint.as_ref()) {
                *endpoint = Arc::clone(existing);
            }
        }
    }
    operations
}
