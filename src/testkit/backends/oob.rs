//! The backend's side of out-of-band ORCA: `OpenRcaService/StreamCoreMetrics` sends the
//! backend's current load report at the interval the client asks for.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio_stream::wrappers::IntervalStream;

use super::load::Load;
use crate::pb::orca::OrcaLoadReport;
use crate::pb::orca_service::OrcaLoadReportRequest;
use crate::pb::orca_service::open_rca_service_server::OpenRcaService;

/// Shortest interval served, whatever the client asks: reports are cheap but not free.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The interval when the client does not say.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// The gRPC path prefix of the service, so the backend can tell these streams from the
/// requests it serves and counts.
pub(super) const PATH_PREFIX: &str = "/xds.service.orca.v3.OpenRcaService/";

pub(super) struct OobReports(pub(super) Arc<Load>);

type ReportStream = Pin<Box<dyn Stream<Item = Result<OrcaLoadReport, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl OpenRcaService for OobReports {
    type StreamCoreMetricsStream = ReportStream;

    async fn stream_core_metrics(
        &self,
        request: tonic::Request<OrcaLoadReportRequest>,
    ) -> Result<tonic::Response<ReportStream>, tonic::Status> {
        let asked = request.into_inner().report_interval.and_then(|d| {
            let nanos = u64::try_from(d.seconds).ok()?.checked_mul(1_000_000_000)?;
            Some(Duration::from_nanos(nanos.saturating_add(u64::try_from(d.nanos).ok()?)))
        });
        let interval = asked.filter(|d| !d.is_zero()).unwrap_or(DEFAULT_INTERVAL).max(MIN_INTERVAL);
        let load = self.0.clone();
        let ticks = IntervalStream::new(tokio::time::interval(interval));
        Ok(tonic::Response::new(Box::pin(ticks.map(move |_| Ok(load.report())))))
    }
}
