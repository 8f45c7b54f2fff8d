//! `envoy.filters.network.rbac`: decides once per connection, before the terminal filter
//! reads a byte, and closes a denied connection (after `delay_deny`, reading nothing
//! meanwhile, when set).
//!
//! Envoy evaluates on the connection's data: once on the first bytes
//! (`ONE_TIME_ON_FIRST_BYTE`), or on every read (`CONTINUOUS`) so that protocol filters
//! before it can add dynamic metadata as messages go by. Every attribute the policies can
//! read — addresses, ports, SNI, the peer certificate, Istio's peer principal — is known
//! when the handshake is done, and Outrider runs no network filter that adds metadata, so
//! the verdict is the same and Outrider takes it once, when the connection is handed to
//! the filters. Two visible differences: a connection that never sends anything is
//! decided (and counted) anyway, and a `CONTINUOUS` connection is counted once, where
//! Envoy counts each read.

use std::sync::Arc;

use super::super::http::FactoryContext;
use super::super::network::{ConnectionContext, NetworkFilter, NetworkFilterStatus};
use super::engine::{self, Attributes};
use super::stats::RbacStats;
use crate::config::filters::rbac::NetworkRbac;

pub struct NetworkRbacFilter {
    config: Arc<NetworkRbac>,
    stats: RbacStats,
}

impl NetworkRbacFilter {
    pub fn new(config: Arc<NetworkRbac>, factory: FactoryContext<'_>) -> Self {
        let stats = RbacStats::network(factory.stats, &config.stat_prefix, &config.shadow_rules_stat_prefix);
        Self { config, stats }
    }

    /// The verdict on a connection: `true` to let it through.
    fn allows(&self, connection: &ConnectionContext<'_>) -> bool {
        // No headers and no request metadata on a connection; the client address is the
        // peer's (there is no `x-forwarded-for` below HTTP).
        let attributes = Attributes {
            parts: None,
            connection: connection.connection,
            remote_ip: connection.connection.peer.ip(),
            metadata: None,
        };
        if let Some(shadow) = &self.config.shadow_rules {
            let counter = if engine::evaluate(shadow, &attributes).allowed {
                &self.stats.shadow_allowed
            } else {
                &self.stats.shadow_denied
            };
            counter.inc();
        }
        let Some(rules) = &self.config.rules else { return true };
        let decision = engine::evaluate(rules, &attributes);
        let counter = if decision.allowed { &self.stats.allowed } else { &self.stats.denied };
        counter.inc();
        if !decision.allowed {
            tracing::debug!(
                peer = %connection.connection.peer,
                details = %decision.response_detail(),
                "rbac: connection denied"
            );
        }
        decision.allowed
    }
}

impl NetworkFilter for NetworkRbacFilter {
    async fn on_new_connection(&self, connection: &ConnectionContext<'_>) -> NetworkFilterStatus {
        if self.allows(connection) {
            return NetworkFilterStatus::Continue;
        }
        if let Some(delay) = self.config.delay_deny {
            tokio::time::sleep(delay).await;
        }
        NetworkFilterStatus::Close
    }
}
