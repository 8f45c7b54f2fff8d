//! One host under one health check: a task on the control runtime that probes, applies
//! the result to the host's flags, tells the balancing task when the host's health
//! changed (or an ejected host passed), and sleeps until the next probe is due.

use std::sync::Arc;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::mpsc::UnboundedSender;

use super::HealthEvent;
use super::grpc::GrpcProber;
use super::http::HttpProber;
use super::tcp::TcpProber;
use super::transport::Target;
use crate::config::cluster::{HealthCheck, HealthChecker};
use crate::lb::Host;
use crate::lb::health_check::{
    FailureKind, HealthCheckStats, ProbeResult, Session, Transition, initial_delay, next_interval,
};

/// Everything a session task owns.
pub(super) struct SessionTask {
    pub cluster: String,
    pub check: usize,
    pub config: HealthCheck,
    pub host: Arc<Host>,
    pub target: Target,
    pub counters: Arc<HealthCheckStats>,
    pub events: UnboundedSender<HealthEvent>,
    pub seed: u64,
}

enum Prober {
    Http(HttpProber),
    Tcp(TcpProber),
    Grpc(GrpcProber),
}

impl Prober {
    fn new(config: &HealthCheck, target: Target) -> Self {
        let reuse = config.reuse_connection;
        match &config.checker {
            HealthChecker::Http(http) => Self::Http(HttpProber::new(http.clone(), target, reuse)),
            HealthChecker::Tcp(tcp) => Self::Tcp(TcpProber::new(tcp.clone(), target, reuse)),
            HealthChecker::Grpc(grpc) => Self::Grpc(GrpcProber::new(grpc.clone(), target, reuse, config.timeout)),
        }
    }

    async fn probe(&mut self) -> ProbeResult {
        match self {
            Self::Http(p) => p.probe().await,
            Self::Tcp(p) => p.probe().await,
            Self::Grpc(p) => p.probe().await,
        }
    }

    /// Drops the connection (after a timeout, Envoy closes it).
    fn close(&mut self) {
        match self {
            Self::Http(p) => p.close(),
            Self::Tcp(p) => p.close(),
            Self::Grpc(p) => p.close(),
        }
    }
}

impl SessionTask {
    /// Probes until the task is aborted (host removed, check reconfigured, shutdown).
    pub async fn run(self) {
        let Self { cluster, check, config, host, target, counters, events, seed } = self;
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut session = Session::new(
            check,
            host.stats.clone(),
            counters.clone(),
            config.healthy_threshold,
            config.unhealthy_threshold,
        );
        let mut prober = Prober::new(&config, target);
        tokio::time::sleep(initial_delay(&config, &mut rng)).await;
        loop {
            counters.attempt.inc();
            let result = match tokio::time::timeout(config.timeout, prober.probe()).await {
                Ok(result) => result,
                Err(_) => {
                    prober.close();
                    ProbeResult::Failed { kind: FailureKind::Timeout, retriable: false }
                }
            };
            let transition = session.on_result(result);
            let passed = matches!(result, ProbeResult::Passed { .. });
            if transition == Transition::Changed {
                let address = host.address();
                if session.failed() {
                    tracing::info!(%cluster, host = %address, ?result, "health check failed the host");
                } else {
                    tracing::info!(%cluster, host = %address, "health check passed the host");
                }
            }
            // A pass may also return an ejected host (outlier detection decides).
            let uneject = passed && host.stats.is_ejected(std::time::Instant::now());
            if transition == Transition::Changed || uneject {
                let changed = transition == Transition::Changed;
                let event = HealthEvent { cluster: cluster.clone(), address: host.address().clone(), passed, changed };
                if events.send(event).is_err() {
                    return; // the balancing task is gone: shutting down
                }
            }
            // Envoy's no-traffic intervals apply until the cluster made its first connection
            // (by its `upstream_cx_total`: a stats matcher that rejects it keeps them, as in Envoy).
            let traffic = host.cluster_stats.upstream_cx_total.get() > 0;
            tokio::time::sleep(next_interval(&config, traffic, passed, transition, &mut rng)).await;
        }
    }
}
