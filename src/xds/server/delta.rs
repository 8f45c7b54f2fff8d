//! Incremental ADS (`DeltaAggregatedResources`), per stream and per type URL.
//!
//! The server tracks what the client has (`initial_resource_versions` on the first request
//! of a type, then everything sent) and sends only resources whose version differs, plus
//! `removed_resources` for ones it has that no longer exist. Subscriptions are deltas
//! themselves, so they are applied whatever the nonce; the nonce and `error_detail` only
//! say whether the client accepted a response.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::requests::{Protocol, ReceivedRequest, SentResponse};
use super::stream_handler::StreamHandler;
use super::{XdsServer, wildcard_by_default};
use crate::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse, Resource};

pub(super) struct DeltaStream {
    server: XdsServer,
    stream: u64,
    node_id: String,
    types: HashMap<String, Subscription>,
}

#[derive(Debug, Default)]
struct Subscription {
    wildcard: bool,
    names: BTreeSet<String>,
    /// Name and version of each resource the client has.
    known: BTreeMap<String, String>,
}

impl Subscription {
    fn covers(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name)
    }
}

impl DeltaStream {
    pub(super) fn new(server: XdsServer) -> Self {
        let stream = server.next_stream();
        DeltaStream { server, stream, node_id: String::new(), types: HashMap::new() }
    }
}

impl StreamHandler for DeltaStream {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;

    fn on_request(&mut self, request: DeltaDiscoveryRequest) -> Vec<DeltaDiscoveryResponse> {
        if let Some(node) = &request.node
            && self.node_id.is_empty()
        {
            self.node_id = node.id.clone();
        }
        self.server.record_request(ReceivedRequest::delta(self.stream, &self.node_id, &request));
        if let Some(error) = &request.error_detail {
            tracing::warn!(
                type_url = %request.type_url, nonce = %request.response_nonce, node = %self.node_id,
                code = error.code, message = %error.message, "xds server: NACK"
            );
        }
        let first = !self.types.contains_key(&request.type_url);
        let subscription = self.types.entry(request.type_url.clone()).or_default();
        if first {
            // Legacy wildcard: the first request of LDS/CDS names nothing.
            subscription.wildcard =
                request.resource_names_subscribe.is_empty() && wildcard_by_default(&request.type_url);
            subscription.known = request.initial_resource_versions.into_iter().collect();
        }
        for name in request.resource_names_subscribe {
            if name == "*" {
                subscription.wildcard = true;
            } else {
                subscription.names.insert(name);
            }
        }
        for name in &request.resource_names_unsubscribe {
            if name == "*" {
                subscription.wildcard = false;
            } else {
                subscription.names.remove(name);
            }
        }
        // The first wildcard request is answered even when there is nothing to send, so
        // the client's initial fetch of LDS/CDS completes.
        let always = first && subscription.wildcard;
        respond(&self.server, self.stream, &request.type_url, subscription, always).into_iter().collect()
    }

    fn on_change(&mut self) -> Vec<DeltaDiscoveryResponse> {
        let mut responses = Vec::new();
        for (type_url, subscription) in &mut self.types {
            responses.extend(respond(&self.server, self.stream, type_url, subscription, false));
        }
        responses
    }
}

/// Sends what the client lacks or has stale, and removes what it has that is gone.
fn respond(
    server: &XdsServer,
    stream: u64,
    type_url: &str,
    subscription: &mut Subscription,
    always: bool,
) -> Option<DeltaDiscoveryResponse> {
    let (version, all) = server.snapshot(type_url);
    // Names no longer subscribed are forgotten: the client dropped them itself.
    subscription.known.retain(|name, _| subscription.wildcard || subscription.names.contains(name));
    let mut resources = Vec::new();
    for (name, current) in all.iter() {
        if subscription.covers(name) && subscription.known.get(name) != Some(&current.version) {
            subscription.known.insert(name.clone(), current.version.clone());
            resources.push(Resource {
                name: name.clone(),
                version: current.version.clone(),
                resource: Some(current.resource.clone()),
                ..Default::default()
            });
        }
    }
    let removed: Vec<String> = subscription.known.keys().filter(|name| !all.contains_key(*name)).cloned().collect();
    for name in &removed {
        subscription.known.remove(name);
    }
    if resources.is_empty() && removed.is_empty() && !always {
        return None;
    }
    let nonce = server.next_nonce();
    server.record_response(SentResponse {
        stream,
        protocol: Protocol::Delta,
        type_url: type_url.to_owned(),
        version: version.clone(),
        nonce: nonce.clone(),
        resources: resources.iter().map(|r| r.name.clone()).collect(),
        removed: removed.clone(),
    });
    Some(DeltaDiscoveryResponse {
        system_version_info: version,
        resources,
        type_url: type_url.to_owned(),
        removed_resources: removed,
        nonce,
        ..Default::default()
    })
}
