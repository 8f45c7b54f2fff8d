//! RBAC's evaluation, shared by the HTTP and network filters: which policy (if any) a
//! request or connection matches, and what the action makes of it — Envoy's
//! `RoleBasedAccessControlEngineImpl` and its matchers.

use std::net::IpAddr;

use serde_json::Value;

use super::super::context::{DownstreamConnection, DynamicMetadata};
use crate::config::filters::rbac::{Action, MetadataMatcher, Permission, Policies, Policy, Principal, ValueMatcher};
use crate::proxy::router::request_header_value;

/// What the matchers read.
pub struct Attributes<'a> {
    /// The request's method, path and headers; `None` for the network filter, which (like
    /// Envoy's) matches header rules against an empty header map.
    pub parts: Option<&'a http::request::Parts>,
    pub connection: &'a DownstreamConnection,
    /// The client's address after `x-forwarded-for` processing (`remote_ip`).
    pub remote_ip: IpAddr,
    /// The request's dynamic metadata; `None` when there is none to read.
    pub metadata: Option<&'a DynamicMetadata>,
}

/// An engine's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision<'p> {
    pub allowed: bool,
    /// The first policy (by name) that matched: Envoy's "effective policy id".
    pub matched_policy: Option<&'p str>,
}

impl Decision<'_> {
    /// `%RESPONSE_CODE_DETAILS%` of a denial: the policy name, whitespace made `_` so the
    /// access log keeps its field count.
    pub fn response_detail(&self) -> String {
        let policy: String = self
            .matched_policy
            .unwrap_or("none")
            .chars()
            .map(|c| if matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c') { '_' } else { c })
            .collect();
        format!("rbac_access_denied_matched_policy[{policy}]")
    }
}

/// Evaluates `policies`: ALLOW allows what matches, DENY denies it, LOG allows everything.
pub fn evaluate<'p>(policies: &'p Policies, attributes: &Attributes<'_>) -> Decision<'p> {
    let matched_policy =
        policies.policies.iter().find(|(_, policy)| policy_matches(policy, attributes)).map(|(name, _)| name.as_str());
    let matched = matched_policy.is_some();
    let allowed = match policies.action {
        Action::Allow => matched,
        Action::Deny => !matched,
        Action::Log => true,
    };
    Decision { allowed, matched_policy }
}

fn policy_matches(policy: &Policy, a: &Attributes<'_>) -> bool {
    policy.permissions.iter().any(|p| permission_matches(p, a))
        && policy.principals.iter().any(|p| principal_matches(p, a))
}

fn permission_matches(permission: &Permission, a: &Attributes<'_>) -> bool {
    match permission {
        Permission::Any => true,
        Permission::And(rules) => rules.iter().all(|p| permission_matches(p, a)),
        Permission::Or(rules) => rules.iter().any(|p| permission_matches(p, a)),
        Permission::Not(rule) => !permission_matches(rule, a),
        Permission::Header(m) => m.matches(header(a, &m.name).as_deref()),
        Permission::UrlPath(m) => path_matches(m, a),
        Permission::DestinationIp(range) => range.contains(a.connection.local.ip()),
        Permission::DestinationPort(port) => u32::from(a.connection.local.port()) == *port,
        Permission::DestinationPortRange { start, end } => {
            let port = u32::from(a.connection.local.port());
            *start <= port && port < *end
        }
        Permission::Metadata(m) => metadata_matches(m, a),
        Permission::RequestedServerName(m) => m.matches(a.connection.server_name.as_deref().unwrap_or("")),
    }
}

fn principal_matches(principal: &Principal, a: &Attributes<'_>) -> bool {
    match principal {
        Principal::Any => true,
        Principal::And(ids) => ids.iter().all(|p| principal_matches(p, a)),
        Principal::Or(ids) => ids.iter().any(|p| principal_matches(p, a)),
        Principal::Not(id) => !principal_matches(id, a),
        Principal::Authenticated(name) => authenticated(name.as_ref(), a.connection),
        Principal::SourceIp(range) | Principal::DirectRemoteIp(range) => range.contains(a.connection.peer.ip()),
        Principal::RemoteIp(range) => range.contains(a.remote_ip),
        Principal::Header(m) => m.matches(header(a, &m.name).as_deref()),
        Principal::UrlPath(m) => path_matches(m, a),
        Principal::Metadata(m) => metadata_matches(m, a),
        Principal::PeerPrincipal(m) => peer_principal(a.connection).is_some_and(|p| m.matches(p)),
    }
}

