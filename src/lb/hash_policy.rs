//! The request hash that ring hash and maglev place a request by, computed from the
//! route's hash policies exactly as Envoy's `HashPolicyImpl` (`source/common/http/
//! hash_policy.cc`) does, so a request reaches the endpoint Envoy would have chosen.
//!
//! Each policy yields an optional xxHash64 (seed 0); the hashes combine as `acc =
//! rotl(acc, 1) ^ new` (the first one as it is); a `terminal` policy ends the evaluation
//! once any hash exists — its own or an earlier one's.
//!
//! - header: every value of the header, sorted bytewise, hashed in a chain (each value's
//!   xxHash64 seeds the next one's, Envoy's `HashUtil::xxHash64(Span)`); `:authority`,
//!   `:path`, `:method` and `:scheme` are read from the request line, and `:authority`
//!   and `host` stand in for each other (hyper keeps an HTTP/1 Host in the header map,
//!   Envoy turns it into `:authority`).
//! - cookie: the first cookie of that name in the `cookie` headers (surrounding double
//!   quotes removed). When it is missing and the policy has a TTL, Envoy makes one up:
//!   the hex xxHash64 of `remote address + local address` (`10.0.0.1:5555` +
//!   `10.0.0.2:80`); the caller must then add the returned `Set-Cookie` to the response.
//! - source IP: xxHash64 of the downstream IP as text (`10.0.0.1`, `2001:db8::1`).
//! - query parameter: the first value of that name in the raw (not percent-decoded) query.
//! - filter state: Outrider has no filter state, so never a hash.

use std::net::{IpAddr, SocketAddr};

use http::header::COOKIE;
use http::request::Parts;
use http::{HeaderMap, Method, Request, Uri};
use xxhash_rust::xxh64::xxh64;

use super::hashing::xxhash64;
use crate::config::route::{HashPolicy, HashSource};

/// The parts of a request the policies read.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
}

impl<'a> RequestView<'a> {
    pub fn from_parts(parts: &'a Parts) -> Self {
        Self { method: &parts.method, uri: &parts.uri, headers: &parts.headers }
    }

    pub fn from_request<B>(request: &'a Request<B>) -> Self {
        Self { method: request.method(), uri: request.uri(), headers: request.headers() }
    }
}

/// The downstream connection: the peer's address (for `source_ip`) and our own (with the
/// peer's, the seed of a generated cookie).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Downstream {
    pub remote: Option<SocketAddr>,
    pub local: Option<SocketAddr>,
}

/// The outcome of the hash policies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHash {
    /// `None`: no policy produced a hash; the balancer then picks at random.
    pub hash: Option<u64>,
    /// Cookies made up for cookie policies with a TTL: each must be set on the response.
    pub set_cookies: Vec<GeneratedCookie>,
}

/// A cookie Envoy would generate and set on the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedCookie {
    pub name: String,
    pub value: String,
    /// The whole `Set-Cookie` value, as Envoy's `makeSetCookieValue` writes it:
    /// `name="value"; Max-Age=ttl; Path=path; attr=value; HttpOnly`.
    pub set_cookie: String,
}

/// The request hash of `request` under `policies`, without cookie generation (a cookie
/// policy whose cookie is missing yields no hash, as in Envoy when the connection's
/// addresses are unknown).
pub fn request_hash(policies: &[HashPolicy], request: &Parts, source_ip: Option<IpAddr>) -> Option<u64> {
    let downstream = Downstream { remote: source_ip.map(|ip| SocketAddr::new(ip, 0)), local: None };
    evaluate(policies, RequestView::from_parts(request), &downstream).hash
}

/// The request hash of `request` under `policies`, and the cookies to set.
pub fn evaluate(policies: &[HashPolicy], request: RequestView<'_>, downstream: &Downstream) -> RequestHash {
    let mut outcome = RequestHash::default();
    for policy in policies {
        if let Some(new) = policy_hash(&policy.source, request, downstream, &mut outcome.set_cookies) {
            outcome.hash = Some(outcome.hash.map_or(new, |acc| acc.rotate_left(1) ^ new));
        }
        if policy.terminal && outcome.hash.is_some() {
            break;
        }
    }
    outcome
}

