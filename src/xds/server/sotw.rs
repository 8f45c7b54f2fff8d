//! State-of-the-world ADS (`StreamAggregatedResources`), per stream and per type URL.
//!
//! Each response carries the whole subscribed set: every resource for a wildcard
//! subscription (LDS, CDS: removal is absence), the requested names that exist otherwise.
//! A request echoing the last nonce is an ACK (its `version_info` is the one sent) or a NACK
//! (`error_detail`); it is answered only if the subscribed names changed. A request with an
//! older nonce is stale, and ignored, as go-control-plane does: the client will answer the
//! newer response with its current names.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::requests::{Protocol, ReceivedRequest, SentResponse};
use super::stream_handler::StreamHandler;
use super::{XdsServer, wildcard_by_default};
use crate::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};

pub(super) struct SotwStream {
    server: XdsServer,
    stream: u64,
    node_id: String,
    types: HashMap<String, TypeWatch>,
}

#[derive(Debug, Default)]
struct TypeWatch {
    /// `None` is a wildcard subscription.
    names: Option<BTreeSet<String>>,
    last_nonce: Option<String>,
    /// Name and version of each resource in the last response; `None` before the first.
    sent: Option<BTreeMap<String, String>>,
}

impl SotwStream {
    pub(super) fn new(server: XdsServer) -> Self {
        let stream = server.next_stream();
        SotwStream { server, stream, node_id: String::new(), types: HashMap::new() }
    }
}

impl StreamHandler for SotwStream {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;

    fn on_request(&mut self, request: DiscoveryRequest) -> Vec<DiscoveryResponse> {
        if let Some(node) = &request.node
            && self.node_id.is_empty()
        {
            self.node_id = node.id.clone();
        }
        self.server.record_request(ReceivedRequest::sotw(self.stream, &self.node_id, &request));
        let watch = self.types.entry(request.type_url.clone()).or_default();
        let nonce = request.response_nonce.as_str();
        if !nonce.is_empty() && watch.last_nonce.as_deref().is_some_and(|last| last != nonce) {
            return Vec::new();
        }
        if let Some(error) = &request.error_detail {
            tracing::warn!(
                type_url = %request.type_url, nonce, node = %self.node_id, code = error.code,
                message = %error.message, "xds server: NACK"
            );
        }
        let names = subscribed_names(&request.type_url, request.resource_names);
        let force = watch.sent.is_none() || watch.names != names;
        watch.names = names;
        respond(&self.server, self.stream, &request.type_url, watch, force).into_iter().collect()
    }

    fn on_change(&mut self) -> Vec<DiscoveryResponse> {
        let mut responses = Vec::new();
        for (type_url, watch) in &mut self.types {
            responses.extend(respond(&self.server, self.stream, type_url, watch, false));
        }
        responses
    }
}

/// The names a request subscribes to; `None` for a wildcard (`*`, or no names on LDS/CDS).
fn subscribed_names(type_url: &str, names: Vec<String>) -> Option<BTreeSet<String>> {
    if names.iter().any(|n| n == "*") || (names.is_empty() && wildcard_by_default(type_url)) {
        return None;
    }
    Some(names.into_iter().collect())
}

/// Builds the response for `watch` if `force` or if its resources differ from the last sent.
fn respond(
    server: &XdsServer,
    stream: u64,
    type_url: &str,
    watch: &mut TypeWatch,
    force: bool,
) -> Option<DiscoveryResponse> {
    let (version, all) = server.snapshot(type_url);
    let selected: Vec<_> =
        all.iter().filter(|(name, _)| watch.names.as_ref().is_none_or(|names| names.contains(*name))).collect();
    let view: BTreeMap<String, String> = selected.iter().map(|(n, v)| ((*n).clone(), v.version.clone())).collect();
    if !force && watch.sent.as_ref() == Some(&view) {
        return None;
    }
    let nonce = server.next_nonce();
    server.record_response(SentResponse {
        stream,
        protocol: Protocol::Sotw,
        type_url: type_url.to_owned(),
        version: version.clone(),
        nonce: nonce.clone(),
        resources: view.keys().cloned().collect(),
        removed: Vec::new(),
    });
    watch.last_nonce = Some(nonce.clone());
    watch.sent = Some(view);
    Some(DiscoveryResponse {
        version_info: version,
        resources: selected.into_iter().map(|(_, v)| v.resource.clone()).collect(),
        type_url: type_url.to_owned(),
        nonce,
        ..Default::default()
    })
}
