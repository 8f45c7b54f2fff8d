//! Route selection: which virtual host and route a request takes, and everything the
//! connection manager needs to forward it (cluster, timeouts, retry policy, rewrites,
//! header mutations), or the local answer (direct response, redirect, 404).
//!
//! Pure and synchronous: the caller passes the request head (after the connection
//! manager's own header handling, [`crate::proxy::headers::mutate_request_headers`], as in
//! Envoy, so `x-forwarded-proto` and `x-envoy-internal` are already set) and a random
//! number for weighted clusters.

mod matching;
mod mirror;
mod mutations;
mod redirect;
mod substitution;
mod timeout;

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http::request::Parts;

use crate::config::route::{
    Action, ClusterSpecifier, HashPolicy, HeaderMutations, HostRewrite, RetryPolicy, Route, RouteAction,
    RouteConfiguration, VirtualHost, WeightedCluster, WeightedTarget,
};

pub use matching::{is_grpc, request_header_value, request_host};
pub use mirror::{Shadow, shadows};
pub use mutations::{
    UpstreamRequestOptions, add_headers, apply_request_mutations, apply_response_mutations, set_attempt_headers,
    set_response_attempt_count,
};
pub use substitution::{DownstreamInfo, substitute};
pub use timeout::{StreamLimits, expected_timeout, stream_limits};

/// The outcome of routing one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Routing<'a> {
    Forward(Forward<'a>),
    /// Answer locally: a route's `direct_response`, or a cluster that cannot be named
    /// (missing cluster header: `cluster_not_found_response_code`, empty body, as Envoy).
    /// `response_headers` are the route's response header mutations, which Envoy applies
    /// to local answers of a matched route too.
    DirectResponse {
        status: StatusCode,
        body: Bytes,
        response_headers: HeaderLayers<'a>,
    },
    /// Answer with a redirect (a route's `redirect`, or `require_tls`).
    Redirect {
        status: StatusCode,
        location: String,
        response_headers: HeaderLayers<'a>,
    },
    /// No virtual host or no route matched: Envoy answers 404 with an empty body.
    NoRoute,
}

/// A request to forward upstream, with every decision the router made for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Forward<'a> {
    pub virtual_host: &'a VirtualHost,
    pub route: &'a Route,
    pub action: &'a RouteAction,
    /// The cluster to send to; from a request header for `cluster_header`.
    pub cluster: Cow<'a, str>,
    /// The weighted-cluster entry that was picked, if the route splits traffic.
    pub weighted_cluster: Option<&'a WeightedCluster>,
    /// Status to answer with when `cluster` does not exist.
    pub cluster_not_found_status: StatusCode,
    /// The whole-request timeout; `None`: disabled.
    pub timeout: Option<Duration>,
    /// Each attempt's timeout; `None`: each attempt may take the whole `timeout`.
    pub per_try_timeout: Option<Duration>,
    pub per_try_idle_timeout: Option<Duration>,
    /// The route's retry policy, else the virtual host's.
    pub retry_policy: Option<&'a RetryPolicy>,
    pub hash_policy: &'a [HashPolicy],
    /// The new `:path` (with query) when `prefix_rewrite` or `regex_rewrite` applies.
    pub path_rewrite: Option<String>,
    /// The new `:authority`, from a literal or a request header.
    pub host_rewrite: Option<Cow<'a, str>>,
    /// `auto_host_rewrite`: the caller sets `:authority` to the chosen endpoint's hostname.
    pub auto_host_rewrite: bool,
    /// Request and response header mutations, in the order Envoy evaluates them.
    pub headers: HeaderLayers<'a>,
}

/// The header mutation levels that apply to a request, in evaluation order (a later
/// level overrides an earlier one's overwrite). Envoy evaluates the weighted cluster's
/// first, then configuration → virtual host → route when
/// `most_specific_header_mutations_wins`, else route → virtual host → configuration.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HeaderLayers<'a>(pub [Option<&'a HeaderMutations>; 4]);

impl<'a> HeaderLayers<'a> {
    fn new(
        config: &'a RouteConfiguration,
        vhost: &'a VirtualHost,
        route: &'a Route,
        cluster: Option<&'a WeightedCluster>,
    ) -> Self {
        let (first, last) = if config.most_specific_header_mutations_wins {
            (&config.headers, &route.headers)
        } else {
            (&route.headers, &config.headers)
        };
        Self([cluster.map(|c| &c.headers), Some(first), Some(&vhost.headers), Some(last)])
    }

    pub fn iter(&self) -> impl Iterator<Item = &'a HeaderMutations> + '_ {
        self.0.iter().flatten().copied()
    }
}

/// Routes a request head. `random` picks among weighted clusters (`random % total`).
pub fn route<'a>(config: &'a RouteConfiguration, parts: &Parts, random: u64) -> Routing<'a> {
    route_selected(config, select(config, parts), parts, random)
}

/// The virtual host and route a request matches: what the HTTP filters see of it before
/// the router acts on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Selection<'a> {
    pub virtual_host: &'a VirtualHost,
    /// `None` when no route of the virtual host matches.
    pub route: Option<&'a Route>,
}

/// Finds the request's virtual host and route; `None` when no virtual host matches.
pub fn select<'a>(config: &'a RouteConfiguration, parts: &Parts) -> Option<Selection<'a>> {
    let host = request_host(config, parts);
    let virtual_host = config.find_virtual_host(&host)?;
    let route = virtual_host.routes.iter().find(|r| matching::route_matches(config, r, parts));
    Some(Selection { virtual_host, route })
}

