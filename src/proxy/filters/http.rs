//! The HTTP filter chain of one connection manager: the filters before the router, run in
//! their configured order on each request's headers (after path normalization and route
//! selection), each one free to let the request go on or answer it locally.

use std::sync::Arc;

use super::context::RequestContext;
use super::{
    LocalResponse, compressor, cors, ext_authz, fault, health_check, istio_stats, jwt_authn, local_ratelimit,
    peer_metadata, ratelimit, rbac, set_filter_state,
};
use crate::config::filters::peer_metadata::LocalNode;
use crate::config::filters::{FilterOverride, HttpFilterConfig};
use crate::store::WorkloadIndex;
use crate::telemetry::Stats;

/// What a filter decided about a request's headers.
#[derive(Debug)]
pub enum FilterHeadersStatus {
    /// On to the next filter (the router after the last).
    Continue,
    /// Answer with this instead of forwarding; no later filter runs.
    LocalReply(LocalResponse),
}

/// One HTTP filter's interface. A filter's runtime value is built once per connection
/// manager from its configuration and shared by every worker, so it is `Send + Sync`; the
/// futures it returns run on one worker and need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait HttpFilter: Send + Sync {
    /// The request's headers. May wait (an external check, a key fetch, a delay).
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus;
}

/// What building a filter may use: the stats store (`http.<stat_prefix>.<filter>.…`).
#[derive(Clone, Copy)]
pub struct FactoryContext<'a> {
    pub stats: &'a Arc<Stats>,
    pub stat_prefix: &'a str,
    /// The filter's name in the configuration (its per-route settings are found by it).
    pub filter_name: &'a str,
    /// This proxy's node (id and Istio workload metadata), from the bootstrap.
    pub node: &'a LocalNode,
    /// The workloads istiod's metadata discovery names, when the bootstrap asks for them.
    pub workloads: Option<&'a Arc<WorkloadIndex>>,
    /// The listener's `traffic_direction` is INBOUND (Istio's reporter side).
    pub inbound: bool,
}

/// A filter, whichever it is. (An enum rather than trait objects: each filter's
/// `decode_headers` is an `async fn`, dispatched without a box per request.)
enum Filter {
    HealthCheck(health_check::HealthCheckFilter),
    JwtAuthn(jwt_authn::JwtAuthnFilter),
    LocalRateLimit(local_ratelimit::LocalRateLimitFilter),
    Fault(fault::FaultFilter),
    Cors(cors::CorsFilter),
    Rbac(rbac::RbacFilter),
    Compressor(compressor::CompressorFilter),
    ExtAuthz(ext_authz::ExtAuthzFilter),
    RateLimit(ratelimit::RateLimitFilter),
    PeerMetadata(peer_metadata::PeerMetadataFilter),
    IstioStats(istio_stats::IstioStatsFilter),
    SetFilterState(set_filter_state::SetFilterStateFilter),
}

impl Filter {
    /// `name` is the filter's configured name, by which routes give it settings; `chain`
    /// the whole list (compressors choose among each other).
    fn build(
        name: &str,
        config: &HttpFilterConfig,
        chain: &[crate::config::filters::HttpFilter],
        factory: FactoryContext<'_>,
    ) -> Self {
        match config {
            HttpFilterConfig::HealthCheck(config) => {
                Self::HealthCheck(health_check::HealthCheckFilter::new(config.clone(), factory))
            }
            HttpFilterConfig::JwtAuthn(config) => {
                Self::JwtAuthn(jwt_authn::JwtAuthnFilter::new(name, config.clone(), factory))
            }
            HttpFilterConfig::LocalRateLimit(config) => {
                Self::LocalRateLimit(local_ratelimit::LocalRateLimitFilter::new(name, config.clone(), factory))
            }
            HttpFilterConfig::Fault(config) => Self::Fault(fault::FaultFilter::new(name, config.clone(), factory)),
            HttpFilterConfig::Cors => Self::Cors(cors::CorsFilter::new(name, factory)),
            HttpFilterConfig::Rbac(config) => Self::Rbac(rbac::RbacFilter::new(name, config.clone(), factory)),
            HttpFilterConfig::Compressor(config) => {
                Self::Compressor(compressor::CompressorFilter::new(config.clone(), chain, factory))
            }
            HttpFilterConfig::ExtAuthz(config) => {
                Self::ExtAuthz(ext_authz::ExtAuthzFilter::new(config.clone(), factory))
            }
            HttpFilterConfig::RateLimit(config) => {
                Self::RateLimit(ratelimit::RateLimitFilter::new(config.clone(), factory))
            }
            HttpFilterConfig::PeerMetadata(config) => {
                Self::PeerMetadata(peer_metadata::PeerMetadataFilter::new(config.clone(), factory))
            }
            HttpFilterConfig::IstioStats(config) => {
                Self::IstioStats(istio_stats::IstioStatsFilter::new(config.clone(), factory))
            }
            HttpFilterConfig::SetFilterState(config) => {
                Self::SetFilterState(set_filter_state::SetFilterStateFilter::new(config.clone()))
            }
        }
    }

    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        // The filters that call out (a key set, an authorization or rate-limit service) are
        // boxed: their callouts' state would otherwise size every request's future, filter
        // or not, and that future is moved as it is built.
        match self {
            Self::HealthCheck(filter) => filter.decode_headers(request).await,
            Self::JwtAuthn(filter) => Box::pin(filter.decode_headers(request)).await,
            Self::LocalRateLimit(filter) => filter.decode_headers(request).await,
            Self::Fault(filter) => filter.decode_headers(request).await,
            Self::Cors(filter) => filter.decode_headers(request).await,
            Self::Rbac(filter) => filter.decode_headers(request).await,
            Self::Compressor(filter) => filter.decode_headers(request).await,
            Self::ExtAuthz(filter) => Box::pin(filter.decode_headers(request)).await,
            Self::RateLimit(filter) => Box::pin(filter.decode_headers(request)).await,
            Self::PeerMetadata(filter) => filter.decode_headers(request).await,
            Self::IstioStats(filter) => filter.decode_headers(request).await,
            Self::SetFilterState(filter) => filter.decode_headers(request).await,
        }
    }
}

struct Entry {
    name: String,
    disabled: bool,
    filter: Filter,
}

/// The filters of one connection manager, in order, the router excluded.
pub struct HttpFilterChain {
    filters: Vec<Entry>,
}

impl HttpFilterChain {
    pub fn build(configs: &[crate::config::filters::HttpFilter], factory: FactoryContext<'_>) -> Self {
        let filters = configs
            .iter()
            .map(|c| Entry {
                name: c.name.clone(),
                disabled: c.disabled,
                filter: Filter::build(&c.name, &c.config, configs, FactoryContext { filter_name: &c.name, ..factory }),
            })
            .collect();
        Self { filters }
    }

    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    /// Runs each enabled filter on the request's headers until one answers.
    pub async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        for entry in &self.filters {
            if !enabled(entry, request) {
                continue;
            }
            if let reply @ FilterHeadersStatus::LocalReply(_) = entry.filter.decode_headers(request).await {
                return reply;
            }
        }
        FilterHeadersStatus::Continue
    }
}

/// Envoy's rule: a route's `FilterConfig { disabled }` turns a filter off or on; a filter
/// `disabled` on the connection manager runs only where a route configures it.
fn enabled(entry: &Entry, request: &RequestContext<'_>) -> bool {
    match request.per_filter(&entry.name) {
        Some(FilterOverride::Enabled(enabled)) => *enabled,
        Some(_) => true,
        None => !entry.disabled,
    }
}
