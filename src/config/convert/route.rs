//! `envoy.config.route.v3.RouteConfiguration` → [`RouteConfiguration`]: virtual hosts,
//! routes, and header mutations at every level.

mod action;
mod hash_policy;
mod mirror;
mod retry;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

pub use retry::parse_retry_on;

use super::common;
use super::header_value_option::{header_name, header_value_option};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::fractional_percent::FractionalPercent;
use crate::config::route::{
    Action, DEFAULT_MAX_DIRECT_RESPONSE_BODY_BYTES, DomainMatcher, HeaderMutations, Route, RouteConfiguration,
    TlsRequirement, VirtualHost,
};
use crate::config::tracing::{RouteTracing, Sampling};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::config::route::v3 as proto;

pub fn route_configuration(proto: proto::RouteConfiguration, warnings: &mut Warnings) -> Result<RouteConfiguration> {
    let proto::RouteConfiguration {
        name,
        virtual_hosts,
        vhds,
        internal_only_headers,
        response_headers_to_add,
        response_headers_to_remove,
        request_headers_to_add,
        request_headers_to_remove,
        most_specific_header_mutations_wins,
        validate_clusters: _, // Envoy's own cross-check against CDS; clusters resolve at request time
        max_direct_response_body_size_bytes,
        cluster_specifier_plugins,
        request_mirror_policies,
        ignore_port_in_host_matching,
        vhost_header,
        ignore_path_parameters_in_path_matching,
        typed_per_filter_config,
        metadata,
        route_specifiers,
    } = proto;
    if vhds.is_some() {
        return Err(ConfigError::new("vhds", "on-demand virtual hosts (VHDS) are not supported"));
    }
    if !cluster_specifier_plugins.is_empty() {
        return Err(ConfigError::new("cluster_specifier_plugins", "cluster specifier plugins are not supported"));
    }
    if !route_specifiers.is_empty() {
        return Err(ConfigError::new("route_specifiers", "route specifier extensions are not supported"));
    }
    if !request_mirror_policies.is_empty() {
        warnings.ignored("request_mirror_policies", "requests are not mirrored (mirrors never affect the response)");
    }
    let per_filter = per_filter(typed_per_filter_config, warnings)?;
    if metadata.is_some() {
        warnings.ignored("metadata", "route configuration metadata is not used");
    }
    let max_body = common::u32_or(&max_direct_response_body_size_bytes, DEFAULT_MAX_DIRECT_RESPONSE_BODY_BYTES);
    let internal_only_headers = internal_only_headers
        .iter()
        .enumerate()
        .map(|(i, h)| header_name(h, false).map_err(|e| e.at(format_args!("internal_only_headers[{i}]"))))
        .collect::<Result<Vec<_>>>()
        .map(common::exact)?;
    let headers = header_mutations(
        request_headers_to_add,
        request_headers_to_remove,
        response_headers_to_add,
        response_headers_to_remove,
    )?;
    // Envoy refuses a domain that appears twice anywhere in the configuration.
    let mut seen: HashMap<DomainMatcher, usize> = HashMap::new();
    let mut vhosts = Vec::with_capacity(virtual_hosts.len());
    for (i, vhost) in virtual_hosts.into_iter().enumerate() {
        let at = format!("virtual_hosts[{i}]");
        let vhost = warnings.within(&at, |w| virtual_host(vhost, max_body, w)).map_err(|e| e.at(&at))?;
        for (j, domain) in vhost.domains.iter().enumerate() {
            if let Some(first) = seen.insert(domain.clone(), i) {
                return Err(ConfigError::new(
                    format!("{at}.domains[{j}]"),
                    format!("duplicate domain {domain:?} (already in virtual_hosts[{first}])"),
                ));
            }
        }
        vhosts.push(Arc::new(vhost));
    }
    let mut config = RouteConfiguration {
        name,
        virtual_hosts: vhosts,
        internal_only_headers,
        headers,
        most_specific_header_mutations_wins,
        ignore_port_in_host_matching,
        ignore_path_parameters_in_path_matching,
        vhost_header: (!vhost_header.is_empty()).then(|| vhost_header.to_ascii_lowercase()),
        per_filter,
        virtual_host_index: Default::default(),
    };
    config.index_virtual_hosts();
    Ok(config)
}

