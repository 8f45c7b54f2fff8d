//! `envoy.config.rbac.v3.RBAC` → [`Policies`]: the policies and every permission and
//! principal Outrider enforces, with Envoy's validation. A matcher kind Outrider cannot
//! evaluate is refused with its path, never skipped: skipping a permission or principal
//! would change which requests a policy matches.

use super::super::super::common::cidr;
use super::super::super::matchers::{header_matcher, string_matcher};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::rbac::{Action, MetadataMatcher, Permission, Policies, Policy, Principal, ValueMatcher};
use crate::config::listener::CidrRange;
use crate::config::route::StringMatcher;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::config::rbac::v3 as proto;
use crate::pb::envoy::r#type::matcher::v3 as matcher;

/// The filter-state key Istio's `istio_authn` network filter publishes the peer's SPIFFE
/// identity under.
pub const PEER_PRINCIPAL_KEY: &str = "io.istio.peer_principal";

pub fn policies(proto: proto::Rbac, warnings: &mut Warnings) -> Result<Policies> {
    let proto::Rbac { action, policies, audit_logging_options } = proto;
    let action = match proto::rbac::Action::try_from(action) {
        Ok(proto::rbac::Action::Allow) => Action::Allow,
        Ok(proto::rbac::Action::Deny) => Action::Deny,
        Ok(proto::rbac::Action::Log) => Action::Log,
        Err(_) => return Err(ConfigError::new("action", format!("unknown action {action}"))),
    };
    if audit_logging_options.is_some() {
        warnings.ignored("audit_logging_options", "audit loggers only record decisions; Outrider does not run them");
    }
    // Envoy keeps the policies in a sorted map and stops at the first that matches.
    let mut policies: Vec<_> = policies.into_iter().collect();
    policies.sort_by(|a, b| a.0.cmp(&b.0));
    let policies = policies
        .into_iter()
        .map(|(name, p)| {
            let at = format!("policies[{name:?}]");
            let policy = warnings.within(&at, |w| policy(p, w)).map_err(|e| e.at(&at))?;
            Ok((name, policy))
        })
        .collect::<Result<_>>()?;
    Ok(Policies { action, policies })
}

fn policy(proto: proto::Policy, warnings: &mut Warnings) -> Result<Policy> {
    let proto::Policy { permissions, principals, condition, checked_condition, cel_config } = proto;
    if condition.is_some() {
        return Err(ConfigError::new("condition", "CEL conditions are not supported"));
    }
    if checked_condition.is_some() {
        return Err(ConfigError::new("checked_condition", "CEL conditions are not supported"));
    }
    if cel_config.is_some() {
        return Err(ConfigError::new("cel_config", "CEL conditions are not supported"));
    }
    let permissions = non_empty(permissions, "permissions", permission, warnings)?;
    let principals = non_empty(principals, "principals", principal, warnings)?;
    Ok(Policy { permissions, principals })
}

/// A repeated field Envoy requires at least one item of, each converted at `field[i]`.
fn non_empty<P, T>(
    items: Vec<P>,
    field: &str,
    convert: impl Fn(P, &mut Warnings) -> Result<T>,
    warnings: &mut Warnings,
) -> Result<Vec<T>> {
    if items.is_empty() {
        return Err(ConfigError::new(field, "must have at least one item"));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let at = format!("{field}[{i}]");
            warnings.within(&at, |w| convert(item, w)).map_err(|e| e.at(&at))
        })
        .collect()
}

