//! Lab backends for the demo, tests and benches: one port serving HTTP/1.1, HTTP/2 and the
//! gRPC echo service (`outrider.echo.v1.Echo/Echo`), with a configured latency, error
//! rate and capacity, and ORCA load reports computed from what the backend really does.
//!
//! Load model: up to `capacity` requests are served at once, each taking `latency` (plus
//! an exponential tail, more while warming up or during a scripted stall: see `timing`);
//! more wait for a free slot, so an overloaded backend gets slower, as real ones do. The
//! load report says `application_utilization` (see [`Utilization`]), and `rps_fractional`
//! / `eps` = requests / errors completed in the last second, per request (headers or
//! trailers) and out of band (`OpenRcaService`, served on the same port). Errors are
//! spread evenly (every `1/error_rate`-th request fails), so runs are repeatable.

mod cpu_work;
mod load;
mod oob;
mod tally;
mod timing;
mod trailer;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::core::shutdown::Signal;
use crate::orca::{ENDPOINT_LOAD_METRICS, ENDPOINT_LOAD_METRICS_BIN};
use crate::pb::echo::echo_server::{Echo, EchoServer};
use crate::pb::echo::{EchoRequest, EchoResponse};
use crate::pb::orca::OrcaLoadReport;
use crate::pb::orca_service::open_rca_service_server::OpenRcaServiceServer;

/// Where a backend is told to slow down (see `Backend::set_added_latency`).
pub const ADDED_LATENCY_PATH: &str = "/_backend/latency";

pub use load::Utilization;
pub use tally::Tally;
pub use timing::{Epoch, Stall, Warmup};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

/// How a lab backend behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendBehaviour {
    /// Named in every answer, so a client sees which backend served it.
    pub name: String,
    /// Time each request takes once it has a slot.
    pub latency: Duration,
    /// Fraction of requests that fail, 0 to 1, spread evenly.
    pub error_rate: f64,
    /// The HTTP status of a failed plain request (gRPC requests fail with UNAVAILABLE).
    pub error_status: StatusCode,
    /// Requests served at once; more wait. At least 1.
    pub capacity: u32,
    /// Whether and how load reports are attached to responses.
    pub orca: Option<OrcaMode>,
    /// Mean of an exponential tail added to `latency`; zero for a fixed latency.
    pub jitter: Duration,
    /// Time-scripted stalls, on the lab's clock ([`Epoch`]).
    pub stalls: Vec<Stall>,
    /// A cold start: the first requests cost more.
    pub warmup: Option<Warmup>,
    /// Failed requests answer at once, without a slot or the latency: a black hole.
    pub fail_fast: bool,
    /// What `application_utilization` measures.
    pub utilization: Utilization,
    /// CPU each request costs once it has a slot, spent on the serving thread (blocking
    /// it, as a CPU-bound application does): a lab pod's capacity is then its CPU limit.
    pub cpu: Duration,
}

/// Where a backend puts its ORCA load report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrcaMode {
    /// `endpoint-load-metrics: TEXT ...` in the response headers.
    TextHeader,
    /// `endpoint-load-metrics-bin: <base64 proto>` in the response headers.
    BinHeader,
    /// `endpoint-load-metrics-bin` in the trailers, as gRPC servers send it.
    Trailer,
}

impl BackendBehaviour {
    /// A fast, healthy backend without load reports.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            latency: Duration::ZERO,
            error_rate: 0.0,
            error_status: StatusCode::SERVICE_UNAVAILABLE,
            capacity: 100,
            orca: None,
            jitter: Duration::ZERO,
            stalls: Vec::new(),
            warmup: None,
            fail_fast: false,
            utilization: Utilization::Inside,
            cpu: Duration::ZERO,
        }
    }
}

/// What a lab observes of its backends: the clock they share and each one's tally.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub epoch: Arc<Epoch>,
    pub tally: Arc<Tally>,
}

/// Serves `listener` until `shutdown`, then lets open connections finish gracefully.
pub async fn serve_backend(listener: TcpListener, behaviour: BackendBehaviour, shutdown: Signal) {
    serve_observed(listener, behaviour, Observed::default(), shutdown).await;
}

/// [`serve_backend`] on a lab's clock, counting completions in `observed.tally`.
pub async fn serve_observed(listener: TcpListener, behaviour: BackendBehaviour, observed: Observed, shutdown: Signal) {
    let seed = listener.local_addr().map_or(0, |a| u64::from(a.port()));
    if !behaviour.cpu.is_zero() {
        cpu_work::calibrate();
    }
    let backend = Arc::new(Backend::new(behaviour, observed, seed));
    let graceful = GracefulShutdown::new();
    let stop = shutdown.triggered();
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::debug!(%error, "backend accept failed");
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let backend = backend.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let backend = backend.clone();
                async move { Ok::<_, Infallible>(backend.handle(request).await) }
            });
            let builder = auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            if let Err(error) = watcher.watch(connection).await {
                tracing::debug!(%error, "backend connection ended");
            }
        });
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}

// === impl Backend ===

/// A backend's state, shared by its connections.
struct Backend {
    behaviour: BackendBehaviour,
    slots: Semaphore,
    load: Arc<load::Load>,
    timing: timing::Timing,
    observed: Observed,
    grpc: tonic::service::Routes,
    /// Milliseconds added to every request from now on, set by `POST /_backend/latency?ms=N`:
    /// the demo's way to slow a backend down while it runs.
    added_latency_ms: AtomicU64,
}

