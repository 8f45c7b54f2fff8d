//! `envoy.filters.http.cors`, by Envoy's rules:
//! - the policies are the route's, virtual host's and route configuration's
//!   `typed_per_filter_config` entries for this filter (most specific first) or, when
//!   there are none, the route's and virtual host's `cors` fields; each attribute comes
//!   from the most specific policy that sets it, while enabled / shadow come from the
//!   first policy alone;
//! - only requests with a non-empty `origin` on a forwarding route are CORS requests; the
//!   origin is valid when an `allow_origin_string_match` entry matches it (or matches
//!   `*`), counted in `http.<prefix>.cors.origin_valid` / `origin_invalid`;
//! - a preflight (`OPTIONS` with `access-control-request-method`) is answered by the
//!   proxy with 200 and the policy's `access-control-allow-*` headers, unless its origin
//!   is invalid and `forward_not_matching_preflights` (default true) sends it upstream;
//! - any response to a valid origin gets `access-control-allow-origin` (the origin
//!   itself, never `*`), `-allow-credentials: true` when allowed and `-expose-headers`.
//!   In shadow mode (shadow enabled, filter not) origins are only counted.

use http::{HeaderName, HeaderValue, Method, StatusCode};

use super::chance::happens;
use super::context::{HeaderEdit, LocalResponse, RequestContext};
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use crate::config::filters::FilterOverride;
use crate::config::filters::cors::CorsPolicy;
use crate::config::route::Action;
use crate::telemetry::{Counter, Scope};

const ALLOW_ORIGIN: HeaderName = HeaderName::from_static("access-control-allow-origin");
const ALLOW_CREDENTIALS: HeaderName = HeaderName::from_static("access-control-allow-credentials");
const ALLOW_METHODS: HeaderName = HeaderName::from_static("access-control-allow-methods");
const ALLOW_HEADERS: HeaderName = HeaderName::from_static("access-control-allow-headers");
const EXPOSE_HEADERS: HeaderName = HeaderName::from_static("access-control-expose-headers");
const MAX_AGE: HeaderName = HeaderName::from_static("access-control-max-age");
const ALLOW_PRIVATE_NETWORK: HeaderName = HeaderName::from_static("access-control-allow-private-network");
const REQUEST_METHOD: &str = "access-control-request-method";
const REQUEST_HEADERS: &str = "access-control-request-headers";
const REQUEST_PRIVATE_NETWORK: &str = "access-control-request-private-network";

pub struct CorsFilter {
    name: String,
    origin_valid: Counter,
    origin_invalid: Counter,
}

impl CorsFilter {
    pub fn new(name: &str, factory: FactoryContext<'_>) -> Self {
        let scope =
            Scope::envoy().child("http").tagged("envoy_http_conn_manager_prefix", factory.stat_prefix).child("cors");
        Self {
            name: name.to_owned(),
            origin_valid: factory.stats.counter(scope.name("origin_valid")),
            origin_invalid: factory.stats.counter(scope.name("origin_invalid")),
        }
    }
}

/// The policies that apply to a request, most specific first.
pub struct Policies<'a>(Vec<&'a CorsPolicy>);

impl<'a> Policies<'a> {
    pub fn new(policies: Vec<&'a CorsPolicy>) -> Self {
        Self(policies)
    }

