//! `envoy.filters.http.ratelimit`: the global rate limit. The request's descriptors (from
//! the route's or virtual host's `rate_limits`) go to the rate-limit service's
//! `ShouldRateLimit`; OVER_LIMIT answers 429 (`rate_limited_status`) with
//! `x-envoy-ratelimited: true` and the `RL` flag; a failure lets the request through unless
//! `failure_mode_deny` (then 500, flag `RLSE`). Stats
//! `cluster.<route's cluster>.ratelimit.ok|over_limit|error|failure_mode_allowed`.

mod descriptors;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

use self::descriptors::{Descriptor, DescriptorInput, descriptors};
use super::cluster_counters::ClusterCounters;
use super::context::{HeaderEdit, LocalResponse, RequestContext};
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use crate::config::filters::FilterOverride;
use crate::config::filters::ratelimit::{RateLimit, RateLimitPerRoute, RequestType, VhRateLimits};
use crate::config::route::{Action, HeaderAppendAction};
use crate::pb::envoy::config::core::v3::HeaderValue as ProtoHeader;
use crate::pb::envoy::extensions::common::ratelimit::v3::{RateLimitDescriptor, rate_limit_descriptor::Entry};
use crate::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use crate::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use crate::proxy::response_flags::ResponseFlags;
use crate::telemetry::Scope;

const SHOULD_RATE_LIMIT_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

pub struct RateLimitFilter {
    config: Arc<RateLimit>,
    name: String,
    stats: ClusterCounters,
}

impl RateLimitFilter {
    pub fn new(config: Arc<RateLimit>, factory: FactoryContext<'_>) -> Self {
        Self { config, name: factory.filter_name.to_owned(), stats: ClusterCounters::new(factory.stats.clone()) }
    }

    /// `cluster.<cluster>.[<stat_prefix>.]ratelimit.<stat>`, Envoy's names.
    fn count(&self, cluster: Option<&str>, stat: &str) {
        let Some(cluster) = cluster else { return };
        let mut scope = Scope::envoy().child("cluster").tagged("envoy_cluster_name", cluster);
        if !self.config.stat_prefix.is_empty() {
            scope = scope.child(&self.config.stat_prefix);
        }
        self.stats.inc(scope.child("ratelimit").name(stat));
    }

    /// The domain and the descriptors of this request, per Envoy's precedence: per-route
    /// `rate_limits`, else the filter's, else the route's and (as `vh_rate_limits` says)
    /// the virtual host's entries of this filter's stage.
    fn descriptors(&self, request: &RequestContext<'_>, cluster: Option<&str>) -> (String, Vec<Descriptor>) {
        let input = DescriptorInput { parts: request.parts, remote_ip: request.remote_ip, cluster };
        let per_route: Option<&RateLimitPerRoute> = match request.per_filter(&self.name) {
            Some(FilterOverride::RateLimit(settings)) => Some(settings),
            _ => None,
        };
        let domain = per_route.and_then(|p| p.domain.clone()).unwrap_or_else(|| self.config.domain.clone());
        if let Some(per_route) = per_route.filter(|p| !p.rate_limits.is_empty()) {
            return (domain, descriptors(&per_route.rate_limits, None, &input));
        }
        if !self.config.rate_limits.is_empty() {
            return (domain, descriptors(&self.config.rate_limits, None, &input));
        }
        let Some(matched) = request.route else { return (domain, Vec::new()) };
        let Some(Action::Route(action)) = matched.route.map(|r| &r.action) else { return (domain, Vec::new()) };
        let stage = Some(self.config.stage);
        let mut out = descriptors(&action.rate_limits, stage, &input);
        let vh = if action.include_vh_rate_limits {
            VhRateLimits::Include
        } else {
            per_route.map_or(VhRateLimits::Override, |p| p.vh_rate_limits)
        };
        let include_vh = match vh {
            VhRateLimits::Include => true,
            VhRateLimits::Ignore => false,
            VhRateLimits::Override => action.rate_limits.is_empty(),
        };
        if include_vh {
            out.extend(descriptors(&matched.virtual_host.rate_limits, stage, &input));
        }
        (domain, out)
    }

    fn applies_to(&self, request: &RequestContext<'_>) -> bool {
        let internal = request.parts.headers.get("x-envoy-internal").is_some_and(|v| v.as_bytes() == b"true");
        match self.config.request_type {
            RequestType::Both => true,
            RequestType::Internal => internal,
            RequestType::External => !internal,
        }
    }

