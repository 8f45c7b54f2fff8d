//! ORCA from real gRPC servers: grpc-go's interop server (v1.83.1, `interop/server`) as the
//! two backends of a `client_side_weighted_round_robin` cluster, gRPC sent through
//! Outrider over HTTP/2, load reported per call (`endpoint-load-metrics-bin` trailers)
//! and out of band (`OpenRcaService/StreamCoreMetrics`).
//!
//! What the interop server can report decides what the split must be. Its `TestOrcaReport`
//! carries utilizations and request costs but no request rate, and the server never sets
//! `rps_fractional`; the weight is `qps / (utilization + eps/qps × penalty)`, so a report
//! without qps gives no weight. grpc-go's own balancer ignores such a report ("Ignoring
//! empty load report": `RpsFractional == 0` in `weightedroundrobin/balancer.go`), and
//! Envoy's `calculateWeightFromOrcaReport` refuses it ("QPS must be positive"). grpc-go's
//! 1:10 expectation (`TestBalancer_TwoAddresses_ReportingEnabled*`: 10 qps at
//! utilization 1.0 and 0.1) comes from test servers that call `SetQPS(10)`, which the
//! interop server does not. So with these peers the reports must reach Outrider intact,
//! each endpoint's own, and the split must stay the even one of round robin: 1:1, exact,
//! because one worker sending one call at a time takes the endpoints in turn. A split
//! that followed the utilizations here would be a weight Envoy and gRPC never compute.

use crate::common;
use crate::grpc_testing;

use std::collections::BTreeMap;
use std::time::Instant;

use common::lab::{self, Lab};
use common::{ROUTE, admin_get, wait};
use grpc_testing::{InteropServer, SimpleRequest, SimpleResponse, TestOrcaReport, UNARY_CALL};
use outrider::lb::cswrr::Weights;

/// Calls per measurement: even, so that round robin splits it exactly.
const CALLS: usize = 200;

/// The cluster: HTTP/2 to the endpoints, CSWRR with no blackout and the shortest weight
/// update period, so that a report is usable as soon as it is received.
fn cluster(policy_extra: &str) -> String {
    format!(
        r#"typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config: {{ http2_protocol_options: {{}} }}
load_balancing_policy:
  policies:
  - typed_extension_config:
      name: envoy.load_balancing_policies.client_side_weighted_round_robin
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin
        blackout_period: 0s
        weight_update_period: 0.1s
{policy_extra}"#
    )
}

fn cpu(utilization: f64) -> TestOrcaReport {
    TestOrcaReport { cpu_utilization: utilization, ..Default::default() }
}

/// Per endpoint port: (`rq_total`, the last ORCA report) from the admin `/clusters` JSON.
async fn hosts(lab: &Lab) -> BTreeMap<u16, (u64, Option<serde_json::Value>)> {
    let (status, body) = admin_get(lab.outrider.admin_address, "/clusters?format=json").await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let cluster = json["cluster_statuses"].as_array().unwrap().iter().find(|c| c["name"] == "backend").unwrap();
    cluster["host_statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|host| {
            let port = host["address"]["socket_address"]["port_value"].as_u64().unwrap() as u16;
            let stats = host["stats"].as_array().unwrap();
            let total = stats.iter().find(|s| s["name"] == "rq_total").unwrap()["value"].as_u64().unwrap();
            let report = host["outrider"]["last_orca_report"].clone();
            (port, (total, (!report.is_null()).then_some(report)))
        })
        .collect()
}

/// Recomputes the weights now (what the weight update timer does) and returns them.
fn weights_now(lab: &Lab) -> Vec<Weights> {
    let lb = lab.outrider.balancers.get("backend").unwrap();
    lb.update_weights(Instant::now());
    lb.weight_updaters().iter().map(|cswrr| (*cswrr.weights()).clone()).collect()
}