    fn first<T>(&self, pick: impl Fn(&'a CorsPolicy) -> Option<T>) -> Option<T> {
        self.0.iter().find_map(|p| pick(p))
    }

    fn text(&self, pick: impl Fn(&'a CorsPolicy) -> &'a str) -> &'a str {
        self.first(|p| Some(pick(p)).filter(|s| !s.is_empty())).unwrap_or("")
    }

    pub fn enabled(&self) -> bool {
        self.0.first().is_some_and(|p| p.filter_enabled.as_ref().is_none_or(happens))
    }

    pub fn shadow_enabled(&self) -> bool {
        self.0.first().is_some_and(|p| p.shadow_enabled.as_ref().is_some_and(happens))
    }

    pub fn origin_allowed(&self, origin: &str) -> bool {
        self.first(|p| Some(&p.allow_origins).filter(|o| !o.is_empty()))
            .is_some_and(|origins| origins.iter().any(|m| m.matches("*") || m.matches(origin)))
    }

    pub fn forward_not_matching_preflights(&self) -> bool {
        self.first(|p| p.forward_not_matching_preflights).unwrap_or(true)
    }

    pub fn allow_credentials(&self) -> bool {
        self.first(|p| p.allow_credentials).unwrap_or(false)
    }

    pub fn allow_private_network_access(&self) -> bool {
        self.first(|p| p.allow_private_network_access).unwrap_or(false)
    }

    pub fn allow_methods(&self) -> &'a str {
        self.text(|p| &p.allow_methods)
    }

    pub fn allow_headers(&self) -> &'a str {
        self.text(|p| &p.allow_headers)
    }

    pub fn expose_headers(&self) -> &'a str {
        self.text(|p| &p.expose_headers)
    }

    pub fn max_age(&self) -> &'a str {
        self.text(|p| &p.max_age)
    }
}

fn value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

fn request_header<'r>(request: &'r RequestContext<'_>, name: &str) -> &'r str {
    request.parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

impl CorsFilter {
    fn policies<'r>(&self, request: &'r RequestContext<'_>) -> Option<Policies<'r>> {
        let matched = request.route?;
        let route = matched.route?;
        // Envoy's CORS filter acts only on routes that forward (a route entry).
        let Action::Route(action) = &route.action else {
            return None;
        };
        let typed: Vec<&CorsPolicy> = [
            route.per_filter.get(&self.name),
            matched.virtual_host.per_filter.get(&self.name),
            matched.config.per_filter.get(&self.name),
        ]
        .into_iter()
        .flatten()
        .filter_map(|o| match o {
            FilterOverride::Cors(policy) => Some(policy.as_ref()),
            _ => None,
        })
        .collect();
        if !typed.is_empty() {
            return Some(Policies::new(typed));
        }
        Some(Policies::new(
            [action.cors.as_deref(), matched.virtual_host.cors.as_deref()].into_iter().flatten().collect(),
        ))
    }
}

impl HttpFilter for CorsFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        let Some(policies) = self.policies(request) else {
            return FilterHeadersStatus::Continue;
        };
        let enabled = policies.enabled();
        let shadow = policies.shadow_enabled();
        if !enabled && !shadow {
            return FilterHeadersStatus::Continue;
        }
        let origin = request_header(request, "origin");
        if origin.is_empty() {
            return FilterHeadersStatus::Continue;
        }
        let allowed = policies.origin_allowed(origin);
        if allowed {
            self.origin_valid.inc()
        } else {
            self.origin_invalid.inc()
        }
        if !enabled {
            return FilterHeadersStatus::Continue;
        }
        // What Envoy's encoder half adds to whatever response goes back, this filter's own
        // preflight answer included.
        let mut edits = Vec::new();
        let origin_value = value(origin);
        if allowed && let Some(origin) = origin_value.clone() {
            edits.push(HeaderEdit::Set(ALLOW_ORIGIN, origin));
            if policies.allow_credentials() {
                edits.push(HeaderEdit::Set(ALLOW_CREDENTIALS, HeaderValue::from_static("true")));
            }
            if let Some(expose) = value(policies.expose_headers()).filter(|v| !v.is_empty()) {
                edits.push(HeaderEdit::Set(EXPOSE_HEADERS, expose));
            }
        }
        let preflight = request.parts.method == Method::OPTIONS && !request_header(request, REQUEST_METHOD).is_empty();
        let reply = (preflight && (allowed || !policies.forward_not_matching_preflights()))
            .then(|| preflight_reply(&policies, request, allowed.then_some(origin_value).flatten()));
        request.response_headers.extend(edits);
        match reply {
            Some(reply) => FilterHeadersStatus::LocalReply(reply),
            None => FilterHeadersStatus::Continue,
        }
    }
}

