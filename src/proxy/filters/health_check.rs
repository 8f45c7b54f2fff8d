//! `envoy.filters.http.health_check`: a request that matches the configured headers is a
//! health check; without pass-through the proxy answers it itself — 200, or 503 once the
//! proxy is draining, as Envoy fails its health checks while it drains.

use std::sync::Arc;

use http::StatusCode;

use super::context::{LocalResponse, RequestContext};
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use crate::config::filters::health_check::HealthCheck;
use crate::proxy::response_flags::ResponseFlags;
use crate::proxy::router::request_header_value;
use crate::telemetry::{Counter, Scope};

pub struct HealthCheckFilter {
    config: Arc<HealthCheck>,
    /// `http.<prefix>.health_check.request_total` etc. are Envoy's; Outrider counts the
    /// checks it answered and the ones that failed because it drains.
    answered: Counter,
    failed: Counter,
}

impl HealthCheckFilter {
    pub fn new(config: Arc<HealthCheck>, factory: FactoryContext<'_>) -> Self {
        let scope = Scope::envoy().child("http").tagged("envoy_http_conn_manager_prefix", factory.stat_prefix);
        let scope = scope.child("health_check");
        Self {
            config,
            answered: factory.stats.counter(scope.name("request")),
            failed: factory.stats.counter(scope.name("failed")),
        }
    }

    fn is_health_check(&self, request: &RequestContext<'_>) -> bool {
        self.config.headers.iter().all(|m| m.matches(request_header_value(request.parts, &m.name).as_deref()))
    }
}

impl HttpFilter for HealthCheckFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        if self.config.pass_through_mode || !self.is_health_check(request) {
            return FilterHeadersStatus::Continue;
        }
        self.answered.inc();
        if request.draining {
            self.failed.inc();
            let mut reply = LocalResponse::new(StatusCode::SERVICE_UNAVAILABLE, "", "health_check_failed");
            reply.flags = ResponseFlags::FAILED_LOCAL_HEALTH_CHECK;
            return FilterHeadersStatus::LocalReply(reply);
        }
        FilterHeadersStatus::LocalReply(LocalResponse::new(StatusCode::OK, "", "health_check_ok"))
    }
}
