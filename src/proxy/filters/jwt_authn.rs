//! `envoy.filters.http.jwt_authn`: the first rule that matches the request (or the
//! route's `PerRouteConfig`) picks a requirement; its verifier checks the request's
//! tokens; a failure is answered 401 (403 for audiences) with Envoy's message as the body
//! and `www-authenticate: Bearer realm="<url>"`, plus `error="invalid_token"` unless the
//! token was missing. On success the verified payloads go to dynamic metadata
//! (`envoy.filters.http.jwt_authn`), where RBAC reads Istio's `request.auth.claims`.

mod authenticate;
mod extract;
mod jwks;
mod jwt;
mod keys;
mod status;
mod verified;
mod verifier;

use std::collections::BTreeMap;
use std::sync::Arc;

use http::{HeaderValue, StatusCode};

use self::authenticate::{FetchCounters, Session};
use self::keys::ProviderKeys;
use self::keys::Providers;
use self::status::Status;
use self::verifier::Verifier;
use super::context::{LocalResponse, RequestContext};
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use crate::config::filters::FilterOverride;
use crate::config::filters::jwt_authn::{JwtAuthentication, JwtPerRoute, METADATA_NAMESPACE};
use crate::config::route::RouteMatch;
use crate::proxy::router::request_header_value;
use crate::telemetry::{Counter, Scope};

/// Envoy truncates the path in the realm to this many bytes.
const MAX_REALM_PATH: usize = 256;

pub struct JwtAuthnFilter {
    /// The filter's name, which per-route settings are keyed by.
    name: String,
    config: Arc<JwtAuthentication>,
    providers: Providers,
    rules: Vec<(RouteMatch, Option<Verifier>)>,
    by_name: BTreeMap<String, Verifier>,
    allowed: Counter,
    denied: Counter,
    cors_preflight_bypassed: Counter,
    fetches: FetchCounters,
}

impl JwtAuthnFilter {
    pub fn new(name: &str, config: Arc<JwtAuthentication>, factory: FactoryContext<'_>) -> Self {
        let scope = Scope::envoy().child("http").tagged("envoy_http_conn_manager_prefix", factory.stat_prefix);
        let scope = scope.child("jwt_authn");
        let counter = |name: &str| factory.stats.counter(scope.name(name));
        let providers: Providers =
            config.providers.iter().map(|(name, p)| (name.clone(), Arc::new(ProviderKeys::new(p.clone())))).collect();
        let rules = config
            .rules
            .iter()
            .map(|rule| (rule.route_match.clone(), rule.requires.as_ref().map(|r| Verifier::build(r, &providers))))
            .collect();
        let by_name =
            config.requirement_map.iter().map(|(name, r)| (name.clone(), Verifier::build(r, &providers))).collect();
        Self {
            name: name.to_owned(),
            allowed: counter("allowed"),
            denied: counter("denied"),
            cors_preflight_bypassed: counter("cors_preflight_bypassed"),
            fetches: FetchCounters { success: counter("jwks_fetch_success"), failed: counter("jwks_fetch_failed") },
            config,
            providers,
            rules,
            by_name,
        }
    }

    fn rule_verifier(&self, request: &RequestContext<'_>) -> Option<&Verifier> {
        self.rules.iter().find(|(m, _)| rule_matches(m, request)).and_then(|(_, verifier)| verifier.as_ref())
    }

    fn deny(&self, status: Status, realm: &str) -> FilterHeadersStatus {
        self.denied.inc();
        let code =
            if status == Status::JwtAudienceNotAllowed { StatusCode::FORBIDDEN } else { StatusCode::UNAUTHORIZED };
        let details = format!("jwt_authn_access_denied{{{}}}", status.message().replace(' ', "_"));
        if self.config.strip_failure_response {
            return FilterHeadersStatus::LocalReply(LocalResponse::new(code, "", details));
        }
        let mut reply = LocalResponse::new(code, status.message(), details);
        let mut challenge = format!("Bearer realm=\"{realm}\"");
        if status != Status::JwtMissed {
            challenge.push_str(", error=\"invalid_token\"");
        }
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            reply.headers.insert(http::header::WWW_AUTHENTICATE, value);
        }
        FilterHeadersStatus::LocalReply(reply)
    }
}

