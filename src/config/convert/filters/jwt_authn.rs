//! `envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication` → [`JwtAuthentication`],
//! and its per-route `PerRouteConfig` → [`JwtPerRoute`].
//!
//! Envoy's own load-time checks are kept: a requirement naming a provider that does not
//! exist, a rule naming a requirement that does not exist, and lists of fewer than two
//! requirements are refused, as Envoy refuses them.

mod provider;
mod requirement;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::common;
use super::super::matchers::route_match;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::jwt_authn::{JwtAuthentication, JwtPerRoute, RequirementRule};
use crate::pb::envoy::extensions::filters::http::jwt_authn::v3 as proto;
use crate::pb::google::protobuf::Any;

pub const TYPE: &str = "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication";
pub const PER_ROUTE_TYPE: &str = "envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig";

pub fn jwt_authentication(any: &Any, warnings: &mut Warnings) -> Result<JwtAuthentication> {
    convert(common::unpack::<proto::JwtAuthentication>(any)?, warnings)
}

fn convert(proto: proto::JwtAuthentication, warnings: &mut Warnings) -> Result<JwtAuthentication> {
    let proto::JwtAuthentication {
        providers,
        rules,
        filter_state_rules,
        bypass_cors_preflight,
        requirement_map,
        strip_failure_response,
        stat_prefix,
    } = proto;
    if filter_state_rules.is_some() {
        return Err(ConfigError::new("filter_state_rules", "choosing requirements by filter state is not supported"));
    }
    if !stat_prefix.is_empty() {
        return Err(ConfigError::new("stat_prefix", "a stat prefix of the filter's own is not supported"));
    }
    let mut converted = BTreeMap::new();
    for (name, provider) in sorted(providers) {
        let at = format!("providers[{name:?}]");
        let provider = warnings.within(&at, |w| provider::provider(provider, w)).map_err(|e| e.at(&at))?;
        converted.insert(name, Arc::new(provider));
    }
    let providers = converted;
    let mut map = BTreeMap::new();
    for (name, requirement) in sorted(requirement_map) {
        let at = format!("requirement_map[{name:?}]");
        map.insert(name, requirement::requirement(requirement, &providers).map_err(|e| e.at(&at))?);
    }
    let rules = rules
        .into_iter()
        .enumerate()
        .map(|(i, rule)| {
            let at = format!("rules[{i}]");
            warnings.within(&at, |w| requirement_rule(rule, &providers, &map, w)).map_err(|e| e.at(&at))
        })
        .collect::<Result<_>>()?;
    Ok(JwtAuthentication { providers, rules, requirement_map: map, bypass_cors_preflight, strip_failure_response })
}

fn requirement_rule(
    proto: proto::RequirementRule,
    providers: &BTreeMap<String, Arc<crate::config::filters::jwt_authn::JwtProvider>>,
    requirement_map: &BTreeMap<String, crate::config::filters::jwt_authn::JwtRequirement>,
    warnings: &mut Warnings,
) -> Result<RequirementRule> {
    use proto::requirement_rule::RequirementType;
    let proto::RequirementRule { r#match, requirement_type } = proto;
    let Some(route) = r#match else {
        return Err(ConfigError::new("match", "is required"));
    };
    let route_match = warnings.within("match", |w| route_match(route, w)).map_err(|e| e.at("match"))?;
    let requires = match requirement_type {
        None => None,
        Some(RequirementType::Requires(requirement)) => {
            Some(requirement::requirement(requirement, providers).map_err(|e| e.at("requires"))?)
        }
        Some(RequirementType::RequirementName(name)) => match requirement_map.get(&name) {
            Some(requirement) => Some(requirement.clone()),
            None => {
                let names: Vec<_> = requirement_map.keys().map(String::as_str).collect();
                return Err(ConfigError::new(
                    "requirement_name",
                    format!("Wrong requirement_name: {name}. It should be one of [{}]", names.join(",")),
                ));
            }
        },
    };
    Ok(RequirementRule { route_match, requires })
}

/// `PerRouteConfig`.
pub fn per_route(any: &Any) -> Result<JwtPerRoute> {
    use proto::per_route_config::RequirementSpecifier;
    let proto::PerRouteConfig { requirement_specifier } = common::unpack::<proto::PerRouteConfig>(any)?;
    match requirement_specifier {
        Some(RequirementSpecifier::Disabled(true)) => Ok(JwtPerRoute::Disabled),
        // `disabled: false` looks up the empty name, which Envoy answers with 403.
        Some(RequirementSpecifier::Disabled(false)) => Ok(JwtPerRoute::RequirementName(String::new())),
        Some(RequirementSpecifier::RequirementName(name)) if name.is_empty() => {
            Err(ConfigError::new("requirement_name", "must not be empty"))
        }
        Some(RequirementSpecifier::RequirementName(name)) => Ok(JwtPerRoute::RequirementName(name)),
        None => Err(ConfigError::new("requirement_specifier", "one of disabled or requirement_name is required")),
    }
}

/// A protobuf map's entries sorted by key, so results and errors do not depend on order.
fn sorted<V>(map: std::collections::HashMap<String, V>) -> Vec<(String, V)> {
    let mut entries: Vec<_> = map.into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries
}
