//! The gRPC health checker: `grpc.health.v1.Health/Check` over HTTP/2, judged as Envoy
//! judges it: `grpc-status` 0 with a `SERVING` answer passes; any other answer (a
//! non-200 status, a non-gRPC response, another gRPC status, `NOT_SERVING`, a malformed
//! message) fails the host at once; a reset or closed connection is a network failure.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{CONTENT_TYPE, TE, USER_AGENT};
use http::{HeaderMap, Request, Version};
use http_body_util::{BodyExt, Full};
use prost::Message;

use super::http::{Connection, USER_AGENT_VALUE, add_headers, network};
use super::transport::Target;
use crate::config::cluster::GrpcHealthCheck;
use crate::lb::health_check::{FailureKind, ProbeResult};

const PATH: &str = "/grpc.health.v1.Health/Check";

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub service: String,
}

/// `grpc.health.v1.HealthCheckResponse`; `status` 1 is `SERVING`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `HealthCheckResponse.ServingStatus.SERVING`.
pub const SERVING: i32 = 1;

/// One host's gRPC checker.
pub(super) struct GrpcProber {
    config: GrpcHealthCheck,
    target: Target,
    reuse: bool,
    /// `grpc-timeout` sent with each call: the check's timeout.
    timeout_ms: u128,
    connection: Option<Connection>,
}

impl GrpcProber {
    pub fn new(config: GrpcHealthCheck, target: Target, reuse: bool, timeout: std::time::Duration) -> Self {
        Self { config, target, reuse, timeout_ms: timeout.as_millis(), connection: None }
    }

    pub fn close(&mut self) {
        self.connection = None;
    }

    pub async fn probe(&mut self) -> ProbeResult {
        let mut connection = match self.connection.take() {
            Some(connection) => connection,
            None => match Connection::open(&self.target, true).await {
                Ok(connection) => connection,
                Err(error) => return network(&self.target, error),
            },
        };
        let request = match self.request() {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(cluster = %self.target.cluster, %error, "gRPC health check request cannot be built");
                return ProbeResult::Failed { kind: FailureKind::Active, retriable: false };
            }
        };
        let response = match connection.send(request).await {
            Ok(response) => response,
            Err(error) => return network(&self.target, error),
        };
        let (parts, body) = response.into_parts();
        let collected = match body.collect().await {
            Ok(collected) => collected,
            Err(error) => return network(&self.target, error),
        };
        if self.reuse {
            self.connection = Some(connection);
        }
        let trailers = collected.trailers().cloned();
        let verdict = judge(parts.status.as_u16(), &parts.headers, collected.to_bytes(), trailers.as_ref());
        if let Err(reason) = &verdict {
            tracing::debug!(cluster = %self.target.cluster, address = %self.target.address, %reason, "gRPC health check failed");
        }
        match verdict {
            Ok(()) => ProbeResult::Passed { degraded: false },
            Err(_) => ProbeResult::Failed { kind: FailureKind::Active, retriable: false },
        }
    }

    fn request(&self) -> Result<Request<Full<Bytes>>, http::Error> {
        let authority = self.target.authority(&self.config.authority);
        let message = HealthCheckRequest { service: self.config.service_name.clone() }.encode_to_vec();
        let mut frame = BytesMut::with_capacity(5 + message.len());
        frame.put_u8(0);
        frame.put_u32(message.len() as u32);
        frame.put_slice(&message);
        let mut request = Request::post(format!("http://{authority}{PATH}"))
            .version(Version::HTTP_2)
            .header(CONTENT_TYPE, "application/grpc")
            .header(TE, "trailers")
            .header(USER_AGENT, USER_AGENT_VALUE)
            .header("grpc-timeout", format!("{}m", self.timeout_ms.max(1)))
            .body(Full::new(frame.freeze()))?;
        add_headers(request.headers_mut(), &self.config.initial_metadata)?;
        Ok(request)
    }
}

/// Whether a complete answer passes; `Err` says why not.
fn judge(status: u16, headers: &HeaderMap, body: Bytes, trailers: Option<&HeaderMap>) -> Result<(), String> {
    let grpc_status = trailers.and_then(|t| t.get("grpc-status")).or_else(|| headers.get("grpc-status"));
    if status != 200 {
        return Err(format!("HTTP status {status}"));
    }
    let grpc = headers.get(CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if !grpc {
        return Err("not a gRPC response".into());
    }
    match grpc_status.map(|v| v.as_bytes()) {
        Some(b"0") => {}
        Some(other) => return Err(format!("grpc-status {}", String::from_utf8_lossy(other))),
        None => return Err("no grpc-status".into()),
    }
    let answer = decode(body)?;
    if answer.status == SERVING { Ok(()) } else { Err(format!("serving status {}", answer.status)) }
}

/// The one message of a unary answer.
fn decode(mut body: Bytes) -> Result<HealthCheckResponse, String> {
    if body.len() < 5 {
        return Err("no message".into());
    }
    let compressed = body.get_u8();
    let length = body.get_u32() as usize;
    if compressed != 0 || body.len() != length {
        return Err("invalid grpc.health.v1 payload".into());
    }
    HealthCheckResponse::decode(body).map_err(|e| format!("invalid grpc.health.v1 payload: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(status: i32) -> Bytes {
        let message = HealthCheckResponse { status }.encode_to_vec();
        let mut frame = BytesMut::new();
        frame.put_u8(0);
        frame.put_u32(message.len() as u32);
        frame.put_slice(&message);
        frame.freeze()
    }

    fn grpc_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, "application/grpc".parse().unwrap());
        headers
    }

    fn ok_trailers() -> HeaderMap {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        trailers
    }

    #[test]
    fn serving_passes_and_everything_else_fails() {
        let headers = grpc_headers();
        assert!(judge(200, &headers, framed(SERVING), Some(&ok_trailers())).is_ok());
        assert!(judge(200, &headers, framed(2), Some(&ok_trailers())).is_err(), "NOT_SERVING");
        assert!(judge(200, &headers, framed(0), Some(&ok_trailers())).is_err(), "UNKNOWN");
        assert!(judge(503, &headers, framed(SERVING), Some(&ok_trailers())).is_err());
        assert!(judge(200, &HeaderMap::new(), framed(SERVING), Some(&ok_trailers())).is_err(), "not gRPC");
        let mut unimplemented = grpc_headers();
        unimplemented.insert("grpc-status", "12".parse().unwrap());
        assert!(judge(200, &unimplemented, Bytes::new(), None).is_err(), "trailers-only error");
        assert!(judge(200, &headers, Bytes::from_static(b"\0\0\0\0\x09ab"), Some(&ok_trailers())).is_err());
    }
}
