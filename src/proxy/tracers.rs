//! The tracers of connection managers that name their own `tracing.provider`: one
//! exporter per distinct provider configuration, shared by every listener and worker
//! that names it and kept across configuration updates (an update that names the same
//! provider finds the same exporter, with its queue and connection). The exporter runs on
//! the control runtime; it finds the collector's address in the current snapshot when
//! each batch leaves, so a collector cluster whose endpoints change is followed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::Address;
use crate::config::endpoint::HealthStatus;
use crate::config::tracing::{TraceCollector, TracingConfig};
use crate::store::Store;
use crate::telemetry::{Resolve, Tracing, Transport};

#[derive(Debug, Default)]
pub struct Tracers {
    /// The control runtime, which carries every export. `None` outside a runtime (unit
    /// tests): no exporter is built.
    control: Option<tokio::runtime::Handle>,
    built: Mutex<HashMap<TracingConfig, Tracing>>,
}

impl Tracers {
    /// Must be called on the control runtime.
    pub fn on_current_runtime() -> Self {
        Self { control: tokio::runtime::Handle::try_current().ok(), built: Mutex::default() }
    }

    /// The tracer for `config`, built the first time it is asked for.
    pub fn get(&self, config: &TracingConfig, store: &Arc<Store>) -> Option<Tracing> {
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tracing) = built.get(config) {
            return Some(tracing.clone());
        }
        let control = self.control.as_ref()?;
        // Entered so that the exporter's connection and batches belong to the control
        // runtime, whichever worker asked first.
        let _entered = control.enter();
        let tracing = match &config.collector {
            TraceCollector::Uri(uri) => match Tracing::otlp(uri, &config.service_name) {
                Ok(tracing) => tracing,
                Err(error) => {
                    tracing::warn!(%error, "spans of this provider are not exported");
                    return None;
                }
            },
            TraceCollector::Cluster(cluster) => Tracing::otlp_resolved(
                cluster_endpoint(store.clone(), cluster.clone()),
                Transport::Grpc,
                &config.service_name,
            ),
            TraceCollector::HttpCluster { cluster, path, headers } => Tracing::otlp_resolved(
                cluster_endpoint(store.clone(), cluster.clone()),
                Transport::Http { path: path.clone(), headers: headers.iter().cloned().collect() },
                &config.service_name,
            ),
        };
        tracing::info!(collector = ?config.collector, "exporting a tracing provider's spans over OTLP");
        built.insert(config.clone(), tracing.clone());
        Some(tracing)
    }
}

/// An endpoint of `cluster` in the snapshot current at each export (EDS first, then the
/// cluster's own load assignment).
fn cluster_endpoint(store: Arc<Store>, cluster: String) -> Resolve {
    Arc::new(move || {
        let snapshot = store.load();
        let assignment = match snapshot.endpoints.get(&cluster) {
            Some(eds) => &eds.resource,
            None => snapshot.clusters.get(&cluster)?.resource.load_assignment.as_ref()?,
        };
        // A healthy endpoint if there is one (as the control plane says), else any.
        let endpoint = assignment
            .endpoints()
            .find(|e| e.health == HealthStatus::Healthy)
            .or_else(|| assignment.endpoints().next())?;
        match &endpoint.address {
            Address::Socket(address) => Some(format!("http://{address}")),
            Address::Dns { host, port } => Some(format!("http://{host}:{port}")),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Snapshot;

    fn provider(cluster: &str) -> TracingConfig {
        TracingConfig { collector: TraceCollector::Cluster(cluster.into()), service_name: "svc".into() }
    }

    #[tokio::test]
    async fn one_exporter_per_distinct_provider() {
        let tracers = Tracers::on_current_runtime();
        let store = Arc::new(Store::new(Snapshot::default()));
        for cluster in ["otel", "otel", "other", "otel"] {
            assert!(tracers.get(&provider(cluster), &store).is_some());
        }
        let built = tracers.built.lock().map(|b| b.len()).unwrap_or_default();
        assert_eq!(built, 2, "equal configurations share one exporter");
    }
}
