//! The HTTP and network filters Outrider runs, as configured: one domain type per filter
//! (each in its own file), gathered here into the enums a listener carries.
//!
//! A filter that a configuration names is either converted into one of these, skipped
//! because it only observes traffic (see `convert::filter_kind`), or refused
//! with its path. Nothing that allows, denies, answers, delays or rewrites requests is
//! ever skipped.

pub mod compressor;
pub mod cors;
pub mod ext_authz;
pub mod fault;
pub mod fractional_percent;
pub mod grpc_service;
pub mod health_check;
pub mod istio_stats;
pub mod jwt_authn;
pub mod local_ratelimit;
pub mod metadata_exchange;
pub mod peer_metadata;
pub mod ratelimit;
pub mod rbac;
pub mod set_filter_state;

use std::sync::Arc;

/// One HTTP filter of a connection manager, before the router.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpFilter {
    /// The filter's name in the configuration (`envoy.filters.http.rbac`, or whatever the
    /// control plane called it): per-route settings (`typed_per_filter_config`) find their
    /// filter by this name.
    pub name: String,
    /// `disabled`: the filter runs only for routes whose per-route settings enable it.
    pub disabled: bool,
    pub config: HttpFilterConfig,
}

/// What an HTTP filter does, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpFilterConfig {
    /// `envoy.filters.http.health_check`.
    HealthCheck(Arc<health_check::HealthCheck>),
    /// `envoy.filters.http.jwt_authn`.
    JwtAuthn(Arc<jwt_authn::JwtAuthentication>),
    /// `envoy.filters.http.local_ratelimit`.
    LocalRateLimit(Arc<local_ratelimit::HttpLocalRateLimit>),
    /// `envoy.filters.http.fault`.
    Fault(Arc<fault::HttpFault>),
    /// `envoy.filters.http.cors` (its policies come from the routes).
    Cors,
    /// `envoy.filters.http.rbac`.
    Rbac(Arc<rbac::HttpRbac>),
    /// `envoy.filters.http.compressor`.
    Compressor(Arc<compressor::Compressor>),
    /// `envoy.filters.http.ext_authz`.
    ExtAuthz(Arc<ext_authz::ExtAuthz>),
    /// `envoy.filters.http.ratelimit`.
    RateLimit(Arc<ratelimit::RateLimit>),
    /// Istio's `istio.metadata_exchange` (`io.istio.http.peer_metadata.Config`).
    PeerMetadata(Arc<peer_metadata::PeerMetadata>),
    /// Istio's `istio.stats` (`stats.PluginConfig`).
    IstioStats(Arc<istio_stats::IstioStats>),
    /// `envoy.filters.http.set_filter_state`.
    SetFilterState(Arc<set_filter_state::SetFilterState>),
}

/// One network filter of a filter chain, before its terminal filter.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkFilter {
    pub name: String,
    pub config: NetworkFilterConfig,
}

/// What a network filter does, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum NetworkFilterConfig {
    /// `envoy.filters.network.local_ratelimit`.
    LocalRateLimit(Arc<local_ratelimit::NetworkLocalRateLimit>),
    /// `envoy.filters.network.rbac`.
    Rbac(Arc<rbac::NetworkRbac>),
    /// `envoy.filters.network.ext_authz`.
    ExtAuthz(Arc<ext_authz::NetworkExtAuthz>),
    /// Istio's `istio.metadata_exchange` (TCP): run by the TCP proxy on the connection's
    /// bytes.
    MetadataExchange(Arc<metadata_exchange::TcpMetadataExchange>),
    /// Istio's `istio.stats` (TCP metrics): reported by the TCP proxy.
    IstioStats(Arc<istio_stats::IstioStats>),
    /// `envoy.filters.network.set_filter_state`: the connection's filter state, set before
    /// the terminal filter sees it (Istio's waypoint re-shares the tunnel's destination).
    SetFilterState(Arc<set_filter_state::NetworkSetFilterState>),
}

impl NetworkFilterConfig {
    /// Whether the filter acts in the TCP proxy rather than when the connection arrives.
    pub fn is_tcp_telemetry(&self) -> bool {
        matches!(self, Self::MetadataExchange(_) | Self::IstioStats(_))
    }
}

/// A filter's settings for one virtual host, route or weighted cluster
/// (`typed_per_filter_config`), by filter name. The most specific level wins, as in Envoy.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PerFilterConfig(pub Vec<(String, FilterOverride)>);

impl PerFilterConfig {
    pub fn get(&self, filter_name: &str) -> Option<&FilterOverride> {
        self.0.iter().find(|(name, _)| name == filter_name).map(|(_, config)| config)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One entry of `typed_per_filter_config`.
#[derive(Debug, Clone, PartialEq)]
pub enum FilterOverride {
    /// `envoy.config.route.v3.FilterConfig`: `disabled` turns the filter off (or, when
    /// false, on for a filter that is `disabled` on the connection manager).
    Enabled(bool),
    /// `envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig`.
    JwtAuthn(jwt_authn::JwtPerRoute),
    /// A route's own local rate limit (and token bucket).
    LocalRateLimit(Arc<local_ratelimit::HttpLocalRateLimit>),
    /// A route's own faults (Istio's VirtualService `fault`).
    Fault(Arc<fault::HttpFault>),
    /// A CORS policy for the route or virtual host.
    Cors(Arc<cors::CorsPolicy>),
    /// `envoy.extensions.filters.http.rbac.v3.RBACPerRoute`.
    Rbac(Arc<rbac::RbacPerRoute>),
    /// `envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute`.
    ExtAuthz(Arc<ext_authz::ExtAuthzPerRoute>),
    /// `envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute`.
    RateLimit(Arc<ratelimit::RateLimitPerRoute>),
}
