//! How a route computes the request hash that ring hash and maglev balance on
//! (`RouteAction.hash_policy`).

use std::time::Duration;

/// One hash policy. Envoy evaluates the list in order, combines the hashes it gets
/// (`rotate_left(acc, 1) ^ hash`), and stops after a `terminal` policy that produced one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashPolicy {
    pub source: HashSource,
    pub terminal: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashSource {
    /// The value(s) of a request header (lower-cased name).
    Header { name: String },
    /// A cookie; with `ttl` set and the cookie missing, Envoy generates one and sets it on
    /// the response (`ttl` of zero makes it a session cookie).
    Cookie { name: String, ttl: Option<Duration>, path: String, attributes: Vec<(String, String)> },
    /// The downstream connection's source IP.
    SourceIp,
    /// A query parameter's value.
    QueryParameter { name: String },
    /// A filter state object's serialized value.
    FilterState { key: String },
}
