//! The xDS proxy pilot-agent runs, in-process: the proxy's ADS streams arrive on the Unix
//! socket Istio's bootstrap names (`./etc/istio/proxy/XDS`) and each is relayed, message for
//! message, to istiod's secure port over TLS with the pod's token, read afresh for every
//! stream (the kubelet rotates it). istiod checks the token's namespace and service account
//! against the node's metadata, which the proxy's own bootstrap supplies unchanged.
//!
//! With the DNS proxy on, the relay also asks istiod for its name table on each stream
//! (once the proxy has asked for listeners, as pilot-agent does) and keeps the answers from
//! the proxy: it hands them to the DNS proxy and ACKs them (NACKs one that does not decode)
//! on the stream itself.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt, stream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

use super::dns::{Dns, NAME_TABLE_TYPE};
use super::settings::AgentSettings;
use crate::config::ResourceType;
use crate::pb::envoy::service::discovery::v3::Resource;
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryService;
use crate::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use crate::pb::google::rpc::Status as RpcStatus;

type Responses<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Relays ADS streams to istiod.
#[derive(Clone)]
pub struct XdsProxy {
    settings: Arc<AgentSettings>,
    channel: Channel,
    /// The DNS proxy the name tables go to, when DNS capture is on.
    dns: Option<Arc<Dns>>,
}

impl XdsProxy {
    pub fn new(settings: Arc<AgentSettings>, channel: Channel, dns: Option<Arc<Dns>>) -> Self {
        Self { settings, channel, dns }
    }

    /// istiod's client, with no limit on what it may send (a large mesh's CDS is tens of MB).
    fn client(&self) -> AggregatedDiscoveryServiceClient<Channel> {
        AggregatedDiscoveryServiceClient::new(self.channel.clone()).max_decoding_message_size(usize::MAX)
    }

    /// `requests` with the token attached.
    fn upstream<S: Stream + Send + 'static>(&self, requests: S) -> Result<Request<S>, Status> {
        let bearer = self.settings.bearer().map_err(Status::unavailable)?;
        let mut request = Request::new(requests);
        request.metadata_mut().insert("authorization", bearer);
        Ok(request)
    }
}

/// The proxy's requests, ending when its stream ends or fails.
fn requests<T: Send + 'static>(downstream: Streaming<T>) -> impl Stream<Item = T> + Send + 'static {
    downstream.take_while(|r| std::future::ready(r.is_ok())).filter_map(|r| std::future::ready(r.ok()))
}

/// The proxy's requests and the relay's own (`injected`), until the proxy's end.
fn with_injected<T: Send + 'static>(
    downstream: impl Stream<Item = T> + Send + 'static,
    injected: mpsc::UnboundedReceiver<T>,
) -> impl Stream<Item = T> + Send + 'static {
    let downstream = downstream.map(Some).chain(stream::once(std::future::ready(None)));
    let injected = UnboundedReceiverStream::new(injected).map(Some);
    stream::select(downstream, injected).take_while(|r| std::future::ready(r.is_some())).filter_map(std::future::ready)
}

/// The ACK of a name table, or its NACK with why it did not decode.
fn table_status(applied: Result<(), String>) -> Option<RpcStatus> {
    applied.err().map(|message| RpcStatus { code: tonic::Code::Internal as i32, message, details: Vec::new() })
}

/// A SotW stream with the DNS proxy fed: the name table asked for after the proxy's first
/// listener request, and its answers kept from the proxy.
fn sotw_with_dns(
    downstream: Streaming<DiscoveryRequest>,
    dns: Arc<Dns>,
) -> (impl Stream<Item = DiscoveryRequest> + Send + 'static, impl Fn(&DiscoveryResponse) -> bool + Send + 'static) {
    let (inject, injected) = mpsc::unbounded_channel();
    let ask = inject.clone();
    let mut asked = false;
    let listeners = ResourceType::Listener.type_url();
    let downstream = requests(downstream).inspect(move |request: &DiscoveryRequest| {
        if !asked && request.type_url == listeners {
            asked = true;
            let _ = ask.send(DiscoveryRequest { type_url: NAME_TABLE_TYPE.to_owned(), ..Default::default() });
        }
    });
    let keep = move |response: &DiscoveryResponse| {
        if response.type_url != NAME_TABLE_TYPE {
            return false;
        }
        let applied = response.resources.first().map_or(Ok(()), |table| dns.apply(table));
        let _ = inject.send(DiscoveryRequest {
            version_info: response.version_info.clone(),
            response_nonce: response.nonce.clone(),
            type_url: NAME_TABLE_TYPE.to_owned(),
            error_detail: table_status(applied),
            ..Default::default()
        });
        true
    };
    (with_injected(downstream, injected), keep)
}

/// [`sotw_with_dns`] for a Delta stream.
fn delta_with_dns(
    downstream: Streaming<DeltaDiscoveryRequest>,
    dns: Arc<Dns>,
) -> (
    impl Stream<Item = DeltaDiscoveryRequest> + Send + 'static,
    impl Fn(&DeltaDiscoveryResponse) -> bool + Send + 'static,
) {
    let (inject, injected) = mpsc::unbounded_channel();
    let ask = inject.clone();
    let mut asked = false;
    let listeners = ResourceType::Listener.type_url();
    let downstream = requests(downstream).inspect(move |request: &DeltaDiscoveryRequest| {
        if !asked && request.type_url == listeners {
            asked = true;
            let _ = ask.send(DeltaDiscoveryRequest { type_url: NAME_TABLE_TYPE.to_owned(), ..Default::default() });
        }
    });
    let keep = move |response: &DeltaDiscoveryResponse| {
        if response.type_url != NAME_TABLE_TYPE {
            return false;
        }
        let table = response.resources.first().and_then(|r: &Resource| r.resource.as_ref());
        let applied = table.map_or(Ok(()), |table| dns.apply(table));
        let _ = inject.send(DeltaDiscoveryRequest {
            response_nonce: response.nonce.clone(),
            type_url: NAME_TABLE_TYPE.to_owned(),
            error_detail: table_status(applied),
            ..Default::default()
        });
        true
    };
    (with_injected(downstream, injected), keep)
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for XdsProxy {
    type StreamAggregatedResourcesStream = Responses<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Responses<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let Some(dns) = self.dns.clone() else {
            let upstream = self.upstream(requests(request.into_inner()))?;
            let responses = self.client().stream_aggregated_resources(upstream).await?.into_inner();
            return Ok(Response::new(Box::pin(responses)));
        };
        let (requests, keep) = sotw_with_dns(request.into_inner(), dns);
        let responses = self.client().stream_aggregated_resources(self.upstream(requests)?).await?.into_inner();
        let responses = responses.filter(move |r| std::future::ready(!r.as_ref().is_ok_and(&keep)));
        Ok(Response::new(Box::pin(responses)))
    }

    async fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        let Some(dns) = self.dns.clone() else {
            let upstream = self.upstream(requests(request.into_inner()))?;
            let responses = self.client().delta_aggregated_resources(upstream).await?.into_inner();
            return Ok(Response::new(Box::pin(responses)));
        };
        let (requests, keep) = delta_with_dns(request.into_inner(), dns);
        let responses = self.client().delta_aggregated_resources(self.upstream(requests)?).await?.into_inner();
        let responses = responses.filter(move |r| std::future::ready(!r.as_ref().is_ok_and(&keep)));
        Ok(Response::new(Box::pin(responses)))
    }
}