#[allow(deprecated)]
fn permission(proto: proto::Permission, warnings: &mut Warnings) -> Result<Permission> {
    use proto::permission::Rule as R;
    let Some(rule) = proto.rule else {
        return Err(ConfigError::new("rule", "one of and_rules, or_rules, any, header, ... is required"));
    };
    Ok(match rule {
        R::AndRules(set) => {
            Permission::And(non_empty(set.rules, "rules", permission, warnings).map_err(|e| e.at("and_rules"))?)
        }
        R::OrRules(set) => {
            Permission::Or(non_empty(set.rules, "rules", permission, warnings).map_err(|e| e.at("or_rules"))?)
        }
        R::Any(any) => {
            if !any {
                return Err(ConfigError::new("any", "must be true"));
            }
            Permission::Any
        }
        R::Header(h) => Permission::Header(within(warnings, "header", |w| header_matcher(h, w))?),
        R::UrlPath(p) => Permission::UrlPath(within(warnings, "url_path", |w| path_matcher(p, w))?),
        R::DestinationIp(range) => Permission::DestinationIp(cidr_range(&range).map_err(|e| e.at("destination_ip"))?),
        R::DestinationPort(port) => {
            if port > 65535 {
                return Err(ConfigError::new("destination_port", format!("{port} is not a port")));
            }
            Permission::DestinationPort(port)
        }
        R::DestinationPortRange(range) => {
            // Envoy's bounds: 0 ≤ start < end ≤ 65536.
            let (start, end) = (range.start, range.end);
            let bounded = |v: i32| u32::try_from(v).ok().filter(|v| *v <= 65536);
            match (bounded(start), bounded(end)) {
                (Some(s), Some(e)) if s < e => Permission::DestinationPortRange { start: s, end: e },
                (None, _) => {
                    return Err(ConfigError::new("destination_port_range.start", format!("{start} is out of bounds")));
                }
                (_, None) => {
                    return Err(ConfigError::new("destination_port_range.end", format!("{end} is out of bounds")));
                }
                _ => {
                    return Err(ConfigError::new(
                        "destination_port_range",
                        format!("start {start} must be less than end {end}"),
                    ));
                }
            }
        }
        R::Metadata(m) => Permission::Metadata(within(warnings, "metadata", |w| metadata_matcher(m, w))?),
        R::SourcedMetadata(m) => {
            Permission::Metadata(within(warnings, "sourced_metadata", |w| sourced_metadata(m, w))?)
        }
        R::NotRule(inner) => Permission::Not(Box::new(within(warnings, "not_rule", |w| permission(*inner, w))?)),
        R::RequestedServerName(m) => {
            Permission::RequestedServerName(within(warnings, "requested_server_name", |w| string_matcher(m, w))?)
        }
        R::Matcher(_) => {
            return Err(ConfigError::new("matcher", "extension permission matchers are not supported"));
        }
        R::UriTemplate(_) => {
            return Err(ConfigError::new("uri_template", "URI template permissions are not supported"));
        }
    })
}

#[allow(deprecated)]
fn principal(proto: proto::Principal, warnings: &mut Warnings) -> Result<Principal> {
    use proto::principal::Identifier as I;
    let Some(identifier) = proto.identifier else {
        return Err(ConfigError::new("identifier", "one of and_ids, or_ids, any, authenticated, ... is required"));
    };
    Ok(match identifier {
        I::AndIds(set) => Principal::And(non_empty(set.ids, "ids", principal, warnings).map_err(|e| e.at("and_ids"))?),
        I::OrIds(set) => Principal::Or(non_empty(set.ids, "ids", principal, warnings).map_err(|e| e.at("or_ids"))?),
        I::Any(any) => {
            if !any {
                return Err(ConfigError::new("any", "must be true"));
            }
            Principal::Any
        }
        I::Authenticated(proto::principal::Authenticated { principal_name }) => Principal::Authenticated(
            principal_name
                .map(|m| warnings.within("authenticated.principal_name", |w| string_matcher(m, w)))
                .transpose()
                .map_err(|e| e.at("authenticated.principal_name"))?,
        ),
        I::SourceIp(range) => Principal::SourceIp(cidr_range(&range).map_err(|e| e.at("source_ip"))?),
        I::DirectRemoteIp(range) => {
            Principal::DirectRemoteIp(cidr_range(&range).map_err(|e| e.at("direct_remote_ip"))?)
        }
        I::RemoteIp(range) => Principal::RemoteIp(cidr_range(&range).map_err(|e| e.at("remote_ip"))?),
        I::Header(h) => Principal::Header(within(warnings, "header", |w| header_matcher(h, w))?),
        I::UrlPath(p) => Principal::UrlPath(within(warnings, "url_path", |w| path_matcher(p, w))?),
        I::Metadata(m) => Principal::Metadata(within(warnings, "metadata", |w| metadata_matcher(m, w))?),
        I::SourcedMetadata(m) => Principal::Metadata(within(warnings, "sourced_metadata", |w| sourced_metadata(m, w))?),
        I::FilterState(m) => within(warnings, "filter_state", |w| filter_state(m, w))?,
        I::NotId(inner) => Principal::Not(Box::new(within(warnings, "not_id", |w| principal(*inner, w))?)),
        I::Custom(_) => return Err(ConfigError::new("custom", "extension principals are not supported")),
    })
}

/// Converts a sub-message at `field`, with its warnings and errors under that path.
fn within<T>(warnings: &mut Warnings, field: &str, convert: impl FnOnce(&mut Warnings) -> Result<T>) -> Result<T> {
    warnings.within(field, convert).map_err(|e| e.at(field))
}

fn cidr_range(range: &core::CidrRange) -> Result<CidrRange> {
    cidr(&range.address_prefix, range.prefix_len.map(|v| v.value))
}

/// `envoy.type.matcher.v3.PathMatcher`: a string matcher on the path (the query and
/// fragment are not part of what it sees).
fn path_matcher(proto: matcher::PathMatcher, warnings: &mut Warnings) -> Result<StringMatcher> {
    match proto.rule {
        Some(matcher::path_matcher::Rule::Path(m)) => within(warnings, "path", |w| string_matcher(m, w)),
        None => Err(ConfigError::new("rule", "path is required")),
    }
}

