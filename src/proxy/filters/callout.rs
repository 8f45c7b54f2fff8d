//! Requests a filter makes to another cluster (an authorization or rate-limit service, a
//! JWKS server): the cluster's balancer picks the endpoint and the worker's pools carry
//! the request, with the cluster's TLS, as for any routed request.

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full, Limited};

use crate::lb::PickContext;
use crate::proxy::clusters::WorkerClusters;
use crate::proxy::original_dst::DestinationSources;
use crate::proxy::upstream::{RequestBody, ResponseBody};

/// The most a callout's response body may hold.
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// Why a callout got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalloutError {
    #[error("cluster {0:?} does not exist")]
    NoCluster(String),
    #[error("cluster {0:?} has no healthy endpoint")]
    NoHealthyUpstream(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("upstream failed: {0}")]
    Upstream(String),
    /// A gRPC call ended with a status other than OK.
    #[error("gRPC status {status}: {message}")]
    Grpc { status: u32, message: String },
    #[error("cannot decode the answer: {0}")]
    Decode(String),
}

/// A worker's means of calling other clusters, lent to filters for one request.
pub struct Callouts<'a> {
    clusters: &'a WorkerClusters,
}

impl<'a> Callouts<'a> {
    pub fn new(clusters: &'a WorkerClusters) -> Self {
        Self { clusters }
    }

    /// The Istio service host of cluster `name` (`istio.services[0].host`), if it exists.
    pub fn istio_service_host(&self, name: &str) -> Option<String> {
        self.clusters.store.load().clusters.get(name)?.resource.istio_service_host.clone()
    }

    /// Sends `request` to `cluster` and reads the whole response, within `timeout`.
    /// `http2`: speak HTTP/2 whatever the cluster's protocol options say (gRPC).
    pub async fn send(
        &self,
        cluster: &str,
        request: Request<Bytes>,
        http2: bool,
        timeout: Duration,
    ) -> Result<Response<Bytes>, CalloutError> {
        match tokio::time::timeout(timeout, self.send_unbounded(cluster, request, http2)).await {
            Ok(result) => result.map(|(response, _)| response),
            Err(_) => Err(CalloutError::Timeout(timeout)),
        }
    }

    async fn send_unbounded(
        &self,
        cluster_name: &str,
        request: Request<Bytes>,
        http2: bool,
    ) -> Result<(Response<Bytes>, Option<http::HeaderMap>), CalloutError> {
        let request = request.map(|body| Full::new(body).map_err(|never| match never {}).boxed());
        let response = self.forward(cluster_name, request, http2).await?;
        let (parts, body) = response.into_parts();
        let collected = Limited::new(body, MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| CalloutError::Upstream(format!("reading the response: {e}")))?;
        let trailers = collected.trailers().cloned();
        Ok((Response::from_parts(parts, collected.to_bytes()), trailers))
    }

    /// Sends `request` to `cluster_name` and hands back the response as it streams: the
    /// balancer picks the endpoint, the cluster's TLS and circuit breakers apply, and the
    /// pool's stats count it. No timeout: the caller bounds it.
    pub async fn forward(
        &self,
        cluster_name: &str,
        request: Request<RequestBody>,
        http2: bool,
    ) -> Result<Response<ResponseBody>, CalloutError> {
        let clusters = self.clusters;
        let snapshot = clusters.store.load();
        let Some(local) = clusters.get(&snapshot, cluster_name) else {
            return Err(CalloutError::NoCluster(cluster_name.to_owned()));
        };
        let pick = PickContext { hash: None, attempt: 0, previous: &[], now: Instant::now() };
        let Some(host) = local.pick(&pick, DestinationSources::default) else {
            return Err(CalloutError::NoHealthyUpstream(cluster_name.to_owned()));
        };
        let tls =
            local.tls(&host.endpoint, &snapshot, &clusters.tls).map_err(|e| CalloutError::Upstream(e.to_string()))?;
        local
            .forward(&clusters.upstreams, &host, http2, request, tls)
            .await
            .map_err(|e| CalloutError::Upstream(e.to_string()))
    }

    /// A unary gRPC call: `path` is `/package.Service/Method`; `authority` the `:authority`
    /// to send (Envoy sends the cluster name when the gRPC service sets none).
    pub async fn grpc_unary<Req, Resp>(
        &self,
        cluster: &str,
        authority: &str,
        path: &str,
        message: &Req,
        timeout: Duration,
    ) -> Result<Resp, CalloutError>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let mut frame = BytesMut::with_capacity(5 + message.encoded_len());
        frame.put_u8(0);
        frame.put_u32(u32::try_from(message.encoded_len()).map_err(|e| CalloutError::Decode(e.to_string()))?);
        message.encode(&mut frame).map_err(|e| CalloutError::Decode(e.to_string()))?;
        let uri = format!("http://{authority}{path}");
        let mut request = Request::post(uri.as_str())
            .body(frame.freeze())
            .map_err(|e| CalloutError::Upstream(format!("building the request: {e}")))?;
        let headers = request.headers_mut();
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
        if let Ok(value) = HeaderValue::from_str(&format!("{}m", timeout.as_millis())) {
            headers.insert("grpc-timeout", value);
        }
        let call = self.send_unbounded(cluster, request, true);
        let (response, trailers) = match tokio::time::timeout(timeout, call).await {
            Ok(result) => result?,
            Err(_) => return Err(CalloutError::Timeout(timeout)),
        };
        // Trailers-only responses carry the status in the headers.
        let status_in = |headers: &http::HeaderMap| {
            let status = headers.get("grpc-status")?.to_str().ok()?.parse::<u32>().ok()?;
            let message = headers.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            Some((status, message))
        };
        let status = trailers.as_ref().and_then(status_in).or_else(|| status_in(response.headers()));
        match status {
            Some((0, _)) => {}
            Some((status, message)) => return Err(CalloutError::Grpc { status, message }),
            None if !response.status().is_success() => {
                return Err(CalloutError::Upstream(format!("HTTP status {}", response.status())));
            }
            None => return Err(CalloutError::Decode("no grpc-status".to_owned())),
        }
        decode_frame(response.into_body())
    }
}

/// The one message of a unary gRPC response body.
fn decode_frame<Resp: prost::Message + Default>(mut body: Bytes) -> Result<Resp, CalloutError> {
    if body.len() < 5 {
        return Err(CalloutError::Decode("short gRPC frame".to_owned()));
    }
    if body.get_u8() != 0 {
        return Err(CalloutError::Decode("compressed gRPC messages are not supported".to_owned()));
    }
    let length = body.get_u32() as usize;
    if body.len() < length {
        return Err(CalloutError::Decode("truncated gRPC frame".to_owned()));
    }
    Resp::decode(body.split_to(length)).map_err(|e| CalloutError::Decode(e.to_string()))
}
