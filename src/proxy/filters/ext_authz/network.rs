//! `envoy.filters.network.ext_authz`: each new connection is checked with the
//! authorization service (its addresses, principals and SNI); a denial closes it, as does a
//! failure unless `failure_mode_allow`. Stats `ext_authz.<stat_prefix>.total`, `ok`,
//! `denied`, `error`, `failure_mode_allowed`, `cx_closed`, and the gauge `active`.

use std::sync::Arc;

use super::CHECK_PATH;
use super::check_request::tcp_check;
use crate::config::filters::ext_authz::NetworkExtAuthz;
use crate::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};
use crate::proxy::filters::http::FactoryContext;
use crate::proxy::filters::network::{ConnectionContext, NetworkFilter, NetworkFilterStatus};
use crate::telemetry::{Counter, Gauge, Scope};

pub struct NetworkExtAuthzFilter {
    config: Arc<NetworkExtAuthz>,
    total: Counter,
    ok: Counter,
    denied: Counter,
    error: Counter,
    failure_mode_allowed: Counter,
    cx_closed: Counter,
    active: Gauge,
}

impl NetworkExtAuthzFilter {
    pub fn new(config: Arc<NetworkExtAuthz>, factory: FactoryContext<'_>) -> Self {
        let scope = Scope::envoy().child("ext_authz").tagged("envoy_ext_authz_prefix", &config.stat_prefix);
        let counter = |name| factory.stats.counter(scope.name(name));
        Self {
            total: counter("total"),
            ok: counter("ok"),
            denied: counter("denied"),
            error: counter("error"),
            failure_mode_allowed: counter("failure_mode_allowed"),
            cx_closed: counter("cx_closed"),
            active: factory.stats.gauge(scope.name("active")),
            config,
        }
    }
}

impl NetworkFilter for NetworkExtAuthzFilter {
    async fn on_new_connection(&self, connection: &ConnectionContext<'_>) -> NetworkFilterStatus {
        let check = tcp_check(connection.connection, self.config.include_tls_session);
        let service = &self.config.service;
        self.total.inc();
        self.active.inc();
        let call = connection.callouts.grpc_unary::<CheckRequest, CheckResponse>(
            &service.cluster_name,
            &service.authority,
            CHECK_PATH,
            &check,
            self.config.timeout,
        );
        let result = call.await;
        self.active.dec();
        match result {
            Ok(response) if response.status.as_ref().map_or(0, |s| s.code) == 0 => {
                self.ok.inc();
                NetworkFilterStatus::Continue
            }
            Ok(_) => {
                self.denied.inc();
                self.cx_closed.inc();
                NetworkFilterStatus::Close
            }
            Err(error) => {
                tracing::debug!(%error, cluster = %service.cluster_name, "network ext_authz check failed");
                self.error.inc();
                if self.config.failure_mode_allow {
                    self.failure_mode_allowed.inc();
                    return NetworkFilterStatus::Continue;
                }
                self.cx_closed.inc();
                NetworkFilterStatus::Close
            }
        }
    }
}
