//! A CSWRR cluster with `enable_oob_load_report` opens one ORCA `StreamCoreMetrics` stream
//! per endpoint, with the configured reporting period, and its reports reach the stats.

use crate::common;

use std::pin::Pin;

use common::*;
use futures::Stream;
use outrider::config::ResourceType;
use outrider::pb::orca::OrcaLoadReport;
use outrider::pb::orca_service::OrcaLoadReportRequest;
use outrider::pb::orca_service::open_rca_service_server::{OpenRcaService, OpenRcaServiceServer};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

struct Reporter {
    opened: mpsc::UnboundedSender<OrcaLoadReportRequest>,
}

type Reports = Pin<Box<dyn Stream<Item = Result<OrcaLoadReport, Status>> + Send>>;

#[tonic::async_trait]
impl OpenRcaService for Reporter {
    type StreamCoreMetricsStream = Reports;

    async fn stream_core_metrics(&self, request: Request<OrcaLoadReportRequest>) -> Result<Response<Reports>, Status> {
        let _ = self.opened.send(request.into_inner());
        let report = OrcaLoadReport { cpu_utilization: 0.5, rps_fractional: 100.0, ..Default::default() };
        let reports = futures::stream::iter([Ok(report)]);
        Ok(Response::new(Box::pin(futures::StreamExt::chain(reports, futures::stream::pending()))))
    }
}

#[tokio::test]
async fn cswrr_with_oob_opens_a_stream_per_endpoint() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port() as u32;
    let (opened, mut streams) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(OpenRcaServiceServer::new(Reporter { opened }))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let cswrr = r#"
load_balancing_policy:
  policies:
  - typed_extension_config:
      name: envoy.load_balancing_policies.client_side_weighted_round_robin
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin
        enable_oob_load_report: true
        oob_reporting_period: 3s
"#;
    let control_plane = ControlPlane::start().await;
    control_plane.set(ResourceType::Cluster, &[&format!("{CLUSTER}{cswrr}")]);
    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &[port])]);
    control_plane.set(ResourceType::Listener, &[LISTENER]);
    control_plane.set(ResourceType::RouteConfiguration, &[ROUTE]);
    let outrider = outrider::app::start_with(bootstrap(control_plane.port, "GRPC"), 1).await.unwrap();

    let request = tokio::time::timeout(WAIT, streams.recv()).await.unwrap().unwrap();
    let interval = request.report_interval.unwrap();
    assert_eq!((interval.seconds, interval.nanos), (3, 0), "the configured reporting period is asked for");
    outrider.stop();
}