#[allow(deprecated)]
fn virtual_host(proto: proto::VirtualHost, max_body: u32, warnings: &mut Warnings) -> Result<VirtualHost> {
    let proto::VirtualHost {
        name,
        domains,
        routes,
        matcher,
        require_tls,
        virtual_clusters,
        rate_limits,
        request_headers_to_add,
        request_headers_to_remove,
        response_headers_to_add,
        response_headers_to_remove,
        cors,
        typed_per_filter_config,
        include_request_attempt_count,
        include_attempt_count_in_response,
        retry_policy,
        retry_policy_typed_config,
        hedge_policy,
        include_is_timeout_retry_header,
        per_request_buffer_limit_bytes,
        request_body_buffer_limit,
        request_mirror_policies,
        metadata,
        route_specifiers,
    } = proto;
    if domains.is_empty() {
        return Err(ConfigError::new("domains", "at least one domain is required"));
    }
    if matcher.is_some() {
        return Err(ConfigError::new("matcher", "the matcher API for routes is not supported"));
    }
    if retry_policy_typed_config.is_some() {
        return Err(ConfigError::new("retry_policy_typed_config", "retry policy extensions are not supported"));
    }
    if hedge_policy.is_some() {
        return Err(ConfigError::new("hedge_policy", "request hedging is not supported"));
    }
    if !route_specifiers.is_empty() {
        return Err(ConfigError::new("route_specifiers", "route specifier extensions are not supported"));
    }
    for (present, field, what) in [
        (!virtual_clusters.is_empty(), "virtual_clusters", "virtual clusters only add statistics"),
        (per_request_buffer_limit_bytes.is_some(), "per_request_buffer_limit_bytes", "bodies are streamed"),
        (request_body_buffer_limit.is_some(), "request_body_buffer_limit", "bodies are streamed"),
        (!request_mirror_policies.is_empty(), "request_mirror_policies", "requests are not mirrored"),
        (metadata.is_some(), "metadata", "virtual host metadata is not used"),
    ] {
        if present {
            warnings.ignored(field, what);
        }
    }
    let require_tls = {
        use proto::virtual_host::TlsRequirementType as T;
        match T::try_from(require_tls) {
            Ok(T::None) => TlsRequirement::None,
            Ok(T::ExternalOnly) => TlsRequirement::ExternalOnly,
            Ok(T::All) => TlsRequirement::All,
            Err(_) => return Err(ConfigError::new("require_tls", format!("unknown value {require_tls}"))),
        }
    };
    let domains = domains
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if d.is_empty() {
                return Err(ConfigError::new(format!("domains[{i}]"), "must not be empty"));
            }
            Ok(DomainMatcher::parse(d))
        })
        .collect::<Result<Vec<_>>>()
        .map(common::exact)?;
    let routes = routes
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let at = format!("routes[{i}]");
            warnings.within(&at, |w| route(r, max_body, w)).map_err(|e| e.at(&at))
        })
        .collect::<Result<Vec<_>>>()
        .map(common::exact)?;
    let retry_policy = retry_policy
        .map(|r| warnings.within("retry_policy", |w| retry::retry_policy(r, w)).map_err(|e| e.at("retry_policy")))
        .transpose()?;
    let rate_limits = super::rate_limit::rate_limits(rate_limits, "rate_limits", warnings)?;
    let weighted = routes.iter().any(|r| {
        matches!(&r.action, Action::Route(a) if matches!(a.cluster, crate::config::route::ClusterSpecifier::WeightedClusters(_)))
    });
    if weighted && super::rate_limit::uses_destination_cluster(&rate_limits) {
        return Err(ConfigError::new(
            "rate_limits",
            "the destination_cluster action with routes to weighted clusters is not supported",
        ));
    }
    Ok(VirtualHost {
        name,
        domains,
        routes,
        require_tls,
        headers: header_mutations(
            request_headers_to_add,
            request_headers_to_remove,
            response_headers_to_add,
            response_headers_to_remove,
        )?,
        retry_policy,
        include_request_attempt_count,
        include_attempt_count_in_response,
        include_is_timeout_retry_header,
        per_filter: per_filter(typed_per_filter_config, warnings)?,
        cors: cors_policy(cors, warnings)?,
        rate_limits,
    })
}

/// A virtual host's or route's `cors` field.
pub(crate) fn cors_policy(
    cors: Option<proto::CorsPolicy>,
    warnings: &mut Warnings,
) -> Result<Option<std::sync::Arc<crate::config::filters::cors::CorsPolicy>>> {
    cors.map(|c| {
        warnings
            .within("cors", |w| super::filters::cors::route_cors_policy(c, w))
            .map(std::sync::Arc::new)
            .map_err(|e| e.at("cors"))
    })
    .transpose()
}