fn header<'a>(a: &'a Attributes<'_>, name: &str) -> Option<std::borrow::Cow<'a, str>> {
    a.parts.and_then(|parts| request_header_value(parts, name))
}

/// `url_path`: the (normalized) path without its query; nothing matches without a path.
fn path_matches(m: &crate::config::route::StringMatcher, a: &Attributes<'_>) -> bool {
    a.parts.is_some_and(|parts| m.matches(parts.uri.path()))
}

/// Envoy's rule: a TLS connection is authenticated; a name matcher is tried on each URI
/// SAN, then each DNS SAN, then the subject (empty without a client certificate).
fn authenticated(name: Option<&crate::config::route::StringMatcher>, connection: &DownstreamConnection) -> bool {
    if !connection.tls {
        return false;
    }
    let Some(name) = name else { return true };
    match &connection.peer_identity {
        Some(identity) => identity.principal_names().any(|n| name.matches(n)),
        None => name.matches(""),
    }
}

/// The filter state `io.istio.peer_principal`: what the connection arrived with (an HBONE
/// tunnel's client, set by Istio's `connect_authority` filter on the terminating side),
/// else what Istio's `istio_authn` network filter publishes: the first `spiffe://` URI SAN
/// of the client certificate, on TLS connections that have one.
fn peer_principal(connection: &DownstreamConnection) -> Option<&str> {
    if let Some(principal) = connection.carried_peer_principal() {
        return Some(principal);
    }
    if !connection.tls {
        return None;
    }
    connection.peer_identity.as_ref()?.uri_sans.iter().map(String::as_str).find(|san| san.starts_with("spiffe://"))
}

fn metadata_matches(m: &MetadataMatcher, a: &Attributes<'_>) -> bool {
    metadata_matcher_matches(m, a.metadata)
}

/// `MetadataMatcher` on a request's dynamic metadata (also ext_authz's
/// `filter_enabled_metadata`).
pub fn metadata_matcher_matches(m: &MetadataMatcher, metadata: Option<&DynamicMetadata>) -> bool {
    value_matches(&m.value, metadata_value(m, metadata)) != m.invert
}

/// The value the matcher looks at, when it is set.
pub fn metadata_value<'a>(m: &MetadataMatcher, metadata: Option<&'a DynamicMetadata>) -> Option<&'a Value> {
    metadata.and_then(|metadata| metadata.get(&m.filter, &m.path))
}

/// `ValueMatcher` on a metadata value; `None` is a value that is not set (Envoy's
/// `KIND_NOT_SET`), which only an inverted matcher accepts.
fn value_matches(m: &ValueMatcher, value: Option<&Value>) -> bool {
    match m {
        ValueMatcher::Null => matches!(value, Some(Value::Null)),
        ValueMatcher::DoubleRange { start, end } => number(value).is_some_and(|v| *start <= v && v < *end),
        ValueMatcher::DoubleExact(exact) => number(value).is_some_and(|v| v == *exact),
        ValueMatcher::String(s) => matches!(value, Some(Value::String(v)) if s.matches(v)),
        ValueMatcher::Bool(b) => matches!(value, Some(Value::Bool(v)) if v == b),
        ValueMatcher::Present(present) => *present && value.is_some(),
        ValueMatcher::ListOneOf(inner) => {
            matches!(value, Some(Value::Array(items)) if items.iter().any(|item| value_matches(inner, Some(item))))
        }
        ValueMatcher::Or(matchers) => matchers.iter().any(|inner| value_matches(inner, value)),
    }
}

fn number(value: Option<&Value>) -> Option<f64> {
    match value {
        Some(Value::Number(n)) => n.as_f64(),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
