//! `envoy.filters.http.local_ratelimit` and `envoy.filters.network.local_ratelimit`.
//!
//! HTTP: a request the filter is enabled for takes a token from the bucket; without one
//! it is counted `rate_limited` and, when enforced, answered `429 local_rate_limited`
//! (response flag `RL`) with `response_headers_to_add`; a limited request that is not
//! enforced goes on with `request_headers_to_add_when_not_enforced`. A route's own
//! settings replace the filter's, bucket included.
//!
//! Buckets are shared, not per worker: the filter's runtime is built once per connection
//! manager and shared by every worker, and so is its bucket (see [`TokenBucket`]), as
//! Envoy documents its buckets as shared by all workers. A route's bucket lives as long as
//! the route configuration that declares it (a new configuration starts full, as in
//! Envoy); it is kept by each connection manager using the route, where Envoy keeps one
//! per route configuration.
//!
//! Envoy 1.40 adds no `x-envoy-ratelimited` header to its local rate limit refusals (its
//! documentation says otherwise; the differential test checks what it sends), so neither
//! does Outrider.

use std::sync::{Arc, Weak};

use super::chance::happens;
use super::context::{LocalResponse, RequestContext};
use super::header_options;
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use super::network::{ConnectionContext, NetworkFilter, NetworkFilterStatus};
use super::token_bucket::TokenBucket;
use crate::config::filters::FilterOverride;
use crate::config::filters::local_ratelimit::{HttpLocalRateLimit, NetworkLocalRateLimit};
use crate::core::cow_map::CowMap;
use crate::proxy::response_flags::ResponseFlags;
use crate::telemetry::{Counter, Scope, Stats};

/// gRPC's RESOURCE_EXHAUSTED, for `rate_limited_as_resource_exhausted`.
const GRPC_RESOURCE_EXHAUSTED: u32 = 8;

pub struct LocalRateLimitFilter {
    name: String,
    limiter: Limiter,
    stats: Arc<Stats>,
    /// Routes' own limiters, by the address of their settings; read by every worker
    /// without a lock.
    per_route: CowMap<usize, (Weak<HttpLocalRateLimit>, Arc<Limiter>)>,
}

/// One configuration's bucket and `<stat_prefix>.http_local_rate_limit.*` counters.
struct Limiter {
    config: Arc<HttpLocalRateLimit>,
    bucket: Option<TokenBucket>,
    enabled: Counter,
    enforced: Counter,
    rate_limited: Counter,
    ok: Counter,
    /// Envoy's counter for descriptors in shadow mode; Outrider has no descriptors, so it
    /// stays 0 (listed as Envoy lists it).
    _shadow_mode: Counter,
}

impl Limiter {
    fn new(config: Arc<HttpLocalRateLimit>, stats: &Stats) -> Self {
        let scope = Scope::envoy()
            .tagged("envoy_local_http_ratelimit_prefix", &config.stat_prefix)
            .child("http_local_rate_limit");
        Self {
            bucket: config.token_bucket.as_ref().map(TokenBucket::new),
            enabled: stats.counter(scope.name("enabled")),
            enforced: stats.counter(scope.name("enforced")),
            rate_limited: stats.counter(scope.name("rate_limited")),
            ok: stats.counter(scope.name("ok")),
            _shadow_mode: stats.counter(scope.name("shadow_mode")),
            config,
        }
    }

    fn decide(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        let config = &self.config;
        if !happens(&config.filter_enabled) {
            return FilterHeadersStatus::Continue;
        }
        self.enabled.inc();
        // Conversion refuses an enabled filter without a bucket.
        let allowed = self.bucket.as_ref().is_none_or(TokenBucket::try_consume);
        if allowed {
            self.ok.inc();
            return FilterHeadersStatus::Continue;
        }
        self.rate_limited.inc();
        if !happens(&config.filter_enforced) {
            header_options::apply(&mut request.parts.headers, &config.request_headers_to_add_when_not_enforced);
            return FilterHeadersStatus::Continue;
        }
        self.enforced.inc();
        let mut reply = LocalResponse::new(config.status, "local_rate_limited", "local_rate_limited");
        header_options::apply(&mut reply.headers, &config.response_headers_to_add);
        reply.flags = ResponseFlags::RATE_LIMITED;
        if config.grpc_resource_exhausted {
            reply.grpc_status = Some(GRPC_RESOURCE_EXHAUSTED);
        }
        FilterHeadersStatus::LocalReply(reply)
    }
}

impl LocalRateLimitFilter {
    pub fn new(name: &str, config: Arc<HttpLocalRateLimit>, factory: FactoryContext<'_>) -> Self {
        Self {
            name: name.to_owned(),
            limiter: Limiter::new(config, factory.stats),
            stats: factory.stats.clone(),
            per_route: CowMap::default(),
        }
    }

    /// The limiter of a route's own settings, made on first use.
    fn route_limiter(&self, config: &Arc<HttpLocalRateLimit>) -> Arc<Limiter> {
        let address = Arc::as_ptr(config) as usize;
        // The weak half tells whether the settings (and so the route configuration) are
        // still the ones the limiter was made for.
        let live = |entry: &(Weak<HttpLocalRateLimit>, Arc<Limiter>)| {
            entry.0.upgrade().is_some_and(|live| Arc::ptr_eq(&live, config))
        };
        if let Some(limiter) =
            self.per_route.read(|routes| routes.get(&address).filter(|e| live(e)).map(|e| e.1.clone()))
        {
            return limiter;
        }
        let made = Arc::new(Limiter::new(config.clone(), &self.stats));
        let mut chosen = made.clone();
        self.per_route.update(|routes| {
            routes.retain(|_, (weak, _)| weak.strong_count() > 0);
            // Another worker may have made this route's limiter meanwhile: one bucket.
            match routes.get(&address).filter(|e| live(e)) {
                Some(entry) => chosen = entry.1.clone(),
                None => {
                    chosen = made.clone();
                    routes.insert(address, (Arc::downgrade(config), made.clone()));
                }
            }
        });
        chosen
    }
}

impl HttpFilter for LocalRateLimitFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        let route_config = match request.per_filter(&self.name) {
            Some(FilterOverride::LocalRateLimit(config)) => Some(config.clone()),
            _ => None,
        };
        match route_config {
            Some(config) => self.route_limiter(&config).decide(request),
            None => self.limiter.decide(request),
        }
    }
}

/// `envoy.filters.network.local_ratelimit`: a new connection takes a token or is closed.
pub struct NetworkLocalRateLimitFilter {
    enabled: bool,
    bucket: TokenBucket,
    /// `local_rate_limit.<stat_prefix>.rate_limited`.
    rate_limited: Counter,
}

impl NetworkLocalRateLimitFilter {
    pub fn new(config: &NetworkLocalRateLimit, factory: FactoryContext<'_>) -> Self {
        let scope = Scope::envoy()
            .child("local_rate_limit")
            .tagged("envoy_local_network_ratelimit_prefix", &config.stat_prefix);
        Self {
            enabled: config.enabled,
            bucket: TokenBucket::new(&config.token_bucket),
            rate_limited: factory.stats.counter(scope.name("rate_limited")),
        }
    }
}

impl NetworkFilter for NetworkLocalRateLimitFilter {
    async fn on_new_connection(&self, _connection: &ConnectionContext<'_>) -> NetworkFilterStatus {
        if !self.enabled || self.bucket.try_consume() {
            return NetworkFilterStatus::Continue;
        }
        self.rate_limited.inc();
        NetworkFilterStatus::Close
    }
}
