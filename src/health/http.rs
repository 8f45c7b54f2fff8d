//! The HTTP health checker: `method path` to the host over HTTP/1.1 or HTTP/2, Envoy's
//! headers (`:authority` from the endpoint's health check hostname, `host` or the cluster's
//! name, `user-agent: Envoy/HC`, the configured additions and removals), and the answer judged as Envoy judges it: a status
//! in `expected_statuses` passes (degraded with `x-envoy-degraded`), one in
//! `retriable_statuses` fails towards the threshold, any other fails the host at once.

use std::ops::Range;

use bytes::Bytes;
use http::header::{CONNECTION, HOST, USER_AGENT};
use http::{HeaderName, HeaderValue, Request, Response, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::transport::Target;
use crate::config::cluster::HttpHealthCheck;
use crate::lb::health_check::{FailureKind, ProbeResult};
use crate::tls::ClientAlpn;

/// Envoy's `user-agent` on health check requests.
pub(super) const USER_AGENT_VALUE: &str = "Envoy/HC";

/// An HTTP connection a checker may keep between probes (`reuse_connection`).
pub(super) enum Connection {
    Http1(http1::SendRequest<Full<Bytes>>),
    Http2(http2::SendRequest<Full<Bytes>>),
}

impl Connection {
    /// Connects and runs the HTTP handshake; the connection is driven by its own task,
    /// which ends when this handle is dropped.
    pub async fn open(target: &Target, http2: bool) -> std::io::Result<Self> {
        let use_ = if http2 { ClientAlpn::Http2 } else { ClientAlpn::Http1 };
        let io = TokioIo::new(target.connect(use_).await?);
        if http2 {
            let (sender, connection) =
                http2::Builder::new(TokioExecutor::new()).handshake(io).await.map_err(std::io::Error::other)?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok(Self::Http2(sender))
        } else {
            let (sender, connection) = http1::Builder::new().handshake(io).await.map_err(std::io::Error::other)?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok(Self::Http1(sender))
        }
    }

    /// Sends `request` (origin-form URI plus `Host` for HTTP/1.1, absolute URI for HTTP/2).
    pub async fn send(&mut self, request: Request<Full<Bytes>>) -> hyper::Result<Response<Incoming>> {
        match self {
            Self::Http1(sender) => {
                sender.ready().await?;
                sender.send_request(request).await
            }
            Self::Http2(sender) => {
                sender.ready().await?;
                sender.send_request(request).await
            }
        }
    }

    pub fn is_http2(&self) -> bool {
        matches!(self, Self::Http2(_))
    }
}

/// One host's HTTP checker.
pub(super) struct HttpProber {
    config: HttpHealthCheck,
    target: Target,
    reuse: bool,
    connection: Option<Connection>,
}

impl HttpProber {
    pub fn new(config: HttpHealthCheck, target: Target, reuse: bool) -> Self {
        Self { config, target, reuse, connection: None }
    }

    pub fn close(&mut self) {
        self.connection = None;
    }

    pub async fn probe(&mut self) -> ProbeResult {
        let mut connection = match self.connection.take() {
            Some(connection) => connection,
            None => match Connection::open(&self.target, self.config.http2).await {
                Ok(connection) => connection,
                Err(error) => return network(&self.target, error),
            },
        };
        let request = match self.request(connection.is_http2()) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(cluster = %self.target.cluster, %error, "health check request cannot be built");
                return ProbeResult::Failed { kind: FailureKind::Active, retriable: false };
            }
        };
        let response = match connection.send(request).await {
            Ok(response) => response,
            Err(error) => return network(&self.target, error),
        };
        let status = response.status().as_u16();
        let degraded = response.headers().contains_key("x-envoy-degraded");
        let close = response.headers().get(CONNECTION).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        // Read the body to its end so that the connection can carry the next probe.
        if let Err(error) = response.into_body().collect().await {
            return network(&self.target, error);
        }
        if self.reuse && !close {
            self.connection = Some(connection);
        }
        judge(&self.config, status, degraded)
    }

    fn request(&self, http2: bool) -> Result<Request<Full<Bytes>>, http::Error> {
        let authority = self.target.authority(&self.config.host);
        let mut builder = Request::builder().method(self.config.method.clone());
        builder = if http2 {
            builder.version(Version::HTTP_2).uri(format!("http://{authority}{}", self.config.path))
        } else {
            builder.uri(self.config.path.as_str()).header(HOST, authority)
        };
        let mut request = builder.header(USER_AGENT, USER_AGENT_VALUE).body(Full::new(Bytes::new()))?;
        add_headers(request.headers_mut(), &self.config.request_headers_to_add)?;
        for name in &self.config.request_headers_to_remove {
            request.headers_mut().remove(name.as_str());
        }
        Ok(request)
    }
}

/// Adds `(name, value)` pairs (configured headers and gRPC metadata).
pub(super) fn add_headers(headers: &mut http::HeaderMap, pairs: &[(String, String)]) -> Result<(), http::Error> {
    for (name, value) in pairs {
        headers.append(HeaderName::try_from(name.as_str())?, HeaderValue::try_from(value.as_str())?);
    }
    Ok(())
}

/// A status against the configured ranges.
pub(super) fn judge(config: &HttpHealthCheck, status: u16, degraded: bool) -> ProbeResult {
    let within = |ranges: &[Range<u16>]| ranges.iter().any(|r| r.contains(&status));
    if within(&config.expected_statuses) {
        ProbeResult::Passed { degraded }
    } else {
        ProbeResult::Failed { kind: FailureKind::Active, retriable: within(&config.retriable_statuses) }
    }
}

pub(super) fn network(target: &Target, error: impl std::fmt::Display) -> ProbeResult {
    tracing::debug!(cluster = %target.cluster, address = %target.address, %error, "health check connection failed");
    ProbeResult::Failed { kind: FailureKind::Network, retriable: false }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> HttpHealthCheck {
        HttpHealthCheck {
            host: String::new(),
            path: "/healthz".into(),
            method: http::Method::GET,
            http2: false,
            expected_statuses: std::iter::once(200..201).collect(),
            retriable_statuses: std::iter::once(500..502).collect(),
            request_headers_to_add: Vec::new(),
            request_headers_to_remove: Vec::new(),
        }
    }

    #[test]
    fn statuses_are_judged_as_envoy_judges_them() {
        let c = config();
        assert_eq!(judge(&c, 200, false), ProbeResult::Passed { degraded: false });
        assert_eq!(judge(&c, 200, true), ProbeResult::Passed { degraded: true });
        assert_eq!(judge(&c, 204, false), ProbeResult::Failed { kind: FailureKind::Active, retriable: false });
        assert_eq!(judge(&c, 501, false), ProbeResult::Failed { kind: FailureKind::Active, retriable: true });
        assert_eq!(judge(&c, 503, false), ProbeResult::Failed { kind: FailureKind::Active, retriable: false });
    }
}
