//! `envoy.filters.http.cors`: the proxy answers CORS preflights itself and adds the
//! `access-control-*` headers to the responses of allowed origins, by the policies of the
//! matched route and virtual host.

use super::fractional_percent::FractionalPercent;
use crate::config::matcher::StringMatcher;

/// A CORS policy: `envoy.extensions.filters.http.cors.v3.CorsPolicy` in
/// `typed_per_filter_config`, or the older `cors` field of a virtual host or route. Each
/// attribute left unset defers to the next less specific policy, as in Envoy.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CorsPolicy {
    /// `allow_origin_string_match`: an origin matching any of these is allowed.
    pub allow_origins: Vec<StringMatcher>,
    /// `allow_methods` (`*` echoes `access-control-request-method`).
    pub allow_methods: String,
    /// `allow_headers` (`*` echoes `access-control-request-headers`).
    pub allow_headers: String,
    pub expose_headers: String,
    pub max_age: String,
    pub allow_credentials: Option<bool>,
    pub allow_private_network_access: Option<bool>,
    /// `forward_not_matching_preflights` (Envoy's default: true).
    pub forward_not_matching_preflights: Option<bool>,
    /// `filter_enabled` (`None`: enabled, Envoy's default).
    pub filter_enabled: Option<FractionalPercent>,
    /// `shadow_enabled` (`None`: off): only count origins, never answer or add headers.
    pub shadow_enabled: Option<FractionalPercent>,
}
