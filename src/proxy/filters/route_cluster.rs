//! The cluster a request's route sends it to, as filters that charge per-cluster stats or
//! describe the destination need it before the router runs.

use crate::config::route::{Action, ClusterSpecifier};
use crate::proxy::filters::context::RequestContext;

/// The route's cluster when it is named (`cluster`) or read from a header
/// (`cluster_header`, when present). `None` for weighted clusters, which the router picks
/// when it forwards, and for routes that do not forward.
pub fn route_cluster(request: &RequestContext<'_>) -> Option<String> {
    let route = request.route?.route?;
    let Action::Route(action) = &route.action else { return None };
    match &action.cluster {
        ClusterSpecifier::Cluster(name) => Some(name.clone()),
        ClusterSpecifier::ClusterHeader(header) => request
            .parts
            .headers
            .get(header.as_str())
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_owned),
        ClusterSpecifier::WeightedClusters(_) => None,
    }
}
