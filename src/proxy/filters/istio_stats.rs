//! Istio's standard metrics (`istio.stats`, `stats.PluginConfig`): when a response ends,
//! `istio_requests_total`, `istio_request_duration_milliseconds`, `istio_request_bytes`,
//! `istio_response_bytes` and, for gRPC, `istio_response_messages_total`, labelled as Istio labels
//! them ([`labels`]) with the peer the metadata exchange found
//! ([`super::peer_metadata::PeerExchange`]).
//!
//! The request's part of the facts is taken as its headers pass; the rest (status, gRPC
//! status, bytes, the connection manager's response flags) as the response goes back,
//! through a response hook that wraps the body ([`body`]). The cells of each label set are
//! created once ([`series`]).

mod body;
pub(crate) mod labels;
pub mod series;

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use http::HeaderMap;

use super::context::{ProxyBody, RequestBodyTap, RequestContext, ResponseFlagsSlot, ResponseHook};
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use super::peer_metadata::PeerExchange;
use crate::config::filters::istio_stats::{IstioStats, StatsReporter, TagOverride, TagValue};
use crate::config::filters::peer_metadata::WorkloadMetadata;
use crate::config::route::{Action, ClusterSpecifier};
use crate::proxy::response_flags::ResponseFlags;
use crate::proxy::upstream::{UpstreamLocalUriSan, UpstreamPeerUriSan};
use crate::telemetry::{Gauge, StatName};
use labels::{Facts, Reporter};

/// The filter: shared by every worker and connection of its connection manager.
pub struct IstioStatsFilter {
    shared: Arc<Shared>,
}

struct Shared {
    config: Arc<IstioStats>,
    reporter: Reporter,
    local: WorkloadMetadata,
    series: series::SeriesCache,
    /// `istio_build{component="proxy",tag="<ISTIO_VERSION>"} 1`, held while the filter is.
    _build: Gauge,
}

impl IstioStatsFilter {
    pub fn new(config: Arc<IstioStats>, factory: FactoryContext<'_>) -> Self {
        let reporter = match config.reporter {
            StatsReporter::ServerGateway => Reporter::ServerGateway,
            StatsReporter::ByDirection if factory.inbound => Reporter::ServerSidecar,
            StatsReporter::ByDirection => Reporter::ClientSidecar,
        };
        let local = factory.node.workload.clone();
        let version = if local.istio_version.is_empty() { "unknown" } else { local.istio_version.as_str() };
        let labels = vec![("component".to_owned(), "proxy".to_owned()), ("tag".to_owned(), version.to_owned())];
        let build = factory.stats.gauge(StatName {
            flat: format!("component=.=proxy;.;tag=.={version};.;istio_build"),
            family: "istio_build".to_owned(),
            labels,
        });
        build.set(1);
        let series = series::SeriesCache::new(factory.stats.clone(), config.clone());
        Self { shared: Arc::new(Shared { config, reporter, local, series, _build: build }) }
    }
}

