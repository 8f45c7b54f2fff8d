//! `RouteAction`, `RedirectAction` and `DirectResponseAction` → [`Action`].

use super::super::common;
use super::retry::retry_policy;
use super::{hash_policy, header_mutations};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::route::action::DEFAULT_ROUTE_TIMEOUT;
use crate::config::route::{
    ClusterNotFoundResponseCode, ClusterSpecifier, DirectResponse, HostRewrite, MaxStreamDuration, Redirect,
    RedirectPathRewrite, RouteAction, WeightedCluster, WeightedClusters, WeightedTarget,
};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::config::route::v3 as proto;

#[allow(deprecated)]
pub fn route_action(proto: proto::RouteAction, warnings: &mut Warnings) -> Result<RouteAction> {
    use proto::route_action::{ClusterSpecifier as C, HostRewriteSpecifier as H};
    let proto::RouteAction {
        cluster_not_found_response_code,
        metadata_match,
        prefix_rewrite,
        regex_rewrite,
        path_rewrite_policy,
        path_rewrite,
        append_x_forwarded_host,
        timeout,
        idle_timeout,
        flush_timeout,
        early_data_policy,
        retry_policy: retry,
        retry_policy_typed_config,
        request_mirror_policies,
        priority,
        rate_limits,
        include_vh_rate_limits,
        hash_policy: hash_policies,
        cors,
        max_grpc_timeout,
        grpc_timeout_offset,
        upgrade_configs,
        internal_redirect_policy,
        internal_redirect_action,
        max_internal_redirects,
        hedge_policy,
        max_stream_duration,
        cluster_specifier,
        host_rewrite_specifier,
    } = proto;
    let refuse = |field: &str, what: &str| Err(ConfigError::new(field, format!("{what} is not supported")));
    if metadata_match.is_some() {
        return refuse("metadata_match", "subset load balancing");
    }
    // Envoy: "Specify only one of prefix_rewrite, regex_rewrite or path_rewrite_policy"
    // (path_rewrite_policy is refused above on its own).
    if regex_rewrite.is_some() && !prefix_rewrite.is_empty() {
        return Err(ConfigError::new("regex_rewrite", "only one of prefix_rewrite and regex_rewrite may be set"));
    }
    let regex_rewrite = regex_rewrite
        .map(|r| {
            warnings
                .within("regex_rewrite", |w| super::super::matchers::regex_match_and_substitute(r, w))
                .map_err(|e| e.at("regex_rewrite"))
        })
        .transpose()?;
    if path_rewrite_policy.is_some() {
        return refuse("path_rewrite_policy", "path rewrite policy extensions");
    }
    if !path_rewrite.is_empty() {
        return refuse("path_rewrite", "substitution path rewriting");
    }
    if retry_policy_typed_config.is_some() {
        return refuse("retry_policy_typed_config", "a retry policy extension");
    }
    if hedge_policy.is_some() {
        return refuse("hedge_policy", "request hedging");
    }
    if internal_redirect_policy.is_some()
        || internal_redirect_action != proto::route_action::InternalRedirectAction::PassThroughInternalRedirect as i32
        || max_internal_redirects.is_some()
    {
        return refuse("internal_redirect_policy", "following redirects internally");
    }
    if flush_timeout.is_some() {
        warnings.ignored("flush_timeout", "per-route flush timeouts are not applied");
    }
    if early_data_policy.is_some() {
        warnings.ignored("early_data_policy", "early data (0-RTT) is never forwarded");
    }
    let request_mirror_policies = request_mirror_policies
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let at = format!("request_mirror_policies[{i}]");
            warnings.within(&at, |w| super::mirror::request_mirror_policy(p, w)).map_err(|e| e.at(&at))
        })
        .collect::<Result<Vec<_>>>()?;
    if priority != core::RoutingPriority::Default as i32 {
        warnings.ignored("priority", "routing priorities are not used for circuit breaking");
    }
    let upgrade_configs = crate::config::convert::upgrade::route_upgrades(upgrade_configs)?;
    let cluster = match cluster_specifier {
        Some(C::Cluster(name)) if !name.is_empty() => ClusterSpecifier::Cluster(name),
        Some(C::ClusterHeader(header)) if !header.is_empty() => {
            ClusterSpecifier::ClusterHeader(header.to_ascii_lowercase())
        }
        Some(C::Cluster(_)) => return Err(ConfigError::new("cluster", "must not be empty")),
        Some(C::ClusterHeader(_)) => return Err(ConfigError::new("cluster_header", "must not be empty")),
        Some(C::WeightedClusters(w)) => ClusterSpecifier::WeightedClusters(
            warnings
                .within("weighted_clusters", |w2| weighted_clusters(w, w2))
                .map_err(|e| e.at("weighted_clusters"))?,
        ),
        Some(C::ClusterSpecifierPlugin(_) | C::InlineClusterSpecifierPlugin(_)) => {
            return refuse("cluster_specifier_plugin", "cluster specifier plugins");
        }
        None => {
            return Err(ConfigError::new("cluster", "one of cluster, cluster_header, weighted_clusters is required"));
        }
    };
    let host_rewrite = match host_rewrite_specifier {
        None => None,
        Some(H::HostRewriteLiteral(host)) => Some(HostRewrite::Literal(host)),
        Some(H::AutoHostRewrite(v)) => v.value.then_some(HostRewrite::Auto),
        Some(H::HostRewriteHeader(header)) => Some(HostRewrite::Header(header.to_ascii_lowercase())),
        Some(H::HostRewritePathRegex(_)) => return refuse("host_rewrite_path_regex", "host rewriting from the path"),
        Some(H::HostRewrite(_)) => return refuse("host_rewrite", "substitution host rewriting"),
    };
    let cluster_not_found_response_code = {
        use proto::route_action::ClusterNotFoundResponseCode as P;
        match P::try_from(cluster_not_found_response_code) {
            Ok(P::ServiceUnavailable) => ClusterNotFoundResponseCode::ServiceUnavailable,
            Ok(P::NotFound) => ClusterNotFoundResponseCode::NotFound,
            Ok(P::InternalServerError) => ClusterNotFoundResponseCode::InternalServerError,
            Err(_) => return Err(ConfigError::new("cluster_not_found_response_code", "unknown value")),
        }
    };
    let mut hashes = Vec::with_capacity(hash_policies.len());
    for (i, policy) in hash_policies.into_iter().enumerate() {
        let at = format!("hash_policy[{i}]");
        if let Some(p) = warnings.within(&at, |w| hash_policy::hash_policy(policy, w)).map_err(|e| e.at(&at))? {
            hashes.push(p);
        }
    }
    let mut max_stream = match max_stream_duration {
        None => MaxStreamDuration::default(),
        Some(m) => max_stream_duration_of(m).map_err(|e| e.at("max_stream_duration"))?,
    };
    // The deprecated fields apply when the new ones are not set, as in Envoy.
    if max_stream.grpc_timeout_header_max.is_none() {
        max_stream.grpc_timeout_header_max = common::opt_duration(&max_grpc_timeout, "max_grpc_timeout")?;
    }
    if max_stream.grpc_timeout_header_offset.is_none() {
        max_stream.grpc_timeout_header_offset = common::opt_duration(&grpc_timeout_offset, "grpc_timeout_offset")?;
    }
    let rate_limits = super::super::rate_limit::rate_limits(rate_limits, "rate_limits", warnings)?;
    if matches!(cluster, ClusterSpecifier::WeightedClusters(_))
        && super::super::rate_limit::uses_destination_cluster(&rate_limits)
    {
        return Err(ConfigError::new(
            "rate_limits",
            "the destination_cluster action with weighted clusters is not supported",
        ));
    }
    Ok(RouteAction {
        rate_limits,
        include_vh_rate_limits: common::bool_or(&include_vh_rate_limits, false),
        cluster,
        cluster_not_found_response_code,
        timeout: match common::opt_duration(&timeout, "timeout")? {
            None => Some(DEFAULT_ROUTE_TIMEOUT),
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
        },
        idle_timeout: common::opt_duration(&idle_timeout, "idle_timeout")?,
        prefix_rewrite: (!prefix_rewrite.is_empty()).then_some(prefix_rewrite),
        regex_rewrite,
        request_mirror_policies,
        host_rewrite,
        append_x_forwarded_host,
        retry_policy: retry
            .map(|r| warnings.within("retry_policy", |w| retry_policy(r, w)).map_err(|e| e.at("retry_policy")))
            .transpose()?,
        hash_policy: hashes,
        max_stream_duration: max_stream,
        cors: super::cors_policy(cors, warnings)?,
        upgrade_configs,
    })
}

