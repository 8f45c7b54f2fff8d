use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::{Stream, StreamExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

use super::*;
use crate::core::shutdown;
use crate::lb::load::LoadReport;
use crate::pb::orca::OrcaLoadReport;
use crate::pb::orca_service::open_rca_service_server::{OpenRcaService, OpenRcaServiceServer};

/// Bounds every wait so a broken client fails the test instead of hanging it.
const WAIT: Duration = Duration::from_secs(10);

struct ChannelSink(mpsc::UnboundedSender<LoadReport>);

impl LoadSink for ChannelSink {
    fn report_load(&self, report: LoadReport) {
        let _ = self.0.send(report);
    }
}

#[derive(Clone, Copy)]
enum Behaviour {
    /// Streams the reports, then keeps the stream open.
    Stream,
    /// Answers like a backend without the ORCA service.
    Unimplemented,
    /// Fails the first call with UNAVAILABLE, then streams.
    FailOnce,
}

/// An in-process backend with the ORCA service.
struct Backend {
    behaviour: Behaviour,
    reports: Vec<OrcaLoadReport>,
    calls: AtomicUsize,
    requests: Mutex<Vec<OrcaLoadReportRequest>>,
}

type ReportStream = Pin<Box<dyn Stream<Item = Result<OrcaLoadReport, Status>> + Send>>;

#[tonic::async_trait]
impl OpenRcaService for Backend {
    type StreamCoreMetricsStream = ReportStream;

    async fn stream_core_metrics(
        &self,
        request: Request<OrcaLoadReportRequest>,
    ) -> Result<Response<ReportStream>, Status> {
        self.requests.lock().unwrap().push(request.into_inner());
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        match self.behaviour {
            Behaviour::Unimplemented => return Err(Status::unimplemented("no ORCA here")),
            Behaviour::FailOnce if call == 0 => return Err(Status::unavailable("warming up")),
            Behaviour::Stream | Behaviour::FailOnce => {}
        }
        let reports = futures::stream::iter(self.reports.clone().into_iter().map(Ok));
        Ok(Response::new(Box::pin(reports.chain(futures::stream::pending()))))
    }
}

/// Serves a [`Backend`] on `listener`; the returned handle shows the calls it has seen.
fn serve(listener: TcpListener, behaviour: Behaviour, reports: Vec<OrcaLoadReport>) -> Arc<Backend> {
    let backend =
        Arc::new(Backend { behaviour, reports, calls: AtomicUsize::new(0), requests: Mutex::new(Vec::new()) });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(OpenRcaServiceServer::from_arc(backend.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    backend
}

async fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    (listener, address)
}

fn report(rps: f64) -> OrcaLoadReport {
    OrcaLoadReport { rps_fractional: rps, cpu_utilization: 0.5, ..Default::default() }
}

/// A client with a millisecond backoff, so reconnect tests take real but short time.
fn client(address: SocketAddr) -> (OobClient, mpsc::UnboundedReceiver<LoadReport>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let client = OobClient::new(address, Duration::from_secs(10), Arc::new(ChannelSink(tx)))
        .with_backoff(Backoff::new(Duration::from_millis(10), Duration::from_millis(50), 1));
    (client, rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<LoadReport>) -> LoadReport {
    timeout(WAIT, rx.recv()).await.unwrap().unwrap()
}

#[tokio::test]
async fn reports_reach_the_sink_and_shutdown_stops_the_task() {
    let (listener, address) = listener().await;
    let invalid = OrcaLoadReport { eps: -1.0, ..Default::default() };
    let backend = serve(listener, Behaviour::Stream, vec![report(10.0), invalid, report(20.0)]);
    let (client, mut rx) = client(address);
    let (trigger, signal) = shutdown::channel();
    let task = client.spawn(signal);

    assert_eq!(next(&mut rx).await.rps_fractional, 10.0);
    // The invalid report in between is dropped, the stream goes on.
    assert_eq!(next(&mut rx).await.rps_fractional, 20.0);
    assert_eq!(backend.calls.load(Ordering::SeqCst), 1);

    trigger.trigger();
    assert_eq!(timeout(WAIT, task).await.unwrap().unwrap(), OobExit::Shutdown);
}

#[tokio::test]
async fn asks_for_the_configured_interval() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let (listener, address) = listener().await;
    let backend = serve(listener, Behaviour::Unimplemented, Vec::new());
    let interval = Duration::from_millis(2500);
    let (_trigger, signal) = shutdown::channel();
    let task = OobClient::new(address, interval, Arc::new(ChannelSink(tx))).spawn(signal);
    assert_eq!(timeout(WAIT, task).await.unwrap().unwrap(), OobExit::Unimplemented);
    let requests = backend.requests.lock().unwrap().clone();
    let expected =
        OrcaLoadReportRequest { report_interval: Some(proto_duration(interval)), request_cost_names: vec![] };
    assert_eq!(requests, vec![expected]);
    assert_eq!(proto_duration(interval), ProtoDuration { seconds: 2, nanos: 500_000_000 });
}

#[tokio::test]
async fn unimplemented_is_final() {
    let (listener, address) = listener().await;
    let backend = serve(listener, Behaviour::Unimplemented, Vec::new());
    let (client, _rx) = client(address);
    let (_trigger, signal) = shutdown::channel();
    assert_eq!(timeout(WAIT, client.spawn(signal)).await.unwrap().unwrap(), OobExit::Unimplemented);
    assert_eq!(backend.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn reconnects_after_a_failed_call() {
    let (listener, address) = listener().await;
    let backend = serve(listener, Behaviour::FailOnce, vec![report(7.0)]);
    let (client, mut rx) = client(address);
    let (_trigger, signal) = shutdown::channel();
    let _task = client.spawn(signal);
    assert_eq!(next(&mut rx).await.rps_fractional, 7.0);
    assert_eq!(backend.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn reconnects_after_a_refused_connection() {
    let (listener, address) = listener().await;
    drop(listener); // Nothing listens: the first attempts are refused.
    let (client, mut rx) = client(address);
    let (_trigger, signal) = shutdown::channel();
    let _task = client.spawn(signal);
    let listener = TcpListener::bind(address).await.unwrap();
    serve(listener, Behaviour::Stream, vec![report(3.0)]);
    assert_eq!(next(&mut rx).await.rps_fractional, 3.0);
}

#[test]
fn only_unimplemented_is_final() {
    use tonic::Code;
    for code in [Code::Unavailable, Code::Internal, Code::DeadlineExceeded, Code::Unknown, Code::PermissionDenied] {
        assert!(matches!(classify(Status::new(code, "")), StreamEnd::Retry(_)), "{code:?}");
    }
    assert!(matches!(classify(Status::unimplemented("")), StreamEnd::Final(_)));
}

/// A backend without the ORCA service that records each stream's `:authority`.
fn serve_recording_authority(listener: TcpListener) -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let recorded = recorded.clone();
            let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let authority = request.uri().authority().map(ToString::to_string).unwrap_or_default();
                recorded.lock().unwrap().push(authority);
                let response = http::Response::builder()
                    .header("content-type", "application/grpc")
                    .header("grpc-status", "12")
                    .body(http_body_util::Empty::<bytes::Bytes>::new())
                    .unwrap();
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    seen
}

#[tokio::test]
async fn the_stream_carries_the_configured_authority_else_the_address() {
    for authority in [Some("orca.backend.example:8080"), None] {
        let (tx, _rx) = mpsc::unbounded_channel();
        let (listener, address) = listener().await;
        let seen = serve_recording_authority(listener);
        let mut client = OobClient::new(address, Duration::from_secs(10), Arc::new(ChannelSink(tx)));
        if let Some(authority) = authority {
            client = client.with_authority(authority.to_owned());
        }
        let (_trigger, signal) = shutdown::channel();
        assert_eq!(timeout(WAIT, client.spawn(signal)).await.unwrap().unwrap(), OobExit::Unimplemented);
        let expected = authority.map_or_else(|| address.to_string(), str::to_owned);
        assert_eq!(*seen.lock().unwrap(), vec![expected]);
    }
}