impl HttpFilter for IstioStatsFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        let exchange = PeerExchange::of(&mut request.parts.extensions);
        // gRPC: the request's messages are counted as its body goes upstream.
        let request_frames = request.is_grpc.then(|| {
            let frames = Arc::new(Mutex::new(body::GrpcFrames::default()));
            let fed = frames.clone();
            let tap = RequestBodyTap(Arc::new(move |chunk: &[u8]| {
                fed.lock().unwrap_or_else(PoisonError::into_inner).feed(chunk);
            }));
            request.parts.extensions.insert(tap);
            frames
        });
        let parts = &*request.parts;
        let config = &self.shared.config;
        let host = if config.disable_host_header_fallback {
            None
        } else {
            parts
                .headers
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .or_else(|| parts.uri.authority().map(|a| a.as_str()))
                .map(str::to_owned)
        };
        let route = request.route.and_then(|r| r.route);
        let cluster = route.and_then(|r| match &r.action {
            Action::Route(action) => match &action.cluster {
                ClusterSpecifier::Cluster(name) => Some(name.clone()),
                ClusterSpecifier::ClusterHeader(header) => {
                    parts.headers.get(header.as_str()).and_then(|v| v.to_str().ok()).map(str::to_owned)
                }
                // The split is decided later, by the router: the `host` header says.
                ClusterSpecifier::WeightedClusters(_) => None,
            },
            _ => None,
        });
        let cluster_service_host = cluster
            .as_deref()
            .filter(|name| name.starts_with("inbound|") && name.ends_with("||"))
            .and_then(|name| request.callouts.istio_service_host(name));
        let dimensions = config
            .overrides
            .iter()
            .map(|(_, change)| match change {
                TagOverride::Remove(_) => Some(String::new()),
                TagOverride::Set(_, value) => request_value(value, parts),
            })
            .collect();
        let content_length = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .unwrap_or(0);
        let pending = Pending {
            shared: self.shared.clone(),
            started: Instant::now(),
            grpc: request.is_grpc,
            host,
            cluster,
            cluster_service_host,
            route_name: route.map(|r| r.name.clone()).filter(|n| !n.is_empty()),
            // Over HBONE the tunnel's peer, carried to the internal listener; else the TLS peer.
            peer_san: match request.connection.carried_peer_principal() {
                Some(principal) => Some(principal.to_owned()),
                None => request.connection.peer_identity.as_ref().and_then(|p| p.uri_sans.first().cloned()),
            },
            upstream_san: None,
            // Server side: the certificate this sidecar presented to the client; client
            // side, the one it presented upstream (set with the response).
            local_san: request.connection.local_uri_san.clone(),
            exchange,
            request_bytes: request_header_bytes(parts).saturating_add(content_length),
            dimensions,
            response_code: 0,
            grpc_status: None,
            response_bytes: 0,
            frames: body::GrpcFrames::default(),
            request_frames,
            flags: ResponseFlagsSlot::default(),
            body_was_empty: false,
        };
        request.response_hooks.push(Box::new(OnResponse(Cell::new(Some(pending)))));
        FilterHeadersStatus::Continue
    }
}

/// A label value known from the request; `None` when it needs the response.
fn request_value(value: &TagValue, parts: &http::request::Parts) -> Option<String> {
    const UNKNOWN: &str = "unknown";
    Some(match value {
        TagValue::Literal(text) => text.clone(),
        TagValue::RequestHeader(name) => {
            parts.headers.get(name.as_str()).and_then(|v| v.to_str().ok()).unwrap_or(UNKNOWN).to_owned()
        }
        TagValue::RequestHost => parts
            .headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| parts.uri.authority().map(|a| a.as_str()))
            .unwrap_or(UNKNOWN)
            .to_owned(),
        TagValue::RequestMethod => parts.method.as_str().to_owned(),
        TagValue::RequestUrlPath => parts.uri.path().to_owned(),
        TagValue::ResponseHeader(_) | TagValue::ResponseCode => return None,
    })
}

fn response_value(value: &TagValue, status: u16, headers: &HeaderMap) -> String {
    match value {
        TagValue::ResponseHeader(name) => {
            headers.get(name.as_str()).and_then(|v| v.to_str().ok()).unwrap_or("unknown").to_owned()
        }
        TagValue::ResponseCode => status.to_string(),
        _ => "unknown".to_owned(),
    }
}

/// Envoy's header byte size: names and values, pseudo-headers included.
fn request_header_bytes(parts: &http::request::Parts) -> u64 {
    let pseudo = parts.method.as_str().len()
        + parts.uri.path_and_query().map_or(1, |p| p.as_str().len())
        + parts.uri.authority().map_or(0, |a| a.as_str().len());
    (pseudo + header_bytes(&parts.headers)) as u64
}

fn header_bytes(headers: &HeaderMap) -> usize {
    headers.iter().map(|(k, v)| k.as_str().len() + v.len()).sum()
}

/// One request waiting for the end of its response.
pub(crate) struct Pending {
    shared: Arc<Shared>,
    started: Instant,
    grpc: bool,
    host: Option<String>,
    cluster: Option<String>,
    /// The cluster's Istio service host, looked up only for inbound clusters, whose name
    /// does not carry it.
    cluster_service_host: Option<String>,
    route_name: Option<String>,
    peer_san: Option<String>,
    /// The upstream certificate's identity (client side).
    upstream_san: Option<Arc<str>>,
    /// This sidecar's own identity on the connection the request or its upstream used.
    local_san: Option<Arc<str>>,
    exchange: PeerExchange,
    request_bytes: u64,
    /// One value per configured label override (see `series`).
    dimensions: Vec<Option<String>>,
    response_code: u16,
    grpc_status: Option<u32>,
    response_bytes: u64,
    /// The request body's gRPC messages, counted on their way upstream.
    request_frames: Option<Arc<Mutex<body::GrpcFrames>>>,
    frames: body::GrpcFrames,
    flags: ResponseFlagsSlot,
    /// The body had nothing to send: dropping it is its end, not a disconnect.
    body_was_empty: bool,
}

fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

impl Pending {
    fn response_body(&mut self, chunk: &[u8], len: usize) {
        self.response_bytes = self.response_bytes.saturating_add(len as u64);
        if self.grpc {
            self.frames.feed(chunk);
        }
    }

    fn trailers(&mut self, trailers: &HeaderMap) {
        self.response_bytes = self.response_bytes.saturating_add(header_bytes(trailers) as u64);
        if let Some(status) = grpc_status(trailers) {
            self.grpc_status = Some(status);
        }
    }

    /// Records the request; `cut` is how its body ended (`DC`, `UC`, or nothing).
    fn report(self, cut: ResponseFlags) {
        let mut flags = self.flags.0.get().copied().unwrap_or(ResponseFlags::NONE);
        flags.insert(cut);
        let shared = &*self.shared;
        let peer = match shared.reporter {
            Reporter::ClientSidecar => self.exchange.upstream(),
            Reporter::ServerSidecar | Reporter::ServerGateway => self.exchange.downstream(),
        };
        let facts = Facts {
            reporter: shared.reporter,
            local: &shared.local,
            peer,
            endpoint_peer: self.exchange.upstream(),
            // Server side: the client's certificate; client side: the upstream's.
            peer_san: match shared.reporter {
                Reporter::ClientSidecar => self.upstream_san.as_deref(),
                _ => self.peer_san.as_deref(),
            },
            local_san: self.local_san.as_deref(),
            host: self.host.as_deref(),
            route_name: self.route_name.as_deref(),
            cluster: self.cluster.as_deref(),
            cluster_service_host: self.cluster_service_host.as_deref(),
            grpc: self.grpc,
            response_code: self.response_code,
            grpc_status: self.grpc_status,
            flags,
        };
        let mut labels: Vec<(&str, Cow<'_, str>)> = labels::standard(&facts);
        for ((_, change), value) in shared.config.overrides.iter().zip(self.dimensions) {
            let tag = match change {
                TagOverride::Remove(tag) => tag,
                TagOverride::Set(tag, _) => tag.as_str(),
            };
            labels.push((tag, Cow::Owned(value.unwrap_or_default())));
        }
        shared.series.with(&labels, self.grpc, |series| {
            if let Some(counter) = &series.requests_total {
                counter.inc();
            }
            if let Some(histogram) = &series.request_duration_milliseconds {
                histogram.record(self.started.elapsed());
            }
            if let Some(histogram) = &series.request_bytes {
                histogram.record_value(self.request_bytes);
            }
            if let Some(histogram) = &series.response_bytes {
                histogram.record_value(self.response_bytes);
            }
            if let Some(counter) = &series.response_messages_total {
                counter.add(self.frames.messages);
            }
            if let (Some(counter), Some(frames)) = (&series.request_messages_total, &self.request_frames) {
                counter.add(frames.lock().unwrap_or_else(PoisonError::into_inner).messages);
            }
        });
    }
}

/// Takes the response's facts and wraps its body.
struct OnResponse(Cell<Option<Pending>>);

impl ResponseHook for OnResponse {
    fn on_response(&self, response: http::Response<ProxyBody>) -> http::Response<ProxyBody> {
        let Some(mut pending) = self.0.take() else { return response };
        let (mut parts, body) = response.into_parts();
        pending.response_code = parts.status.as_u16();
        pending.upstream_san = parts.extensions.get::<UpstreamPeerUriSan>().map(|san| san.0.clone());
        if pending.shared.reporter == Reporter::ClientSidecar {
            pending.local_san = parts.extensions.get::<UpstreamLocalUriSan>().map(|san| san.0.clone());
        }
        pending.response_bytes = (3 + header_bytes(&parts.headers)) as u64;
        // A trailers-only gRPC answer has its status in the headers.
        pending.grpc_status = grpc_status(&parts.headers);
        for ((_, change), value) in pending.shared.config.overrides.iter().zip(pending.dimensions.iter_mut()) {
            if let (TagOverride::Set(_, expression), None) = (change, &value) {
                *value = Some(response_value(expression, pending.response_code, &parts.headers));
            }
        }
        parts.extensions.insert(pending.flags.clone());
        pending.body_was_empty = hyper::body::Body::is_end_stream(&body);
        let body = http_body_util::BodyExt::boxed_unsync(body::Observed::new(body, pending));
        http::Response::from_parts(parts, body)
    }
}
