//! `envoy.filters.http.health_check`: answers the load balancer's health checks itself
//! (or, in pass-through mode, lets them through and only marks them).

use crate::config::matcher::HeaderMatcher;

/// `envoy.extensions.filters.http.health_check.v3.HealthCheck`.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheck {
    /// `pass_through_mode`: forward health checks to the upstream instead of answering.
    pub pass_through_mode: bool,
    /// A request is a health check when all of these match.
    pub headers: Vec<HeaderMatcher>,
}
