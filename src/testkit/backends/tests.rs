use std::net::SocketAddr;

use http_body_util::Empty;
use hyper::client::conn::{http1, http2};

use super::*;
use crate::core::shutdown::{self, Trigger};
use crate::lb::load::LoadReport;
use crate::pb::echo::echo_client::EchoClient;

async fn start(behaviour: BackendBehaviour) -> (SocketAddr, Trigger, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (trigger, signal) = shutdown::channel();
    let serving = tokio::spawn(serve_backend(listener, behaviour, signal));
    (address, trigger, serving)
}

async fn h1_get(address: SocketAddr) -> Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = Request::get("/any/path").header("host", "backend").body(Empty::<Bytes>::new()).unwrap();
    sender.send_request(request).await.unwrap()
}

async fn h2_client(address: SocketAddr) -> http2::SendRequest<Full<Bytes>> {
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    sender
}

fn report(headers: &HeaderMap) -> LoadReport {
    crate::orca::from_headers(headers).expect("an ORCA header").expect("a valid report")
}

async fn body_text(response: Response<Incoming>) -> String {
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

#[tokio::test]
async fn answers_http1_with_its_name_and_a_text_load_report() {
    let behaviour = BackendBehaviour { orca: Some(OrcaMode::TextHeader), ..BackendBehaviour::new("b1") };
    let (address, trigger, serving) = start(behaviour).await;
    for expected_rps in 1..=3 {
        let response = h1_get(address).await;
        assert_eq!(response.status(), StatusCode::OK);
        let report = report(response.headers());
        assert_eq!(report.rps_fractional, f64::from(expected_rps));
        assert_eq!(report.eps, 0.0);
        assert!(report.application_utilization > 0.0 && report.application_utilization <= 1.0, "{report:?}");
        assert_eq!(body_text(response).await, "b1: ok\n");
    }
    trigger.trigger();
    tokio::time::timeout(Duration::from_secs(5), serving).await.unwrap().unwrap();
}

#[tokio::test]
async fn answers_http2_with_a_binary_load_report() {
    let behaviour = BackendBehaviour { orca: Some(OrcaMode::BinHeader), capacity: 4, ..BackendBehaviour::new("b2") };
    let (address, _trigger, _serving) = start(behaviour).await;
    let mut client = h2_client(address).await;
    let request = Request::get(format!("http://{address}/")).body(Full::new(Bytes::new())).unwrap();
    let response = client.send_request(request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    let report = report(response.headers());
    assert_eq!(report.application_utilization, 0.25, "this request, one of four slots");
    assert_eq!(body_text(response).await, "b2: ok\n");
}

#[tokio::test]
async fn serves_the_grpc_echo_service() {
    let (address, _trigger, _serving) = start(BackendBehaviour::new("g1")).await;
    let mut client = EchoClient::connect(format!("http://{address}")).await.unwrap();
    let request = EchoRequest { payload: "hi".into(), ..Default::default() };
    let response = client.echo(request).await.unwrap().into_inner();
    assert_eq!(response, EchoResponse { payload: "hi".into(), backend: "g1".into() });
    let failing = EchoRequest { fail_with_code: tonic::Code::NotFound as i32, ..Default::default() };
    let status = client.echo(failing).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn grpc_load_reports_ride_in_the_trailers() {
    let behaviour = BackendBehaviour { orca: Some(OrcaMode::Trailer), ..BackendBehaviour::new("g2") };
    let (address, _trigger, _serving) = start(behaviour).await;
    let message = prost::Message::encode_to_vec(&EchoRequest { payload: "x".into(), ..Default::default() });
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    let request = Request::post(format!("http://{address}/outrider.echo.v1.Echo/Echo"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(framed)))
        .unwrap();
    let response = h2_client(address).await.send_request(request).await.unwrap();
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().expect("trailers");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(report(trailers).rps_fractional, 1.0);
}

#[tokio::test]
async fn errors_are_spread_evenly_and_reported() {
    let behaviour =
        BackendBehaviour { error_rate: 0.5, orca: Some(OrcaMode::TextHeader), ..BackendBehaviour::new("flaky") };
    let (address, _trigger, _serving) = start(behaviour).await;
    let mut statuses = Vec::new();
    let mut last = LoadReport::default();
    for _ in 0..4 {
        let response = h1_get(address).await;
        statuses.push(response.status().as_u16());
        last = report(response.headers());
    }
    assert_eq!(statuses, [200, 503, 200, 503]);
    assert_eq!((last.rps_fractional, last.eps), (4.0, 2.0));
}

#[tokio::test]
async fn requests_beyond_capacity_wait_for_a_slot() {
    let behaviour = BackendBehaviour { latency: Duration::from_millis(100), capacity: 1, ..BackendBehaviour::new("q") };
    let (address, _trigger, _serving) = start(behaviour).await;
    let started = Instant::now();
    let (a, b) = tokio::join!(h1_get(address), h1_get(address));
    assert_eq!((a.status(), b.status()), (StatusCode::OK, StatusCode::OK));
    assert!(started.elapsed() >= Duration::from_millis(200), "{:?}", started.elapsed());
}

#[tokio::test]
async fn streams_load_reports_out_of_band_without_counting_them() {
    use crate::pb::orca_service::OrcaLoadReportRequest;
    use crate::pb::orca_service::open_rca_service_client::OpenRcaServiceClient;
    let (address, _trigger, _serving) = start(BackendBehaviour::new("oob")).await;
    assert_eq!(h1_get(address).await.status(), StatusCode::OK);
    let mut client = OpenRcaServiceClient::connect(format!("http://{address}")).await.unwrap();
    let interval = crate::pb::google::protobuf::Duration { seconds: 0, nanos: 100_000_000 };
    let request = OrcaLoadReportRequest { report_interval: Some(interval), ..Default::default() };
    let mut stream = client.stream_core_metrics(request).await.unwrap().into_inner();
    for _ in 0..2 {
        let report = tokio::time::timeout(Duration::from_secs(10), stream.message()).await.unwrap().unwrap().unwrap();
        assert!(report.rps_fractional <= 1.0, "the stream itself is not a request: {report:?}");
    }
}

#[tokio::test]
async fn a_fail_fast_backend_answers_errors_without_its_latency() {
    let behaviour = BackendBehaviour {
        latency: Duration::from_secs(600),
        error_rate: 1.0,
        error_status: StatusCode::INTERNAL_SERVER_ERROR,
        fail_fast: true,
        ..BackendBehaviour::new("hole")
    };
    let (address, _trigger, _serving) = start(behaviour).await;
    let response = tokio::time::timeout(Duration::from_secs(10), h1_get(address)).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn an_observed_backend_tallies_what_it_served_on_the_labs_clock() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let observed = Observed::default();
    let (_trigger, signal) = shutdown::channel();
    let behaviour = BackendBehaviour { error_rate: 0.5, ..BackendBehaviour::new("counted") };
    tokio::spawn(serve_observed(listener, behaviour, observed.clone(), signal));
    for _ in 0..4 {
        h1_get(address).await;
    }
    let seconds = observed.tally.seconds();
    let total = seconds.iter().fold([0, 0], |a, s| [a[0] + s[0], a[1] + s[1]]);
    assert_eq!(total, [2, 2]);
}
