//! Incremental ADS (`DeltaAggregatedResources`), istiod's default.

use std::collections::{BTreeMap, BTreeSet};

use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

use super::AdsClientConfig;
use super::session::Session;
use super::sotw::MAX_MESSAGE_SIZE;
use super::status::nack_status;
use super::validate::{Incoming, refuse_duplicate_addresses};
use super::workloads;
use crate::config::ResourceType;
use crate::core::backoff::Backoff;
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};

/// Runs one stream until it ends.
pub async fn run(
    session: &mut Session,
    config: &AdsClientConfig,
    channel: Channel,
    backoff: &mut Backoff,
) -> Result<(), tonic::Status> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut stream = Stream { tx, config, node_sent: false, subscribed: BTreeMap::new(), subscriptions_for: None };
    if let Some(index) = &config.workloads {
        stream.send_request(workloads::subscribe(index));
    }
    for resource_type in ResourceType::ALL {
        // Resume: tell the server which versions are held, so it sends only what changed.
        // As Envoy: the versions of the ACKed responses, not of what is held (a NACKed
        // response's valid resources were applied, but their versions are not reported).
        let held = session.acked.get(&resource_type).map(|a| a.resources.clone()).unwrap_or_default();
        if resource_type.is_wildcard() {
            if session.is_wildcard_subscribed(resource_type) {
                stream.subscribed.insert(resource_type, BTreeSet::new());
                stream.send(
                    resource_type,
                    DeltaDiscoveryRequest {
                        initial_resource_versions: held.into_iter().collect(),
                        ..Default::default()
                    },
                );
            }
        } else {
            let wanted = session.wanted(resource_type);
            if !wanted.is_empty() {
                let initial = held.into_iter().filter(|(name, _)| wanted.contains(name)).collect();
                stream.send(
                    resource_type,
                    DeltaDiscoveryRequest {
                        resource_names_subscribe: wanted.iter().cloned().collect(),
                        initial_resource_versions: initial,
                        ..Default::default()
                    },
                );
                stream.subscribed.insert(resource_type, wanted);
            }
        }
    }
    let mut client = AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE);
    let mut responses = client.delta_aggregated_resources(UnboundedReceiverStream::new(rx)).await?.into_inner();
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
    tx: mpsc::UnboundedSender<DeltaDiscoveryRequest>,
    config: &'a AdsClientConfig,
    node_sent: bool,
    /// Explicitly subscribed names per type (empty for wildcard types).
    subscribed: BTreeMap<ResourceType, BTreeSet<String>>,
    /// The `ConfigState::references` the subscriptions were last brought in step with.
    subscriptions_for: Option<u64>,
}

