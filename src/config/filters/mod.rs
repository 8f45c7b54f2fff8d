//! The HTTP and network filters Outrider runs, as configured: one domain type per filter
//! (each in its own file), gathered here into the enums a listener carries.
//!
//! A filter that a configuration names is either converted into one of these, skipped
//! because it only observes traffic (see `convert::listener::filter_kind`), or refused
//! with its path. Nothing that allows, denies, answers, delays or rewrites requests is
//! ever skipped.

pub mod ext_authz;
pub mod grpc_service;
pub mod health_check;
pub mod ratelimit;

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
    /// `envoy.filters.http.ext_authz`.
    ExtAuthz(Arc<ext_authz::ExtAuthz>),
    /// `envoy.filters.http.ratelimit`.
    RateLimit(Arc<ratelimit::RateLimit>),
}

impl HttpFilterConfig {
    /// The filter's kind, as Envoy's documentation names it (logs, `config_dump`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::HealthCheck(_) => "envoy.filters.http.health_check",
            Self::ExtAuthz(_) => "envoy.filters.http.ext_authz",
            Self::RateLimit(_) => "envoy.filters.http.ratelimit",
        }
    }
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
    /// `envoy.filters.network.ext_authz`.
    ExtAuthz(Arc<ext_authz::NetworkExtAuthz>),
}

impl NetworkFilterConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ExtAuthz(_) => "envoy.filters.network.ext_authz",
        }
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
    /// `envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute`.
    ExtAuthz(Arc<ext_authz::ExtAuthzPerRoute>),
    /// `envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute`.
    RateLimit(Arc<ratelimit::RateLimitPerRoute>),
}