fn max_stream_duration_of(proto: proto::route_action::MaxStreamDuration) -> Result<MaxStreamDuration> {
    let proto::route_action::MaxStreamDuration {
        max_stream_duration,
        grpc_timeout_header_max,
        grpc_timeout_header_offset,
    } = proto;
    Ok(MaxStreamDuration {
        max_stream_duration: common::opt_duration(&max_stream_duration, "max_stream_duration")?,
        grpc_timeout_header_max: common::opt_duration(&grpc_timeout_header_max, "grpc_timeout_header_max")?,
        grpc_timeout_header_offset: common::opt_duration(&grpc_timeout_header_offset, "grpc_timeout_header_offset")?,
    })
}

#[allow(deprecated)]
fn weighted_clusters(proto: proto::WeightedCluster, warnings: &mut Warnings) -> Result<WeightedClusters> {
    let proto::WeightedCluster { clusters, total_weight, runtime_key_prefix, random_value_specifier } = proto;
    if !runtime_key_prefix.is_empty() {
        warnings.ignored("runtime_key_prefix", "there is no runtime; the configured weights are used");
    }
    if random_value_specifier.is_some() {
        return Err(ConfigError::new("random_value_specifier", "choosing the random value is not supported"));
    }
    if clusters.is_empty() {
        return Err(ConfigError::new("clusters", "at least one cluster is required"));
    }
    let clusters = clusters
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let at = format!("clusters[{i}]");
            warnings.within(&at, |w| cluster_weight(c, w)).map_err(|e| e.at(&at))
        })
        .collect::<Result<Vec<_>>>()?;
    let total: u64 = clusters.iter().map(|c| u64::from(c.weight)).sum();
    if total == 0 {
        return Err(ConfigError::new("clusters", "the sum of the weights must be greater than 0"));
    }
    if let Some(declared) = total_weight
        && u64::from(declared.value) != total
    {
        return Err(ConfigError::new(
            "total_weight",
            format!("{} does not equal the sum of the weights, {total}", declared.value),
        ));
    }
    Ok(WeightedClusters { clusters, total })
}