impl Backend {
    fn new(behaviour: BackendBehaviour, observed: Observed, seed: u64) -> Self {
        let capacity = behaviour.capacity.max(1);
        let load = Arc::new(load::Load::new(capacity, behaviour.utilization));
        let echo = EchoService { name: behaviour.name.clone() };
        let grpc = tonic::service::Routes::new(EchoServer::new(echo))
            .add_service(OpenRcaServiceServer::new(oob::OobReports(load.clone())));
        let b = &behaviour;
        let timing = timing::Timing::new(b.latency, b.jitter, b.stalls.clone(), b.warmup, seed);
        Self {
            slots: Semaphore::new(capacity as usize),
            load,
            timing,
            observed,
            grpc,
            behaviour: BackendBehaviour { capacity, ..behaviour },
            added_latency_ms: AtomicU64::new(0),
        }
    }

    async fn handle(&self, request: Request<Incoming>) -> Response<ResponseBody> {
        if request.uri().path().starts_with(oob::PATH_PREFIX) {
            return self.grpc(request).await;
        }
        if request.uri().path() == ADDED_LATENCY_PATH && request.method() == http::Method::POST {
            return self.set_added_latency(request.uri().query().unwrap_or(""));
        }
        self.observed.epoch.since(Instant::now());
        let _inside = self.load.enter();
        let fails = self.load.injects_error(self.behaviour.error_rate);
        let grpc = is_grpc(request.headers());
        let mut busy = Duration::ZERO;
        let _slot = if fails && self.behaviour.fail_fast {
            None
        } else {
            let slot = self.slots.acquire().await;
            let started = Instant::now();
            let added = Duration::from_millis(self.added_latency_ms.load(Ordering::Relaxed));
            let service = self.timing.next(self.observed.epoch.since(started)).saturating_add(added);
            cpu_work::spend(self.behaviour.cpu);
            if !service.is_zero() {
                tokio::time::sleep(service).await;
            }
            busy = started.elapsed();
            Some(slot)
        };
        let mut response = match (fails, grpc) {
            (true, true) => grpc_unavailable(),
            (true, false) => self.text(self.behaviour.error_status, "injected failure"),
            (false, true) => self.grpc(request).await,
            (false, false) => self.text(StatusCode::OK, "ok"),
        };
        let failed = response.status().is_server_error()
            || response.headers().get("grpc-status").is_some_and(|status| status != "0");
        self.observed.tally.record(self.observed.epoch.since(Instant::now()), failed);
        let report = self.load.completed(failed, busy);
        match self.behaviour.orca {
            None => {}
            Some(OrcaMode::TextHeader) => {
                if let Ok(value) = HeaderValue::from_str(&text_report(&report)) {
                    response.headers_mut().insert(ENDPOINT_LOAD_METRICS, value);
                }
            }
            Some(OrcaMode::BinHeader) => {
                response.headers_mut().insert(ENDPOINT_LOAD_METRICS_BIN, binary_report(&report));
            }
            Some(OrcaMode::Trailer) => {
                response = response.map(|body| trailer::WithTrailer::new(body, binary_report(&report)).boxed_unsync());
            }
        }
        response
    }

    /// `ms=N`: every request from now on takes N ms more (0 restores the configured latency).
    fn set_added_latency(&self, query: &str) -> Response<ResponseBody> {
        let ms = query.split('&').find_map(|pair| pair.strip_prefix("ms=")).and_then(|ms| ms.parse::<u64>().ok());
        match ms {
            Some(ms) => {
                self.added_latency_ms.store(ms, Ordering::Relaxed);
                self.text(StatusCode::OK, &format!("{ms} ms added to every request"))
            }
            None => self.text(StatusCode::BAD_REQUEST, "expected ?ms=<milliseconds>"),
        }
    }

    fn text(&self, status: StatusCode, what: &str) -> Response<ResponseBody> {
        let body = format!("{}: {what}\n", self.behaviour.name);
        let mut response = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed_unsync());
        *response.status_mut() = status;
        response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        response
    }

    async fn grpc(&self, request: Request<Incoming>) -> Response<ResponseBody> {
        match self.grpc.clone().oneshot(request).await {
            Ok(response) => response.map(|body| body.map_err(BoxError::from).boxed_unsync()),
            Err(never) => match never {},
        }
    }
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// A trailers-only gRPC response with status UNAVAILABLE.
fn grpc_unavailable() -> Response<ResponseBody> {
    let (parts, ()) = tonic::Status::unavailable("injected failure").into_http::<()>().into_parts();
    Response::from_parts(parts, http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
}

fn text_report(report: &OrcaLoadReport) -> String {
    format!(
        "TEXT application_utilization={}, rps_fractional={}, eps={}",
        report.application_utilization, report.rps_fractional, report.eps
    )
}

fn binary_report(report: &OrcaLoadReport) -> HeaderValue {
    let encoded = base64::engine::general_purpose::STANDARD.encode(prost::Message::encode_to_vec(report));
    HeaderValue::from_str(&encoded).unwrap_or_else(|_| HeaderValue::from_static(""))
}

// === impl EchoService ===

/// `outrider.echo.v1.Echo`: answers with the payload and the backend's name, after the
/// requested delay, or with the requested status.
struct EchoService {
    name: String,
}

#[tonic::async_trait]
impl Echo for EchoService {
    async fn echo(&self, request: tonic::Request<EchoRequest>) -> Result<tonic::Response<EchoResponse>, tonic::Status> {
        let EchoRequest { payload, delay_ms, fail_with_code } = request.into_inner();
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(u64::from(delay_ms))).await;
        }
        if fail_with_code != 0 {
            return Err(tonic::Status::new(tonic::Code::from(fail_with_code), "requested failure"));
        }
        Ok(tonic::Response::new(EchoResponse { payload, backend: self.name.clone() }))
    }
}

#[cfg(test)]
mod tests;
