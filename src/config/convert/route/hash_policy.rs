//! `RouteAction.HashPolicy` → [`HashPolicy`].

use super::super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::route::{HashPolicy, HashSource};
use crate::pb::envoy::config::route::v3::route_action::HashPolicy as ProtoHashPolicy;
use crate::pb::envoy::config::route::v3::route_action::hash_policy as proto;

/// Converts one policy; `Ok(None)` for a policy that can never produce a hash
/// (`connection_properties` without `source_ip`), which Envoy also drops.
pub fn hash_policy(policy: ProtoHashPolicy, warnings: &mut Warnings) -> Result<Option<HashPolicy>> {
    use proto::PolicySpecifier as P;
    let ProtoHashPolicy { terminal, policy_specifier } = policy;
    let source = match policy_specifier {
        Some(P::Header(proto::Header { header_name, regex_rewrite })) => {
            if header_name.is_empty() {
                return Err(ConfigError::new("header.header_name", "must not be empty"));
            }
            if regex_rewrite.is_some() {
                return Err(ConfigError::new("header.regex_rewrite", "rewriting the hashed header is not supported"));
            }
            HashSource::Header { name: header_name.to_ascii_lowercase() }
        }
        Some(P::Cookie(proto::Cookie { name, ttl, path, attributes })) => {
            if name.is_empty() {
                return Err(ConfigError::new("cookie.name", "must not be empty"));
            }
            let ttl = common::opt_duration(&ttl, "cookie.ttl")?;
            let attributes =
                attributes.into_iter().map(|proto::CookieAttribute { name, value }| (name, value)).collect();
            HashSource::Cookie { name, ttl, path, attributes }
        }
        Some(P::ConnectionProperties(proto::ConnectionProperties { source_ip: true })) => HashSource::SourceIp,
        Some(P::ConnectionProperties(proto::ConnectionProperties { source_ip: false })) => {
            warnings.ignored("connection_properties", "source_ip is false: the policy never produces a hash");
            return Ok(None);
        }
        Some(P::QueryParameter(proto::QueryParameter { name })) => {
            if name.is_empty() {
                return Err(ConfigError::new("query_parameter.name", "must not be empty"));
            }
            HashSource::QueryParameter { name }
        }
        Some(P::FilterState(proto::FilterState { key })) => {
            if key.is_empty() {
                return Err(ConfigError::new("filter_state.key", "must not be empty"));
            }
            HashSource::FilterState { key }
        }
        None => return Err(ConfigError::new("policy_specifier", "one of header, cookie, ... is required")),
    };
    Ok(Some(HashPolicy { source, terminal }))
}