impl HttpFilter for JwtAuthnFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        if self.config.bypass_cors_preflight && is_cors_preflight(request) {
            self.cors_preflight_bypassed.inc();
            self.allowed.inc();
            return FilterHeadersStatus::Continue;
        }
        let verifier = match request.per_filter(&self.name) {
            Some(FilterOverride::JwtAuthn(JwtPerRoute::Disabled)) => None,
            Some(FilterOverride::JwtAuthn(JwtPerRoute::RequirementName(name))) => match self.by_name.get(name) {
                Some(verifier) => Some(verifier),
                None => {
                    self.denied.inc();
                    let names: Vec<_> = self.by_name.keys().map(String::as_str).collect();
                    let error = format!("Wrong requirement_name: {name}. It should be one of [{}]", names.join(","));
                    let body = if self.config.strip_failure_response {
                        String::new()
                    } else {
                        format!("Failed JWT authentication: {error}")
                    };
                    let details = format!("jwt_authn_access_denied{{{}}}", error.replace(' ', "_"));
                    return FilterHeadersStatus::LocalReply(LocalResponse::new(StatusCode::FORBIDDEN, body, details));
                }
            },
            _ => self.rule_verifier(request),
        };
        let Some(verifier) = verifier else {
            self.allowed.inc();
            return FilterHeadersStatus::Continue;
        };
        // The realm is the URL as it arrived, before a token parameter is removed.
        let realm = original_uri(request);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut session = Session {
            request,
            providers: &self.providers,
            counters: &self.fetches,
            extracted: serde_json::Map::new(),
            now,
        };
        let outcome = verifier.verify(&mut session).await;
        if outcome.status != Status::Ok {
            return self.deny(outcome.status, &realm);
        }
        let extracted = std::mem::take(&mut session.extracted);
        for (key, value) in extracted {
            request.metadata.set(METADATA_NAMESPACE, key, value);
        }
        self.allowed.inc();
        FilterHeadersStatus::Continue
    }
}

/// `OPTIONS` with non-empty `origin` and `access-control-request-method`.
fn is_cors_preflight(request: &RequestContext<'_>) -> bool {
    let non_empty = |name| request.parts.headers.get(name).is_some_and(|v: &HeaderValue| !v.is_empty());
    request.parts.method == http::Method::OPTIONS && non_empty("origin") && non_empty("access-control-request-method")
}

/// A rule's match: headers, query parameters, gRPC, then the path (its query excluded).
fn rule_matches(m: &RouteMatch, request: &RequestContext<'_>) -> bool {
    let parts = &*request.parts;
    let query = m
        .query_parameters
        .is_empty()
        .then(Vec::new)
        .unwrap_or_else(|| extract::query_params(parts.uri.query().unwrap_or_default()));
    m.headers.iter().all(|h| h.matches(request_header_value(parts, &h.name).as_deref()))
        && m.query_parameters
            .iter()
            .all(|q| q.matches(query.iter().find(|(key, _)| *key == q.name).map(|(_, value)| value.as_str())))
        && (!m.grpc || request.is_grpc)
        && m.path.matches(parts.uri.path(), m.case_sensitive, parts.method == http::Method::CONNECT)
}

/// `scheme://host/path?query` as Envoy's `buildOriginalUri` writes it (path cut at 256
/// bytes).
fn original_uri(request: &RequestContext<'_>) -> String {
    let parts = &*request.parts;
    let scheme = parts.uri.scheme_str().unwrap_or(if request.connection.tls { "https" } else { "http" });
    let host = request_header_value(parts, ":authority").unwrap_or_default();
    let path = request.path();
    let mut end = path.len().min(MAX_REALM_PATH);
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{scheme}://{host}{}", &path[..end])
}