/// `CALLS` unary calls through Outrider, the `i`-th carrying `report(i)`; returns how many
/// each endpoint port served, from the admin counters.
async fn split(lab: &Lab, report: impl Fn(usize) -> Option<TestOrcaReport>) -> BTreeMap<u16, u64> {
    let before = hosts(lab).await;
    let mut grpc = grpc_testing::client(lab.proxy_port).await;
    for i in 0..CALLS {
        let request = SimpleRequest { response_size: 0, orca_per_query_report: report(i) };
        let _: SimpleResponse = grpc_testing::unary(&mut grpc, UNARY_CALL, request).await;
    }
    hosts(lab).await.into_iter().map(|(port, (total, _))| (port, total - before[&port].0)).collect()
}

#[tokio::test]
async fn per_call_reports_from_grpc_go_reach_each_endpoint_and_without_qps_keep_round_robin() {
    let Some(binary) = common::peers::peer("grpc-interop-server", "interop_orca per_call") else {
        return;
    };
    let (a, b) = (InteropServer::start(&binary).await, InteropServer::start(&binary).await);
    let lab = lab::start(&[a.port, b.port], &cluster(""), ROUTE, "GRPC").await;

    // One call at a time on one worker: the endpoints serve in turn, so alternating the
    // reported load gives one endpoint every 1.0 and the other every 0.1, at equal QPS.
    let served = split(&lab, |i| Some(cpu(if i % 2 == 0 { 1.0 } else { 0.1 }))).await;
    println!("per-call split (port: calls): {served:?}");

    let hosts = hosts(&lab).await;
    let mut reported: Vec<f64> = hosts
        .values()
        .map(|(_, report)| {
            let report = report.as_ref().expect("the endpoint's trailers reached the balancer");
            assert_eq!(report["rps_fractional"], 0.0, "the interop server reports no rate: {report}");
            report["cpu_utilization"].as_f64().unwrap()
        })
        .collect();
    reported.sort_by(f64::total_cmp);
    assert_eq!(reported, [0.1, 1.0], "each endpoint's own per-call report, decoded from grpc-go's trailer");

    assert!(
        weights_now(&lab).iter().all(|w| *w == Weights::RoundRobin),
        "reports without qps give no weight (grpc-go and Envoy ignore them)"
    );
    assert_eq!(served.values().copied().collect::<Vec<_>>(), [CALLS as u64 / 2; 2], "round robin: {served:?}");
    lab.outrider.stop();
}

#[tokio::test]
async fn oob_reports_from_grpc_go_reach_each_endpoint_and_without_qps_keep_round_robin() {
    let Some(binary) = common::peers::peer("grpc-interop-server", "interop_orca oob") else {
        return;
    };
    let (a, b) = (InteropServer::start(&binary).await, InteropServer::start(&binary).await);
    // Set before Outrider connects, so the first report of each stream already has it.
    grpc_testing::set_oob_report(a.port, cpu(1.0)).await;
    grpc_testing::set_oob_report(b.port, cpu(0.1)).await;
    // The interop server accepts any reporting interval (it lifts ORCA's 30 s minimum).
    let oob = "        enable_oob_load_report: true\n        oob_reporting_period: 0.1s\n";
    let lab = lab::start(&[a.port, b.port], &cluster(oob), ROUTE, "GRPC").await;

    let want = BTreeMap::from([(a.port, 1.0), (b.port, 0.1)]);
    let lb = lab.outrider.balancers.get("backend").unwrap();
    wait::until_sync("an OOB report from each interop server", || {
        lb.hosts().iter().all(|host| {
            let port = host.address().to_string().rsplit(':').next().unwrap().parse::<u16>().unwrap();
            host.stats.load_report().is_some_and(|timed| timed.report.cpu_utilization == want[&port])
        })
    })
    .await;
    for (port, (_, report)) in hosts(&lab).await {
        let report = report.unwrap();
        assert_eq!(report["cpu_utilization"], want[&port], "port {port}: {report}");
        assert_eq!(report["rps_fractional"], 0.0, "the interop server reports no rate: {report}");
    }

    assert!(
        weights_now(&lab).iter().all(|w| *w == Weights::RoundRobin),
        "reports without qps give no weight (grpc-go and Envoy ignore them)"
    );
    let served = split(&lab, |_| None).await;
    println!("OOB split (port: calls): {served:?}");
    assert_eq!(served.values().copied().collect::<Vec<_>>(), [CALLS as u64 / 2; 2], "round robin: {served:?}");
    lab.outrider.stop();
}

