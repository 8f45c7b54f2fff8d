//! Istio's HTTP peer metadata exchange (`io.istio.http.peer_metadata.Config`): on the way
//! in, the peer's `x-envoy-peer-metadata` / `-id` headers are read and removed
//! (discovery); on the way out this proxy's own are added (propagation) — to every request
//! sent upstream, and to a response when its request carried the peer's, as Istio does.
//!
//! What was learnt goes into the request's [`PeerExchange`], where `istio.stats` finds it
//! when the response ends, whichever order the two filters run in.

mod cache;
pub mod tcp_frame;
pub mod wire;

use std::sync::{Arc, OnceLock};

use http::{HeaderName, HeaderValue};

use super::context::{ProxyBody, RequestContext, ResponseHook};
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use crate::config::filters::peer_metadata::{PeerMetadata, WorkloadMetadata};
use crate::proxy::stream_info::{SharedWithUpstream, StreamState};
use crate::store::WorkloadIndex;

/// The peers one request learnt of, shared by the filters that read or fill them. Kept
/// in the request's extensions (never sent on the wire).
#[derive(Debug, Clone, Default)]
pub struct PeerExchange(Arc<Peers>);

#[derive(Debug, Default)]
struct Peers {
    /// The workload that sent the request (Istio's `wasm.downstream_peer`).
    downstream: OnceLock<Arc<WorkloadMetadata>>,
    /// The workload that answered it (`wasm.upstream_peer`).
    upstream: OnceLock<Arc<WorkloadMetadata>>,
}

impl PeerExchange {
    /// The request's exchange, created by whichever filter asks first.
    pub fn of(extensions: &mut http::Extensions) -> Self {
        extensions.get_or_insert_default::<Self>().clone()
    }

    pub fn downstream(&self) -> Option<&Arc<WorkloadMetadata>> {
        self.0.downstream.get()
    }

    pub fn upstream(&self) -> Option<&Arc<WorkloadMetadata>> {
        self.0.upstream.get()
    }

    /// The first peer found wins, as in Istio ("duplicate peer metadata, skipping").
    fn set_downstream(&self, peer: Arc<WorkloadMetadata>) {
        let _ = self.0.downstream.set(peer);
    }

    fn set_upstream(&self, peer: Arc<WorkloadMetadata>) {
        let _ = self.0.upstream.set(peer);
    }
}

/// The filter: its settings, this proxy's own headers (encoded once) and the peers
/// already decoded.
pub struct PeerMetadataFilter {
    config: Arc<PeerMetadata>,
    id: HeaderValue,
    metadata: HeaderValue,
    peers: Arc<cache::PeerCache>,
    /// istiod's workload metadata, when the bootstrap subscribes to it.
    workloads: Option<Arc<WorkloadIndex>>,
}

static METADATA: HeaderName = HeaderName::from_static(wire::METADATA);
static METADATA_ID: HeaderName = HeaderName::from_static(wire::METADATA_ID);

impl PeerMetadataFilter {
    pub fn new(config: Arc<PeerMetadata>, factory: FactoryContext<'_>) -> Self {
        let node = factory.node;
        // Both are the proxy's own configuration; a node id that is no header value is
        // sent empty rather than failing every request.
        let id = HeaderValue::from_str(&node.id).unwrap_or_else(|_| HeaderValue::from_static(""));
        let metadata =
            HeaderValue::from_str(&wire::encode(&node.workload)).unwrap_or_else(|_| HeaderValue::from_static(""));
        let config = Arc::new(config.for_direction(factory.inbound));
        let workloads = factory.workloads.cloned();
        Self { config, id, metadata, peers: Arc::new(cache::PeerCache::default()), workloads }
    }
}

/// The filter state object that carries a downstream peer across to an internal listener
/// (Istio's `downstream_peer`), as the peer's metadata header would.
pub const DOWNSTREAM_PEER: &str = "downstream_peer";

impl HttpFilter for PeerMetadataFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        let exchange = PeerExchange::of(&mut request.parts.extensions);
        // A peer an earlier listener found and shared with this internal connection
        // (`shared_with_upstream` there) is this request's caller, as in Envoy, where the
        // connection's filter state is the request's too.
        if let Some(carried) = request.connection.stream.as_deref().and_then(|s| s.filter_state.get(DOWNSTREAM_PEER))
            && let Some(peer) = self.peers.decode(carried.as_bytes())
        {
            exchange.set_downstream(peer);
        }
        let headers = &mut request.parts.headers;
        let mut received = Received::default();
        if self.config.downstream_discovery {
            received.id = headers.contains_key(&METADATA_ID);
            if let Some(value) = headers.get(&METADATA) {
                received.metadata = true;
                if let Some(peer) = self.peers.decode(value.as_bytes()) {
                    exchange.set_downstream(peer);
                }
            }
            headers.remove(&METADATA_ID);
            headers.remove(&METADATA);
        }
        if self.config.downstream_workload_discovery
            && exchange.downstream().is_none()
            && let Some(peer) = self.workloads.as_ref().and_then(|index| index.peer(request.connection.peer.ip()))
        {
            exchange.set_downstream(peer);
        }
        if self.config.shared_with_upstream
            && let Some(peer) = exchange.downstream()
        {
            let state = request.parts.extensions.get_or_insert_default::<StreamState>();
            state.filter_state.set(DOWNSTREAM_PEER.into(), wire::encode(peer).into(), SharedWithUpstream::Once);
        }
        let headers = &mut request.parts.headers;
        if self.config.upstream_propagation {
            headers.insert(METADATA_ID.clone(), self.id.clone());
            headers.insert(METADATA.clone(), self.metadata.clone());
        }
        if self.config.upstream_discovery || (self.config.downstream_propagation && received.any()) {
            request.response_hooks.push(Box::new(OnResponse {
                exchange,
                peers: self.peers.clone(),
                upstream_discovery: self.config.upstream_discovery,
                id: (self.config.downstream_propagation && received.id).then(|| self.id.clone()),
                metadata: (self.config.downstream_propagation && received.metadata).then(|| self.metadata.clone()),
            }));
        }
        FilterHeadersStatus::Continue
    }
}

/// Which of the peer's headers the request carried: Istio answers with the same ones.
#[derive(Default)]
struct Received {
    id: bool,
    metadata: bool,
}

impl Received {
    fn any(&self) -> bool {
        self.id || self.metadata
    }
}

/// Upstream discovery and downstream propagation, on whichever response goes back.
struct OnResponse {
    exchange: PeerExchange,
    peers: Arc<cache::PeerCache>,
    upstream_discovery: bool,
    id: Option<HeaderValue>,
    metadata: Option<HeaderValue>,
}

impl ResponseHook for OnResponse {
    fn on_response(&self, mut response: http::Response<ProxyBody>) -> http::Response<ProxyBody> {
        let headers = response.headers_mut();
        if self.upstream_discovery {
            if let Some(peer) = headers.get(&METADATA).and_then(|value| self.peers.decode(value.as_bytes())) {
                self.exchange.set_upstream(peer);
            }
            headers.remove(&METADATA_ID);
            headers.remove(&METADATA);
        }
        if let Some(id) = &self.id {
            headers.insert(METADATA_ID.clone(), id.clone());
        }
        if let Some(metadata) = &self.metadata {
            headers.insert(METADATA.clone(), metadata.clone());
        }
        response
    }
}
