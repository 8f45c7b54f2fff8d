//! The HTTP filter's stats, with Envoy's names: `http.<hcm prefix>.ext_authz.[<stat_prefix>.]ok`
//! (and `denied`, `error`, `failure_mode_allowed`, `invalid`), and the same under
//! `cluster.<route's cluster>.ext_authz.` for the route's cluster.

use super::super::http::FactoryContext;
use crate::proxy::filters::cluster_counters::ClusterCounters;
use crate::telemetry::{Counter, Scope};

#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    Ok,
    Denied,
    Error,
    FailureModeAllowed,
    Invalid,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Denied => "denied",
            Self::Error => "error",
            Self::FailureModeAllowed => "failure_mode_allowed",
            Self::Invalid => "invalid",
        }
    }
}

pub struct ExtAuthzStats {
    clusters: ClusterCounters,
    filter_prefix: String,
    ok: Counter,
    denied: Counter,
    error: Counter,
    failure_mode_allowed: Counter,
    invalid: Counter,
}

impl ExtAuthzStats {
    pub fn new(factory: FactoryContext<'_>, filter_prefix: &str) -> Self {
        let scope = Scope::envoy().child("http").tagged("envoy_http_conn_manager_prefix", factory.stat_prefix);
        let scope = with_prefix(scope.child("ext_authz"), filter_prefix);
        let counter = |name| factory.stats.counter(scope.name(name));
        Self {
            clusters: ClusterCounters::new(factory.stats.clone()),
            filter_prefix: filter_prefix.to_owned(),
            ok: counter("ok"),
            denied: counter("denied"),
            error: counter("error"),
            failure_mode_allowed: counter("failure_mode_allowed"),
            invalid: counter("invalid"),
        }
    }

    /// Counts `outcome`, and under the route's cluster when it is known.
    pub fn count(&self, outcome: Outcome, cluster: Option<&str>) {
        let counter = match outcome {
            Outcome::Ok => &self.ok,
            Outcome::Denied => &self.denied,
            Outcome::Error => &self.error,
            Outcome::FailureModeAllowed => &self.failure_mode_allowed,
            Outcome::Invalid => &self.invalid,
        };
        counter.inc();
        if let Some(cluster) = cluster {
            let scope = Scope::envoy().child("cluster").tagged("envoy_cluster_name", cluster).child("ext_authz");
            self.clusters.inc(with_prefix(scope, &self.filter_prefix).name(outcome.name()));
        }
    }
}

fn with_prefix(scope: Scope, prefix: &str) -> Scope {
    if prefix.is_empty() { scope } else { scope.tagged("envoy_ext_authz_prefix", prefix) }
}