/// A gRPC backend reporting fixed out-of-band load, as grpc-go's WRR test servers do
/// (`oobMetrics.SetQPS(10)`, `SetApplicationUtilization(u)`): the echo service and
/// `OpenRcaService` on one port.
mod fixed_load {
    use std::pin::Pin;

    use futures::Stream;
    use outrider::pb::echo::echo_server::{Echo, EchoServer};
    use outrider::pb::echo::{EchoRequest, EchoResponse};
    use outrider::pb::orca::OrcaLoadReport;
    use outrider::pb::orca_service::OrcaLoadReportRequest;
    use outrider::pb::orca_service::open_rca_service_server::{OpenRcaService, OpenRcaServiceServer};
    use tonic::{Request, Response, Status};

    #[derive(Clone)]
    struct Backend {
        report: OrcaLoadReport,
    }

    type Reports = Pin<Box<dyn Stream<Item = Result<OrcaLoadReport, Status>> + Send>>;

    #[tonic::async_trait]
    impl OpenRcaService for Backend {
        type StreamCoreMetricsStream = Reports;

        async fn stream_core_metrics(&self, _: Request<OrcaLoadReportRequest>) -> Result<Response<Reports>, Status> {
            // One report, then the stream stays open: the load never changes.
            let first = futures::stream::iter([Ok(self.report.clone())]);
            Ok(Response::new(Box::pin(futures::StreamExt::chain(first, futures::stream::pending()))))
        }
    }

    #[tonic::async_trait]
    impl Echo for Backend {
        async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoResponse>, Status> {
            Ok(Response::new(EchoResponse { payload: request.into_inner().payload, backend: String::new() }))
        }
    }

    /// Starts a backend reporting `qps` at `utilization`; returns its port.
    pub async fn start(qps: f64, utilization: f64) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let report = OrcaLoadReport { rps_fractional: qps, application_utilization: utilization, ..Default::default() };
        let backend = Backend { report };
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(OpenRcaServiceServer::new(backend.clone()))
                .add_service(EchoServer::new(backend))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        port
    }
}

/// The control for the two tests above: the same cluster and the same path through
/// Outrider, with reports that carry a rate, give grpc-go's expected 1:10. grpc-go's
/// `checkWeights` sends 100 calls and allows ±2 around 100 × w / Σw; here 1100 calls,
/// the same ±2 around 100 and 1000. The stride scheduler takes the heavier endpoint every
/// generation and the lighter one in a tenth of them, evenly spread, so whatever phase the
/// worker starts at, the count is within one of its share: the bound holds on every run.
#[tokio::test]
async fn oob_reports_with_qps_split_one_to_ten_as_grpc_go_expects() {
    let loaded = fixed_load::start(10.0, 1.0).await;
    let idle = fixed_load::start(10.0, 0.1).await;
    let oob = "        enable_oob_load_report: true\n        oob_reporting_period: 0.1s\n";
    let lab = lab::start(&[loaded, idle], &cluster(oob), ROUTE, "GRPC").await;
    let lb = lab.outrider.balancers.get("backend").unwrap();
    wait::until_sync("an OOB report from each backend", || lb.hosts().iter().all(|h| h.stats.load_report().is_some()))
        .await;
    assert!(matches!(weights_now(&lab)[..], [Weights::Stride(_)]), "the reports give weights");

    let mut grpc = grpc_testing::client(lab.proxy_port).await;
    let before = hosts(&lab).await;
    for _ in 0..1100 {
        let request = outrider::pb::echo::EchoRequest::default();
        let _: outrider::pb::echo::EchoResponse =
            grpc_testing::unary(&mut grpc, "/outrider.echo.v1.Echo/Echo", request).await;
    }
    let after = hosts(&lab).await;
    let served = |port: u16| after[&port].0 - before[&port].0;
    println!("OOB split with qps: loaded {} : idle {}", served(loaded), served(idle));
    assert!(served(loaded).abs_diff(100) <= 2, "loaded (utilization 1.0) takes 1/11: {}", served(loaded));
    assert!(served(idle).abs_diff(1000) <= 2, "idle (utilization 0.1) takes 10/11: {}", served(idle));
    lab.outrider.stop();
}

