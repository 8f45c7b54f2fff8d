//! Route configurations: virtual hosts chosen by the request's host, routes chosen by
//! path and headers, and what each route does (forward, redirect, answer directly).

pub mod action;
pub mod hash_policy;
pub mod mirror;
pub mod regex_rewrite;
pub mod retry;
pub mod virtual_host_index;

use std::sync::Arc;

use super::filters::PerFilterConfig;
use super::filters::cors::CorsPolicy;
use super::tracing::RouteTracing;

pub use action::{
    ClusterNotFoundResponseCode, ClusterSpecifier, DirectResponse, HostRewrite, MaxStreamDuration, Redirect,
    RedirectPathRewrite, RouteAction, WeightedCluster, WeightedClusters, WeightedTarget,
};
pub use hash_policy::{HashPolicy, HashSource};
pub use mirror::{MirrorCluster, RequestMirrorPolicy, ShadowHost};
pub use regex_rewrite::RegexRewrite;
pub use retry::{RetryBackOff, RetryOn, RetryOnSet, RetryPolicy};
// What routes are made of and filters use too, in modules of their own (which use no
// route) and named here as well, as part of a route.
pub use super::header_value::{HeaderAppendAction, HeaderValueOption};
pub use super::matcher::{
    HeaderMatch, HeaderMatcher, PathMatch, Pattern, QueryParameterMatcher, RouteMatch, StringMatcher,
};
pub use super::rate_limit::{RateLimitAction, RateLimitPolicy};

/// Envoy's default limit on a direct response body (`max_direct_response_body_size_bytes`).
pub const DEFAULT_MAX_DIRECT_RESPONSE_BODY_BYTES: u32 = 4096;

/// An RDS resource, or an HTTP connection manager's inline `route_config`.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfiguration {
    pub name: String,
    pub virtual_hosts: Vec<Arc<VirtualHost>>,
    /// Headers removed from requests that do not come from an internal address.
    pub internal_only_headers: Vec<http::HeaderName>,
    pub headers: HeaderMutations,
    /// With it, the most specific level (route, then virtual host, then configuration)
    /// wins when the same header is added at several levels; without it, the least.
    pub most_specific_header_mutations_wins: bool,
    /// Match the host without its `:port`.
    pub ignore_port_in_host_matching: bool,
    /// Match paths without `;parameters`.
    pub ignore_path_parameters_in_path_matching: bool,
    /// Select the virtual host by this header instead of `:authority`.
    pub vhost_header: Option<String>,
    /// `typed_per_filter_config`: the HTTP filters' settings for every virtual host.
    pub per_filter: PerFilterConfig,
    /// `virtual_hosts` by domain; built with [`RouteConfiguration::index_virtual_hosts`].
    pub virtual_host_index: virtual_host_index::VirtualHostIndex,
}

/// Header additions and removals at one level (configuration, virtual host, route, or
/// weighted cluster). Values may contain Envoy's `%COMMAND%` substitutions, kept verbatim.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeaderMutations {
    pub request_headers_to_add: Vec<HeaderValueOption>,
    pub request_headers_to_remove: Vec<http::HeaderName>,
    pub response_headers_to_add: Vec<HeaderValueOption>,
    pub response_headers_to_remove: Vec<http::HeaderName>,
}

/// `envoy.config.route.v3.VirtualHost`.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualHost {
    pub name: String,
    pub domains: Vec<DomainMatcher>,
    pub routes: Vec<Route>,
    pub require_tls: TlsRequirement,
    pub headers: HeaderMutations,
    /// Used by routes that have no retry policy of their own.
    pub retry_policy: Option<RetryPolicy>,
    /// Send `x-envoy-attempt-count` upstream.
    pub include_request_attempt_count: bool,
    /// Send `x-envoy-attempt-count` downstream.
    pub include_attempt_count_in_response: bool,
    /// Send `x-envoy-is-timeout-retry` upstream.
    pub include_is_timeout_retry_header: bool,
    /// `typed_per_filter_config`: the HTTP filters' settings for this virtual host.
    pub per_filter: PerFilterConfig,
    /// `cors`: the CORS filter's policy here when `typed_per_filter_config` has none.
    pub cors: Option<Arc<CorsPolicy>>,
    /// `rate_limits`: descriptors for the global rate-limit filter, used by routes that
    /// have none of their own (or that include them).
    pub rate_limits: Vec<RateLimitPolicy>,
}

