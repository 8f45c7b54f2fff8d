//! `envoy.filters.http.rbac` and `envoy.filters.network.rbac`: role-based access control.
//! A set of named policies, each a list of permissions (what is asked for) and principals
//! (who asks); the action says what a match means (allow, deny, or only log). The same
//! policies may also run in shadow mode: evaluated and counted, never enforced.
//!
//! Evaluation lives in `proxy::filters::rbac::engine`; these are the validated rules.

use std::time::Duration;

use crate::config::address::CidrRange;
use crate::config::matcher::{HeaderMatcher, StringMatcher};

/// `envoy.extensions.filters.http.rbac.v3.RBAC`.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRbac {
    /// `rules`: enforced. `None`: nothing is enforced (every request passes).
    pub rules: Option<Policies>,
    /// `shadow_rules`: evaluated and counted only.
    pub shadow_rules: Option<Policies>,
    /// `rules_stat_prefix`: `http.<hcm>.rbac.<prefix>.allowed` (without a trailing `.`).
    pub rules_stat_prefix: String,
    /// `shadow_rules_stat_prefix`, as configured: it also prefixes the dynamic metadata keys
    /// (`<prefix>shadow_engine_result`).
    pub shadow_rules_stat_prefix: String,
}

/// `envoy.extensions.filters.http.rbac.v3.RBACPerRoute`: the route's own rules; `None`
/// (no `rbac`) turns RBAC off for the route, enforced and shadow rules alike.
#[derive(Debug, Clone, PartialEq)]
pub struct RbacPerRoute {
    pub rules: Option<Policies>,
    pub shadow_rules: Option<Policies>,
}

/// `envoy.extensions.filters.network.rbac.v3.RBAC`.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkRbac {
    pub rules: Option<Policies>,
    pub shadow_rules: Option<Policies>,
    /// `stat_prefix`: `<prefix>.rbac.allowed` (without a trailing `.`).
    pub stat_prefix: String,
    pub shadow_rules_stat_prefix: String,
    /// `delay_deny`: how long a denied connection is held (reading nothing) before it is
    /// closed.
    pub delay_deny: Option<Duration>,
}

/// `envoy.config.rbac.v3.RBAC`: the action and the policies, sorted by name — the order
/// Envoy tries them in (the first that matches is the "effective policy").
#[derive(Debug, Clone, PartialEq)]
pub struct Policies {
    pub action: Action,
    pub policies: Vec<(String, Policy)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A request is allowed when a policy matches.
    Allow,
    /// A request is denied when a policy matches.
    Deny,
    /// Every request is allowed; a match only marks it for the access log.
    Log,
}

/// `envoy.config.rbac.v3.Policy`: matches when any permission and any principal match.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub permissions: Vec<Permission>,
    pub principals: Vec<Principal>,
}

/// `envoy.config.rbac.v3.Permission`: what the request asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Permission {
    Any,
    And(Vec<Permission>),
    Or(Vec<Permission>),
    Not(Box<Permission>),
    Header(HeaderMatcher),
    UrlPath(StringMatcher),
    DestinationIp(CidrRange),
    DestinationPort(u32),
    /// `[start, end)`.
    DestinationPortRange {
        start: u32,
        end: u32,
    },
    Metadata(MetadataMatcher),
    RequestedServerName(StringMatcher),
}

/// `envoy.config.rbac.v3.Principal`: who asks.
#[derive(Debug, Clone, PartialEq)]
pub enum Principal {
    Any,
    And(Vec<Principal>),
    Or(Vec<Principal>),
    Not(Box<Principal>),
    /// `authenticated`: a TLS connection; with a matcher, one of the peer certificate's
    /// URI SANs, DNS SANs or its subject matches.
    Authenticated(Option<StringMatcher>),
    /// `source_ip` (deprecated; the connection's peer, like `direct_remote_ip`).
    SourceIp(CidrRange),
    DirectRemoteIp(CidrRange),
    /// `remote_ip`: the client address after `x-forwarded-for` processing.
    RemoteIp(CidrRange),
    Header(HeaderMatcher),
    UrlPath(StringMatcher),
    Metadata(MetadataMatcher),
    /// `filter_state` on `io.istio.peer_principal`, the only filter state Outrider knows.
    PeerPrincipal(StringMatcher),
}

/// `envoy.type.matcher.v3.MetadataMatcher` on the request's dynamic metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct MetadataMatcher {
    /// The namespace: `envoy.filters.http.jwt_authn`, `istio_authn`...
    pub filter: String,
    /// Keys into nested structs; at least one.
    pub path: Vec<String>,
    pub value: ValueMatcher,
    pub invert: bool,
}

/// `envoy.type.matcher.v3.ValueMatcher`.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueMatcher {
    Null,
    /// `[start, end)`.
    DoubleRange {
        start: f64,
        end: f64,
    },
    DoubleExact(f64),
    String(StringMatcher),
    Bool(bool),
    /// `present_match`: `true` matches any value that is set; `false` matches nothing.
    Present(bool),
    /// `list_match.one_of`: a list with an element that matches.
    ListOneOf(Box<ValueMatcher>),
    Or(Vec<ValueMatcher>),
}