/// The same 1:10 with grpc-go on the serving side: two `grpc-orca-backend`s
/// (tests/peers/grpc-orca, grpc-go's `orca.ServerMetricsRecorder` with `SetQPS(10)` and
/// `SetApplicationUtilization(1.0 | 0.1)`, as grpc-go's WRR tests set them). `oob` picks how
/// the load arrives: per call (`orca.CallMetricsServerOption`, the trailer) or out of band
/// (`orca.Register`, whose first report is sent when the stream opens; grpc-go then waits
/// its 30 s minimum, whatever `oob_reporting_period` asks).
async fn grpc_go_orca_splits_one_to_ten(oob: bool, test: &str) {
    let Some(binary) = common::peers::peer("grpc-orca-backend", test) else {
        return;
    };
    let loaded = InteropServer::start_with(&binary, &["--qps=10", "--utilization=1.0"]).await;
    let idle = InteropServer::start_with(&binary, &["--qps=10", "--utilization=0.1"]).await;
    let extra = if oob { "        enable_oob_load_report: true\n        oob_reporting_period: 1s\n" } else { "" };
    let lab = lab::start(&[loaded.port, idle.port], &cluster(extra), ROUTE, "GRPC").await;
    let lb = lab.outrider.balancers.get("backend").unwrap();
    let mut grpc = grpc_testing::client(lab.proxy_port).await;
    let echo = async |grpc: &mut _| {
        let _: outrider::pb::echo::EchoResponse =
            grpc_testing::unary(grpc, "/outrider.echo.v1.Echo/Echo", outrider::pb::echo::EchoRequest::default()).await;
    };
    if !oob {
        // Round robin until each endpoint has answered once with its trailer.
        for _ in 0..2 {
            echo(&mut grpc).await;
        }
    }
    wait::until_sync("a load report from each grpc-go backend", || {
        lb.hosts().iter().all(|h| h.stats.load_report().is_some())
    })
    .await;
    for (port, (_, report)) in hosts(&lab).await {
        let report = report.unwrap();
        let want = if port == loaded.port { 1.0 } else { 0.1 };
        assert_eq!(report["application_utilization"], want, "port {port}: {report}");
        assert_eq!(report["rps_fractional"], 10.0, "port {port}: {report}");
    }
    assert!(matches!(weights_now(&lab)[..], [Weights::Stride(_)]), "the reports give weights");

    let before = hosts(&lab).await;
    for _ in 0..1100 {
        echo(&mut grpc).await;
    }
    let after = hosts(&lab).await;
    let served = |port: u16| after[&port].0 - before[&port].0;
    println!("{test}: loaded {} : idle {}", served(loaded.port), served(idle.port));
    assert!(served(loaded.port).abs_diff(100) <= 2, "loaded (utilization 1.0) takes 1/11: {}", served(loaded.port));
    assert!(served(idle.port).abs_diff(1000) <= 2, "idle (utilization 0.1) takes 10/11: {}", served(idle.port));
    lab.outrider.stop();
}

#[tokio::test]
async fn per_call_reports_from_grpc_go_orca_split_one_to_ten() {
    grpc_go_orca_splits_one_to_ten(false, "interop_orca grpc-go per_call 1:10").await;
}

#[tokio::test]
async fn oob_reports_from_grpc_go_orca_split_one_to_ten() {
    grpc_go_orca_splits_one_to_ten(true, "interop_orca grpc-go oob 1:10").await;
}