/// The proxy's answer to a preflight.
fn preflight_reply(
    policies: &Policies<'_>,
    request: &RequestContext<'_>,
    origin: Option<HeaderValue>,
) -> LocalResponse {
    let mut reply = LocalResponse::new(StatusCode::OK, "", "cors_response");
    let headers = &mut reply.headers;
    if let Some(origin) = origin {
        headers.insert(ALLOW_ORIGIN, origin);
    }
    if policies.allow_credentials() {
        headers.insert(ALLOW_CREDENTIALS, HeaderValue::from_static("true"));
    }
    // `*` echoes what the request asks for.
    let echo = |configured: &str, asked: &str| if configured == "*" { value(asked) } else { value(configured) };
    let methods = policies.allow_methods();
    if !methods.is_empty()
        && let Some(v) = echo(methods, request_header(request, REQUEST_METHOD))
    {
        headers.insert(ALLOW_METHODS, v);
    }
    let allow_headers = policies.allow_headers();
    if !allow_headers.is_empty()
        && let Some(v) = echo(allow_headers, request_header(request, REQUEST_HEADERS))
    {
        headers.insert(ALLOW_HEADERS, v);
    }
    if let Some(max_age) = value(policies.max_age()).filter(|v| !v.is_empty()) {
        headers.insert(MAX_AGE, max_age);
    }
    if policies.allow_private_network_access() && request_header(request, REQUEST_PRIVATE_NETWORK) == "true" {
        headers.insert(ALLOW_PRIVATE_NETWORK, HeaderValue::from_static("true"));
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::filters::fractional_percent::FractionalPercent;
    use crate::config::route::StringMatcher;

    fn exact(origin: &str) -> StringMatcher {
        StringMatcher::Exact { value: origin.into(), ignore_case: false }
    }

    #[test]
    fn each_attribute_comes_from_the_most_specific_policy_that_sets_it() {
        let route = CorsPolicy { allow_methods: "PUT".into(), allow_credentials: Some(false), ..CorsPolicy::default() };
        let vhost = CorsPolicy {
            allow_origins: vec![exact("https://a.test")],
            allow_methods: "GET".into(),
            max_age: "60".into(),
            allow_credentials: Some(true),
            forward_not_matching_preflights: Some(false),
            ..CorsPolicy::default()
        };
        let policies = Policies::new(vec![&route, &vhost]);
        assert_eq!(policies.allow_methods(), "PUT");
        assert_eq!(policies.max_age(), "60");
        assert!(!policies.allow_credentials());
        assert!(!policies.forward_not_matching_preflights());
        assert!(policies.origin_allowed("https://a.test"));
        assert!(!policies.origin_allowed("https://b.test"));
        assert!(policies.enabled() && !policies.shadow_enabled());
    }

    #[test]
    fn enabled_and_shadow_come_from_the_first_policy_only() {
        let off = FractionalPercent::NONE;
        let route = CorsPolicy {
            filter_enabled: Some(off),
            shadow_enabled: Some(FractionalPercent::ALL),
            ..CorsPolicy::default()
        };
        let vhost = CorsPolicy { filter_enabled: Some(FractionalPercent::ALL), ..CorsPolicy::default() };
        let policies = Policies::new(vec![&route, &vhost]);
        assert!(!policies.enabled());
        assert!(policies.shadow_enabled());
        // No policy: nothing is enabled, and forwarding unmatched preflights is the default.
        let none = Policies::new(Vec::new());
        assert!(!none.enabled() && !none.shadow_enabled());
        assert!(none.forward_not_matching_preflights());
        assert!(!none.origin_allowed("https://a.test"));
    }

    #[test]
    fn a_matcher_of_star_allows_every_origin() {
        let policy = CorsPolicy { allow_origins: vec![exact("*")], ..CorsPolicy::default() };
        assert!(Policies::new(vec![&policy]).origin_allowed("https://anything.test"));
    }
}
