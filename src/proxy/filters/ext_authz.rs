//! `envoy.filters.http.ext_authz`: each request is checked with the authorization
//! service before it goes on. OK lets it through (with the header edits the service asks
//! for), a denial answers with the service's reply (403 by default), and a failure answers
//! `status_on_error` (403) unless `failure_mode_allow` lets the request through. Denials
//! and failures carry the `UAEX` response flag.

mod check_request;
mod decision;
mod http_service;
mod metadata;
pub mod network;
mod request_edits;
mod stats;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};

use self::decision::{Decision, Denied};
use self::stats::{ExtAuthzStats, Outcome};
use super::context::{HeaderEdit, LocalResponse, RequestContext};
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use crate::config::filters::FilterOverride;
use crate::config::filters::ext_authz::{AuthzService, ExtAuthz, ExtAuthzPerRoute};
use crate::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};
use crate::proxy::response_flags::ResponseFlags;

/// The namespace the service's `dynamic_metadata` is kept under.
const METADATA_NAMESPACE: &str = "envoy.filters.http.ext_authz";
/// The gRPC method of checks.
pub(crate) const CHECK_PATH: &str = "/envoy.service.auth.v3.Authorization/Check";
/// Added to a request let through by `failure_mode_allow_header_add`.
const FAILURE_MODE_ALLOWED_HEADER: &str = "x-envoy-auth-failure-mode-allowed";

pub struct ExtAuthzFilter {
    config: Arc<ExtAuthz>,
    name: String,
    stats: ExtAuthzStats,
}

impl ExtAuthzFilter {
    pub fn new(config: Arc<ExtAuthz>, factory: FactoryContext<'_>) -> Self {
        let stats = ExtAuthzStats::new(factory, &config.stat_prefix);
        Self { name: factory.filter_name.to_owned(), config, stats }
    }

    /// This filter's per-route settings, least specific first (route configuration,
    /// virtual host, route).
    fn per_route<'r>(&self, request: &RequestContext<'r>) -> Vec<&'r ExtAuthzPerRoute> {
        let Some(route) = request.route else { return Vec::new() };
        [Some(&route.config.per_filter), Some(&route.virtual_host.per_filter), route.route.map(|r| &r.per_filter)]
            .into_iter()
            .flatten()
            .filter_map(|levels| match levels.get(&self.name) {
                Some(FilterOverride::ExtAuthz(settings)) => Some(&**settings),
                _ => None,
            })
            .collect()
    }

    async fn check(&self, request: &RequestContext<'_>, check: &CheckRequest) -> Decision {
        match &self.config.service {
            AuthzService::Grpc { service, timeout } => {
                let call = request.callouts.grpc_unary::<CheckRequest, CheckResponse>(
                    &service.cluster_name,
                    &service.authority,
                    CHECK_PATH,
                    check,
                    *timeout,
                );
                match call.await {
                    Ok(response) => decision::from_check_response(response),
                    Err(error) => {
                        tracing::debug!(%error, cluster = %service.cluster_name, "ext_authz check failed");
                        Decision::Error
                    }
                }
            }
            AuthzService::Http(service) => {
                let Some(http) = http_service::request(service, check) else { return Decision::Error };
                match request.callouts.send(&service.cluster, http, false, service.timeout).await {
                    Ok(response) => http_service::decision(service, response),
                    Err(error) => {
                        tracing::debug!(%error, cluster = %service.cluster, "ext_authz check failed");
                        Decision::Error
                    }
                }
            }
        }
    }

    fn denied(&self, request: &mut RequestContext<'_>, denied: Denied) -> FilterHeadersStatus {
        let Denied { status, headers, mut body, dynamic_metadata: _ } = denied;
        let limit = self.config.max_denied_response_body_bytes as usize;
        if limit > 0 && body.len() > limit {
            body = body.slice(..limit);
        }
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
        let mut reply = LocalResponse::new(status, body, "ext_authz_denied");
        reply.flags = ResponseFlags::UNAUTHORIZED_EXTERNAL_SERVICE;
        // Each named header replaces what the reply had (its `content-type` included), and
        // may come more than once (`set-cookie`), as Envoy sets them: as edits of the reply,
        // which apply after its defaults.
        for (name, _) in &headers {
            request.response_headers.push(HeaderEdit::Remove(name.clone()));
        }
        for (name, value) in headers {
            request.response_headers.push(HeaderEdit::Append(name, value));
        }
        FilterHeadersStatus::LocalReply(reply)
    }

    fn failed(&self, status: u16, details: &str) -> FilterHeadersStatus {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
        let mut reply = LocalResponse::new(status, Bytes::new(), details);
        reply.flags = ResponseFlags::UNAUTHORIZED_EXTERNAL_SERVICE;
        FilterHeadersStatus::LocalReply(reply)
    }
}

impl HttpFilter for ExtAuthzFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        // Envoy checks only requests that matched a route.
        if request.route.is_none() {
            return FilterHeadersStatus::Continue;
        }
        let settings = self.per_route(request);
        if settings.last().is_some_and(|s| s.disabled) {
            return FilterHeadersStatus::Continue;
        }
        // Context extensions merge across levels, the more specific winning per key.
        let mut context_extensions = BTreeMap::new();
        for level in &settings {
            context_extensions.extend(level.context_extensions.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let check = check_request::http_check(&self.config, request, context_extensions, rand::random());
        let decision = self.check(request, &check).await;
        let cluster = super::route_cluster::route_cluster(request);
        let metadata = match &decision {
            Decision::Ok(allowed) => allowed.dynamic_metadata.as_ref(),
            Decision::Denied(denied) => denied.dynamic_metadata.as_ref(),
            _ => None,
        };
        if self.config.dynamic_metadata_ingestion
            && let Some(metadata) = metadata
        {
            for (key, value) in metadata::struct_to_json(metadata) {
                request.metadata.set(METADATA_NAMESPACE, key, value);
            }
        }
        match decision {
            Decision::Ok(allowed) => {
                if request_edits::apply(request, allowed).is_err() {
                    self.stats.count(Outcome::Invalid, cluster.as_deref());
                    return self.failed(500, "ext_authz_invalid");
                }
                self.stats.count(Outcome::Ok, cluster.as_deref());
                FilterHeadersStatus::Continue
            }
            Decision::Denied(denied) => {
                self.stats.count(Outcome::Denied, cluster.as_deref());
                self.denied(request, denied)
            }
            Decision::Invalid => {
                self.stats.count(Outcome::Invalid, cluster.as_deref());
                self.failed(500, "ext_authz_invalid")
            }
            Decision::Error => {
                self.stats.count(Outcome::Error, cluster.as_deref());
                if !self.config.failure_mode_allow {
                    return self.failed(self.config.status_on_error, "ext_authz_error");
                }
                self.stats.count(Outcome::FailureModeAllowed, cluster.as_deref());
                if self.config.failure_mode_allow_header_add {
                    request.parts.headers.append(FAILURE_MODE_ALLOWED_HEADER, HeaderValue::from_static("true"));
                }
                FilterHeadersStatus::Continue
            }
        }
    }
}