fn cluster_weight(proto: proto::weighted_cluster::ClusterWeight, warnings: &mut Warnings) -> Result<WeightedCluster> {
    use proto::weighted_cluster::cluster_weight::HostRewriteSpecifier as H;
    let proto::weighted_cluster::ClusterWeight {
        name,
        cluster_header,
        weight,
        metadata_match,
        request_headers_to_add,
        request_headers_to_remove,
        response_headers_to_add,
        response_headers_to_remove,
        typed_per_filter_config,
        host_rewrite_specifier,
    } = proto;
    let target = match (name.is_empty(), cluster_header.is_empty()) {
        (false, true) => WeightedTarget::Cluster(name),
        (true, false) => WeightedTarget::ClusterHeader(cluster_header.to_ascii_lowercase()),
        _ => return Err(ConfigError::new("name", "exactly one of name and cluster_header is required")),
    };
    if metadata_match.is_some() {
        return Err(ConfigError::new("metadata_match", "subset load balancing is not supported"));
    }
    if !typed_per_filter_config.is_empty() {
        warnings.ignored("typed_per_filter_config", "per-filter overrides of filters Outrider does not run");
    }
    let headers = header_mutations(
        request_headers_to_add,
        request_headers_to_remove,
        response_headers_to_add,
        response_headers_to_remove,
    )?;
    let host_rewrite_literal = host_rewrite_specifier.map(|H::HostRewriteLiteral(host)| host);
    Ok(WeightedCluster { target, weight: common::u32_or(&weight, 0), headers, host_rewrite_literal })
}

