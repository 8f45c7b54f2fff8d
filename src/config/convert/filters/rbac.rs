//! `envoy.extensions.filters.{http,network}.rbac.v3.RBAC` and `RBACPerRoute` → the RBAC
//! domain types of [`crate::config::filters::rbac`].

pub(crate) mod policy;

use super::super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::rbac::{HttpRbac, NetworkRbac, Policies, RbacPerRoute};
use crate::pb::envoy::extensions::filters::http::rbac::v3 as http_proto;
use crate::pb::envoy::extensions::filters::network::rbac::v3 as network_proto;
use crate::pb::google::protobuf::Any;

pub const HTTP_TYPE: &str = "envoy.extensions.filters.http.rbac.v3.RBAC";
pub const PER_ROUTE_TYPE: &str = "envoy.extensions.filters.http.rbac.v3.RBACPerRoute";
pub const NETWORK_TYPE: &str = "envoy.extensions.filters.network.rbac.v3.RBAC";

pub fn http_rbac(any: &Any, warnings: &mut Warnings) -> Result<HttpRbac> {
    http_rules(common::unpack::<http_proto::Rbac>(any)?, warnings)
}

pub fn per_route(any: &Any, warnings: &mut Warnings) -> Result<RbacPerRoute> {
    let http_proto::RbacPerRoute { rbac } = common::unpack::<http_proto::RbacPerRoute>(any)?;
    let Some(rbac) = rbac else { return Ok(RbacPerRoute { rules: None, shadow_rules: None }) };
    let HttpRbac { rules, shadow_rules, rules_stat_prefix, shadow_rules_stat_prefix } =
        warnings.within("rbac", |w| http_rules(rbac, w)).map_err(|e| e.at("rbac"))?;
    // Envoy counts a route's decisions in the filter's stats and names its metadata keys
    // after the filter's prefix; the route's own prefixes name nothing.
    if !rules_stat_prefix.is_empty() {
        warnings.ignored("rbac.rules_stat_prefix", "a route's rules are counted under the filter's stat prefix");
    }
    if !shadow_rules_stat_prefix.is_empty() {
        warnings
            .ignored("rbac.shadow_rules_stat_prefix", "a route's shadow rules are counted under the filter's prefix");
    }
    Ok(RbacPerRoute { rules, shadow_rules })
}

fn http_rules(proto: http_proto::Rbac, warnings: &mut Warnings) -> Result<HttpRbac> {
    let http_proto::Rbac {
        rules,
        rules_stat_prefix,
        matcher,
        shadow_rules,
        shadow_matcher,
        shadow_rules_stat_prefix,
        track_per_rule_stats,
    } = proto;
    refuse_matchers(matcher.is_some(), shadow_matcher.is_some())?;
    if track_per_rule_stats {
        warnings.ignored("track_per_rule_stats", "per-policy counters are not kept; the filter's totals are");
    }
    Ok(HttpRbac {
        rules: rules_of(rules, "rules", warnings)?,
        shadow_rules: rules_of(shadow_rules, "shadow_rules", warnings)?,
        rules_stat_prefix: stat_segment(&rules_stat_prefix).to_owned(),
        shadow_rules_stat_prefix,
    })
}

pub fn network_rbac(any: &Any, warnings: &mut Warnings) -> Result<NetworkRbac> {
    let network_proto::Rbac {
        rules,
        matcher,
        shadow_rules,
        shadow_matcher,
        shadow_rules_stat_prefix,
        stat_prefix,
        enforcement_type,
        delay_deny,
    } = common::unpack::<network_proto::Rbac>(any)?;
    refuse_matchers(matcher.is_some(), shadow_matcher.is_some())?;
    if stat_prefix.is_empty() {
        return Err(ConfigError::new("stat_prefix", "must not be empty"));
    }
    // Either type gets the same verdict: every attribute the policies read is fixed once the
    // connection is handed to the filters (see `proxy::filters::rbac::network`), so the
    // type is only checked to be one Envoy knows.
    if network_proto::rbac::EnforcementType::try_from(enforcement_type).is_err() {
        return Err(ConfigError::new("enforcement_type", format!("unknown type {enforcement_type}")));
    }
    let delay_deny = common::opt_duration(&delay_deny, "delay_deny")?.filter(|d| !d.is_zero());
    Ok(NetworkRbac {
        rules: rules_of(rules, "rules", warnings)?,
        shadow_rules: rules_of(shadow_rules, "shadow_rules", warnings)?,
        stat_prefix: stat_segment(&stat_prefix).to_owned(),
        shadow_rules_stat_prefix,
        delay_deny,
    })
}

/// The `matcher` / `shadow_matcher` form (a match tree of RBAC actions) takes precedence
/// over `rules` in Envoy; Outrider does not evaluate match trees, so it refuses them.
fn refuse_matchers(matcher: bool, shadow_matcher: bool) -> Result<()> {
    if matcher {
        return Err(ConfigError::new("matcher", "RBAC match trees are not supported; use rules"));
    }
    if shadow_matcher {
        return Err(ConfigError::new("shadow_matcher", "RBAC match trees are not supported; use shadow_rules"));
    }
    Ok(())
}

fn rules_of(
    rules: Option<crate::pb::envoy::config::rbac::v3::Rbac>,
    field: &str,
    warnings: &mut Warnings,
) -> Result<Option<Policies>> {
    rules.map(|r| warnings.within(field, |w| policy::policies(r, w)).map_err(|e| e.at(field))).transpose()
}

/// A stat prefix as the one segment Envoy makes of it: `tcp.` and `tcp` both name
/// `tcp.rbac.allowed`.
fn stat_segment(prefix: &str) -> &str {
    prefix.strip_suffix('.').unwrap_or(prefix)
}

#[cfg(test)]
mod tests;
