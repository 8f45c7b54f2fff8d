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
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryService;
use crate::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use crate::pb::google::protobuf::Any;
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

/// What the relay needs of a stream's messages (SotW or Delta) to ask for the name table
/// and take its answers.
trait NameTableStream {
    type Request: Send + 'static;
    type Response;
    fn type_url(request: &Self::Request) -> &str;
    /// The request for the name table.
    fn ask() -> Self::Request;
    /// `None` when `response` is not a name table; else the table, if it has one.
    fn table(response: &Self::Response) -> Option<Option<&Any>>;
    /// The ACK (or, with `error`, the NACK) of `response`.
    fn ack(response: &Self::Response, error: Option<RpcStatus>) -> Self::Request;
}

struct Sotw;

impl NameTableStream for Sotw {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;

    fn type_url(request: &DiscoveryRequest) -> &str {
        &request.type_url
    }

    fn ask() -> DiscoveryRequest {
        DiscoveryRequest { type_url: NAME_TABLE_TYPE.to_owned(), ..Default::default() }
    }

    fn table(response: &DiscoveryResponse) -> Option<Option<&Any>> {
        (response.type_url == NAME_TABLE_TYPE).then(|| response.resources.first())
    }

    fn ack(response: &DiscoveryResponse, error: Option<RpcStatus>) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: response.version_info.clone(),
            response_nonce: response.nonce.clone(),
            type_url: NAME_TABLE_TYPE.to_owned(),
            error_detail: error,
            ..Default::default()
        }
    }
}

struct Delta;

impl NameTableStream for Delta {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;

    fn type_url(request: &DeltaDiscoveryRequest) -> &str {
        &request.type_url
    }

    fn ask() -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest { type_url: NAME_TABLE_TYPE.to_owned(), ..Default::default() }
    }

    fn table(response: &DeltaDiscoveryResponse) -> Option<Option<&Any>> {
        (response.type_url == NAME_TABLE_TYPE).then(|| response.resources.first().and_then(|r| r.resource.as_ref()))
    }

    fn ack(response: &DeltaDiscoveryResponse, error: Option<RpcStatus>) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            response_nonce: response.nonce.clone(),
            type_url: NAME_TABLE_TYPE.to_owned(),
            error_detail: error,
            ..Default::default()
        }
    }
}

/// A stream with the DNS proxy fed: the name table asked for after the proxy's first
/// listener request, and its answers (which the returned function says are kept) handed
/// to `dns` and ACKed on the stream, never forwarded to the proxy.
fn with_dns<K: NameTableStream>(
    downstream: Streaming<K::Request>,
    dns: Arc<Dns>,
) -> (impl Stream<Item = K::Request> + Send + 'static, impl Fn(&K::Response) -> bool + Send + 'static) {
    let (inject, injected) = mpsc::unbounded_channel();
    let ask = inject.clone();
    let mut asked = false;
    let listeners = ResourceType::Listener.type_url();
    let downstream = requests(downstream).inspect(move |request: &K::Request| {
        if !asked && K::type_url(request) == listeners {
            asked = true;
            let _ = ask.send(K::ask());
        }
    });
    let keep = move |response: &K::Response| {
        let Some(table) = K::table(response) else { return false };
        let applied = table.map_or(Ok(()), |table| dns.apply(table));
        let _ = inject.send(K::ack(response, table_status(applied)));
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
        let (requests, keep) = with_dns::<Sotw>(request.into_inner(), dns);
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
        let (requests, keep) = with_dns::<Delta>(request.into_inner(), dns);
        let responses = self.client().delta_aggregated_resources(self.upstream(requests)?).await?.into_inner();
        let responses = responses.filter(move |r| std::future::ready(!r.as_ref().is_ok_and(&keep)));
        Ok(Response::new(Box::pin(responses)))
    }
}