fn policy_hash(
    source: &HashSource,
    request: RequestView<'_>,
    downstream: &Downstream,
    set_cookies: &mut Vec<GeneratedCookie>,
) -> Option<u64> {
    match source {
        HashSource::Header { name } => header_hash(request, name),
        HashSource::Cookie { name, ttl, path, attributes } => {
            if let Some(value) = cookie_value(request.headers, name.as_bytes()).filter(|v| !v.is_empty()) {
                return Some(xxhash64(value));
            }
            let ttl = (*ttl)?;
            let cookie = generate_cookie(downstream, name, path, ttl.as_secs(), attributes)?;
            let hash = xxhash64(cookie.value.as_bytes());
            set_cookies.push(cookie);
            Some(hash)
        }
        HashSource::SourceIp => downstream.remote.map(|addr| xxhash64(addr.ip().to_string().as_bytes())),
        HashSource::QueryParameter { name } => query_value(request.uri, name).map(xxhash64),
        HashSource::FilterState { .. } => None,
    }
}

/// All values of header `name`, sorted, hashed in a chain; `None` when it is absent.
fn header_hash(request: RequestView<'_>, name: &str) -> Option<u64> {
    let pseudo = |value: Option<&str>| value.map(|v| xxhash64(v.as_bytes()));
    let authority = || {
        request
            .uri
            .authority()
            .map(|a| a.as_str())
            .or_else(|| request.headers.get("host").and_then(|h| h.to_str().ok()))
    };
    match name {
        ":authority" => return pseudo(authority()),
        ":path" => return pseudo(request.uri.path_and_query().map(|p| p.as_str())),
        ":method" => return pseudo(Some(request.method.as_str())),
        ":scheme" => return pseudo(request.uri.scheme_str()),
        "host" if !request.headers.contains_key("host") => return pseudo(authority()),
        _ => {}
    }
    let mut values: Vec<&[u8]> = request.headers.get_all(name).iter().map(|v| v.as_bytes()).collect();
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values.iter().fold(0, |seed, value| xxh64(value, seed)))
}

/// The value of cookie `name` in the `cookie` headers, parsed as Envoy's `parseCookieValue`
/// does: split on `;`, leading spaces skipped, no `=` → not a cookie, first match wins,
/// one pair of surrounding double quotes removed.
fn cookie_value<'h>(headers: &'h HeaderMap, name: &[u8]) -> Option<&'h [u8]> {
    for header in headers.get_all(COOKIE) {
        for pair in header.as_bytes().split(|&b| b == b';') {
            let Some(equals) = pair.iter().position(|&b| b == b'=') else { continue };
            let start = pair.iter().position(|&b| b != b' ').unwrap_or(equals).min(equals);
            if &pair[start..equals] != name {
                continue;
            }
            let value = &pair[equals + 1..];
            return Some(match value {
                [b'"', inner @ .., b'"'] => inner,
                _ => value,
            });
        }
    }
    None
}

/// The first value of query parameter `name`, not percent-decoded (Envoy's
/// `QueryParamsMulti::parseQueryString`); a parameter without `=` has the empty value.
fn query_value<'u>(uri: &'u Uri, name: &str) -> Option<&'u [u8]> {
    uri.query()?.split('&').find_map(|param| {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        (key == name).then_some(value.as_bytes())
    })
}

/// Envoy's `generateCookie`: nothing without both addresses.
fn generate_cookie(
    downstream: &Downstream,
    name: &str,
    path: &str,
    ttl_seconds: u64,
    attributes: &[(String, String)],
) -> Option<GeneratedCookie> {
    let (remote, local) = (downstream.remote?, downstream.local?);
    let value = format!("{:016x}", xxhash64(format!("{remote}{local}").as_bytes()));
    let mut set_cookie = format!("{name}=\"{value}\"");
    if ttl_seconds != 0 {
        set_cookie.push_str(&format!("; Max-Age={ttl_seconds}"));
    }
    if !path.is_empty() {
        set_cookie.push_str(&format!("; Path={path}"));
    }
    for (attribute, attribute_value) in attributes {
        if attribute_value.is_empty() {
            set_cookie.push_str(&format!("; {attribute}"));
        } else {
            set_cookie.push_str(&format!("; {attribute}={attribute_value}"));
        }
    }
    set_cookie.push_str("; HttpOnly");
    Some(GeneratedCookie { name: name.to_string(), value, set_cookie })
}

#[cfg(test)]
mod tests;
