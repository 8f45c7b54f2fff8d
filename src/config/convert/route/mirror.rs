//! `RouteAction.RequestMirrorPolicy` → [`RequestMirrorPolicy`].

use super::super::filters::fractional_percent::runtime_fractional_percent;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::fractional_percent::FractionalPercent;
use crate::config::route::{MirrorCluster, RequestMirrorPolicy, ShadowHost};
use crate::pb::envoy::config::route::v3 as proto;

pub fn request_mirror_policy(
    proto: proto::route_action::RequestMirrorPolicy,
    warnings: &mut Warnings,
) -> Result<RequestMirrorPolicy> {
    let proto::route_action::RequestMirrorPolicy {
        cluster,
        cluster_header,
        runtime_fraction,
        trace_sampled,
        disable_shadow_host_suffix_append,
        request_headers_mutations,
        host_rewrite_literal,
    } = proto;
    let cluster = match (cluster.is_empty(), cluster_header.is_empty()) {
        (false, true) => MirrorCluster::Cluster(cluster),
        (true, false) => {
            if http::HeaderName::from_bytes(cluster_header.as_bytes()).is_err() {
                return Err(ConfigError::new("cluster_header", format!("{cluster_header:?} is not a header name")));
            }
            MirrorCluster::Header(cluster_header.to_ascii_lowercase())
        }
        (false, false) => return Err(ConfigError::new("cluster", "only one of cluster and cluster_header may be set")),
        (true, true) => return Err(ConfigError::new("cluster", "one of cluster and cluster_header is required")),
    };
    if !request_headers_mutations.is_empty() {
        return Err(ConfigError::new(
            "request_headers_mutations",
            "header mutations of mirrored requests are not supported",
        ));
    }
    // Without the field Envoy mirrors every request (its default of 100/100).
    let fraction = match &runtime_fraction {
        None => FractionalPercent::ALL,
        Some(r) => warnings
            .within("runtime_fraction", |w| runtime_fractional_percent(r, w))
            .map_err(|e| e.at("runtime_fraction"))?,
    };
    let host = if !host_rewrite_literal.is_empty() {
        if http::HeaderValue::from_str(&host_rewrite_literal).is_err() {
            return Err(ConfigError::new("host_rewrite_literal", "is not a valid header value"));
        }
        ShadowHost::Literal(host_rewrite_literal)
    } else if disable_shadow_host_suffix_append {
        ShadowHost::Unchanged
    } else {
        ShadowHost::Suffixed
    };
    Ok(RequestMirrorPolicy { cluster, fraction, trace_sampled: trace_sampled.map(|b| b.value), host })
}
