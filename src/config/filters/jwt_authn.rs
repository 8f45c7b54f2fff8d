//! `envoy.filters.http.jwt_authn`: verifies JSON Web Tokens (signature, issuer, audiences,
//! time) against each provider's keys, as the rules and requirements say, and answers
//! 401 / 403 when a required token is missing or bad.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;

use crate::config::matcher::RouteMatch;

/// The dynamic metadata namespace the filter writes verified tokens under.
pub const METADATA_NAMESPACE: &str = "envoy.filters.http.jwt_authn";

/// `envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication`.
#[derive(Debug, Clone, PartialEq)]
pub struct JwtAuthentication {
    /// By provider name. Sorted by name: where Envoy picks "the first provider" with an
    /// issuer from a protobuf map (whose order is unspecified), Outrider picks the first by
    /// name.
    pub providers: BTreeMap<String, Arc<JwtProvider>>,
    /// The first rule whose match holds decides what the request needs; none matching:
    /// nothing is verified.
    pub rules: Vec<RequirementRule>,
    /// Named requirements, for `requirement_name` in rules and per-route settings.
    pub requirement_map: BTreeMap<String, JwtRequirement>,
    /// CORS preflight requests (`OPTIONS` with `origin` and
    /// `access-control-request-method`) pass unverified.
    pub bypass_cors_preflight: bool,
    /// Failure replies have no body and no `www-authenticate`.
    pub strip_failure_response: bool,
}

/// `JwtProvider`: who issues tokens, where they are found, the keys that verify them and
/// what is done with a verified one.
#[derive(Debug, Clone, PartialEq)]
pub struct JwtProvider {
    /// `iss` the tokens must carry; empty: any issuer.
    pub issuer: String,
    /// `aud` must contain one of these (compared without `http(s)://` and a trailing
    /// `/`); empty: any audience.
    pub audiences: Vec<String>,
    /// Keep the token in the request (else its header is removed, or its query parameter).
    pub forward: bool,
    pub from_headers: Vec<JwtHeader>,
    pub from_params: Vec<String>,
    pub from_cookies: Vec<String>,
    /// Add the token's payload (base64url) to the request in this header.
    pub forward_payload_header: Option<HeaderName>,
    /// With `forward_payload_header`: pad the base64url payload with `=`.
    pub pad_forward_payload_header: bool,
    /// Put the verified payload in dynamic metadata under this key (empty: don't).
    pub payload_in_metadata: String,
    /// Claims whose space-separated string value becomes a list in the metadata (Istio's
    /// `scope`, `permission`).
    pub space_delimited_claims: Vec<String>,
    /// Put the verified token's JOSE header in dynamic metadata under this key.
    pub header_in_metadata: String,
    /// Seconds of leeway for `exp` and `nbf` (Envoy's default 60 when unset or 0).
    pub clock_skew_seconds: u64,
    /// Claims copied into request headers.
    pub claim_to_headers: Vec<ClaimToHeader>,
    pub jwks: JwksSource,
}

/// `JwtHeader`: a header carrying the token, after `value_prefix` when set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtHeader {
    pub name: HeaderName,
    pub value_prefix: String,
}

/// `JwtClaimToHeader`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimToHeader {
    pub header_name: HeaderName,
    /// A claim name; `.` descends into nested objects (`a.b`).
    pub claim_name: String,
}

/// Where a provider's keys come from.
#[derive(Debug, Clone, PartialEq)]
pub enum JwksSource {
    /// `local_jwks`: the JWKS text, read at conversion. An invalid one is accepted (as
    /// Envoy accepts it) and verifies nothing.
    Local(String),
    Remote(RemoteJwks),
}

/// `RemoteJwks`: keys fetched from a cluster on first need and kept for `cache_duration`.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteJwks {
    pub cluster: String,
    /// The absolute URI fetched (`http_uri.uri`).
    pub uri: http::Uri,
    /// `http_uri.timeout`: for the whole fetch, retries included.
    pub timeout: Duration,
    /// Default 10 minutes.
    pub cache_duration: Duration,
    pub retry: Option<JwksRetry>,
}

/// `RemoteJwks.retry_policy` (`envoy.config.core.v3.RetryPolicy`): retried on 5xx,
/// connect failures and resets, with jittered exponential back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JwksRetry {
    pub num_retries: u32,
    pub base_interval: Duration,
    pub max_interval: Duration,
}

/// `JwtRequirement`.
#[derive(Debug, Clone, PartialEq)]
pub enum JwtRequirement {
    /// `provider_name` / `provider_and_audiences`: a valid token of this provider (with
    /// `audiences`, checked against these instead of the provider's).
    Provider { name: String, audiences: Option<Vec<String>> },
    /// `requires_any`: one of these.
    Any(Vec<JwtRequirement>),
    /// `requires_all`: all of these.
    All(Vec<JwtRequirement>),
    /// `allow_missing_or_failed`: tokens are verified, and the request goes on whatever
    /// the result.
    AllowMissingOrFailed,
    /// `allow_missing`: a request without a token goes on; a bad token is refused.
    AllowMissing,
    /// No requirement type set: everything passes.
    AllowAll,
}

/// `RequirementRule`.
#[derive(Debug, Clone, PartialEq)]
pub struct RequirementRule {
    pub route_match: RouteMatch,
    /// `None`: the matching request is not verified.
    pub requires: Option<JwtRequirement>,
}

/// `PerRouteConfig`, a route's `typed_per_filter_config` for the filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtPerRoute {
    /// `disabled: true`: nothing is verified on the route.
    Disabled,
    /// `requirement_name` (also `disabled: false`, which names the empty requirement):
    /// the requirement of `requirement_map`; a name not there gets 403.
    RequirementName(String),
}