impl Stream<'_> {
    /// Handles one response: applies what is valid of it, then ACKs it, or NACKs it with
    /// the invalid resources. Returns whether it was ACKed.
    fn handle(&mut self, session: &mut Session, response: DeltaDiscoveryResponse) -> bool {
        if response.type_url == crate::store::WORKLOAD_TYPE
            && let Some(index) = &self.config.workloads
        {
            let detail = workloads::apply(index, &response);
            if let Some(detail) = &detail {
                tracing::warn!(resource = "workloads", %detail, "rejected (NACK)");
            }
            let acked = detail.is_none();
            self.send_request(DeltaDiscoveryRequest {
                type_url: response.type_url,
                response_nonce: response.nonce,
                error_detail: detail.map(nack_status),
                ..Default::default()
            });
            return acked;
        }
        let DeltaDiscoveryResponse { system_version_info, resources, type_url, removed_resources, nonce, .. } =
            response;
        let Some(resource_type) = ResourceType::from_type_url(&type_url) else {
            tracing::warn!(%type_url, "ignoring a response of an unknown type");
            return false;
        };
        let mut problems = Vec::new();
        let mut incoming = Vec::with_capacity(resources.len());
        let mut versions = BTreeMap::new();
        for resource in resources {
            if versions.insert(resource.name.clone(), resource.version.clone()).is_some() {
                problems.push(format!("duplicate name {} found among added/updated resources", resource.name));
                continue;
            }
            match resource.resource {
                Some(any) if any.type_url == type_url => incoming.push(Incoming {
                    name: Some(resource.name),
                    version: resource.version,
                    bytes: any.value.into(),
                }),
                Some(any) => {
                    problems.push(format!("{}: type {} in a {type_url} response", resource.name, any.type_url))
                }
                // A name without a body: the server has nothing for it (yet).
                None => {}
            }
        }
        for name in &removed_resources {
            if versions.contains_key(name) {
                problems.push(format!("duplicate name {name} found in the union of added+removed resources"));
            }
        }
        let detail = if problems.is_empty() {
            let mut verdict = session.validate(resource_type, incoming);
            if resource_type == ResourceType::Listener && !verdict.refused {
                // What stays bound: every held listener this response neither replaces
                // nor removes.
                let accepted: BTreeSet<String> =
                    verdict.accepted.iter().map(|v| v.resource.name().to_owned()).collect();
                let kept = session
                    .state
                    .held_listeners()
                    .filter(|(l, _)| !accepted.contains(&l.name) && !removed_resources.contains(&l.name))
                    .map(|(l, _)| l);
                refuse_duplicate_addresses(&mut verdict, kept);
            }
            let detail = verdict.error_detail(resource_type);
            // A refused response removes nothing either.
            let removed = if verdict.refused { &[][..] } else { &removed_resources[..] };
            session.accept(resource_type, &system_version_info, verdict.accepted, removed, detail.is_none());
            detail
        } else {
            // A malformed response is refused before anything of it is applied.
            session.stats.rejected(resource_type);
            Some(problems.join("; "))
        };
        let acked = match detail {
            None => {
                let acked = &mut session.acked.entry(resource_type).or_default().resources;
                acked.extend(versions);
                removed_resources.iter().for_each(|name| _ = acked.remove(name));
                self.send(resource_type, DeltaDiscoveryRequest { response_nonce: nonce, ..Default::default() });
                true
            }
            Some(detail) => {
                tracing::warn!(resource = resource_type.short_name(), version = %system_version_info, %detail, "rejected (NACK)");
                self.send(
                    resource_type,
                    DeltaDiscoveryRequest {
                        response_nonce: nonce,
                        error_detail: Some(nack_status(detail)),
                        ..Default::default()
                    },
                );
                false
            }
        };
        // Applied listeners and clusters may refer to new route configurations, endpoints
        // and secrets, ACKed or not.
        self.update_subscriptions(session);
        acked
    }

    /// Subscribes to newly referenced RDS, EDS and SDS names and unsubscribes from the rest.
    fn update_subscriptions(&mut self, session: &mut Session) {
        // What listeners and clusters refer to is unchanged: so are the names wanted.
        if self.subscriptions_for.replace(session.references()) == Some(session.references()) {
            return;
        }
        for resource_type in ResourceType::ALL.into_iter().filter(|t| !t.is_wildcard()) {
            let wanted = session.wanted(resource_type);
            let current = self.subscribed.get(&resource_type).cloned().unwrap_or_default();
            if wanted == current {
                continue;
            }
            let subscribe: Vec<String> = wanted.difference(&current).cloned().collect();
            let unsubscribe: Vec<String> = current.difference(&wanted).cloned().collect();
            self.send(
                resource_type,
                DeltaDiscoveryRequest {
                    resource_names_subscribe: subscribe,
                    resource_names_unsubscribe: unsubscribe.clone(),
                    ..Default::default()
                },
            );
            self.subscribed.insert(resource_type, wanted);
            if let Some(acked) = session.acked.get_mut(&resource_type) {
                unsubscribe.iter().for_each(|name| _ = acked.resources.remove(name));
            }
            session.forget(resource_type, &unsubscribe);
        }
    }

    /// Sends `request` for `resource_type`, with the node when it is due.
    fn send(&mut self, resource_type: ResourceType, mut request: DeltaDiscoveryRequest) {
        request.type_url = resource_type.type_url().to_owned();
        self.send_request(request);
    }

    /// Sends `request` (its type set), with the node when it is due.
    fn send_request(&mut self, mut request: DeltaDiscoveryRequest) {
        if !self.node_sent || !self.config.set_node_on_first_message_only {
            request.node = Some(self.config.node.clone());
        }
        self.node_sent = true;
        // A closed channel means the stream ended; the receive side reports why.
        let _ = self.tx.send(request);
    }
}
