//! The network filters of one filter chain: run once a connection's chain is chosen and
//! its TLS handshake (if any) is done, before the terminal filter sees a byte. Each may let
//! the connection go on or close it.

use std::sync::Arc;

use super::callout::Callouts;
use super::context::DownstreamConnection;
use super::ext_authz::network::NetworkExtAuthzFilter;
use super::http::FactoryContext;
use super::istio_tcp::TcpTelemetry;
use super::local_ratelimit::NetworkLocalRateLimitFilter;
use super::rbac;
use super::set_filter_state;
use crate::config::filters::set_filter_state::NetworkSetFilterState;
use crate::config::filters::{NetworkFilter as NetworkFilterEntry, NetworkFilterConfig};

/// What a network filter decided about a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkFilterStatus {
    Continue,
    /// Close the connection without passing it on.
    Close,
}

/// One connection as a network filter sees it.
pub struct ConnectionContext<'a> {
    pub connection: &'a DownstreamConnection,
    pub callouts: &'a Callouts<'a>,
}

/// One network filter's interface; see [`super::HttpFilter`] for why it is `async`.
#[allow(async_fn_in_trait)]
pub trait NetworkFilter: Send + Sync {
    /// A new connection, after its handshake. (Envoy runs RBAC's one-time check and
    /// external authorization on the first bytes; the attributes they read are all known
    /// here already, so Outrider decides before reading.)
    async fn on_new_connection(&self, connection: &ConnectionContext<'_>) -> NetworkFilterStatus;
}

enum Filter {
    LocalRateLimit(NetworkLocalRateLimitFilter),
    Rbac(rbac::network::NetworkRbacFilter),
    ExtAuthz(NetworkExtAuthzFilter),
    /// Changes the connection itself (its filter state), so it is run by the chain, not
    /// through [`NetworkFilter`].
    SetFilterState(Arc<NetworkSetFilterState>),
}

impl Filter {
    /// `None` for Istio's TCP telemetry filters, which act in the TCP proxy
    /// ([`TcpTelemetry`]).
    fn build(config: &NetworkFilterConfig, factory: FactoryContext<'_>) -> Option<Self> {
        Some(match config {
            NetworkFilterConfig::LocalRateLimit(config) => {
                Self::LocalRateLimit(NetworkLocalRateLimitFilter::new(config, factory))
            }
            NetworkFilterConfig::Rbac(config) => {
                Self::Rbac(rbac::network::NetworkRbacFilter::new(config.clone(), factory))
            }
            NetworkFilterConfig::ExtAuthz(config) => {
                Self::ExtAuthz(NetworkExtAuthzFilter::new(config.clone(), factory))
            }
            NetworkFilterConfig::SetFilterState(config) => Self::SetFilterState(config.clone()),
            NetworkFilterConfig::MetadataExchange(_) | NetworkFilterConfig::IstioStats(_) => return None,
        })
    }

    async fn on_new_connection(
        &self,
        connection: &mut DownstreamConnection,
        callouts: &Callouts<'_>,
    ) -> NetworkFilterStatus {
        let context = |connection| ConnectionContext { connection, callouts };
        match self {
            Self::LocalRateLimit(filter) => filter.on_new_connection(&context(connection)).await,
            Self::Rbac(filter) => filter.on_new_connection(&context(connection)).await,
            Self::ExtAuthz(filter) => filter.on_new_connection(&context(connection)).await,
            Self::SetFilterState(config) => {
                set_filter_state::on_new_connection(config, connection);
                NetworkFilterStatus::Continue
            }
        }
    }
}

/// The network filters of one filter chain, in order, the terminal filter excluded.
pub struct NetworkFilterChain {
    filters: Vec<Filter>,
    /// Istio's metadata exchange and TCP metrics, when the chain has them.
    pub tcp_telemetry: Option<TcpTelemetry>,
}

impl NetworkFilterChain {
    pub fn build(configs: &Arc<[NetworkFilterEntry]>, factory: FactoryContext<'_>) -> Self {
        Self {
            filters: configs.iter().filter_map(|c| Filter::build(&c.config, factory)).collect(),
            tcp_telemetry: TcpTelemetry::build(configs, factory),
        }
    }

    /// Runs each filter in order until one closes the connection; a filter may change the
    /// connection's filter state, which the filters after it and the terminal filter see.
    pub async fn on_new_connection(
        &self,
        connection: &mut DownstreamConnection,
        callouts: &Callouts<'_>,
    ) -> NetworkFilterStatus {
        for filter in &self.filters {
            if filter.on_new_connection(connection, callouts).await == NetworkFilterStatus::Close {
                return NetworkFilterStatus::Close;
            }
        }
        NetworkFilterStatus::Continue
    }
}