    fn over_limit(&self, request: &mut RequestContext<'_>, response: RateLimitResponse) -> FilterHeadersStatus {
        let status = StatusCode::from_u16(self.config.rate_limited_status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        let mut reply = LocalResponse::new(status, Bytes::from(response.raw_body), "request_rate_limited");
        reply.flags = ResponseFlags::RATE_LIMITED;
        if self.config.rate_limited_as_resource_exhausted {
            reply.grpc_status = Some(8);
        }
        // The service's headers are authoritative, `content-type` included: as edits of the
        // reply, which apply after its defaults.
        let service_headers: Vec<_> = headers(&response.response_headers_to_add).collect();
        let edits = &mut *request.response_headers;
        if service_headers.iter().any(|(name, _)| name == http::header::CONTENT_TYPE) {
            edits.push(HeaderEdit::Remove(http::header::CONTENT_TYPE));
        }
        edits.extend(service_headers.into_iter().map(|(name, value)| HeaderEdit::Append(name, value)));
        if !self.config.disable_x_envoy_ratelimited_header {
            edits.push(HeaderEdit::Set(
                HeaderName::from_static("x-envoy-ratelimited"),
                HeaderValue::from_static("true"),
            ));
        }
        for option in &self.config.response_headers_to_add {
            let Ok(value) = HeaderValue::from_str(&option.value) else { continue };
            let edit = match option.append_action {
                HeaderAppendAction::AppendIfExistsOrAdd => HeaderEdit::Append(option.name.clone(), value),
                HeaderAppendAction::AddIfAbsent => HeaderEdit::AddIfAbsent(option.name.clone(), value),
                HeaderAppendAction::OverwriteIfExistsOrAdd => HeaderEdit::Set(option.name.clone(), value),
                HeaderAppendAction::OverwriteIfExists => HeaderEdit::OverwriteIfExists(option.name.clone(), value),
            };
            edits.push(edit);
        }
        FilterHeadersStatus::LocalReply(reply)
    }
}

/// The valid headers of a list the service sent (an invalid one is dropped, as Envoy's
/// header map refuses it).
fn headers(list: &[ProtoHeader]) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
    list.iter().filter_map(|h| {
        let name = HeaderName::from_bytes(h.key.as_bytes()).ok()?;
        let value = if h.raw_value.is_empty() {
            HeaderValue::from_str(&h.value)
        } else {
            HeaderValue::from_bytes(&h.raw_value)
        };
        Some((name, value.ok()?))
    })
}

impl HttpFilter for RateLimitFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        if !self.applies_to(request) {
            return FilterHeadersStatus::Continue;
        }
        // Envoy rate limits only requests whose route forwards them.
        if !matches!(request.route.and_then(|r| r.route).map(|r| &r.action), Some(Action::Route(_))) {
            return FilterHeadersStatus::Continue;
        }
        let cluster = super::route_cluster::route_cluster(request);
        let (domain, descriptors) = self.descriptors(request, cluster.as_deref());
        if descriptors.is_empty() {
            return FilterHeadersStatus::Continue;
        }
        let message = RateLimitRequest {
            domain,
            descriptors: descriptors
                .into_iter()
                .map(|entries| RateLimitDescriptor {
                    entries: entries.into_iter().map(|(key, value)| Entry { key, value }).collect(),
                    ..RateLimitDescriptor::default()
                })
                .collect(),
            hits_addend: 0,
        };
        let service = &self.config.service;
        let call = request.callouts.grpc_unary::<RateLimitRequest, RateLimitResponse>(
            &service.cluster_name,
            &service.authority,
            SHOULD_RATE_LIMIT_PATH,
            &message,
            self.config.timeout,
        );
        let response = match call.await {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(%error, cluster = %service.cluster_name, "rate limit call failed");
                self.count(cluster.as_deref(), "error");
                if self.config.failure_mode_deny {
                    let status =
                        StatusCode::from_u16(self.config.status_on_error).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    let mut reply = LocalResponse::new(status, Bytes::new(), "rate_limiter_error");
                    reply.flags = ResponseFlags::RATE_LIMIT_SERVICE_ERROR;
                    return FilterHeadersStatus::LocalReply(reply);
                }
                self.count(cluster.as_deref(), "failure_mode_allowed");
                return FilterHeadersStatus::Continue;
            }
        };
        if response.overall_code == Code::OverLimit as i32 {
            self.count(cluster.as_deref(), "over_limit");
            return self.over_limit(request, response);
        }
        self.count(cluster.as_deref(), "ok");
        for (name, value) in headers(&response.request_headers_to_add) {
            request.parts.headers.append(name, value);
        }
        for (name, value) in headers(&response.response_headers_to_add) {
            request.response_headers.push(HeaderEdit::Append(name, value));
        }
        FilterHeadersStatus::Continue
    }
}
