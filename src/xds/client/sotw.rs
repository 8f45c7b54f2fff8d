//! State-of-the-world ADS (`StreamAggregatedResources`).

use std::collections::{BTreeMap, BTreeSet};

use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

use super::AdsClientConfig;
use super::session::Session;
use super::status::nack_status;
use super::validate::{Incoming, refuse_duplicate_addresses};
use crate::config::ResourceType;
use crate::core::backoff::Backoff;
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use crate::pb::google::rpc::Status;

/// Largest response accepted: big meshes send EDS updates of many megabytes.
pub const MAX_MESSAGE_SIZE: usize = 256 * 1024 * 1024;

/// Runs one stream until it ends.
pub async fn run(
    session: &mut Session,
    config: &AdsClientConfig,
    channel: Channel,
    backoff: &mut Backoff,
) -> Result<(), tonic::Status> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut stream = Stream {
        tx,
        config,
        node_sent: false,
        subscribed: BTreeMap::new(),
        nonces: BTreeMap::new(),
        subscriptions_for: None,
    };
    for resource_type in ResourceType::ALL {
        if resource_type.is_wildcard() {
            if session.is_wildcard_subscribed(resource_type) {
                let version = session.acked_version(resource_type);
                stream.request(resource_type, version, BTreeSet::new(), None);
            }
        } else {
            let wanted = session.wanted(resource_type);
            if !wanted.is_empty() {
                let version = session.acked_version(resource_type);
                stream.request(resource_type, version, wanted, None);
            }
        }
    }
    let mut client = AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE);
    let mut responses = client.stream_aggregated_resources(UnboundedReceiverStream::new(rx)).await?.into_inner();
    loop {
        tokio::select! {
            response = responses.message() => match response? {
                None => return Ok(()),
                Some(response) => {
                    if stream.handle(session, response) {
                        backoff.reset();
                    }
                }
            },
            () = session.background() => {}
        }
    }
}

struct Stream<'a> {
    tx: mpsc::UnboundedSender<DiscoveryRequest>,
    config: &'a AdsClientConfig,
    node_sent: bool,
    /// Names requested per type (empty for wildcard types).
    subscribed: BTreeMap<ResourceType, BTreeSet<String>>,
    /// The `ConfigState::references` the subscriptions were last brought in step with.
    subscriptions_for: Option<u64>,
    /// The last nonce received per type.
    nonces: BTreeMap<ResourceType, String>,
}

impl Stream<'_> {
    /// Handles one response: applies what is valid of it, then ACKs it, or NACKs it with
    /// the invalid resources. Returns whether it was ACKed.
    fn handle(&mut self, session: &mut Session, response: DiscoveryResponse) -> bool {
        let DiscoveryResponse { version_info, resources, type_url, nonce, .. } = response;
        let Some(resource_type) = ResourceType::from_type_url(&type_url) else {
            tracing::warn!(%type_url, "ignoring a response of an unknown type");
            return false;
        };
        self.nonces.insert(resource_type, nonce.clone());
        let mut mismatched = Vec::new();
        let incoming = resources
            .into_iter()
            .enumerate()
            .filter_map(|(i, any)| {
                if any.type_url != type_url {
                    mismatched.push(format!("resources[{i}]: type {} in a {type_url} response", any.type_url));
                    return None;
                }
                Some(Incoming { name: None, version: version_info.clone(), bytes: any.value.into() })
            })
            .collect();
        let names = self.subscribed.get(&resource_type).cloned().unwrap_or_default();
        let detail = if mismatched.is_empty() {
            let mut verdict = session.validate(resource_type, incoming);
            if resource_type == ResourceType::Listener && !verdict.refused {
                // What stays bound: static listeners and those this response names but
                // refused (they keep their previous version); the rest are replaced or go.
                let accepted: BTreeSet<String> =
                    verdict.accepted.iter().map(|v| v.resource.name().to_owned()).collect();
                let names = verdict.names.clone();
                let kept = session
                    .state
                    .held_listeners()
                    .filter(|(l, is_static)| *is_static || (names.contains(&l.name) && !accepted.contains(&l.name)))
                    .map(|(l, _)| l);
                refuse_duplicate_addresses(&mut verdict, kept);
            }
            let detail = verdict.error_detail(resource_type);
            // LDS and CDS responses are the whole state: what they do not name is removed
            // (an invalid resource is named, so it keeps its previous version).
            let removed = if resource_type.is_wildcard() && !verdict.refused {
                session.not_named(resource_type, &verdict.names)
            } else {
                Vec::new()
            };
            session.accept(resource_type, &version_info, verdict.accepted, &removed, detail.is_none());
            detail
        } else {
            // A malformed response is refused before anything of it is applied.
            session.stats.rejected(resource_type);
            Some(mismatched.join("; "))
        };
        let acked = match detail {
            None => {
                session.acked.entry(resource_type).or_default().version_info = version_info.clone();
                self.request(resource_type, version_info, names, Some(nonce));
                true
            }
            Some(detail) => {
                tracing::warn!(resource = resource_type.short_name(), version = %version_info, %detail, "rejected (NACK)");
                // As Envoy: the NACK carries the last ACKed version, which stays the one
                // requested, even though the valid resources of this response were applied.
                let previous = session.acked_version(resource_type);
                self.send(resource_type, previous, names, nonce, Some(nack_status(detail)));
                false
            }
        };
        // Applied listeners and clusters may refer to new route configurations, endpoints
        // and secrets, ACKed or not.
        self.update_subscriptions(session);
        acked
    }

    /// Re-requests RDS, EDS and SDS when the names that listeners and clusters refer to changed.
    fn update_subscriptions(&mut self, session: &mut Session) {
        // What listeners and clusters refer to is unchanged: so are the names wanted.
        if self.subscriptions_for.replace(session.references()) == Some(session.references()) {
            return;
        }
        for resource_type in ResourceType::ALL.into_iter().filter(|t| !t.is_wildcard()) {
            let wanted = session.wanted(resource_type);
            let current = self.subscribed.get(&resource_type);
            if current == Some(&wanted) || (current.is_none() && wanted.is_empty()) {
                continue;
            }
            let dropped: Vec<String> = current.map(|c| c.difference(&wanted).cloned().collect()).unwrap_or_default();
            if wanted.is_empty() {
                // An empty SotW request would mean "everything"; keep the old request and
                // just forget what is no longer referenced.
                session.forget(resource_type, &dropped);
                continue;
            }
            let version = session.acked_version(resource_type);
            let nonce = self.nonces.get(&resource_type).cloned();
            self.request(resource_type, version, wanted, nonce);
            session.forget(resource_type, &dropped);
        }
    }

    fn request(
        &mut self,
        resource_type: ResourceType,
        version: String,
        names: BTreeSet<String>,
        nonce: Option<String>,
    ) {
        self.send(resource_type, version, names, nonce.unwrap_or_default(), None);
    }

    fn send(
        &mut self,
        resource_type: ResourceType,
        version_info: String,
        names: BTreeSet<String>,
        response_nonce: String,
        error_detail: Option<Status>,
    ) {
        let node = (!self.node_sent || !self.config.set_node_on_first_message_only).then(|| self.config.node.clone());
        self.node_sent = true;
        let request = DiscoveryRequest {
            version_info,
            node,
            resource_names: names.iter().cloned().collect(),
            type_url: resource_type.type_url().to_owned(),
            response_nonce,
            error_detail,
            ..Default::default()
        };
        self.subscribed.insert(resource_type, names);
        // A closed channel means the stream ended; the receive side reports why.
        let _ = self.tx.send(request);
    }
}