/// What the router does with a request whose virtual host and route were selected by
/// [`select`] (the HTTP filters run in between).
pub fn route_selected<'a>(
    config: &'a RouteConfiguration,
    selection: Option<Selection<'a>>,
    parts: &Parts,
    random: u64,
) -> Routing<'a> {
    let Some(Selection { virtual_host: vhost, route }) = selection else {
        return Routing::NoRoute;
    };
    let host = request_host(config, parts);
    if let Some(location) = redirect::tls_required(vhost.require_tls, parts, &host) {
        return Routing::Redirect {
            status: StatusCode::MOVED_PERMANENTLY,
            location,
            response_headers: HeaderLayers::default(),
        };
    }
    let Some(route) = route else {
        return Routing::NoRoute;
    };
    match &route.action {
        Action::Route(action) => forward(config, vhost, route, action, parts, random),
        Action::Redirect(redirect) => Routing::Redirect {
            status: StatusCode::from_u16(redirect.response_code).unwrap_or(StatusCode::MOVED_PERMANENTLY),
            location: redirect::location(redirect, Some(&route.route_match.path), parts, &host),
            response_headers: HeaderLayers::new(config, vhost, route, None),
        },
        Action::DirectResponse(direct) => Routing::DirectResponse {
            status: StatusCode::from_u16(direct.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body: direct.body.clone().unwrap_or_default(),
            response_headers: HeaderLayers::new(config, vhost, route, None),
        },
    }
}

fn forward<'a>(
    config: &'a RouteConfiguration,
    vhost: &'a VirtualHost,
    route: &'a Route,
    action: &'a RouteAction,
    parts: &Parts,
    random: u64,
) -> Routing<'a> {
    let cluster_not_found_status = StatusCode::from_u16(action.cluster_not_found_response_code.status())
        .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let (cluster, weighted_cluster) = match &action.cluster {
        ClusterSpecifier::Cluster(name) => (Some(Cow::Borrowed(name.as_str())), None),
        ClusterSpecifier::ClusterHeader(header) => (header_cluster(parts, header), None),
        ClusterSpecifier::WeightedClusters(weighted) => {
            let picked = weighted.pick(random % weighted.total.max(1));
            let name = picked.and_then(|c| match &c.target {
                WeightedTarget::Cluster(name) => Some(Cow::Borrowed(name.as_str())),
                WeightedTarget::ClusterHeader(header) => header_cluster(parts, header),
            });
            (name, picked)
        }
    };
    let headers = HeaderLayers::new(config, vhost, route, weighted_cluster);
    let Some(cluster) = cluster else {
        return Routing::DirectResponse {
            status: cluster_not_found_status,
            body: Bytes::new(),
            response_headers: headers,
        };
    };
    let path_rewrite = path_rewrite(route, action, parts);
    if path_rewrite.as_deref().is_some_and(|p| !p.starts_with('/')) {
        // A rewrite that leaves no origin-form path (`prefix_rewrite: ""`, a regex that
        // eats the leading `/`) cannot be sent as it is. Envoy sends it anyway and a
        // conforming upstream answers 400; forwarding the unrewritten path instead would
        // ignore the rewrite, so the answer is that 400, given here.
        return Routing::DirectResponse {
            status: StatusCode::BAD_REQUEST,
            body: Bytes::new(),
            response_headers: headers,
        };
    }
    let retry_policy = action.retry_policy.as_ref().or(vhost.retry_policy.as_ref());
    let timeouts = timeout::Timeouts::of(action, retry_policy, parts);
    Routing::Forward(Forward {
        virtual_host: vhost,
        route,
        action,
        cluster,
        weighted_cluster,
        cluster_not_found_status,
        timeout: timeouts.global,
        per_try_timeout: timeouts.per_try,
        per_try_idle_timeout: retry_policy.and_then(|p| p.per_try_idle_timeout),
        retry_policy,
        hash_policy: &action.hash_policy,
        path_rewrite,
        host_rewrite: host_rewrite(action, weighted_cluster, parts),
        auto_host_rewrite: action.host_rewrite == Some(HostRewrite::Auto),
        headers,
    })
}

/// The new `:path` of `prefix_rewrite` or `regex_rewrite` (never both, by configuration).
fn path_rewrite(route: &Route, action: &RouteAction, parts: &Parts) -> Option<String> {
    if let Some(new) = &action.prefix_rewrite {
        return matching::rewrite_prefix(route, parts, new);
    }
    matching::rewrite_regex(parts, action.regex_rewrite.as_ref()?)
}

/// A cluster named by a request header; missing or empty means no cluster.
fn header_cluster<'a>(parts: &Parts, header: &str) -> Option<Cow<'a, str>> {
    let value = parts.headers.get(header)?.to_str().ok()?;
    (!value.is_empty()).then(|| Cow::Owned(value.to_owned()))
}

/// Envoy applies the weighted cluster's literal first and the route's rewrite after it,
/// so the route's wins when it yields a value.
fn host_rewrite<'a>(
    action: &'a RouteAction,
    cluster: Option<&'a WeightedCluster>,
    parts: &Parts,
) -> Option<Cow<'a, str>> {
    let from_route = match &action.host_rewrite {
        Some(HostRewrite::Literal(host)) => Some(Cow::Borrowed(host.as_str())),
        Some(HostRewrite::Header(name)) => header_cluster(parts, name),
        Some(HostRewrite::Auto) | None => None,
    };
    from_route.or_else(|| cluster.and_then(|c| c.host_rewrite_literal.as_deref()).map(Cow::Borrowed))
}

// Tests: `tests/proxy/proxy_router.rs` (they build route configurations from Envoy JSON,
// which needs `pb`, out of bounds for `proxy`).
