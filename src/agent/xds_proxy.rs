//! The xDS proxy pilot-agent runs, in-process: the proxy's ADS streams arrive on the Unix
//! socket Istio's bootstrap names (`./etc/istio/proxy/XDS`) and each is relayed, message for
//! message, to istiod's secure port over TLS with the pod's token, read afresh for every
//! stream (the kubelet rotates it). istiod checks the token's namespace and service account
//! against the node's metadata, which the proxy's own bootstrap supplies unchanged.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

use super::settings::AgentSettings;
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryService;
use crate::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};

type Responses<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Relays ADS streams to istiod.
#[derive(Clone)]
pub struct XdsProxy {
    settings: Arc<AgentSettings>,
    channel: Channel,
}

impl XdsProxy {
    pub fn new(settings: Arc<AgentSettings>, channel: Channel) -> Self {
        Self { settings, channel }
    }

    /// istiod's client, with no limit on what it may send (a large mesh's CDS is tens of MB).
    fn client(&self) -> AggregatedDiscoveryServiceClient<Channel> {
        AggregatedDiscoveryServiceClient::new(self.channel.clone()).max_decoding_message_size(usize::MAX)
    }

    /// The proxy's requests, ending when its stream ends or fails, with the token attached.
    fn upstream<T: Send + 'static>(
        &self,
        downstream: Streaming<T>,
    ) -> Result<Request<impl Stream<Item = T> + Send + 'static>, Status> {
        let bearer = self.settings.bearer().map_err(Status::unavailable)?;
        let requests =
            downstream.take_while(|r| std::future::ready(r.is_ok())).filter_map(|r| std::future::ready(r.ok()));
        let mut request = Request::new(requests);
        request.metadata_mut().insert("authorization", bearer);
        Ok(request)
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for XdsProxy {
    type StreamAggregatedResourcesStream = Responses<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Responses<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let upstream = self.upstream(request.into_inner())?;
        let responses = self.client().stream_aggregated_resources(upstream).await?.into_inner();
        Ok(Response::new(Box::pin(responses)))
    }

    async fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        let upstream = self.upstream(request.into_inner())?;
        let responses = self.client().delta_aggregated_resources(upstream).await?.into_inner();
        Ok(Response::new(Box::pin(responses)))
    }
}