/// `VirtualHost.require_tls`: requests that do not meet it get a 301 to https.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsRequirement {
    #[default]
    None,
    ExternalOnly,
    All,
}

/// One entry of `VirtualHost.domains`, in Envoy's forms. Stored lower-cased; hosts are
/// compared case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DomainMatcher {
    /// `example.com` (may include a port: `example.com:8080`).
    Exact(String),
    /// `*.example.com` or `*-bar.example.com`: stores the part after `*`; the host must
    /// be longer than it (the wildcard matches at least one character).
    Suffix(String),
    /// `example.*`: stores the part before `*`.
    Prefix(String),
    /// `*`: the default virtual host.
    Any,
}

impl DomainMatcher {
    /// Parses a `domains` entry; `*` only has meaning as the first or last character.
    pub fn parse(domain: &str) -> Self {
        let domain = domain.to_ascii_lowercase();
        if domain == "*" {
            DomainMatcher::Any
        } else if let Some(suffix) = domain.strip_prefix('*') {
            DomainMatcher::Suffix(suffix.to_owned())
        } else if let Some(prefix) = domain.strip_suffix('*') {
            DomainMatcher::Prefix(prefix.to_owned())
        } else {
            DomainMatcher::Exact(domain)
        }
    }

    /// Whether the lower-cased `host` matches.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            DomainMatcher::Exact(d) => host == d,
            DomainMatcher::Suffix(s) => host.len() > s.len() && host.ends_with(s.as_str()),
            DomainMatcher::Prefix(p) => host.len() > p.len() && host.starts_with(p.as_str()),
            DomainMatcher::Any => true,
        }
    }
}

impl std::fmt::Display for DomainMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DomainMatcher::Exact(d) => f.write_str(d),
            DomainMatcher::Suffix(s) => write!(f, "*{s}"),
            DomainMatcher::Prefix(p) => write!(f, "{p}*"),
            DomainMatcher::Any => f.write_str("*"),
        }
    }
}

impl RouteConfiguration {
    /// The virtual host for `host`, by Envoy's precedence: an exact domain, then the
    /// longest suffix wildcard, then the longest prefix wildcard, then `*`.
    pub fn find_virtual_host(&self, host: &str) -> Option<&Arc<VirtualHost>> {
        let host = if self.ignore_port_in_host_matching { without_port(host) } else { host };
        self.virtual_host_index.find(host).and_then(|position| self.virtual_hosts.get(position))
    }

    /// (Re)builds the domain index of `virtual_hosts`; conversion calls it once.
    pub fn index_virtual_hosts(&mut self) {
        let domains = self.virtual_hosts.iter().enumerate().flat_map(|(i, v)| v.domains.iter().map(move |d| (i, d)));
        self.virtual_host_index = virtual_host_index::VirtualHostIndex::new(domains);
    }
}

/// A host without its `:port` suffix (IPv6 literals without a port left alone).
fn without_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(colon)
            if host[colon + 1..].bytes().all(|b| b.is_ascii_digit())
                && (!host.contains('[') || host[..colon].ends_with(']')) =>
        {
            &host[..colon]
        }
        _ => host,
    }
}

/// `envoy.config.route.v3.Route`.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub name: String,
    pub route_match: RouteMatch,
    pub action: Action,
    pub headers: HeaderMutations,
    /// `typed_per_filter_config`: the HTTP filters' settings for this route.
    pub per_filter: PerFilterConfig,
    /// `tracing`: this route's sampling and extra custom tags.
    pub tracing: Option<Arc<RouteTracing>>,
}

/// What a matched route does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Route(Box<RouteAction>),
    Redirect(Redirect),
    DirectResponse(DirectResponse),
}
