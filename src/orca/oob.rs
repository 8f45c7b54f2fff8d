//! Out-of-band ORCA: one long-lived `OpenRcaService/StreamCoreMetrics` stream to one
//! endpoint, whose reports go to a [`LoadSink`]. This is how a balancer learns the load of
//! backends it is not currently sending requests to.
//!
//! Recovery follows Envoy's `OrcaOobSession` and gRFC A51: any failure reconnects after a
//! jittered exponential backoff (Envoy: 1 s up to 60 s) that resets once a report arrived,
//! so a server that accepts and hangs up cannot make the client spin; `UNIMPLEMENTED`
//! means the backend has no ORCA service, and the client stops for good.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

use crate::core::backoff::Backoff;
use crate::core::shutdown::Signal;
use crate::lb::load::LoadSink;
use crate::pb::google::protobuf::Duration as ProtoDuration;
use crate::pb::orca_service::OrcaLoadReportRequest;
use crate::pb::orca_service::open_rca_service_client::OpenRcaServiceClient;

use super::report::from_proto;

/// Why a stream task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OobExit {
    /// The shutdown signal fired.
    Shutdown,
    /// The endpoint answered `UNIMPLEMENTED`: it has no ORCA service; asking again would
    /// only cost it a failed call per backoff period.
    Unimplemented,
}

/// The out-of-band stream client for one endpoint.
pub struct OobClient {
    endpoint: SocketAddr,
    /// The stream's `:authority`; `None`: the address dialled.
    authority: Option<String>,
    report_interval: Duration,
    sink: Arc<dyn LoadSink>,
    backoff: Backoff,
}

/// Starts an [`OobClient`] with Envoy's backoff; see [`OobClient::spawn`].
pub fn spawn_oob_stream(
    endpoint: SocketAddr,
    report_interval: Duration,
    sink: Arc<dyn LoadSink>,
    shutdown: Signal,
) -> JoinHandle<OobExit> {
    OobClient::new(endpoint, report_interval, sink).spawn(shutdown)
}

/// How one stream attempt ended.
#[derive(Debug)]
enum StreamEnd {
    /// Never retried (gRFC A51, Envoy `handlePermanentFailure`).
    Final(tonic::Status),
    /// Retried after backoff.
    Retry(String),
}

impl OobClient {
    /// `report_interval` is what the client asks for; servers may enforce a minimum
    /// (gRPC's default minimum is 30 s).
    pub fn new(endpoint: SocketAddr, report_interval: Duration, sink: Arc<dyn LoadSink>) -> Self {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60), rand::random());
        Self { endpoint, authority: None, report_interval, sink, backoff }
    }

    /// Sends `authority` as the stream's `:authority` (`oob_reporting_config.authority`,
    /// else the endpoint's hostname) instead of the address dialled.
    pub fn with_authority(mut self, authority: String) -> Self {
        self.authority = Some(authority);
        self
    }

    /// Replaces Envoy's 1 s–60 s backoff; tests use milliseconds.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Runs the client on the current runtime until shutdown or `UNIMPLEMENTED`.
    pub fn spawn(self, shutdown: Signal) -> JoinHandle<OobExit> {
        tokio::spawn(self.run(shutdown))
    }

    /// Streams, reconnecting after backoff, until shutdown or `UNIMPLEMENTED`.
    pub async fn run(mut self, shutdown: Signal) -> OobExit {
        let stop = shutdown.triggered();
        tokio::pin!(stop);
        loop {
            let end = tokio::select! {
                biased;
                () = &mut stop => return OobExit::Shutdown,
                end = self.stream_once() => end,
            };
            match end {
                StreamEnd::Final(status) => {
                    tracing::info!(endpoint = %self.endpoint, %status, "ORCA out-of-band reporting unsupported; not retrying");
                    return OobExit::Unimplemented;
                }
                StreamEnd::Retry(reason) => {
                    tracing::debug!(endpoint = %self.endpoint, %reason, "ORCA out-of-band stream ended; reconnecting");
                }
            }
            let delay = self.backoff.next_delay();
            tokio::select! {
                biased;
                () = &mut stop => return OobExit::Shutdown,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Connects, opens the stream and forwards reports until the stream ends.
    async fn stream_once(&mut self) -> StreamEnd {
        let channel = match connect(self.endpoint, self.authority.as_deref()).await {
            Ok(channel) => channel,
            Err(e) => return StreamEnd::Retry(format!("connect: {e:?}")),
        };
        let request = OrcaLoadReportRequest {
            report_interval: Some(proto_duration(self.report_interval)),
            request_cost_names: Vec::new(),
        };
        let mut stream = match OpenRcaServiceClient::new(channel).stream_core_metrics(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => return classify(status),
        };
        loop {
            match stream.message().await {
                Ok(Some(proto)) => {
                    // A report proves the stream works; headers alone do not (Envoy).
                    self.backoff.reset();
                    match from_proto(proto) {
                        Ok(report) => self.sink.report_load(report),
                        Err(e) => {
                            self.sink.refuse_load();
                            tracing::debug!(endpoint = %self.endpoint, error = %e, "ORCA report refused");
                        }
                    }
                }
                Ok(None) => return StreamEnd::Retry("closed by the server".into()),
                Err(status) => return classify(status),
            }
        }
    }
}

/// The one place that knows how to reach an endpoint: plaintext HTTP/2 over TCP. TLS to
/// the backend goes here when it is added. Keep-alive pings detect a silent peer, because a
/// server-streaming call has no deadline (Envoy sets none either).
async fn connect(endpoint: SocketAddr, authority: Option<&str>) -> Result<Channel, tonic::transport::Error> {
    let mut channel = Endpoint::from_shared(format!("http://{endpoint}"))?;
    // The origin is what requests carry as `:authority`; an authority that is not valid
    // in a URI (a hostname from EDS can be anything) leaves the address dialled.
    if let Some(origin) = authority.and_then(|a| format!("http://{a}").parse::<http::Uri>().ok()) {
        channel = channel.origin(origin);
    }
    channel
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .connect()
        .await
}

/// `UNIMPLEMENTED` is final; every other status is worth retrying.
fn classify(status: tonic::Status) -> StreamEnd {
    if status.code() == tonic::Code::Unimplemented {
        StreamEnd::Final(status)
    } else {
        StreamEnd::Retry(format!("{}: {}", status.code(), status.message()))
    }
}

fn proto_duration(duration: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests;
