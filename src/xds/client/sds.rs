//! Secrets over separate SDS streams, one per serving cluster.
//!
//! Istio never sends secrets on the ADS stream: its agent serves them (`default`, the
//! workload certificate, and `ROOTCA`) on the `sds-grpc` Unix-socket cluster. A TLS context
//! whose `sds_config` names such a cluster gets its secrets from a state-of-the-world
//! `StreamSecrets` stream to it, which this module runs. Accepted secrets go to the ADS
//! client's session, which owns the configuration and publishes.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::status::nack_status;
use super::status::{self, Recovery};
use super::transport;
use super::validate::{Incoming, validate};
use crate::config::{Address, Resource, ResourceType};
use crate::core::backoff::Backoff;
use crate::core::shutdown::Signal;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use crate::pb::envoy::service::secret::v3::secret_discovery_service_client::SecretDiscoveryServiceClient;
use crate::pb::google::rpc::Status;
use crate::store::Versioned;

/// Secrets accepted on an SDS stream.
#[derive(Debug)]
pub struct SdsUpdate {
    pub version: String,
    pub secrets: Vec<Versioned<Resource>>,
    /// Whether the whole response was accepted (and ACKed).
    pub whole: bool,
}

/// The running SDS streams and the channel their updates arrive on.
pub struct SdsStreams {
    node: core::Node,
    shutdown: Signal,
    seed: u64,
    names: BTreeMap<String, watch::Sender<BTreeSet<String>>>,
    sender: mpsc::UnboundedSender<SdsUpdate>,
    pub updates: mpsc::UnboundedReceiver<SdsUpdate>,
}

impl SdsStreams {
    pub fn new(node: core::Node, shutdown: Signal, seed: u64) -> Self {
        let (sender, updates) = mpsc::unbounded_channel();
        Self { node, shutdown, seed, names: BTreeMap::new(), sender, updates }
    }

    /// Makes each serving cluster's stream ask for exactly `wanted[cluster]`, starting
    /// streams as clusters appear. `address_of` finds a cluster's server.
    pub fn sync(&mut self, wanted: BTreeMap<String, BTreeSet<String>>, address_of: impl Fn(&str) -> Option<Address>) {
        for (cluster, names) in &mut self.names {
            if !wanted.contains_key(cluster) {
                names.send_if_modified(|current| !std::mem::take(current).is_empty());
            }
        }
        for (cluster, names) in wanted {
            if let Some(sender) = self.names.get(&cluster) {
                sender.send_if_modified(|current| {
                    let changed = *current != names;
                    *current = names.clone();
                    changed
                });
                continue;
            }
            let Some(address) = address_of(&cluster) else {
                tracing::warn!(%cluster, "SDS cluster is not a bootstrap cluster with an endpoint; its secrets cannot be fetched");
                continue;
            };
            let (sender, receiver) = watch::channel(names);
            let stream = SdsStream {
                cluster: cluster.clone(),
                address,
                node: self.node.clone(),
                names: receiver,
                updates: self.sender.clone(),
                warned: HashSet::new(),
            };
            tokio::spawn(stream.run(self.shutdown.clone(), self.seed));
            self.names.insert(cluster, sender);
        }
    }
}

struct SdsStream {
    cluster: String,
    address: Address,
    node: core::Node,
    names: watch::Receiver<BTreeSet<String>>,
    updates: mpsc::UnboundedSender<SdsUpdate>,
    warned: HashSet<crate::config::Ignored>,
}

impl SdsStream {
    async fn run(mut self, shutdown: Signal, seed: u64) {
        let mut backoff = Backoff::xds(seed);
        loop {
            let outcome = tokio::select! {
                outcome = self.stream_once(&mut backoff) => outcome,
                _ = shutdown.clone().triggered() => return,
            };
            if let Err(status) = outcome {
                tracing::warn!(cluster = %self.cluster, code = ?status.code(), message = status.message(), "SDS stream failed");
                if status::recovery(status.code()) == Recovery::GiveUp {
                    return;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                _ = shutdown.clone().triggered() => return,
            }
        }
    }

    async fn stream_once(&mut self, backoff: &mut Backoff) -> Result<(), tonic::Status> {
        let channel = transport::connect(&self.address)
            .await
            .map_err(|e| tonic::Status::unavailable(format!("cannot connect: {e}")))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut version = String::new();
        let mut nonce = String::new();
        let mut names = self.names.borrow_and_update().clone();
        let request = |version: &str, nonce: &str, names: &BTreeSet<String>, error: Option<Status>, node: bool| {
            DiscoveryRequest {
                version_info: version.to_owned(),
                node: node.then(|| self.node.clone()),
                resource_names: names.iter().cloned().collect(),
                type_url: ResourceType::Secret.type_url().to_owned(),
                response_nonce: nonce.to_owned(),
                error_detail: error,
                ..Default::default()
            }
        };
        let _ = tx.send(request(&version, &nonce, &names, None, true));
        let mut client = SecretDiscoveryServiceClient::new(channel);
        let mut responses = client.stream_secrets(UnboundedReceiverStream::new(rx)).await?.into_inner();
        loop {
            tokio::select! {
                response = responses.message() => {
                    let Some(DiscoveryResponse { version_info, resources, nonce: response_nonce, .. }) = response? else {
                        return Ok(());
                    };
                    nonce = response_nonce;
                    let incoming = resources
                        .into_iter()
                        .map(|any| Incoming { name: None, version: version_info.clone(), bytes: any.value.into() })
                        .collect();
                    // As on ADS: secrets are applied in order until the first invalid one.
                    let verdict = validate(None, ResourceType::Secret, incoming, &mut self.warned);
                    let detail = verdict.error_detail(ResourceType::Secret);
                    let whole = detail.is_none();
                    if whole || !verdict.accepted.is_empty() {
                        let update = SdsUpdate { version: version_info.clone(), secrets: verdict.accepted, whole };
                        let _ = self.updates.send(update);
                    }
                    match detail {
                        None => {
                            version = version_info;
                            backoff.reset();
                            let _ = tx.send(request(&version, &nonce, &names, None, false));
                        }
                        Some(detail) => {
                            tracing::warn!(cluster = %self.cluster, %detail, "SDS update rejected (NACK)");
                            let _ = tx.send(request(&version, &nonce, &names, Some(nack_status(detail)), false));
                        }
                    }
                }
                changed = self.names.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    names = self.names.borrow_and_update().clone();
                    let _ = tx.send(request(&version, &nonce, &names, None, false));
                }
            }
        }
    }
}