#[allow(deprecated)]
fn route(proto: proto::Route, max_body: u32, warnings: &mut Warnings) -> Result<Route> {
    use proto::route::Action as A;
    let proto::Route {
        name,
        r#match,
        metadata,
        decorator,
        typed_per_filter_config,
        request_headers_to_add,
        request_headers_to_remove,
        response_headers_to_add,
        response_headers_to_remove,
        tracing,
        per_request_buffer_limit_bytes,
        stat_prefix,
        request_body_buffer_limit,
        route_specifiers,
        action,
    } = proto;
    if !route_specifiers.is_empty() {
        return Err(ConfigError::new("route_specifiers", "route specifier extensions are not supported"));
    }
    for (present, field, what) in [
        (metadata.is_some(), "metadata", "route metadata is not used"),
        (decorator.is_some(), "decorator", "tracing span names are not set"),
        (per_request_buffer_limit_bytes.is_some(), "per_request_buffer_limit_bytes", "bodies are streamed"),
        (!stat_prefix.is_empty(), "stat_prefix", "per-route statistics are not kept"),
        (request_body_buffer_limit.is_some(), "request_body_buffer_limit", "bodies are streamed"),
    ] {
        if present {
            warnings.ignored(field, what);
        }
    }
    let route_match = r#match.ok_or_else(|| ConfigError::new("match", "is required"))?;
    let route_match =
        warnings.within("match", |w| super::matchers::route_match(route_match, w)).map_err(|e| e.at("match"))?;
    let action = match action {
        Some(A::Route(r)) => Action::Route(Box::new(
            warnings.within("route", |w| action::route_action(r, w)).map_err(|e| e.at("route"))?,
        )),
        Some(A::Redirect(r)) => Action::Redirect(action::redirect(r).map_err(|e| e.at("redirect"))?),
        Some(A::DirectResponse(d)) => {
            Action::DirectResponse(action::direct_response(d, max_body).map_err(|e| e.at("direct_response"))?)
        }
        Some(A::FilterAction(_)) => return Err(ConfigError::new("filter_action", "filter actions are not supported")),
        Some(A::NonForwardingAction(_)) => {
            return Err(ConfigError::new("non_forwarding_action", "non-forwarding actions are not supported"));
        }
        None => return Err(ConfigError::new("action", "one of route, redirect, direct_response is required")),
    };
    let headers = header_mutations(
        request_headers_to_add,
        request_headers_to_remove,
        response_headers_to_add,
        response_headers_to_remove,
    )?;
    let per_filter = per_filter(typed_per_filter_config, warnings)?;
    let tracing = tracing
        .map(|t| warnings.within("tracing", |w| route_tracing(t, w)).map_err(|e| e.at("tracing")))
        .transpose()?
        .map(Arc::new);
    Ok(Route { name, route_match, action, headers, per_filter, tracing })
}

/// A route's `tracing`: each percentage unset is everything (100 of HUNDRED), as Envoy's
/// `RouteTracingImpl` fills it in.
fn route_tracing(tracing: proto::Tracing, warnings: &mut Warnings) -> Result<RouteTracing> {
    use crate::config::convert::filters::fractional_percent::fractional_percent;
    let proto::Tracing {
        client_sampling,
        random_sampling,
        overall_sampling,
        custom_tags,
        operation,
        upstream_operation,
    } = tracing;
    if !operation.is_empty() || !upstream_operation.is_empty() {
        let field = if operation.is_empty() { "upstream_operation" } else { "operation" };
        warnings.ignored(field, "spans keep Envoy's default names");
    }
    let percent = |value: Option<crate::pb::envoy::r#type::v3::FractionalPercent>, field: &str| match value {
        None => Ok(FractionalPercent::ALL),
        Some(p) => fractional_percent(&p).map_err(|e| e.at(field)),
    };
    Ok(RouteTracing {
        sampling: Sampling {
            client: percent(client_sampling, "client_sampling")?,
            random: percent(random_sampling, "random_sampling")?,
            overall: percent(overall_sampling, "overall_sampling")?,
        },
        custom_tags: super::custom_tags::custom_tags(custom_tags)?,
    })
}

/// The four header-mutation fields that route configurations, virtual hosts, routes and
/// weighted clusters share.
pub(crate) fn header_mutations(
    request_headers_to_add: Vec<core::HeaderValueOption>,
    request_headers_to_remove: Vec<String>,
    response_headers_to_add: Vec<core::HeaderValueOption>,
    response_headers_to_remove: Vec<String>,
) -> Result<HeaderMutations> {
    let add = |list: Vec<core::HeaderValueOption>, field: &str, request: bool| {
        list.into_iter()
            .enumerate()
            .map(|(i, h)| header_value_option(h, request).map_err(|e| e.at(format!("{field}[{i}]"))))
            .collect::<Result<Vec<_>>>()
    };
    let remove = |list: Vec<String>, field: &str, request: bool| {
        list.iter()
            .enumerate()
            .map(|(i, h)| header_name(h, request).map_err(|e| e.at(format!("{field}[{i}]"))))
            .collect::<Result<Vec<_>>>()
    };
    Ok(HeaderMutations {
        request_headers_to_add: add(request_headers_to_add, "request_headers_to_add", true)?,
        request_headers_to_remove: remove(request_headers_to_remove, "request_headers_to_remove", true)?,
        response_headers_to_add: add(response_headers_to_add, "response_headers_to_add", false)?,
        response_headers_to_remove: remove(response_headers_to_remove, "response_headers_to_remove", false)?,
    })
}

/// `typed_per_filter_config` at any level, with its path.
fn per_filter(
    config: HashMap<String, crate::pb::google::protobuf::Any>,
    warnings: &mut Warnings,
) -> Result<crate::config::filters::PerFilterConfig> {
    warnings
        .within("typed_per_filter_config", |w| super::filters::per_filter_config(config, w))
        .map_err(|e| e.at("typed_per_filter_config"))
}