pub fn redirect(proto: proto::RedirectAction) -> Result<Redirect> {
    use proto::redirect_action::{PathRewriteSpecifier as P, RedirectResponseCode as R, SchemeRewriteSpecifier as S};
    let proto::RedirectAction {
        host_redirect,
        port_redirect,
        response_code,
        strip_query,
        scheme_rewrite_specifier,
        path_rewrite_specifier,
    } = proto;
    let port = match u16::try_from(port_redirect) {
        Ok(0) => None,
        Ok(port) => Some(port),
        Err(_) => return Err(ConfigError::new("port_redirect", format!("{port_redirect} is not a port"))),
    };
    let path = match path_rewrite_specifier {
        None => None,
        Some(P::PathRedirect(path)) => Some(RedirectPathRewrite::Path(path)),
        Some(P::PrefixRewrite(prefix)) => Some(RedirectPathRewrite::Prefix(prefix)),
        Some(P::RegexRewrite(_)) => return Err(ConfigError::new("regex_rewrite", "regex redirects are not supported")),
        Some(P::PathRewrite(_)) => {
            return Err(ConfigError::new("path_rewrite", "substitution redirects are not supported"));
        }
    };
    let response_code = match R::try_from(response_code) {
        Ok(R::MovedPermanently) => 301,
        Ok(R::Found) => 302,
        Ok(R::SeeOther) => 303,
        Ok(R::TemporaryRedirect) => 307,
        Ok(R::PermanentRedirect) => 308,
        Err(_) => return Err(ConfigError::new("response_code", format!("unknown redirect code {response_code}"))),
    };
    let scheme = match scheme_rewrite_specifier {
        Some(S::HttpsRedirect(true)) => Some("https".to_owned()),
        Some(S::HttpsRedirect(false)) | None => None,
        Some(S::SchemeRedirect(scheme)) => Some(scheme.to_ascii_lowercase()),
    };
    Ok(Redirect {
        scheme,
        host: (!host_redirect.is_empty()).then_some(host_redirect),
        port,
        path,
        strip_query,
        response_code,
    })
}

/// `max_body` is the route configuration's `max_direct_response_body_size_bytes`.
pub fn direct_response(proto: proto::DirectResponseAction, max_body: u32) -> Result<DirectResponse> {
    use core::data_source::Specifier as D;
    let proto::DirectResponseAction { status, body, body_format } = proto;
    let status = match u16::try_from(status) {
        Ok(s) if (100..=599).contains(&s) => s,
        _ => return Err(ConfigError::new("status", format!("{status} is not an HTTP status"))),
    };
    if body_format.is_some() {
        return Err(ConfigError::new("body_format", "formatted direct response bodies are not supported"));
    }
    let body = match body {
        None => None,
        Some(core::DataSource { watched_directory: _, specifier }) => match specifier {
            Some(D::InlineString(s)) => Some(bytes::Bytes::from(s)),
            Some(D::InlineBytes(b)) => Some(bytes::Bytes::from(b)),
            Some(D::Filename(_)) => {
                return Err(ConfigError::new("body.filename", "bodies from files are not supported"));
            }
            Some(D::EnvironmentVariable(_)) => {
                return Err(ConfigError::new(
                    "body.environment_variable",
                    "bodies from the environment are not supported",
                ));
            }
            None => None,
        },
    };
    if let Some(b) = &body
        && b.len() > max_body as usize
    {
        return Err(ConfigError::new("body", format!("{} bytes exceed the limit of {max_body}", b.len())));
    }
    Ok(DirectResponse { status, body })
}
