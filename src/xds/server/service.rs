//! The tonic ADS service: one task per stream, driven by the client's requests, by resource
//! changes and by the server's shutdown. The protocol logic lives in `sotw` and `delta`.

use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::XdsServer;
use super::delta::DeltaStream;
use super::sotw::SotwStream;
use super::stream_handler::StreamHandler;
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryService;
use crate::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use crate::pb::envoy::service::secret::v3::secret_discovery_service_server::SecretDiscoveryService;

/// Responses waiting for a slow client; beyond this the stream task waits for it.
const RESPONSE_BUFFER: usize = 16;

#[derive(Clone)]
pub(super) struct AdsService {
    server: XdsServer,
    stopped: watch::Receiver<bool>,
}

impl AdsService {
    pub(super) fn new(server: XdsServer, stopped: watch::Receiver<bool>) -> Self {
        AdsService { server, stopped }
    }

    fn start<H: StreamHandler>(
        &self,
        handler: H,
        inbound: Streaming<H::Request>,
    ) -> ReceiverStream<Result<H::Response, Status>> {
        let (tx, rx) = mpsc::channel(RESPONSE_BUFFER);
        tokio::spawn(run(handler, inbound, tx, self.server.changes(), self.stopped.clone()));
        ReceiverStream::new(rx)
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for AdsService {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type DeltaAggregatedResourcesStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let handler = SotwStream::new(self.server.clone());
        Ok(Response::new(self.start(handler, request.into_inner())))
    }

    async fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        let handler = DeltaStream::new(self.server.clone());
        Ok(Response::new(self.start(handler, request.into_inner())))
    }
}

/// SDS on its own service, as Istio's agent serves it: the same streams, secrets only.
#[tonic::async_trait]
impl SecretDiscoveryService for AdsService {
    type StreamSecretsStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type DeltaSecretsStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_secrets(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamSecretsStream>, Status> {
        let handler = SotwStream::new(self.server.clone());
        Ok(Response::new(self.start(handler, request.into_inner())))
    }

    async fn delta_secrets(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaSecretsStream>, Status> {
        let handler = DeltaStream::new(self.server.clone());
        Ok(Response::new(self.start(handler, request.into_inner())))
    }

    async fn fetch_secrets(&self, _request: Request<DiscoveryRequest>) -> Result<Response<DiscoveryResponse>, Status> {
        Err(Status::unimplemented("REST-style FetchSecrets is not served; use StreamSecrets"))
    }
}

/// Runs one stream until the client ends it, stops reading, or the server shuts down.
async fn run<H: StreamHandler>(
    mut handler: H,
    mut inbound: Streaming<H::Request>,
    tx: mpsc::Sender<Result<H::Response, Status>>,
    mut changes: watch::Receiver<u64>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let responses = tokio::select! {
            message = inbound.next() => match message {
                Some(Ok(request)) => handler.on_request(request),
                Some(Err(status)) => {
                    tracing::debug!(%status, "xds server: stream ended by error");
                    return;
                }
                None => return,
            },
            changed = changes.changed() => match changed {
                Ok(()) => handler.on_change(),
                Err(_) => return,
            },
            () = stopped_signal(&mut stopped) => {
                let _ = tx.send(Err(Status::unavailable("xds server shutting down"))).await;
                return;
            }
        };
        for response in responses {
            if tx.send(Ok(response)).await.is_err() {
                return;
            }
        }
    }
}

/// Resolves when the server stops (or its handle is gone).
async fn stopped_signal(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}