/// Istio's peer identity as a filter state. Other filter state is refused: Outrider has no
/// filter that publishes any.
fn filter_state(proto: matcher::FilterStateMatcher, warnings: &mut Warnings) -> Result<Principal> {
    let matcher::FilterStateMatcher { key, matcher } = proto;
    if key != PEER_PRINCIPAL_KEY {
        return Err(ConfigError::new(
            "key",
            format!("filter state {key:?} is not supported (only {PEER_PRINCIPAL_KEY:?})"),
        ));
    }
    match matcher {
        Some(matcher::filter_state_matcher::Matcher::StringMatch(m)) => {
            Ok(Principal::PeerPrincipal(within(warnings, "string_match", |w| string_matcher(m, w))?))
        }
        Some(matcher::filter_state_matcher::Matcher::AddressMatch(_)) => {
            Err(ConfigError::new("address_match", "the peer principal is not an address"))
        }
        None => Err(ConfigError::new("matcher", "string_match is required")),
    }
}

fn sourced_metadata(proto: proto::SourcedMetadata, warnings: &mut Warnings) -> Result<MetadataMatcher> {
    let proto::SourcedMetadata { metadata_matcher: m, metadata_source } = proto;
    match proto::MetadataSource::try_from(metadata_source) {
        Ok(proto::MetadataSource::Dynamic) => {}
        Ok(proto::MetadataSource::Route) => {
            return Err(ConfigError::new("metadata_source", "route metadata is not supported"));
        }
        Err(_) => return Err(ConfigError::new("metadata_source", format!("unknown source {metadata_source}"))),
    }
    let Some(m) = m else { return Err(ConfigError::new("metadata_matcher", "is required")) };
    within(warnings, "metadata_matcher", |w| metadata_matcher(m, w))
}

/// `envoy.type.matcher.v3.MetadataMatcher`.
pub fn metadata_matcher(proto: matcher::MetadataMatcher, warnings: &mut Warnings) -> Result<MetadataMatcher> {
    let matcher::MetadataMatcher { filter, path, value, invert } = proto;
    if filter.is_empty() {
        return Err(ConfigError::new("filter", "must not be empty"));
    }
    if path.is_empty() {
        return Err(ConfigError::new("path", "must have at least one segment"));
    }
    let path = path
        .into_iter()
        .enumerate()
        .map(|(i, segment)| match segment.segment {
            Some(matcher::metadata_matcher::path_segment::Segment::Key(key)) if !key.is_empty() => Ok(key),
            _ => Err(ConfigError::new(format!("path[{i}].key"), "must not be empty")),
        })
        .collect::<Result<_>>()?;
    let Some(value) = value else { return Err(ConfigError::new("value", "is required")) };
    let value = within(warnings, "value", |w| value_matcher(value, w))?;
    Ok(MetadataMatcher { filter, path, value, invert })
}

/// `envoy.type.matcher.v3.ValueMatcher`.
fn value_matcher(proto: matcher::ValueMatcher, warnings: &mut Warnings) -> Result<ValueMatcher> {
    use matcher::value_matcher::MatchPattern as M;
    Ok(match proto.match_pattern {
        Some(M::NullMatch(_)) => ValueMatcher::Null,
        Some(M::DoubleMatch(d)) => match d.match_pattern {
            Some(matcher::double_matcher::MatchPattern::Range(r)) => {
                ValueMatcher::DoubleRange { start: r.start, end: r.end }
            }
            Some(matcher::double_matcher::MatchPattern::Exact(v)) => ValueMatcher::DoubleExact(v),
            None => return Err(ConfigError::new("double_match.match_pattern", "range or exact is required")),
        },
        Some(M::StringMatch(m)) => ValueMatcher::String(within(warnings, "string_match", |w| string_matcher(m, w))?),
        Some(M::BoolMatch(b)) => ValueMatcher::Bool(b),
        Some(M::PresentMatch(p)) => ValueMatcher::Present(p),
        Some(M::ListMatch(list)) => match list.match_pattern {
            Some(matcher::list_matcher::MatchPattern::OneOf(inner)) => {
                ValueMatcher::ListOneOf(Box::new(within(warnings, "list_match.one_of", |w| value_matcher(*inner, w))?))
            }
            None => return Err(ConfigError::new("list_match.match_pattern", "one_of is required")),
        },
        Some(M::OrMatch(or)) => {
            if or.value_matchers.len() < 2 {
                return Err(ConfigError::new("or_match.value_matchers", "must have at least two items"));
            }
            let matchers = or
                .value_matchers
                .into_iter()
                .enumerate()
                .map(|(i, m)| {
                    let at = format!("or_match.value_matchers[{i}]");
                    within(warnings, &at, |w| value_matcher(m, w))
                })
                .collect::<Result<_>>()?;
            ValueMatcher::Or(matchers)
        }
        None => return Err(ConfigError::new("match_pattern", "one of null_match, string_match, ... is required")),
    })
}
